// Main loop pieces of the sm90 dense decode kernel: the two producer roles
// (K/V TMA ring, Q gather) and the consumer building blocks (tail zeroing,
// the two WGMMA products, masking).
//
// Pipeline: kNumStages = 2 K/V stages of 64 tokens x d_qk.
//   kv_full[s]  (1 arrival + TMA bytes)  producer warp -> consumers
//   kv_empty[s] (8 arrivals: 4 warps of each consumer warpgroup) consumers -> producer
//   q_full  (96 arrivals: the Q-gather threads)  once per item
//   q_empty (4 arrivals: the warps of WG1, after the item's last Q.K^T)
//   p_full / p_empty (128 arrivals each: every WG1 / WG2 thread) per block,
//   for the P tile and the row factors (kernel.cuh)
// Every role walks the same (item, block) sequence of its part, so stage and
// phase counters agree without communication.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/barriers.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/traits.h"
#include "openmla/schedule.h"

namespace openmla::kernels::decode_dense {

// The blocks of one item that a part owns.
struct ItemBlocks {
  int length;       // KV tokens of the request, clamped to [0, max_length]
  int begin_block;  // first 64-token block (inclusive)
  int end_block;    // one past the last block
  bool partial;     // write partial_o / partial_lse instead of out / lse
  int slot;         // partial slot (when partial)
};

// `length`: the item's KV length (dense) or counted index positions (sparse).
__device__ __forceinline__ ItemBlocks item_blocks_of_length(const PartWork& part, int item, int length) {
  ItemBlocks r;
  r.length = length;
  // NOTE: (length - 1) / BLOCK_N + 1, not (length + BLOCK_N - 1) / BLOCK_N: lengths reach INT32_MAX.
  const int num_blocks = max(1, (r.length - 1) / BLOCK_N + 1);
  r.begin_block = part_item_begin_block(part, item);
  r.end_block = item == part.end_item ? part.end_block : num_blocks;
  r.partial = part_item_is_partial(part, item);
  r.slot = r.partial ? part_item_slot(part, item) : 0;
  return r;
}

__device__ __forceinline__ ItemBlocks item_blocks(const KernelParams& params, const PartWork& part,
                                                  int item) {
  return item_blocks_of_length(part, item, min(max(__ldg(params.seqlens + item), 0), params.max_length));
}

// Valid (loaded, finite) tokens of block `block`: [0, 64) clipped to the length.
__device__ __forceinline__ int block_valid_tokens(int length, int block) {
  return min(max(length - block * BLOCK_N, 0), BLOCK_N);
}

template <class Traits>
struct Mainloop {
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;

  // ---- producer: K/V ring (warp 0) --------------------------------------------------------
  // Block b of a request: tokens [64 b, 64 b + 64), loaded as 64 / box_tokens
  // boxes per 64-column chunk. Boxes whose first token is past the length are
  // not loaded (their block-table entries may be garbage) and not counted in
  // the barrier's transaction bytes; the consumer zeroes those rows.
  // NOTE: all 32 lanes issue TMAs (lane i takes boxes i, i + 32, ...), so
  // small pages (4 boxes x 9 chunks at page 16) cost no more issue slots than
  // page 64; lane k < num_boxes looks up page k.
  static __device__ void produce_kv(const KernelParams& params, const PartWork& part,
                                    SharedStorage& smem, int kv_head, int lane) {
    constexpr int kMaxLoads = kMaxBoxesPerBlock * Traits::kNumChunks;
    constexpr int kIssueRounds = (kMaxLoads + 31) / 32;
    const uint32_t box_bytes = uint32_t(params.box_tokens) * Traits::kBoxRowBytes;
    int block_counter = 0;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      const ItemBlocks blocks = item_blocks(params, part, item);
      const int32_t* table = params.block_table + int64_t(item) * params.block_table_stride_b;  // [max_pages]
      for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
        const int stage = block_counter % kNumStages;
        const uint32_t phase = (block_counter / kNumStages) & 1;
        const int first_token = block * BLOCK_N;
        const int valid = block_valid_tokens(blocks.length, block);
        const int num_boxes = (valid + params.box_tokens - 1) / params.box_tokens;
        // Page lookups go out before the empty-slot wait so their latency hides
        // behind the consumers' work on the previous blocks.
        const int my_page =
            lane < num_boxes ? __ldg(table + (first_token + lane * params.box_tokens) / params.page_size) : 0;
        // Every box of a block starts at the same token of its page (boxes are whole pages below 64
        // tokens, a single box above): one division per block, not one per issue round.
        const int token_in_page = first_token % params.page_size;
        common::mbarrier_wait(&smem.kv_empty[stage], phase ^ 1);
        if (lane == 0) {
          common::mbarrier_arrive_expect_tx(&smem.kv_full[stage],
                                            uint32_t(num_boxes) * Traits::kNumChunks * box_bytes);
        }
        __syncwarp();
        Element* stage_base = smem.kv[stage];
        const int num_loads = num_boxes * Traits::kNumChunks;
#pragma unroll
        for (int round = 0; round < kIssueRounds; ++round) {
          const int load = round * 32 + lane;
          const int box = min(load / Traits::kNumChunks, kMaxBoxesPerBlock - 1);
          const int chunk = load % Traits::kNumChunks;
          const int page = __shfl_sync(0xffffffffu, my_page, box);
          if (load < num_loads) {
            common::tma_load_4d(&params.tma_kv, &smem.kv_full[stage],
                                stage_base + chunk * Traits::kChunkElems + box * params.box_tokens * kChunkCols,
                                chunk * kChunkCols, kv_head, token_in_page, page);
          }
        }
      }
    }
  }

  // ---- producer: Q gather (kQLoadThreads threads) ---------------------------------------------
  // Packed row r of the tile is query token s = (64 m + r) / hpk, head
  // kv_head * hpk + (64 m + r) % hpk. Such rows are not a regular tensor when
  // hpk does not divide 64, so they are gathered with 16-byte cp.async into the
  // swizzled layout; padding rows are zero-filled.
  // Thread t copies 16-byte piece t % 8 of every 128-byte chunk row for rows
  // t / 8, t / 8 + 12, ...: the row's (s, head) division happens once per row,
  // and within a row the source and the swizzled destination of chunk k are
  // fixed offsets from chunk 0's (a 128B-swizzle row permutes pieces inside
  // its own chunk row only).
  // NOTE: per-piece index arithmetic (two runtime divisions per 16 bytes) made
  // this loop ~100 instructions per piece, several microseconds per item, all
  // of it on the critical path of a short call.
  // One item's Q tile -> smem.q by kThreads threads (cp.async, not waited).
  template <int kThreads>
  static __device__ __forceinline__ void gather_q_tile(const KernelParams& params, SharedStorage& smem, int item,
                                                       int kv_head, int m_tile, int thread) {
    using namespace cute;
    constexpr int kElemsPerPiece = 16 / int(sizeof(Element));  // 8
    constexpr int kPieceLanes = kChunkCols / kElemsPerPiece;     // 8 pieces per chunk row
    constexpr int kRowGroups = kThreads / kPieceLanes;           // rows in flight
    static_assert(kThreads % kPieceLanes == 0);
    Tensor sQ = make_tensor(make_smem_ptr(smem.q), typename Traits::SmemLayoutQ{});  // (64, d_qk)
    const Element* q = static_cast<const Element*>(params.q);
    const int piece_col = (thread % kPieceLanes) * kElemsPerPiece;
    const Element* q_item = q + int64_t(item) * params.q_stride_b;  // [s_q, h_q, d_qk]
    for (int row = thread / kPieceLanes; row < BLOCK_M; row += kRowGroups) {
      const int packed = m_tile * BLOCK_M + row;
      const bool real = packed < params.rows_per_kv;
      const int s = real ? packed / params.heads_per_kv : 0;
      const int head = kv_head * params.heads_per_kv + (real ? packed % params.heads_per_kv : 0);
      const Element* src = real ? q_item + s * params.q_stride_s + head * params.q_stride_h + piece_col : q;
      Element* dst = &sQ(row, piece_col);  // chunk 0; chunk k is kChunkElems further
#pragma unroll
      for (int chunk = 0; chunk < Traits::kNumChunks; ++chunk) {
        common::cp_async_16_zfill(dst + chunk * Traits::kChunkElems, real ? src + chunk * kChunkCols : q, real);
      }
    }
  }

  static __device__ void produce_q(const KernelParams& params, const PartWork& part, SharedStorage& smem,
                                   int kv_head, int m_tile, int thread) {
    int item_counter = 0;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      const ItemBlocks blocks = item_blocks(params, part, item);
      if (blocks.begin_block >= blocks.end_block) continue;
      if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
      gather_q_tile<kQLoadThreads>(params, smem, item, kv_head, m_tile, thread);
      common::cp_async_wait_all();
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.q_full);
      ++item_counter;
    }
  }

  // ---- consumer: zero the V rows past the valid tokens ---------------------------------------------
  // TMA left them stale (or never loaded them); 0 * NaN would poison P.V.
  // Whole 128-byte rows are zeroed, so the swizzle inside a row is irrelevant.
  static __device__ void zero_tail_rows(Element* stage_base, int valid, int thread) {
    constexpr int kPiecesPerChunkRow = Traits::kRowBytes / 16;  // 8
    const int tail_rows = BLOCK_N - valid;
    const int pieces_per_chunk = tail_rows * kPiecesPerChunkRow;
    uint4* base = reinterpret_cast<uint4*>(stage_base);
    for (int idx = thread; idx < Traits::kNumVChunks * pieces_per_chunk; idx += kWarpgroupThreads) {
      const int chunk = idx / pieces_per_chunk;
      const int rest = idx % pieces_per_chunk;
      const int row = valid + rest / kPiecesPerChunkRow;
      const int piece = rest % kPiecesPerChunkRow;
      base[(chunk * Traits::kChunkElems * int(sizeof(Element))) / 16 + row * kPiecesPerChunkRow + piece] =
          make_uint4(0, 0, 0, 0);
    }
  }

  // NOTE: smem base pointers are laundered through an empty asm before the
  // GMMA descriptors are built from them. Otherwise the compiler hoists the
  // loop-invariant descriptors of every k-step (and of both stages) into
  // registers, which spills once S and O are both in flight.
  template <class T>
  static __device__ __forceinline__ T* opaque(T* ptr) {
    asm volatile("" : "+l"(ptr));
    return ptr;
  }

  // ---- consumer: S = Q.K^T (issued, not waited) -------------------------------------------------
  // The caller waits with warpgroup_wait<N>() and fences tSrS afterwards.
  template <class TiledMma, class TensorS>
  static __device__ __forceinline__ void issue_qk(TiledMma& tiled_mma, Element* q_base, Element* stage_base,
                                                  int thread, TensorS& tSrS) {
    using namespace cute;
    Tensor sQ = make_tensor(make_smem_ptr(opaque(q_base)), typename Traits::SmemLayoutQ{});      // (64, d_qk)
    Tensor sK = make_tensor(make_smem_ptr(opaque(stage_base)), typename Traits::SmemLayoutK{});  // (64 tokens, d_qk)
    auto thr_mma = tiled_mma.get_thread_slice(thread);
    Tensor tSrQ = thr_mma.partition_fragment_A(sQ);  // (MMA, 1, d_qk/16)
    Tensor tSrK = thr_mma.partition_fragment_B(sK);  // (MMA, 1, d_qk/16)
    common::wgmma_product(tiled_mma, tSrQ, tSrK, tSrS);
  }

  // ---- consumer: O_half += P.V_half (issued, not waited) --------------------------------------------
  template <class TiledMma, class TensorO>
  static __device__ __forceinline__ void issue_pv(TiledMma& tiled_mma, Element* p_base, Element* v_half_base,
                                                  int thread, TensorO& tOrO) {
    using namespace cute;
    Tensor sP = make_tensor(make_smem_ptr(opaque(p_base)), typename Traits::SmemLayoutP{});          // (64, 64)
    Tensor sV = make_tensor(make_smem_ptr(opaque(v_half_base)), typename Traits::SmemLayoutVHalf{});  // (256 cols, 64 tokens)
    auto thr_mma = tiled_mma.get_thread_slice(thread);
    Tensor tOrP = thr_mma.partition_fragment_A(sP);  // (MMA, 1, 4)
    Tensor tOrV = thr_mma.partition_fragment_B(sV);  // (MMA, 1, 4)
    common::wgmma_accumulate(tiled_mma, tOrP, tOrV, tOrO);
  }

  // ---- consumer: O_half += P.V_half with P in registers (issued, not waited) -------------------------
  // tSrP: P in the S accumulator's fragment ((2, 2, 8), 1, 1). For the sm90
  // 64xN layouts, accumulator values 8k..8k+7 of a thread are exactly its
  // A-operand registers of k-block k (PTX "wgmma 64xNx16 A fragment"), so P
  // is viewed as ((2, 2, 2), 1, 4) without moving a register.
  template <class TiledMma, class TensorP, class TensorO>
  static __device__ __forceinline__ void issue_pv_regs(TiledMma& tiled_mma, TensorP& tSrP, Element* v_half_base,
                                                       int thread, TensorO& tOrO) {
    using namespace cute;
    static_assert(decltype(size(tSrP))::value == 32, "P fragment of a 64x64 accumulator");
    Tensor sV = make_tensor(make_smem_ptr(opaque(v_half_base)), typename Traits::SmemLayoutVHalf{});  // (256 cols, 64 tokens)
    auto thr_mma = tiled_mma.get_thread_slice(thread);
    Tensor tOrV = thr_mma.partition_fragment_B(sV);  // (MMA, 1, 4)
    Tensor tOrP = make_tensor(tSrP.data(), Layout<Shape<Shape<_2, _2, _2>, _1, _4>,
                                                  Stride<Stride<_1, _2, _4>, _0, _8>>{});  // (MMA, 1, 4)
    warpgroup_fence_operand(tSrP);
    common::wgmma_accumulate(tiled_mma, tOrP, tOrV, tOrO);
  }

  // ---- consumer: P -> shared memory ---------------------------------------------------------------
  // group_address(g): this thread's shared-window address of stmatrix group g
  // (p_store_addresses). With the sm90 64x64 accumulator partitioned for
  // SM90_U32x4_STSM_N, stmatrix g stores P values 8g..8g+7 of the thread's
  // fragment (two per register).
  template <class TensorP, class GroupAddress>
  static __device__ __forceinline__ void store_p(const TensorP& tSrP, const GroupAddress& group_address) {
    using namespace cute;
    static_assert(decltype(size(tSrP))::value == 32, "P fragment of a 64x64 accumulator");
    Tensor tSrP_u32 = recast<uint32_t>(tSrP);  // (16) two P values each
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(group_address(g)),
                   "r"(tSrP_u32(4 * g)), "r"(tSrP_u32(4 * g + 1)), "r"(tSrP_u32(4 * g + 2)),
                   "r"(tSrP_u32(4 * g + 3))
                   : "memory");
    }
  }

  // The four stmatrix destinations of this thread in the P tile, as
  // shared-window addresses, formed once per CTA (the swizzled 64-bit address
  // math of a CuTe copy cost ~40 instructions per block on WG1's critical path).
  static __device__ __forceinline__ void p_store_addresses(Element* p_base, int thread, uint32_t (&dst)[4]) {
    using namespace cute;
    typename Traits::TiledMmaQK mma_qk;
    Tensor sP = make_tensor(make_smem_ptr(p_base), typename Traits::SmemLayoutP{});  // (64, 64)
    auto thr_copy_p = make_tiled_copy_C(typename Traits::SmemCopyAtomP{}, mma_qk).get_thread_slice(thread);
    Tensor tPsP = thr_copy_p.partition_D(sP);  // ((8, 4), 1, 1): four 16-byte rows per thread
    static_assert(decltype(size<0, 0>(tPsP))::value == 8 && decltype(size<0, 1>(tPsP))::value == 4 &&
                  decltype(size<1>(tPsP))::value == 1 && decltype(size<2>(tPsP))::value == 1);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      dst[g] = common::smem_u32(&tPsP(make_coord(make_coord(0, g), 0, 0)));
      asm volatile("" : "+r"(dst[g]));  // keep them in registers, not rebuilt per block
    }
  }

  // ---- consumer: mask S --------------------------------------------------------------------------------
  // Row i of the view sees tokens [0, row_limit[i]); everything else -> -inf
  // (this also replaces NaN from stale K rows).
  // NOTE: in the sm90 64xN accumulator, column j of a thread's row view is
  // 2 * (lane % 4) + (j % 2) + 8 * (j / 2) (PTX "wgmma 64xNx16 D fragment"), so
  // the per-block test reduces to compile-time offsets against one bound per row.
  template <class TensorSRowCol>
  static __device__ __forceinline__ void mask_scores(TensorSRowCol& tSrS_rc, int lane, int first_token,
                                                     const int (&row_limit)[2]) {
    using namespace cute;
#pragma unroll
    for (int i = 0; i < size<0>(tSrS_rc); ++i) {
      const int bound = row_limit[i] - first_token - 2 * (lane % 4);  // column offsets below this are visible
#pragma unroll
      for (int j = 0; j < size<1>(tSrS_rc); ++j) {
        if ((j % 2) + 8 * (j / 2) >= bound) tSrS_rc(i, j) = -INFINITY;
      }
    }
  }
};

}  // namespace openmla::kernels::decode_dense

// sm90 sparse prefill, the alternate-blocks kernel
// (DecodeKernel::kSparsePrefillAlternateBlocks): a token's blocks are
// processed in pairs, the two consumer warpgroups taking alternate blocks (the
// hand-offs of decode_dense/alternate_blocks_kernel.cuh), and a gather
// warpgroup loads each half of a block as soon as its last reader freed it,
// and each token's Q as soon as the previous token's last S retired.
// Design and measurements: docs/kernels/prefill_sparse.md.
//
// Roles (384 threads):
//   WG0 owns the even block of a pair (buffer K0) and O[:, 0:256);
//   WG1 owns the odd block (buffer K1) and O[:, 256:512);
//   WG2 gathers: warp w copies rows [16 w, 16 w + 16) of every block, each
//       half (tiles 0-3 = V's left half, tiles 4.. = the rest) on its own
//       barrier, in the order the consumers free them; and Q per token.
// Per pair (e = even block in K0, o = odd block in K1), with the hand-off each
// step signals in brackets:
//   WG0  softmax(S_e) against the running max m -> m_e, scale0        [kScale0]
//        P_e relative to m_e -> sP0                                   [kP0]
//        O_L = O_L scale0 + P_e.V_e,L                     (K0 tiles 0-3 free)
//   WG1  softmax(S_o) against m_e -> m_o, scale1                       [kScale1]
//        O_R = O_R scale0 + sP0.V_e,R                     (K0 tiles 4.. free)
//        P_o -> sP1                                                     [kP1]
//        O_R = O_R scale1 + P_o.V_o,R                     (K1 tiles 4.. free)
//   WG0  O_L = O_L scale1 + sP1.V_o,L                     (K1 tiles 0-3, sP1 free)
//        S(next e): tiles 0-3, then 4..                                [kSeIssued]
//   WG1  S(next o): tiles 4.., then 0-3 (the order they were freed)
// Shared memory is the heads-on-M plan (Q, two 64-row buffers, one P tile):
// sP1 is the plan's P tile; sP0 is K0's RoPE tile at d_qk = 576 (read only by
// S_e, which retired before P_e is written, and reloaded only after the last
// reader of sP0 freed K0's right half), a tile of its own at 512.
// Q stays in shared memory for the whole token, so the gather warpgroup loads
// the next token's Q while the current token's last pair runs.
// Invalid rows were zero-filled by the gather and are masked by their
// validity bits (PrefillProblem), so no tail rows are zeroed here.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include <cmath>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/prologue.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/heads_on_m/block_pairs.cuh"
#include "kernels/sm90/heads_on_m/consumer_steps.cuh"
#include "kernels/sm90/heads_on_m/epilogue.cuh"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "kernels/sm90/heads_on_m/traits.h"
#include "kernels/sm90/prefill_sparse/config.h"
#include "kernels/sm90/prefill_sparse/gather.cuh"
#include "kernels/sm90/prefill_sparse/problem.cuh"

namespace openmla::kernels::prefill_sparse {

using heads_on_m::BLOCK_M;
using heads_on_m::kChunkCols;
using heads_on_m::HEAD_DIM_V_HALF;
using heads_on_m::ItemBlocks;
using heads_on_m::QueryRow;

inline constexpr int kAlternateConsumerThreads = 2 * kWarpgroupThreads;
inline constexpr int kAlternateCtaThreads = 3 * kWarpgroupThreads;
inline constexpr int kAlternateLeftTiles = 4;  // tiles 0-3: V's left half; the rest: V's right half (+ RoPE)
// setmaxnreg: the gather warpgroup gives back what the two consumers take (sum <= 3 x 168).
inline constexpr int kAlternateLoaderRegs = 72;
// 216 / 72 against 224 / 56: 1.1-1.3 % fewer cycles at s_kv = 32768, 0.4-0.6 % more at 8192 (H200,
// session 30). NOTE: in session 22 ptxas serialised every consumer WGMMA at 216 (1.6x slower); since
// session 28's changes it no longer does (the build guard fails on C7515); 16 B spill in the O store.
inline constexpr int kAlternateConsumerRegs = 216;
static_assert(kAlternateLoaderRegs + 2 * kAlternateConsumerRegs <= 3 * kEntryRegs, "setmaxnreg budget");

struct AlternateBlocksBarriers {
  // Bit r of buffer b's 64-bit word: row r holds a counted, in-range kv row (PrefillProblem's
  // column mask); 16 bits per gather warp.
  alignas(8) uint16_t stage_valid[2][kWarpsPerWarpgroup];
  // Per buffer and half (tiles 0-3 / 4..): 128 cp.async arrivals (.noinc), plus, for half b of
  // buffer b, the 4 gather warps' validity-bit writers (AlternateBlocksKernel::gather_half).
  uint64_t half_full[2][2];
  uint64_t tile_free[2][2];        // per buffer: tiles 0-3 / 4.. read for the last time (128 threads)
  float row_sum[2][BLOCK_M];       // token end: each warpgroup's quad-reduced row sums
  float seen_max[2][BLOCK_M];      // token end: each warpgroup's true row max (log2 units, max_logits)
  uint64_t handoff[heads_on_m::kNumHandoffs];  // see heads_on_m::Handoff
  uint64_t all_consumers;          // both consumer warpgroups, every thread (sync_consumers)
};
// d_qk = 512 has no RoPE tile to hold sP0: it gets a tile of its own.
template <bool kOwnP0>
struct AlternateBlocksExtraStorage : AlternateBlocksBarriers {};
template <>
struct AlternateBlocksExtraStorage<true> : AlternateBlocksBarriers {
  alignas(1024) uint16_t p0[BLOCK_M * BLOCK_N];  // SmemLayoutP
};

template <int kHeadDimQK>
struct AlternateBlocksKernel {
  static constexpr bool kP0InRopeTile = kHeadDimQK == 576;
  using T = heads_on_m::Traits<DType::kBF16, kHeadDimQK, 2, AlternateBlocksExtraStorage<!kP0InRopeTile>>;
  using Element = typename T::Element;
  using SharedStorage = typename T::SharedStorage;
  using Loop = heads_on_m::ConsumerSteps<T>;
  using Problem = PrefillProblem<T>;
  using Gather = RowGather<T>;
  using BlockPairCursor = heads_on_m::BlockPairCursor<Problem>;
  using Pair = heads_on_m::PairSteps<SharedStorage>;
  static constexpr int kTiles = T::kNumChunks;  // 9 or 8 tiles of 64 columns

  // sP0: K0's RoPE tile (d_qk 576) or its own tile.
  static __device__ __forceinline__ Element* p0_tile(SharedStorage& smem) {
    if constexpr (kP0InRopeTile) {
      return smem.kv[0] + 8 * T::kChunkElems;
    } else {
      return reinterpret_cast<Element*>(smem.extra.p0);
    }
  }

  // ---- the gather warpgroup --------------------------------------------------------------------
  // Lane l of warp w copies 16-byte unit l % 8 of every 64-column tile of the rows
  // 16 w + l / 8 + 4 i (i < 4) of a block: one warp instruction reads 128 contiguous bytes of
  // four rows, and every copy's addresses are a register plus a constant. NOTE: a gather that
  // formed each row's addresses in a loop (a warp per row, 512 bytes an instruction) measured
  // 0.67-0.74x FlashMLA against 0.89-0.98x for this one (docs/performance.md, session 22).
  struct LoaderRows {
    const uint16_t* src[4];  // row i: this lane's unit of tile 0 (params.kv when the row is invalid)
    uint32_t valid;          // bit i: row i holds a counted, in-range kv row
  };

  // The lane's four indices of `block` of the cursor's token (-1 past the token's blocks). Loaded
  // a pair before gather_half turns them into addresses: their first use (the sign extension)
  // was the gather's top stall site under ncu, the gather warpgroup then busy 81 % of the kernel.
  // The gather keeps indices, not addresses (8 registers a pair, not 18), to stay within 56.
  struct LoaderIndices {
    int32_t index[4];  // rows first_row + 4 i
  };
  static __device__ __forceinline__ LoaderIndices load_indices(const KernelParams& params, const BlockPairCursor& cur,
                                                               int block, int first_row) {
    LoaderIndices indices;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      indices.index[i] =
          block < cur.end_block ? Gather::block_index(params, cur.item, cur.length, block, first_row + 4 * i) : -1;
    }
    return indices;
  }

  // The rows those indices name.
  static __device__ __forceinline__ LoaderRows rows_of(const KernelParams& params, const LoaderIndices& indices,
                                                       int lane) {
    LoaderRows rows;
    rows.valid = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t offset = Gather::row_offset(params, indices.index[i]);
      rows.src[i] = params.kv + (offset >= 0 ? offset : 0) + 8 * (lane % 8);
      rows.valid |= uint32_t(offset >= 0) << i;
    }
    return rows;
  }

  // Half `kHalf` (0: tiles 0-3, 1: the rest) of this lane's rows into buffer `buf`, then one
  // arrival per thread once its copies land. dst_row[p]: the lane's byte offset in a buffer of
  // row 16 w + l / 8 + 4 i for i % 2 == p, less 512 i (the 128B swizzle of rows r and r + 8 is
  // the same). The half that the buffer's own warpgroup frees (buffer b: half b) first publishes
  // the rows' validity: that warpgroup reads the bits (its mask) before it frees that half, so
  // the rewrite is ordered after the read.
  template <int kHalf>
  static __device__ __forceinline__ void gather_half(const KernelParams& params, SharedStorage& smem, int buf,
                                                     const LoaderIndices& indices, const uint32_t (&dst_row)[2],
                                                     int warp, int lane) {
    const LoaderRows rows = rows_of(params, indices, lane);
    constexpr int kTileBegin = kHalf == 0 ? 0 : kAlternateLeftTiles;
    constexpr int kTileEnd = kHalf == 0 ? kAlternateLeftTiles : kTiles;
    constexpr uint32_t kChunkBytes = uint32_t(T::kChunkElems) * sizeof(Element);
    if (buf == kHalf) {
      uint32_t bits = 0;  // bit j + 4 i: row 16 w + j + 4 i
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t b = __ballot_sync(0xffffffffu, (rows.valid >> i) & 1u);  // lanes 8 j
        bits |= ((b & 1u) | ((b >> 7) & 2u) | ((b >> 14) & 4u) | ((b >> 21) & 8u)) << (4 * i);
      }
      if (lane == 0) {
        smem.extra.stage_valid[buf][warp] = uint16_t(bits);
        common::mbarrier_arrive(&smem.extra.half_full[buf][kHalf]);
      }
    }
    const uint32_t base = common::smem_u32(smem.kv[buf]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool valid = (rows.valid >> i) & 1u;
      const uint32_t dst = base + dst_row[i % 2] + uint32_t(i) * 4 * T::kRowBytes;
#pragma unroll
      for (int t = kTileBegin; t < kTileEnd; ++t) {
        common::cp_async_16_zfill(dst + uint32_t(t) * kChunkBytes, rows.src[i] + t * kChunkCols, valid);
      }
    }
    common::cp_async_arrive_noinc(&smem.extra.half_full[buf][kHalf]);
  }

  // Q of `token` (heads >= h_q zero-filled): this warp's 16 rows, one arrival per thread on q_full.
  static __device__ __forceinline__ void gather_q(const KernelParams& params, SharedStorage& smem, int token,
                                                  int q_group, int warp, int lane) {
    const int head = q_group * kHeadsPerCta + warp * kRowsPerProducerWarp + lane;
    const int64_t q_offset = lane < kRowsPerProducerWarp && head < params.h_q
                                 ? int64_t(token) * params.q_stride_s + int64_t(head) * params.q_stride_h
                                 : -1;
    Gather::copy_rows(params.q, q_offset, common::smem_u32(smem.q), warp * kRowsPerProducerWarp, lane);
    common::cp_async_arrive_noinc(&smem.q_full);
  }

  // Every pair of the part: the first at once, then each following pair's halves as the
  // consumers release the current pair's, in the order they are released (K0 tiles 0-3, K0 4..,
  // K1 4.., K1 0-3); a new token's Q before its first pair, once the consumers' last S of the
  // previous token retired.
  static __device__ void run_loader(const KernelParams& params, const PartWork& part, SharedStorage& smem,
                                    int q_group, int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int first_row = warp * kRowsPerProducerWarp + lane / 8;
    const uint32_t unit = uint32_t((lane % 8) ^ (lane / 8));  // 128B swizzle of rows first_row + 8 k
    const uint32_t dst_row[2] = {uint32_t(first_row) * T::kRowBytes + (unit << 4),
                                 uint32_t(first_row) * T::kRowBytes + ((unit ^ 4u) << 4)};
    BlockPairCursor cur;
    cur.first(params, part);
    if (!cur.valid) return;
    gather_q(params, smem, cur.item, q_group, warp, lane);
    LoaderIndices even = load_indices(params, cur, cur.even_block, first_row);
    LoaderIndices odd = load_indices(params, cur, cur.even_block + 1, first_row);
    gather_half<0>(params, smem, 0, even, dst_row, warp, lane);
    gather_half<1>(params, smem, 0, even, dst_row, warp, lane);
    heads_on_m::PairFrees frees;  // the first pair's buffers are free
    if (cur.has_odd) {
      gather_half<1>(params, smem, 1, odd, dst_row, warp, lane);
      gather_half<0>(params, smem, 1, odd, dst_row, warp, lane);
      frees.odd_loaded();
    }
    // The next pair's indices, loaded a pair ahead of their use.
    int item = cur.item;
    BlockPairCursor nxt = cur;
    nxt.advance(params, part);
    if (nxt.valid) {
      even = load_indices(params, nxt, nxt.even_block, first_row);
      odd = load_indices(params, nxt, nxt.even_block + 1, first_row);
    }
    uint32_t q_phase = 0;
    while (nxt.valid) {
      const LoaderIndices pair_even = even, pair_odd = odd;
      const bool has_odd = nxt.has_odd;
      if (nxt.item != item) {
        item = nxt.item;
        common::mbarrier_wait(&smem.q_empty, q_phase);
        q_phase ^= 1;
        gather_q(params, smem, item, q_group, warp, lane);
      }
      nxt.advance(params, part);
      if (nxt.valid) {
        even = load_indices(params, nxt, nxt.even_block, first_row);
        odd = load_indices(params, nxt, nxt.even_block + 1, first_row);
      }
      common::mbarrier_wait(&smem.extra.tile_free[0][0], frees.even_parity());
      gather_half<0>(params, smem, 0, pair_even, dst_row, warp, lane);
      common::mbarrier_wait(&smem.extra.tile_free[0][1], frees.even_parity());
      gather_half<1>(params, smem, 0, pair_even, dst_row, warp, lane);
      frees.even_loaded();
      if (has_odd) {
        frees.wait_odd(&smem.extra.tile_free[1][1]);
        gather_half<1>(params, smem, 1, pair_odd, dst_row, warp, lane);
        frees.wait_odd(&smem.extra.tile_free[1][0]);
        gather_half<0>(params, smem, 1, pair_odd, dst_row, warp, lane);
        frees.odd_loaded();
      }
    }
    common::cp_async_wait_all();  // nothing in flight when the warpgroup exits
  }

  // ---- the consumers ---------------------------------------------------------------------------
  // S += Q.K^T over tiles [first, last] of buffer `buf` (each half waited on its barrier just
  // before its first k-step). overwrite: the first k-step replaces S. One commit group.
  template <class TensorS>
  static __device__ __forceinline__ void issue_s_tiles(SharedStorage& smem, int buf, uint32_t phase, int first,
                                                       int last, bool overwrite, TensorS& tSrS, int thread) {
    using namespace cute;
    typename T::TiledMmaQK mma;
    Tensor sQ = make_tensor(make_smem_ptr(Loop::opaque(smem.q)), typename T::SmemLayoutQ{});          // (64, d_qk)
    Tensor sK = make_tensor(make_smem_ptr(Loop::opaque(smem.kv[buf])), typename T::SmemLayoutK{});  // (64, d_qk)
    auto thr = mma.get_thread_slice(thread);
    Tensor tSsQ = thr.partition_fragment_A(sQ);  // (MMA, 1, d_qk / 16)
    Tensor tSsK = thr.partition_fragment_B(sK);  // (MMA, 1, d_qk / 16)
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    mma.accumulate_ = overwrite ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      if (t < first || t > last) continue;
      if (t == first || t == kAlternateLeftTiles) {  // each half lands on its own barrier
        common::mbarrier_wait(&smem.extra.half_full[buf][t < kAlternateLeftTiles ? 0 : 1], phase);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        gemm(mma, tSsQ(_, _, 4 * t + k), tSsK(_, _, 4 * t + k), tSrS);
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
    }
    warpgroup_commit_batch();
  }

  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int wg, int thread) {
    using namespace cute;
    const int lane = thread % 32;
    typename T::TiledMmaQK mma_qk;
    typename T::TiledMmaPVRegs mma_pv_regs;
    typename T::TiledMmaPV mma_pv;
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BLOCK_M>, Int<BLOCK_N>>{});  // (MMA, 1, 1) fp32
    Tensor tSrP = make_tensor_like<Element>(tSrS);                                    // (MMA, 1, 1) P
    Tensor tOrO = partition_fragment_C(mma_pv_regs, Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{});  // (MMA, 1, 1) fp32
    Tensor tScS = mma_qk.get_thread_slice(thread).partition_C(
        make_identity_tensor(Shape<Int<BLOCK_M>, Int<BLOCK_N>>{}));  // (MMA, 1, 1) (row, column) of S
    Tensor tSrS_rc = common::make_rowcol_view(tSrS);  // (2 rows, 16 cols)
    Tensor tSrP_rc = common::make_rowcol_view(tSrP);  // (2 rows, 16 cols)
    Tensor tScS_rc = common::make_rowcol_view(tScS);  // (2 rows, 16 cols)
    Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 64 values: 256 columns)
    static_assert(decltype(size<1>(tOrO_rc))::value == 64 && decltype(size<1>(tSrS_rc))::value == 16);
    int tile_row[2];
    QueryRow rows[2];
    Pair::template tile_rows<Problem>(params, q_group, tScS_rc, tile_row, rows);
    const uint32_t p_dst0 = Pair::template p_store_base<Loop>(wg == 0 ? p0_tile(smem) : smem.p, thread);  // sP0 / sP1
    const typename Pair::RowState state = Pair::row_state(smem);
    float* const s_max = state.max;

    BlockPairCursor cur;
    cur.first(params, part);
    if (!cur.valid) return;
    uint32_t phase0 = 0, phase1 = 0;  // parity of the next load each buffer's owner waits for
    uint32_t phases = 0;              // hand-offs this warpgroup waits for
    uint32_t p1_phase = 0;            // WG1: parity of sP1's next release
    uint32_t q_phase = 0;             // parity of the next Q
    uint32_t meet_phase = 0;          // sync_consumers
    while (cur.valid) {
      const int item = cur.item;
      const ItemBlocks blocks = Problem::item_blocks(params, part, item);
      const typename Problem::ItemMask mask = Problem::item_mask(params, blocks, rows);
      // ---- token start: its Q (gathered while the previous token's last pair ran), its first S
      common::mbarrier_wait(&smem.q_full, q_phase);
      q_phase ^= 1;
      clear(tOrO);
      float row_sum[2] = {0.0f, 0.0f};
      float seen_max[2] = {-INFINITY, -INFINITY};  // true row max of this warpgroup's blocks (log2 units)
      if (wg == 0) {
        issue_s_tiles(smem, 0, phase0, 0, kTiles - 1, true, tSrS, thread);
        phase0 ^= 1;
      } else if (cur.has_odd) {
        issue_s_tiles(smem, 1, phase1, 0, kTiles - 1, true, tSrS, thread);
        phase1 ^= 1;
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      bool first_pair = true;
      float wg1_max[2];  // WG1: the row max it published last (the token's final max after its last pair)

      for (;;) {
        BlockPairCursor nxt = cur;
        nxt.advance(params, part);
        const bool same_item = nxt.valid && nxt.item == cur.item;
        const int even = cur.even_block;
        if (!same_item) {  // the token's last S of this warpgroup retired: Q may be rewritten
          __syncwarp();
          if (lane == 0) common::mbarrier_arrive(&smem.q_empty);
        }
        if (wg == 0) {
          // ---- a. softmax of the even block against the running max (none at the token's start)
          Problem::mask_scores(mask, smem, 0, tSrS_rc, lane, even);
          Pair::even_softmax(
              smem, state, tile_row, [&](int i) { return first_pair ? -INFINITY : s_max[tile_row[i]]; },
              params.scale_log2, tSrS, tSrP, tSrS_rc, tOrO_rc, row_sum, seen_max, lane);
          // ---- c. P_e relative to this block's max -> sP0 (its last reader freed it with K0's
          // right half, before the gather that S_e read); WG1 moves its O_R to the pair's max
          Loop::store_p(tSrP, [=](int g) { return p_dst0 ^ uint32_t(32 * g); });
          common::fence_view_async_shared();
          Pair::signal(smem, heads_on_m::kP0);
          // ---- d. O_L += P_e.V_e,L; then K0's tiles 0-3 are free
          Loop::issue_pv_regs(mma_pv_regs, tSrP, smem.kv[0], thread, tOrO);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          common::mbarrier_arrive(&smem.extra.tile_free[0][0]);
          // ---- e. O_L to the pair's max
          Pair::even_to_pair_max(smem, state, tile_row, tOrO_rc, row_sum, phases);
          // ---- f. O_L += P_o.V_o,L (P_o from sP1)
          if (cur.has_odd) {
            Pair::await(smem, heads_on_m::kP1, phases);
            Loop::issue_pv(mma_pv, smem.p, smem.kv[1], thread, tOrO);
          }
          // ---- g. S of the next even block: tiles 0-3 (reloaded first)
          if (same_item) issue_s_tiles(smem, 0, phase0, 0, kAlternateLeftTiles - 1, true, tSrS, thread);
          // ---- h. after O_L += P_o.V_o,L, K1's tiles 0-3 and sP1 are free
          if (cur.has_odd) {
            Pair::wait_products(same_item);
            warpgroup_fence_operand(tOrO);
            common::mbarrier_arrive(&smem.extra.tile_free[1][0]);  // only pairs that read K1 free it
          }
          if (lane == 0 && cur.has_odd) common::mbarrier_arrive(&smem.p_empty);
          // ---- i. the rest of the next even block's S
          if (same_item) {
            issue_s_tiles(smem, 0, phase0, kAlternateLeftTiles, kTiles - 1, false, tSrS, thread);
            phase0 ^= 1;
            // S_e' goes to the tensor pipe before S_o', so this warpgroup's next softmax
            // runs while S_o' is still on the pipe.
            Pair::signal(smem, heads_on_m::kSeIssued);
          }
          warpgroup_wait<0>();
          warpgroup_fence_operand(tSrS);
          warpgroup_fence_operand(tOrO);
        } else {
          // ---- a. the odd block's row max against the reference after the even block (its
          // exponentials follow P_e.V_e,R's issue, so the tensor pipe runs that product meanwhile)
          float m_new[2], scale1[2];
          Pair::odd_max(
              smem, state, tile_row, cur.has_odd, [&] { Problem::mask_scores(mask, smem, 1, tSrS_rc, lane, even + 1); },
              params.scale_log2, tSrS_rc, tOrO_rc, row_sum, m_new, scale1, seen_max, phases, lane);
          wg1_max[0] = m_new[0];
          wg1_max[1] = m_new[1];
          // ---- b. O_R += P_e.V_e,R before P_o.V_o,R, so K0's right half is freed one P.V earlier
          Pair::await(smem, heads_on_m::kP0, phases);
          Loop::issue_pv(mma_pv, p0_tile(smem), smem.kv[0] + T::kVHalfOffset, thread, tOrO);
          Pair::odd_exponentiate(cur.has_odd, params.scale_log2, tSrS_rc, tSrP_rc, m_new, scale1, row_sum);
          // ---- c. P_o -> sP1 (once WG0's previous P_o.V_o,L retired), O_R to the pair's max,
          // O_R += P_o.V_o,R
          if (cur.has_odd) {
            const auto await_p1_free = [&] {
              common::mbarrier_wait(&smem.p_empty, p1_phase ^ 1);
              p1_phase ^= 1;
            };
            Pair::template odd_p_and_pv<Loop>(smem, tSrP, p_dst0, scale1, await_p1_free, mma_pv_regs,
                                              smem.kv[1] + T::kVHalfOffset, tOrO, tOrO_rc, thread);
          }
          // ---- d. frees: K0's right half (with sP0 at d_qk 576) after P_e.V_e,R, K1's after P_o.V_o,R
          // (without an odd block P_e.V_e,R is the one product in flight: wait for all of it)
          Pair::wait_products(cur.has_odd);
          common::mbarrier_arrive(&smem.extra.tile_free[0][1]);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          if (cur.has_odd) common::mbarrier_arrive(&smem.extra.tile_free[1][1]);
          // ---- e. S of the next odd block, in the order its tiles were freed
          if (same_item) Pair::await(smem, heads_on_m::kSeIssued, phases);
          if (same_item && nxt.has_odd) {
            issue_s_tiles(smem, 1, phase1, kAlternateLeftTiles, kTiles - 1, true, tSrS, thread);
            issue_s_tiles(smem, 1, phase1, 0, kAlternateLeftTiles - 1, false, tSrS, thread);
            phase1 ^= 1;
            warpgroup_wait<0>();
            warpgroup_fence_operand(tSrS);
          }
        }
        first_pair = false;
        if (!same_item) break;
        cur = nxt;
      }

      // ---- token end: both halves' row sums, then each warpgroup stores its O half
      // NOTE: issuing the next token's first S before the meeting and the store (branch
      // wip/prefill-s-before-store) measured flat at h_q = 128 and 2 % slower at h_q = 64 (session 29).
      float total[2], norm[2], final_max[2];
      if (lane % 4 == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) smem.extra.seen_max[wg][tile_row[i]] = seen_max[i];
      }
      Pair::total_row_sums(smem, wg, tile_row, row_sum, meet_phase, lane, total);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // NOTE: WG1 keeps its own copy: once past the meeting, WG0 may publish the next token's first max.
        final_max[i] = wg == 0 ? s_max[tile_row[i]] : wg1_max[i];
        norm[i] = Problem::row_norm(params, item, blocks, rows[i], final_max[i], total[i]);
      }
      // The row sums are rewritten at the next token's end, after hand-offs that follow these reads.
      using Epilogue = heads_on_m::Epilogue<T, Problem>;
      // NOTE: 16-byte stores (store_o_wide). With store_o's 4-byte ones every consumer warp stalled on
      // the store queue at each token's end; the O store cost about 8 % of the kernel's cycles, and
      // store_o_wide took 4-5 % off (docs/kernels/prefill_sparse.md, docs/performance.md session 24).
      if (blocks.partial) {
        Epilogue::store_o(params, item, blocks, tOrO_rc, rows, norm, wg * HEAD_DIM_V_HALF, lane);
      } else {
        Epilogue::store_o_wide(params, item, tOrO_rc, rows, norm, wg * HEAD_DIM_V_HALF, lane);
      }
      if (wg == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) seen_max[i] = fmaxf(seen_max[i], smem.extra.seen_max[1][tile_row[i]]);
        Epilogue::store_lse(params, item, blocks, rows, final_max, total, seen_max, lane);
      }
      cur.advance(params, part);
    }
  }
};

template <int kHeadDimQK>
__global__ void __launch_bounds__(kAlternateCtaThreads, 1)
    prefill_sparse_alternate_blocks_kernel(const __grid_constant__ KernelParams params) {
  using K = AlternateBlocksKernel<kHeadDimQK>;
  using SharedStorage = typename K::SharedStorage;
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = common::aligned_shared_storage<SharedStorage, K::T::kSmemAlignSlack>(smem_raw);
  const int q_group = int(blockIdx.x);
  const int wg = common::warp_uniform_warpgroup(kWarpgroupThreads);
  const int thread = int(threadIdx.x) % kWarpgroupThreads;
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < 2; ++h) {
        common::mbarrier_init(&smem.extra.half_full[b][h], kWarpgroupThreads + (h == b ? kWarpsPerWarpgroup : 0));
      }
      // NOTE: every thread of the freeing warpgroup arrives: with one lane per warp, racecheck saw
      // the other lanes' reads of the validity bits unordered with the gather's rewrite (ptxas
      // drops a __syncwarp before the arrival).
      for (int g = 0; g < 2; ++g) common::mbarrier_init(&smem.extra.tile_free[b][g], kWarpgroupThreads);
    }
    common::mbarrier_init(&smem.q_full, kWarpgroupThreads);             // the gather warpgroup's cp.async
    common::mbarrier_init(&smem.q_empty, 2 * kWarpsPerWarpgroup);       // every consumer warp, after its last S
    common::mbarrier_init(&smem.p_empty, kWarpsPerWarpgroup);           // sP1 free: WG0's warps after P_o.V_o,L
    for (int h = 0; h < heads_on_m::kNumHandoffs; ++h) common::mbarrier_init(&smem.extra.handoff[h], kWarpgroupThreads);
    common::mbarrier_init(&smem.extra.all_consumers, kAlternateConsumerThreads);
    common::mbarrier_init_fence();
  }
  const PartWork part = common::scheduled_part(params.parts);
  if (part.flags & kPartEmpty) return;  // uniform over the CTA
  __syncthreads();
  if (wg == 2) {
    cutlass::arch::warpgroup_reg_dealloc<kAlternateLoaderRegs>();
    K::run_loader(params, part, smem, q_group, thread);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<kAlternateConsumerRegs>();
  K::run(params, part, smem, q_group, wg, thread);
}

template <int kHeadDimQK>
Status launch_alternate_blocks(const char* name, const KernelParams& params, dim3 grid, cudaStream_t stream) {
  using T = typename AlternateBlocksKernel<kHeadDimQK>::T;
  return common::launch_dependent(name, &prefill_sparse_alternate_blocks_kernel<kHeadDimQK>, grid,
                                  dim3(kAlternateCtaThreads), T::kSmemBytes, stream, 1, params);
}

}  // namespace openmla::kernels::prefill_sparse

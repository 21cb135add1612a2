// sm90 sparse prefill at d_qk = 576, the alternate-blocks kernel
// (DecodeKernel::kSparsePrefillAlternateBlocks): a token's blocks are
// processed in pairs, the two consumer warpgroups taking alternate blocks
// (the scheme of decode_dense/alternate_blocks_kernel.cuh, see
// docs/kernels/decode_dense.md "The alternate-blocks kernel"), and a third
// warpgroup gathers each half of a block's rows as soon as its last reader has
// freed it. Design: docs/kernels/prefill_sparse.md.
//
// Roles (384 threads):
//   WG0 owns the even block of a pair (buffer K0) and O[:, 0:256);
//   WG1 owns the odd block (buffer K1) and O[:, 256:512);
//   WG2 gathers: warp w copies rows [16 w, 16 w + 16) of every block, each
//       half (columns 0-255 = tiles 0-3, 256-575 = tiles 4-8) on its own
//       barrier, in the order the consumers free them.
// Per pair (e = even block in K0, o = odd block in K1), with the hand-off each
// step signals in brackets:
//   WG0  softmax(S_e) against the running max m -> m_e, scale0        [kScale0]
//        P_e relative to m_e -> sP0                                   [kP0]
//        O_L = O_L scale0 + P_e.V_e,L                     (K0 tiles 0-3 free)
//   WG1  softmax(S_o) against m_e -> m_o, scale1                       [kScale1]
//        O_R = O_R scale0 + sP0.V_e,R                     (K0 tiles 4-8, sP0 free)
//        P_o -> sP1 (Q's RoPE chunk: Q's RoPE tile lives in registers)  [kP1]
//        O_R = O_R scale1 + P_o.V_o,R                     (K1 tiles 4-8 free)
//   WG0  O_L = O_L scale1 + sP1.V_o,L                     (K1 tiles 0-3 free)
//        S(next e): tiles 0-3, then 4-8                                 [kSeIssued]
//   WG1  S(next o): tiles 4-8, then 0-3 (the order they were freed)
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
#include "kernels/common/tma.cuh"
#include "kernels/sm90/heads_on_m/consumer_steps.cuh"
#include "kernels/sm90/heads_on_m/epilogue.cuh"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "kernels/sm90/heads_on_m/traits.h"
#include "kernels/sm90/prefill_sparse/config.h"
#include "kernels/sm90/prefill_sparse/problem.cuh"
#include "kernels/sm90/prefill_sparse/producer.cuh"

namespace openmla::kernels::prefill_sparse {

using heads_on_m::BLOCK_M;
using heads_on_m::kChunkCols;
using heads_on_m::HEAD_DIM_V_HALF;
using heads_on_m::ItemBlocks;
using heads_on_m::QueryRow;

inline constexpr int kAlternateConsumerThreads = 2 * kWarpgroupThreads;
inline constexpr int kAlternateCtaThreads = 3 * kWarpgroupThreads;
inline constexpr int kAlternateTiles = 9;      // 64-column tiles of a 576-wide block
inline constexpr int kAlternateLeftTiles = 4;  // tiles 0-3: V's left half; 4-8: V's right half + RoPE
// setmaxnreg: the gather warpgroup gives back what the two consumers take (sum <= 3 x 168).
inline constexpr int kAlternateLoaderRegs = 40;
inline constexpr int kAlternateConsumerRegs = 232;
static_assert(kAlternateLoaderRegs + 2 * kAlternateConsumerRegs <= 3 * kEntryRegs, "setmaxnreg budget");
// Between the two consumer warpgroups everything goes through mbarriers (racecheck reported
// hazards across named barriers shared by the two warpgroups, even around plain bar.sync):
// one-way hand-offs of 128 arrivals (every thread of the signalling warpgroup releases its own
// stores), one phase per use, and a two-way barrier of 256 arrivals (all_consumers).
enum Handoff { kScale0, kScale1, kP0, kP1, kSeIssued, kNumHandoffs };

struct AlternateBlocksExtraStorage {
  // Bit r of buffer b's 64-bit word: row r holds a counted, in-range kv row (PrefillProblem's
  // column mask); 16 bits per gather warp.
  alignas(8) uint16_t stage_valid[2][kWarpsPerWarpgroup];
  // Per buffer and half (tiles 0-3 / 4-8): 128 cp.async arrivals (.noinc), plus, for half b of
  // buffer b, the 4 gather warps' validity-bit writers (AlternateBlocksKernel::gather_half).
  uint64_t half_full[2][2];
  uint64_t tile_free[2][2];           // per buffer: tiles 0-3 / 4-8 read for the last time (4 warps)
  float row_sum[2][BLOCK_M];          // item end: each warpgroup's quad-reduced row sums
  uint64_t handoff[kNumHandoffs];     // see Handoff
  uint64_t all_consumers;             // both consumer warpgroups, every thread (sync_consumers)
};

// The part's blocks as a sequence of pairs (even, even + 1) per item; the last
// pair of an item with an odd block count has no odd block.
struct BlockPairCursor {
  int item, even_block, end_block, length;
  bool valid, has_odd;

  __device__ void start_item(const KernelParams& params, const PartWork& part, int new_item) {
    item = new_item;
    const ItemBlocks blocks = heads_on_m::item_blocks_of_length(part, item, token_length(params, item));
    even_block = blocks.begin_block;
    end_block = blocks.end_block;
    length = blocks.length;
  }
  __device__ void settle(const KernelParams& params, const PartWork& part) {
    while (even_block >= end_block) {
      if (item + 1 > part.end_item) {
        valid = false;
        return;
      }
      start_item(params, part, item + 1);
    }
    has_odd = even_block + 1 < end_block;
  }
  __device__ void first(const KernelParams& params, const PartWork& part) {
    valid = true;
    start_item(params, part, part.begin_item);
    settle(params, part);
  }
  __device__ void advance(const KernelParams& params, const PartWork& part) {
    even_block += 2;
    settle(params, part);
  }
};

struct AlternateBlocksKernel {
  using T = heads_on_m::Traits<DType::kBF16, kHeadDimQK, 2, AlternateBlocksExtraStorage>;
  using Element = typename T::Element;
  using SharedStorage = typename T::SharedStorage;
  using Loop = heads_on_m::ConsumerSteps<T>;
  using Problem = PrefillProblem<T>;
  using Gather = GatherProducer<T>;
  // S's RoPE tile with Q from registers.
  using TiledMmaQKRope = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<BLOCK_M>, cute::Int<BLOCK_N>, cute::Int<kChunkCols>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>()));

  // ---- the gather warpgroup --------------------------------------------------------------------
  // This lane's (l < 16) row offset of `block` of the cursor's token, or -1 (no block: nothing read).
  static __device__ __forceinline__ int64_t lane_row_offset(const KernelParams& params, const BlockPairCursor& cur,
                                                            int block, int row, int lane) {
    if (lane >= kRowsPerProducerWarp || block >= cur.end_block) return -1;
    return Gather::row_offset(params, Gather::block_index(params, cur.item, cur.length, block, row));
  }

  // Half `kHalf` (0: tiles 0-3, 1: tiles 4-8) of this warp's 16 rows into buffer `buf`, then one
  // arrival per thread once its copies land. The half that the buffer's own warpgroup frees
  // (buffer b: half b) first publishes the rows' validity: that warpgroup reads the bits (its
  // mask) before it frees that half, so the rewrite is ordered after the read.
  template <int kHalf>
  static __device__ __forceinline__ void gather_half(const KernelParams& params, SharedStorage& smem, int buf,
                                                     int64_t lane_offset, int warp, int lane) {
    constexpr int kUnitBegin = kHalf == 0 ? 0 : kAlternateLeftTiles * 8;
    constexpr int kUnitEnd = kHalf == 0 ? kAlternateLeftTiles * 8 : kAlternateTiles * 8;
    if (buf == kHalf) {
      const uint32_t valid_bits = __ballot_sync(0xffffffffu, lane_offset >= 0) & 0xffffu;
      if (lane == 0) {
        smem.extra.stage_valid[buf][warp] = uint16_t(valid_bits);
        common::mbarrier_arrive(&smem.extra.half_full[buf][kHalf]);
      }
    }
    Gather::template copy_row_units<kUnitBegin, kUnitEnd>(params.kv, lane_offset, common::smem_u32(smem.kv[buf]),
                                                          warp * kRowsPerProducerWarp, lane);
    common::cp_async_arrive_noinc(&smem.extra.half_full[buf][kHalf]);
  }

  // Every pair of the part: the first at once, then each following pair's halves as the
  // consumers release the current pair's, in the order they are released (K0 tiles 0-3, K0 4-8,
  // K1 4-8, K1 0-3).
  static __device__ void run_loader(const KernelParams& params, const PartWork& part, SharedStorage& smem,
                                    int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int row = warp * kRowsPerProducerWarp + lane;
    BlockPairCursor cur;
    cur.first(params, part);
    if (!cur.valid) return;
    int64_t even = lane_row_offset(params, cur, cur.even_block, row, lane);
    int64_t odd = lane_row_offset(params, cur, cur.even_block + 1, row, lane);
    gather_half<0>(params, smem, 0, even, warp, lane);
    gather_half<1>(params, smem, 0, even, warp, lane);
    if (cur.has_odd) {
      gather_half<1>(params, smem, 1, odd, warp, lane);
      gather_half<0>(params, smem, 1, odd, warp, lane);
    }
    uint32_t phase = 0;
    for (;;) {
      BlockPairCursor nxt = cur;
      nxt.advance(params, part);
      if (!nxt.valid) break;
      even = lane_row_offset(params, nxt, nxt.even_block, row, lane);
      odd = lane_row_offset(params, nxt, nxt.even_block + 1, row, lane);
      common::mbarrier_wait(&smem.extra.tile_free[0][0], phase);
      gather_half<0>(params, smem, 0, even, warp, lane);
      common::mbarrier_wait(&smem.extra.tile_free[0][1], phase);
      gather_half<1>(params, smem, 0, even, warp, lane);
      common::mbarrier_wait(&smem.extra.tile_free[1][1], phase);
      if (nxt.has_odd) gather_half<1>(params, smem, 1, odd, warp, lane);
      common::mbarrier_wait(&smem.extra.tile_free[1][0], phase);
      if (nxt.has_odd) gather_half<0>(params, smem, 1, odd, warp, lane);
      phase ^= 1;
      cur = nxt;
    }
    common::cp_async_wait_all();  // nothing in flight when the warpgroup exits
  }

  // Q of `token` (64 heads from head0; heads >= h_q zero-filled) by the 256 consumer threads.
  static __device__ __forceinline__ void load_q_tile(const KernelParams& params, SharedStorage& smem, int token,
                                                     int head0, int thread) {
    constexpr int kUnitsPerRow = T::kHeadDimQK * int(sizeof(Element)) / 16;  // 72
    constexpr uint32_t kChunkBytes = uint32_t(T::kChunkElems) * sizeof(Element);
    const uint32_t q_base = common::smem_u32(smem.q);
    for (int idx = thread; idx < BLOCK_M * kUnitsPerRow; idx += kAlternateConsumerThreads) {
      const int r = idx / kUnitsPerRow;
      const int unit = idx - r * kUnitsPerRow;
      const bool real = head0 + r < params.h_q;
      const uint16_t* src = params.q + (real ? int64_t(token) * params.q_stride_s +
                                                    int64_t(head0 + r) * params.q_stride_h + 8 * unit
                                             : 0);
      const uint32_t dst = q_base + uint32_t(unit / 8) * kChunkBytes + uint32_t(r) * T::kRowBytes +
                           ((uint32_t(unit % 8) ^ uint32_t(r & 7)) << 4);
      common::cp_async_16_zfill(dst, src, real);
    }
  }

  // S += Q.K^T over tiles [first, last] of buffer `buf` (each waited on its
  // barrier just before its k-steps); tile 8 takes Q from registers.
  // overwrite: the first k-step replaces S. One commit group.
  template <class TensorS, class TensorQ8>
  static __device__ __forceinline__ void issue_s_tiles(SharedStorage& smem, int buf, uint32_t phase, int first,
                                                       int last, bool overwrite, TensorS& tSrS, TensorQ8& tSrQ8,
                                                       int thread) {
    using namespace cute;
    typename T::TiledMmaQK mma;
    TiledMmaQKRope mma_rope;
    Tensor sQ = make_tensor(make_smem_ptr(Loop::opaque(smem.q)), typename T::SmemLayoutQ{});          // (64, 576)
    Tensor sK = make_tensor(make_smem_ptr(Loop::opaque(smem.kv[buf])), typename T::SmemLayoutK{});  // (64, 576)
    auto thr = mma.get_thread_slice(thread);
    Tensor tSsQ = thr.partition_fragment_A(sQ);  // (MMA, 1, 36)
    Tensor tSsK = thr.partition_fragment_B(sK);  // (MMA, 1, 36)
    Tensor sK8 = make_tensor(make_smem_ptr(Loop::opaque(smem.kv[buf] + 8 * T::kChunkElems)),
                             typename T::SmemLayoutP{});  // (64 tokens, 64) RoPE tile
    Tensor tSsK8 = mma_rope.get_thread_slice(thread).partition_fragment_B(sK8);  // (MMA, 1, 4)
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    mma.accumulate_ = overwrite ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
    mma_rope.accumulate_ = mma.accumulate_;
#pragma unroll
    for (int t = 0; t < kAlternateTiles; ++t) {
      if (t < first || t > last) continue;
      if (t == first || t == kAlternateLeftTiles) {  // each half lands on its own barrier
        common::mbarrier_wait(&smem.extra.half_full[buf][t < kAlternateLeftTiles ? 0 : 1], phase);
      }
      if (t < 8) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          gemm(mma, tSsQ(_, _, 4 * t + k), tSsK(_, _, 4 * t + k), tSrS);
          mma.accumulate_ = GMMA::ScaleOut::One;
        }
        mma_rope.accumulate_ = GMMA::ScaleOut::One;
      } else {
        warpgroup_fence_operand(tSrQ8);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          gemm(mma_rope, tSrQ8(_, _, k), tSsK8(_, _, k), tSrS);
          mma_rope.accumulate_ = GMMA::ScaleOut::One;
        }
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
    }
    warpgroup_commit_batch();
  }

  // Row max of the block (log2 domain, masked entries -inf), quad-reduced.
  template <class TensorSRowCol>
  static __device__ __forceinline__ float block_row_max(const TensorSRowCol& s_rc, int i, float scale_log2) {
    float m = s_rc(i, 0);
#pragma unroll
    for (int j = 1; j < 16; ++j) m = fmaxf(m, s_rc(i, j));
    return common::quad_allreduce_max(m) * scale_log2;
  }

  // P = exp2(S scale - max) in place; returns this thread's part of the row sums.
  template <class TensorSRowCol>
  static __device__ __forceinline__ void exponentiate(TensorSRowCol& s_rc, float scale_log2, const float (&max)[2],
                                                      float (&sum)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float offset = common::max_offset(max[i]);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float p = common::exp2_approx(fmaf(s_rc(i, j), scale_log2, -offset));
        s_rc(i, j) = p;
        s += p;
      }
      sum[i] = s;
    }
  }

  // The quad leader of each row publishes the row's new max and this warpgroup's factor.
  static __device__ __forceinline__ void publish_row_state(float* s_max, float* s_scale, const int (&tile_row)[2],
                                                           const float (&m_new)[2], const float (&scale)[2], int lane) {
    __syncwarp();
    if (lane % 4 == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        s_max[tile_row[i]] = m_new[i];
        s_scale[tile_row[i]] = scale[i];
      }
    }
  }

  static __device__ __forceinline__ void signal(SharedStorage& smem, Handoff h) {
    common::mbarrier_arrive(&smem.extra.handoff[h]);
  }
  // `phases` holds the parity each hand-off's next wait expects, one bit per hand-off.
  static __device__ __forceinline__ void await(SharedStorage& smem, Handoff h, uint32_t& phases) {
    common::mbarrier_wait(&smem.extra.handoff[h], (phases >> h) & 1u);
    phases ^= 1u << h;
  }

  // Both consumer warpgroups meet here; `phase` is this thread's count of meetings, mod 2.
  static __device__ __forceinline__ void sync_consumers(SharedStorage& smem, uint32_t& phase) {
    common::mbarrier_arrive(&smem.extra.all_consumers);
    common::mbarrier_wait(&smem.extra.all_consumers, phase);
    phase ^= 1;
  }

  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int wg, int thread) {
    using namespace cute;
    const int lane = thread % 32;
    const int all_thread = wg * kWarpgroupThreads + thread;
    typename T::TiledMmaQK mma_qk;
    typename T::TiledMmaPVRegs mma_pv_regs;
    typename T::TiledMmaPV mma_pv;
    TiledMmaQKRope mma_rope;
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BLOCK_M>, Int<BLOCK_N>>{});  // (MMA, 1, 1) fp32
    Tensor tSrP = make_tensor_like<Element>(tSrS);                                    // (MMA, 1, 1) P
    Tensor tOrO = partition_fragment_C(mma_pv_regs, Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{});  // (MMA, 1, 1) fp32
    Tensor sQ8 = make_tensor(make_smem_ptr(smem.q + 8 * T::kChunkElems), typename T::SmemLayoutP{});  // (64, 64)
    auto thr_rope = mma_rope.get_thread_slice(thread);
    Tensor tSrQ8 = thr_rope.partition_fragment_A(sQ8);  // (MMA, 1, 4) Q's RoPE tile, registers
    Tensor tSsQ8 = thr_rope.partition_A(sQ8);           // same partition, shared memory
    Tensor tScS = mma_qk.get_thread_slice(thread).partition_C(
        make_identity_tensor(Shape<Int<BLOCK_M>, Int<BLOCK_N>>{}));  // (MMA, 1, 1) (row, column) of S
    Tensor tSrS_rc = common::make_rowcol_view(tSrS);  // (2 rows, 16 cols)
    Tensor tScS_rc = common::make_rowcol_view(tScS);  // (2 rows, 16 cols)
    Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 64 values: 256 columns)
    static_assert(decltype(size<1>(tOrO_rc))::value == 64 && decltype(size<1>(tSrS_rc))::value == 16);
    int tile_row[2];
    QueryRow rows[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_row[i] = int(get<0>(tScS_rc(i, 0)));
      rows[i] = Problem::query_row(params, q_group, tile_row[i]);
    }
    // stmatrix destination of group 0; group g's is group 0's XOR 32 g (1024-aligned P tiles; the
    // identity holds for every thread of CuTe's partition), so P's address takes one register.
    uint32_t p_dst0;
    {
      uint32_t dst[4];
      Loop::p_store_addresses(wg == 0 ? smem.p : smem.q + 8 * T::kChunkElems, thread, dst);
      p_dst0 = dst[0];
    }
    float* const s_max = smem.piece_lse;        // running row max (log2 domain), shared by both warpgroups
    float* const s_scale0 = smem.row_scale;     // WG0's factor of the pair
    float* const s_scale1 = smem.row_norm;      // WG1's factor of the pair

    BlockPairCursor cur;
    cur.first(params, part);
    if (!cur.valid) return;
    uint32_t phase0 = 0, phase1 = 0;  // parity of the next load each buffer's owner waits for
    uint32_t phases = 0;               // hand-offs this warpgroup waits for
    uint32_t p0_phase = 0;             // WG0: parity of sP0's next release
    uint32_t meet_phase = 0;           // sync_consumers
    while (cur.valid) {
      const int item = cur.item;
      // NOTE: recomputed rather than kept in the cursor: carrying the whole ItemBlocks in BlockPairCursor
      // raised the consumers' spill from 44 to 64 bytes at 240 registers (session 14).
      const ItemBlocks blocks = Problem::item_blocks(params, part, item);
      const typename Problem::ItemMask mask = Problem::item_mask(params, blocks, rows);
      // ---- item start: Q (the RoPE tile into registers, its shared memory becomes sP1)
      load_q_tile(params, smem, item, q_group * kHeadsPerCta, all_thread);
      common::cp_async_wait_all();
      common::fence_view_async_shared();
      sync_consumers(smem, meet_phase);
#pragma unroll
      for (int v = 0; v < size(tSrQ8); ++v) tSrQ8(v) = tSsQ8(v);
      if (wg == 0 && lane % 4 == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) s_max[tile_row[i]] = -INFINITY;
      }
      sync_consumers(smem, meet_phase);
      clear(tOrO);
      float row_sum[2] = {0.0f, 0.0f};
      if (wg == 0) {
        issue_s_tiles(smem, 0, phase0, 0, 8, true, tSrS, tSrQ8, thread);
        phase0 ^= 1;
      } else if (cur.has_odd) {
        issue_s_tiles(smem, 1, phase1, 0, 8, true, tSrS, tSrQ8, thread);
        phase1 ^= 1;
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);

      for (;;) {
        BlockPairCursor nxt = cur;
        nxt.advance(params, part);
        const bool same_item = nxt.valid && nxt.item == cur.item;
        const int even = cur.even_block;
        if (wg == 0) {
          // ---- a. softmax of the even block against the running max
          Problem::mask_scores(mask, smem, 0, tSrS_rc, lane, even);
          float m_new[2], scale0[2], sum[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const float m_old = s_max[tile_row[i]];
            m_new[i] = fmaxf(m_old, block_row_max(tSrS_rc, i, params.scale_log2));
            scale0[i] = common::rescale_factor(m_old, m_new[i]);
          }
          publish_row_state(s_max, s_scale0, tile_row, m_new, scale0, lane);
          signal(smem, kScale0);
          exponentiate(tSrS_rc, params.scale_log2, m_new, sum);
#pragma unroll
          for (int i = 0; i < 2; ++i) row_sum[i] = row_sum[i] * scale0[i] + sum[i];
#pragma unroll
          for (int v = 0; v < size(tSrS); ++v) tSrP(v) = Element(tSrS(v));
          common::rescale_rows(tOrO_rc, scale0);
          // ---- c. P_e relative to this block's max -> sP0 at once (WG1 moves its O_R to the pair's max)
          common::mbarrier_wait(&smem.p_empty, p0_phase ^ 1);  // WG1's previous P_e.V_e,R retired
          p0_phase ^= 1;
          Loop::store_p(tSrP, [=](int g) { return p_dst0 ^ uint32_t(32 * g); });
          common::fence_view_async_shared();
          signal(smem, kP0);
          // ---- d. O_L += P_e.V_e,L; then K0's tiles 0-3 are free
          Loop::issue_pv_regs(mma_pv_regs, tSrP, smem.kv[0], thread, tOrO);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          if (lane == 0) common::mbarrier_arrive(&smem.extra.tile_free[0][0]);
          // ---- e. O_L to the pair's max
          await(smem, kScale1, phases);
          float scale1[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) scale1[i] = s_scale1[tile_row[i]];
#pragma unroll
          for (int i = 0; i < 2; ++i) row_sum[i] *= scale1[i];
          common::rescale_rows(tOrO_rc, scale1);
          // ---- f. O_L += P_o.V_o,L (P_o from sP1)
          if (cur.has_odd) {
            await(smem, kP1, phases);
            Loop::issue_pv(mma_pv, smem.q + 8 * T::kChunkElems, smem.kv[1], thread, tOrO);
          }
          // ---- g. S of the next even block: tiles 0-3 (reloaded first)
          if (same_item) {
            issue_s_tiles(smem, 0, phase0, 0, 3, true, tSrS, tSrQ8, thread);
          }
          // ---- h. after O_L += P_o.V_o,L, K1's tiles 0-3 are free
          if (cur.has_odd) {
            if (same_item) {
              warpgroup_wait<1>();
            } else {
              warpgroup_wait<0>();
            }
            warpgroup_fence_operand(tOrO);
          }
          if (lane == 0) common::mbarrier_arrive(&smem.extra.tile_free[1][0]);
          // ---- i. the rest of the next even block's S
          if (same_item) {
            issue_s_tiles(smem, 0, phase0, 4, 8, false, tSrS, tSrQ8, thread);
            phase0 ^= 1;
            // S_e' goes to the tensor pipe before S_o', so this warpgroup's next softmax
            // runs while S_o' is still on the pipe.
            signal(smem, kSeIssued);
          }
          warpgroup_wait<0>();
          warpgroup_fence_operand(tSrS);
          warpgroup_fence_operand(tOrO);
        } else {
          // ---- a. softmax of the odd block, against the max after the even block
          await(smem, kScale0, phases);
          float m_mid[2], scale0[2], scale1[2], sum[2] = {0.0f, 0.0f}, m_new[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            m_mid[i] = s_max[tile_row[i]];
            scale0[i] = s_scale0[tile_row[i]];
            m_new[i] = m_mid[i];
          }
          if (cur.has_odd) {
            Problem::mask_scores(mask, smem, 1, tSrS_rc, lane, even + 1);
#pragma unroll
            for (int i = 0; i < 2; ++i) m_new[i] = fmaxf(m_mid[i], block_row_max(tSrS_rc, i, params.scale_log2));
          }
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            scale1[i] = cur.has_odd ? common::rescale_factor(m_mid[i], m_new[i]) : 1.0f;
          }
          publish_row_state(s_max, s_scale1, tile_row, m_new, scale1, lane);
          signal(smem, kScale1);
          float factor[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) factor[i] = scale0[i] * scale1[i];
          if (cur.has_odd) exponentiate(tSrS_rc, params.scale_log2, m_new, sum);
#pragma unroll
          for (int i = 0; i < 2; ++i) row_sum[i] = row_sum[i] * factor[i] + sum[i];
          // P_e in sP0 is relative to the even block's max: O_R joins it there, and moves to the
          // pair's max (scale1) after P_e.V_e,R, which is rare past a sequence's first blocks.
          common::rescale_rows(tOrO_rc, scale0);
          // ---- b. O_R += P_e.V_e,R before P_o.V_o,R, so K0's tiles 4-8 are freed one P.V earlier
          await(smem, kP0, phases);
          Loop::issue_pv(mma_pv, smem.p, smem.kv[0] + T::kVHalfOffset, thread, tOrO);
          // ---- c. P_o -> sP1, O_R to the pair's max, O_R += P_o.V_o,R
          if (cur.has_odd) {
#pragma unroll
            for (int v = 0; v < size(tSrS); ++v) tSrP(v) = Element(tSrS(v));
            Loop::store_p(tSrP, [=](int g) { return p_dst0 ^ uint32_t(32 * g); });
            common::fence_view_async_shared();
            signal(smem, kP1);
            if (!common::warp_rows_unscaled(scale1)) {
              warpgroup_wait<0>();
              warpgroup_fence_operand(tOrO);
              common::rescale_rows(tOrO_rc, scale1);
            }
            Loop::issue_pv_regs(mma_pv_regs, tSrP, smem.kv[1] + T::kVHalfOffset, thread, tOrO);
          }
          if (cur.has_odd) warpgroup_wait<1>();
          // ---- d. frees: K0 tiles 4-8 and sP0 after P_e.V_e,R, K1 tiles 4-8 after P_o.V_o,R
          if (lane == 0) {
            common::mbarrier_arrive(&smem.extra.tile_free[0][1]);
            common::mbarrier_arrive(&smem.p_empty);
          }
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          if (lane == 0) common::mbarrier_arrive(&smem.extra.tile_free[1][1]);
          // ---- e. S of the next odd block, in the order its tiles were freed
          if (same_item) await(smem, kSeIssued, phases);
          if (same_item && nxt.has_odd) {
            issue_s_tiles(smem, 1, phase1, 4, 8, true, tSrS, tSrQ8, thread);
            issue_s_tiles(smem, 1, phase1, 0, 3, false, tSrS, tSrQ8, thread);
            phase1 ^= 1;
            warpgroup_wait<0>();
            warpgroup_fence_operand(tSrS);
          }
        }
        if (!same_item) break;
        cur = nxt;
      }

      // ---- item end: both halves' row sums, then each warpgroup stores its O half
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        row_sum[i] = common::quad_allreduce_sum(row_sum[i]);
        if (lane % 4 == 0) smem.extra.row_sum[wg][tile_row[i]] = row_sum[i];
      }
      sync_consumers(smem, meet_phase);
      float total[2], norm[2], final_max[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        total[i] = smem.extra.row_sum[0][tile_row[i]] + smem.extra.row_sum[1][tile_row[i]];
        final_max[i] = s_max[tile_row[i]];
        norm[i] = Problem::row_norm(params, item, blocks, rows[i], final_max[i], total[i]);
      }
      heads_on_m::Epilogue<T, Problem>::store_o(params, item, blocks, tOrO_rc, rows, norm, wg * HEAD_DIM_V_HALF, lane);
      if (wg == 0) heads_on_m::Epilogue<T, Problem>::store_lse(params, item, blocks, rows, final_max, total, lane);
      // Q, sP1 and the row state are rewritten by the next item.
      sync_consumers(smem, meet_phase);
      cur.advance(params, part);
    }
  }
};

__global__ void __launch_bounds__(kAlternateCtaThreads, 1)
    prefill_sparse_alternate_blocks_kernel(const __grid_constant__ KernelParams params) {
  using K = AlternateBlocksKernel;
  using SharedStorage = typename K::SharedStorage;
  extern __shared__ uint8_t smem_raw[];
  // Aligned by an offset from the __shared__ array itself, so the compiler keeps knowing the
  // storage is shared memory (32-bit addresses instead of generic pointer pairs in registers).
  const uint32_t align_pad =
      (K::T::kSmemAlignSlack - common::smem_u32(smem_raw) % K::T::kSmemAlignSlack) % K::T::kSmemAlignSlack;
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw + align_pad);
  const int q_group = int(blockIdx.x);
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = int(threadIdx.x) % kWarpgroupThreads;
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < 2; ++h) {
        common::mbarrier_init(&smem.extra.half_full[b][h], kWarpgroupThreads + (h == b ? kWarpsPerWarpgroup : 0));
      }
      for (int g = 0; g < 2; ++g) common::mbarrier_init(&smem.extra.tile_free[b][g], kWarpgroupThreads / 32);
    }
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads / 32);  // sP0 free: WG1's warps after P_e.V_e,R
    for (int h = 0; h < kNumHandoffs; ++h) common::mbarrier_init(&smem.extra.handoff[h], kWarpgroupThreads);
    common::mbarrier_init(&smem.extra.all_consumers, kAlternateConsumerThreads);
    common::mbarrier_init_fence();
  }
  common::wait_for_previous_grid();
  common::allow_next_grid();
  const PartWork part = params.parts[blockIdx.y];
  if (part.flags & kPartEmpty) return;  // uniform over the CTA
  __syncthreads();
  if (wg == 2) {
    cutlass::arch::warpgroup_reg_dealloc<kAlternateLoaderRegs>();
    K::run_loader(params, part, smem, thread);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<kAlternateConsumerRegs>();
  K::run(params, part, smem, q_group, wg, thread);
}

inline Status launch_alternate_blocks(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  using T = AlternateBlocksKernel::T;
  return common::launch_dependent("prefill_sparse_alternate_blocks", &prefill_sparse_alternate_blocks_kernel, grid,
                                  dim3(kAlternateCtaThreads), T::kSmemBytes, stream, 1, params);
}

}  // namespace openmla::kernels::prefill_sparse

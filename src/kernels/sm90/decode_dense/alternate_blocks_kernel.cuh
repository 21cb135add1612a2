// sm90 dense decode for compute-bound shapes, the alternate-blocks kernel
// (DecodeKernel::kDenseAlternateBlocks: d_qk = 576, pages of >= 64 tokens,
// >= 2 query tiles per KV head): an item's blocks are processed in pairs, the
// two consumer warpgroups taking alternate blocks, and one thread of a third
// warpgroup reloads each group of 64-column tiles as soon as its last reader
// has freed it. Design and measurements: docs/kernels/decode_dense.md, "The
// alternate-blocks kernel".
//
// Roles (384 threads):
//   WG0 owns the even block of a pair (buffer K0) and O[:, 0:256);
//   WG1 owns the odd block (buffer K1) and O[:, 256:512);
//   WG2 thread 0 issues every K/V load (no consumer warp has loads in flight).
// Per pair (e = even block in K0, o = odd block in K1, S of both on chip),
// with the hand-off each step signals in brackets:
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
// Every 64-column tile has its own full barrier, so S starts on the tiles that
// landed first.
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
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/problem.cuh"
#include "kernels/sm90/decode_dense/producers.cuh"
#include "kernels/sm90/decode_dense/rows_and_blocks.cuh"
#include "kernels/sm90/heads_on_m/consumer_steps.cuh"
#include "kernels/sm90/heads_on_m/epilogue.cuh"
#include "kernels/sm90/heads_on_m/traits.h"

namespace openmla::kernels::decode_dense {

inline constexpr int kAlternateConsumerThreads = 2 * kWarpgroupThreads;
// A separate loader: a warp that issued TMA loads and then ran fence.proxy.async
// after its P stores measured as waiting for those loads.
inline constexpr int kAlternateCtaThreads = 3 * kWarpgroupThreads;
inline constexpr int kAlternateTiles = 9;  // 64-column tiles of a 576-wide block
// Named barriers inside one warpgroup: barrier_ids::kAlternateBlocksWarpgroup0 / 1
// (kernels/common/named_barriers.h).
// Between the two consumer warpgroups everything goes through mbarriers (racecheck reported
// hazards across named barriers shared by the two warpgroups, even around plain bar.sync):
// one-way hand-offs of 128 arrivals (every thread of the signalling warpgroup releases its own
// stores), one phase per use, and a two-way barrier of 256 arrivals (all_consumers).
enum Handoff { kScale0, kScale1, kP0, kP1, kSeIssued, kNumHandoffs };

struct AlternateBlocksExtraStorage {
  uint64_t tile_full[2][kAlternateTiles];  // per buffer and 64-column tile: 1 arrival + 8 KB of TMA
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
    const ItemBlocks blocks = item_blocks(params, part, item);
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

template <DType kDType>
struct AlternateBlocksKernel {
  using T = heads_on_m::Traits<kDType, 576, 2, AlternateBlocksExtraStorage>;
  using Element = typename T::Element;
  using SharedStorage = typename T::SharedStorage;
  using Loop = heads_on_m::ConsumerSteps<T>;
  using Problem = DenseProblem<T>;
  // S's RoPE tile with Q from registers.
  using TiledMmaQKRope = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<BLOCK_M>, cute::Int<BLOCK_N>, cute::Int<kChunkCols>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>()));

  // Page of `block` of `item`, or -1 when the block has no valid token (an
  // empty request's only block: its table entry may be garbage).
  static __device__ __forceinline__ int page_of(const KernelParams& params, int item, int block, int length) {
    if (block_valid_tokens(length, block) <= 0) return -1;
    return __ldg(params.block_table + int64_t(item) * params.block_table_stride_b + block * BLOCK_N / params.page_size);
  }

  // One thread: tiles [first, last] of `block` (in page `page`, -1: nothing to load) into buffer `buf`.
  static __device__ void load_tiles(const KernelParams& params, SharedStorage& smem, int buf, int first, int last,
                                    int block, int page, int kv_head) {
    const int token_in_page = (block * BLOCK_N) % params.page_size;
    for (int t = first; t <= last; ++t) {
      common::mbarrier_arrive_expect_tx(&smem.extra.tile_full[buf][t], page >= 0 ? uint32_t(T::kChunkElems * sizeof(Element)) : 0u);
      if (page >= 0) {
        common::tma_load_4d(&params.tma_kv, &smem.extra.tile_full[buf][t], smem.kv[buf] + t * T::kChunkElems,
                            t * kChunkCols, kv_head, token_in_page, page);
      }
    }
  }

  // The loader (one thread of the third warpgroup): the first pair at once, then each
  // following pair's tiles as the consumers release the current pair's, in the order
  // they are released (K0 tiles 0-3, K0 4-8, K1 4-8, K1 0-3).
  static __device__ void run_loader(const KernelParams& params, const PartWork& part, SharedStorage& smem,
                                    int kv_head) {
    BlockPairCursor cur;
    cur.first(params, part);
    if (!cur.valid) return;
    load_tiles(params, smem, 0, 0, 8, cur.even_block, page_of(params, cur.item, cur.even_block, cur.length), kv_head);
    if (cur.has_odd) {
      load_tiles(params, smem, 1, 0, 8, cur.even_block + 1, page_of(params, cur.item, cur.even_block + 1, cur.length),
                 kv_head);
    }
    uint32_t phase = 0;
    for (;;) {
      BlockPairCursor nxt = cur;
      nxt.advance(params, part);
      if (!nxt.valid) return;
      const int page_e = page_of(params, nxt.item, nxt.even_block, nxt.length);
      const int page_o = nxt.has_odd ? page_of(params, nxt.item, nxt.even_block + 1, nxt.length) : -1;
      common::mbarrier_wait(&smem.extra.tile_free[0][0], phase);
      load_tiles(params, smem, 0, 0, 3, nxt.even_block, page_e, kv_head);
      common::mbarrier_wait(&smem.extra.tile_free[0][1], phase);
      load_tiles(params, smem, 0, 4, 8, nxt.even_block, page_e, kv_head);
      common::mbarrier_wait(&smem.extra.tile_free[1][1], phase);
      if (nxt.has_odd) load_tiles(params, smem, 1, 4, 8, nxt.even_block + 1, page_o, kv_head);
      common::mbarrier_wait(&smem.extra.tile_free[1][0], phase);
      if (nxt.has_odd) load_tiles(params, smem, 1, 0, 3, nxt.even_block + 1, page_o, kv_head);
      phase ^= 1;
      cur = nxt;
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
      common::mbarrier_wait(&smem.extra.tile_full[buf][t], phase);
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
                             int kv_head, int m_tile, int wg, int thread) {
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
      Producers<T>::template gather_q_tile<kAlternateConsumerThreads>(params, smem, item, kv_head, m_tile, all_thread);
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
          // ---- b. stale V rows of a short block to zero before any P.V reads them
          const int valid_e = block_valid_tokens(cur.length, even);
          if (valid_e < BLOCK_N) {
            Loop::zero_tail_rows(smem.kv[0], valid_e, thread);
            common::fence_view_async_shared();
            common::named_barrier_sync(barrier_ids::kAlternateBlocksWarpgroup0, kWarpgroupThreads);
          }
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
            const int valid_o = block_valid_tokens(cur.length, even + 1);
            if (valid_o < BLOCK_N) {
              Loop::zero_tail_rows(smem.kv[1], valid_o, thread);
              common::fence_view_async_shared();
              common::named_barrier_sync(barrier_ids::kAlternateBlocksWarpgroup1, kWarpgroupThreads);
            }
            Loop::store_p(tSrP, [=](int g) { return p_dst0 ^ uint32_t(32 * g); });
            common::fence_view_async_shared();
            signal(smem, kP1);
            // NOTE: a warpgroup vote, not a warp one: wgmma.wait_group is .aligned, so
            // all four warps must take the same branch (compute-sanitizer synccheck:
            // "mismatching warpgroup instruction pc between warps" with a warp vote).
            if (!common::named_barrier_all(barrier_ids::kAlternateBlocksWarpgroup1, kWarpgroupThreads,
                                           common::rows_unscaled(scale1))) {
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
      using Epilogue = heads_on_m::Epilogue<T, Problem>;
      if (blocks.partial) {
        Epilogue::store_o(params, item, blocks, tOrO_rc, rows, norm, wg * HEAD_DIM_V_HALF, lane);
      } else {
        // Q's shared memory is free here (every S of the item retired; the next item's Q is
        // gathered after the meeting below), and so is sP1 in its RoPE tile (read by the last
        // P_o.V_o,L, which WG0 waited for before the meeting above).
        static_assert(2 * Epilogue::kStageBytes <= kAlternateTiles * T::kChunkElems * int(sizeof(Element)));
        Epilogue::store_o_staged(params, item, tOrO_rc, rows, tile_row, norm, wg * HEAD_DIM_V_HALF, lane,
                                 common::smem_u32(smem.q) + uint32_t(wg * Epilogue::kStageBytes));
      }
      if (wg == 0) Epilogue::store_lse(params, item, blocks, rows, final_max, total, lane);
      // Q, sP1 and the row state are rewritten by the next item.
      sync_consumers(smem, meet_phase);
      cur.advance(params, part);
    }
  }
};

template <DType kDType>
__global__ void __launch_bounds__(kAlternateCtaThreads, 1) decode_dense_alternate_blocks_kernel(const __grid_constant__ KernelParams params) {
  using K = AlternateBlocksKernel<kDType>;
  using SharedStorage = typename K::SharedStorage;
  extern __shared__ uint8_t smem_raw[];
  // Aligned by an offset from the __shared__ array itself, so the compiler keeps knowing the
  // storage is shared memory (32-bit addresses instead of generic pointer pairs in registers).
  const uint32_t align_pad =
      (K::T::kSmemAlignSlack - common::smem_u32(smem_raw) % K::T::kSmemAlignSlack) % K::T::kSmemAlignSlack;
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw + align_pad);
  const int q_group = int(blockIdx.x);
  const int kv_head = q_group / params.num_m_tiles;
  const int m_tile = q_group % params.num_m_tiles;
  const int wg = common::warp_uniform_warpgroup(kWarpgroupThreads);
  const int thread = int(threadIdx.x) % kWarpgroupThreads;
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      for (int t = 0; t < kAlternateTiles; ++t) common::mbarrier_init(&smem.extra.tile_full[b][t], 1);
      for (int g = 0; g < 2; ++g) common::mbarrier_init(&smem.extra.tile_free[b][g], kWarpgroupThreads / 32);
    }
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads / 32);  // sP0 free: WG1's warps after P_e.V_e,R
    for (int h = 0; h < kNumHandoffs; ++h) common::mbarrier_init(&smem.extra.handoff[h], kWarpgroupThreads);
    common::mbarrier_init(&smem.extra.all_consumers, kAlternateConsumerThreads);
    common::mbarrier_init_fence();
    common::tma_prefetch_descriptor(&params.tma_kv);
  }
  const PartWork part = common::scheduled_part(params.parts);
  if (part.flags & kPartEmpty) return;  // uniform over the CTA
  __syncthreads();
  if (wg == 2) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (thread == 0) K::run_loader(params, part, smem, kv_head);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<240>();
  K::run(params, part, smem, q_group, kv_head, m_tile, wg, thread);
}

template <DType kDType>
Status launch_alternate_blocks_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  using T = typename AlternateBlocksKernel<kDType>::T;
  return common::launch_dependent("decode_dense_alternate_blocks", &decode_dense_alternate_blocks_kernel<kDType>, grid, dim3(kAlternateCtaThreads),
                                  T::kSmemBytes, stream, 1, params);
}

}  // namespace openmla::kernels::decode_dense

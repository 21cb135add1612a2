// sm90 dense decode, the alternate-blocks kernel (DecodeKernel::kDenseAlternateBlocks:
// d_qk = 576, pages of whole 64-token blocks, any number of query tiles; the
// cluster split runs the column-split kernel): an item's blocks are processed in pairs, the
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
#include "kernels/common/schedule/own_part.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/problem.cuh"
#include "kernels/sm90/decode_dense/producers.cuh"
#include "kernels/sm90/decode_dense/rows_and_blocks.cuh"
#include "kernels/sm90/heads_on_m/block_pairs.cuh"
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
struct AlternateBlocksExtraStorage {
  uint64_t tile_full[2][kAlternateTiles];  // per buffer and 64-column tile: 1 arrival + 8 KB of TMA
  uint64_t tile_free[2][2];           // per buffer: tiles 0-3 / 4-8 read for the last time (4 warps)
  float row_sum[2][BLOCK_M];          // item end: each warpgroup's quad-reduced row sums
  uint64_t handoff[heads_on_m::kNumHandoffs];     // see heads_on_m::Handoff
  uint64_t all_consumers;             // both consumer warpgroups, every thread (sync_consumers)
};

template <DType kDType>
struct AlternateBlocksKernel {
  using T = heads_on_m::Traits<kDType, 576, 2, AlternateBlocksExtraStorage>;
  using Element = typename T::Element;
  using SharedStorage = typename T::SharedStorage;
  using Loop = heads_on_m::ConsumerSteps<T>;
  using Problem = DenseProblem<T>;
  using BlockPairCursor = heads_on_m::BlockPairCursor<Problem>;
  using Pair = heads_on_m::PairSteps<SharedStorage>;
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
    heads_on_m::PairFrees frees;  // the first pair's buffers are free
    if (cur.has_odd) {
      load_tiles(params, smem, 1, 0, 8, cur.even_block + 1, page_of(params, cur.item, cur.even_block + 1, cur.length),
                 kv_head);
      frees.odd_loaded();
    }
    for (;;) {
      BlockPairCursor nxt = cur;
      nxt.advance(params, part);
      if (!nxt.valid) return;
      const int page_e = page_of(params, nxt.item, nxt.even_block, nxt.length);
      const int page_o = nxt.has_odd ? page_of(params, nxt.item, nxt.even_block + 1, nxt.length) : -1;
      common::mbarrier_wait(&smem.extra.tile_free[0][0], frees.even_parity());
      load_tiles(params, smem, 0, 0, 3, nxt.even_block, page_e, kv_head);
      common::mbarrier_wait(&smem.extra.tile_free[0][1], frees.even_parity());
      load_tiles(params, smem, 0, 4, 8, nxt.even_block, page_e, kv_head);
      frees.even_loaded();
      if (nxt.has_odd) {
        frees.wait_odd(&smem.extra.tile_free[1][1]);
        load_tiles(params, smem, 1, 4, 8, nxt.even_block + 1, page_o, kv_head);
        frees.wait_odd(&smem.extra.tile_free[1][0]);
        load_tiles(params, smem, 1, 0, 3, nxt.even_block + 1, page_o, kv_head);
        frees.odd_loaded();
      }
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
    Tensor tSrP_rc = common::make_rowcol_view(tSrP);  // (2 rows, 16 cols)
    Tensor tScS_rc = common::make_rowcol_view(tScS);  // (2 rows, 16 cols)
    Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 64 values: 256 columns)
    static_assert(decltype(size<1>(tOrO_rc))::value == 64 && decltype(size<1>(tSrS_rc))::value == 16);
    int tile_row[2];
    QueryRow rows[2];
    Pair::template tile_rows<Problem>(params, q_group, tScS_rc, tile_row, rows);
    // P tiles: WG0's is the plan's, WG1's is Q's RoPE tile (read from registers by S).
    const uint32_t p_dst0 =
        Pair::template p_store_base<Loop>(wg == 0 ? smem.p : smem.q + 8 * T::kChunkElems, thread);
    const typename Pair::RowState state = Pair::row_state(smem);
    float* const s_max = state.max;

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
      Pair::sync_consumers(smem, meet_phase);
#pragma unroll
      for (int v = 0; v < size(tSrQ8); ++v) tSrQ8(v) = tSsQ8(v);
      if (wg == 0 && lane % 4 == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) s_max[tile_row[i]] = -INFINITY;
      }
      Pair::sync_consumers(smem, meet_phase);
      clear(tOrO);
      float row_sum[2] = {0.0f, 0.0f};
      float seen_max[2] = {-INFINITY, -INFINITY};  // the true row max: unused (dense writes no max_logits)
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
          Pair::even_softmax(smem, state, tile_row, [&](int i) { return s_max[tile_row[i]]; }, params.scale_log2,
                             tSrS, tSrP, tSrS_rc, tOrO_rc, row_sum, seen_max, lane);
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
          Pair::signal(smem, heads_on_m::kP0);
          // ---- d. O_L += P_e.V_e,L; then K0's tiles 0-3 are free
          Loop::issue_pv_regs(mma_pv_regs, tSrP, smem.kv[0], thread, tOrO);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          if (lane == 0) common::mbarrier_arrive(&smem.extra.tile_free[0][0]);
          // ---- e. O_L to the pair's max
          Pair::even_to_pair_max(smem, state, tile_row, tOrO_rc, row_sum, phases);
          // ---- f. O_L += P_o.V_o,L (P_o from sP1)
          if (cur.has_odd) {
            Pair::await(smem, heads_on_m::kP1, phases);
            Loop::issue_pv(mma_pv, smem.q + 8 * T::kChunkElems, smem.kv[1], thread, tOrO);
          }
          // ---- g. S of the next even block: tiles 0-3 (reloaded first)
          if (same_item) {
            issue_s_tiles(smem, 0, phase0, 0, 3, true, tSrS, tSrQ8, thread);
          }
          // ---- h. after O_L += P_o.V_o,L, K1's tiles 0-3 are free
          if (cur.has_odd) {
            Pair::wait_products(same_item);
            warpgroup_fence_operand(tOrO);
            if (lane == 0) common::mbarrier_arrive(&smem.extra.tile_free[1][0]);  // only pairs that read K1 free it
          }
          // ---- i. the rest of the next even block's S
          if (same_item) {
            issue_s_tiles(smem, 0, phase0, 4, 8, false, tSrS, tSrQ8, thread);
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
          // ---- b. O_R += P_e.V_e,R before P_o.V_o,R, so K0's tiles 4-8 are freed one P.V earlier
          Pair::await(smem, heads_on_m::kP0, phases);
          Loop::issue_pv(mma_pv, smem.p, smem.kv[0] + T::kVHalfOffset, thread, tOrO);
          Pair::odd_exponentiate(cur.has_odd, params.scale_log2, tSrS_rc, tSrP_rc, m_new, scale1, row_sum);
          // ---- c. P_o -> sP1, O_R to the pair's max, O_R += P_o.V_o,R
          if (cur.has_odd) {
            const auto zero_tail = [&] {
              const int valid_o = block_valid_tokens(cur.length, even + 1);
              if (valid_o < BLOCK_N) {
                Loop::zero_tail_rows(smem.kv[1], valid_o, thread);
                common::fence_view_async_shared();
                common::named_barrier_sync(barrier_ids::kAlternateBlocksWarpgroup1, kWarpgroupThreads);
              }
            };
            Pair::template odd_p_and_pv<Loop>(smem, tSrP, p_dst0, scale1, zero_tail, mma_pv_regs,
                                              smem.kv[1] + T::kVHalfOffset, tOrO, tOrO_rc, thread);
          }
          // ---- d. frees: K0 tiles 4-8 and sP0 after P_e.V_e,R, K1 tiles 4-8 after P_o.V_o,R
          // (without an odd block P_e.V_e,R is the one product in flight: wait for all of it)
          Pair::wait_products(cur.has_odd);
          if (lane == 0) {
            common::mbarrier_arrive(&smem.extra.tile_free[0][1]);
            common::mbarrier_arrive(&smem.p_empty);
          }
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          if (lane == 0 && cur.has_odd) common::mbarrier_arrive(&smem.extra.tile_free[1][1]);
          // ---- e. S of the next odd block, in the order its tiles were freed
          if (same_item) Pair::await(smem, heads_on_m::kSeIssued, phases);
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
      float total[2], norm[2], final_max[2];
      Pair::total_row_sums(smem, wg, tile_row, row_sum, meet_phase, lane, total);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
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
      Pair::sync_consumers(smem, meet_phase);
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
    for (int h = 0; h < heads_on_m::kNumHandoffs; ++h) common::mbarrier_init(&smem.extra.handoff[h], kWarpgroupThreads);
    common::mbarrier_init(&smem.extra.all_consumers, kAlternateConsumerThreads);
    common::mbarrier_init_fence();
    common::tma_prefetch_descriptor(&params.tma_kv);
  }
  const PartWork part = common::own_part(params.schedule, common::schedule_scratch(smem.kv));
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

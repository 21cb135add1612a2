// The alternate-blocks scheme's shared pieces: an item's blocks walked in pairs
// (even block to the first consumer warpgroup, odd to the second), the per-pair
// softmax steps and the mbarrier hand-offs between the two warpgroups. Used by
// decode_dense/alternate_blocks_kernel.cuh and
// prefill_sparse/alternate_blocks_kernel.cuh (the per-pair protocol is written
// out in the first).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "openmla/schedule.h"

namespace openmla::kernels::heads_on_m {

// Between the two consumer warpgroups everything goes through mbarriers (racecheck reported
// hazards across named barriers shared by the two warpgroups, even around plain bar.sync):
// one-way hand-offs of 128 arrivals (every thread of the signalling warpgroup releases its own
// stores), one phase per use, and a two-way barrier of 256 arrivals (all_consumers).
enum Handoff { kScale0, kScale1, kP0, kP1, kSeIssued, kNumHandoffs };

// The part's blocks as a sequence of pairs (even, even + 1) per item; the last
// pair of an item with an odd block count has no odd block.
template <class Problem>
struct BlockPairCursor {
  int item, even_block, end_block, length;
  bool valid, has_odd;

  __device__ void start_item(const typename Problem::Params& params, const PartWork& part, int new_item) {
    item = new_item;
    const ItemBlocks blocks = Problem::item_blocks(params, part, item);
    even_block = blocks.begin_block;
    end_block = blocks.end_block;
    length = blocks.length;
  }
  __device__ void settle(const typename Problem::Params& params, const PartWork& part) {
    while (even_block >= end_block) {
      if (item + 1 > part.end_item) {
        valid = false;
        return;
      }
      start_item(params, part, item + 1);
    }
    has_odd = even_block + 1 < end_block;
  }
  __device__ void first(const typename Problem::Params& params, const PartWork& part) {
    valid = true;
    start_item(params, part, part.begin_item);
    settle(params, part);
  }
  __device__ void advance(const typename Problem::Params& params, const PartWork& part) {
    even_block += 2;
    settle(params, part);
  }
};

// The loader's waits for the consumers' frees of the two buffers, in one register (sparse
// prefill's gather warps run at 72): bit 0 the parity of K0's next free (every pair reads K0),
// bit 1 K1's (counted by the pairs that read K1: those with an odd block), bit 2 whether K1
// holds a block some pair reads (its free then comes before a reload).
// NOTE: K1's frees counted per pair (every pair freeing K1), a pair without an odd block (an
// item's last, of an odd block count) let the consumers complete K1's next phase as well
// before the loader waited for the one before it; the loader then waited on a parity that had
// come round again, for an arrival that never came: a hang (H200, 2026-12-03, docs/performance.md
// session 34; cuda-gdb: the consumers had exited, the loader thread spun on tile_free[1][0]).
struct PairFrees {
  uint32_t bits = 0;

  __device__ __forceinline__ uint32_t even_parity() const { return bits & 1u; }
  // Before loading one of K1's tile groups: the last reader's free of that group.
  __device__ __forceinline__ void wait_odd(uint64_t* group_free) const {
    if (bits & 4u) common::mbarrier_wait(group_free, (bits >> 1) & 1u);
  }
  // After loading all of K1 for a pair with an odd block.
  __device__ __forceinline__ void odd_loaded() { bits = (bits & 4u) ? bits ^ 2u : bits | 4u; }
  // After loading all of K0 for a pair.
  __device__ __forceinline__ void even_loaded() { bits ^= 1u; }
};

// One consumer warpgroup's steps of a pair. SharedStorage::extra holds
// handoff[kNumHandoffs] (128 arrivals each), all_consumers (256) and
// row_sum[2][64] (each warpgroup's row sums at an item's end).
template <class SharedStorage>
struct PairSteps {
  // Row max of the block (log2 domain, masked entries -inf), quad-reduced.
  template <class TensorSRowCol>
  static __device__ __forceinline__ float block_row_max(const TensorSRowCol& s_rc, int i, float scale_log2) {
    float m = s_rc(i, 0);
#pragma unroll
    for (int j = 1; j < 16; ++j) m = fmaxf(m, s_rc(i, j));
    return common::quad_allreduce_max(m) * scale_log2;
  }

  // P = exp2(S scale - max) into p_rc (S's own view: in place; P's: rounded to its element type);
  // returns this thread's part of the row sums, from the unrounded P.
  template <class TensorSRowCol, class TensorPRowCol>
  static __device__ __forceinline__ void exponentiate(const TensorSRowCol& s_rc, TensorPRowCol& p_rc, float scale_log2,
                                                      const float (&max)[2], float (&sum)[2]) {
    using PElement = typename TensorPRowCol::value_type;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float offset = common::max_offset(max[i]);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float p = common::exp2_approx(fmaf(s_rc(i, j), scale_log2, -offset));
        p_rc(i, j) = PElement(p);
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

  // WG1, step c of a pair with an odd block: P_o (tSrP, from odd_exponentiate) -> sP1 at p_dst0 once
  // `before_store` ran (the kernel's own step: the dense kernel zeroes K1's tail rows, the prefill
  // kernel waits for sP1 to be free) [kP1]; O_R to the pair's reference unless no row's moved; then
  // O_R += P_o.V_o,R (v_odd_right: K1's right half) is issued.
  // NOTE: a warpgroup vote, not a warp one: wgmma.wait_group is .aligned, so all four warps must
  // take the same branch (compute-sanitizer synccheck: "mismatching warpgroup instruction pc
  // between warps" with a warp vote).
  template <class Loop, class BeforeStore, class TensorP, class MmaPVRegs, class Element, class TensorO,
            class TensorORowCol>
  static __device__ __forceinline__ void odd_p_and_pv(SharedStorage& smem, TensorP& tSrP, uint32_t p_dst0,
                                                      const float (&scale1)[2], const BeforeStore& before_store,
                                                      MmaPVRegs& mma_pv_regs, Element* v_odd_right, TensorO& tOrO,
                                                      TensorORowCol& tOrO_rc, int thread) {
    before_store();
    Loop::store_p(tSrP, [=](int g) { return p_dst0 ^ uint32_t(32 * g); });
    common::fence_view_async_shared();
    signal(smem, kP1);
    if (!common::named_barrier_all(barrier_ids::kAlternateBlocksWarpgroup1, kWarpgroupThreads,
                                   common::rows_unscaled(scale1))) {
      cute::warpgroup_wait<0>();
      cute::warpgroup_fence_operand(tOrO);
      common::rescale_rows(tOrO_rc, scale1);
    }
    Loop::issue_pv_regs(mma_pv_regs, tSrP, v_odd_right, thread, tOrO);
  }

  // Wait for this warpgroup's committed WGMMA batches, all but the newest when `keep_newest` (a
  // product the step leaves running). The condition must be uniform over the warpgroup.
  static __device__ __forceinline__ void wait_products(bool keep_newest) {
    if (keep_newest) {
      cute::warpgroup_wait<1>();
    } else {
      cute::warpgroup_wait<0>();
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

  // The row state both warpgroups share (shared memory): the running row max (log2 domain) and
  // each warpgroup's factor of the current pair.
  struct RowState {
    float* max;
    float* scale0;
    float* scale1;
  };
  // The running row max (log2 domain) in piece_lse, shared by both warpgroups; WG0's factor of
  // the pair in row_scale, WG1's in row_norm.
  static __device__ __forceinline__ RowState row_state(SharedStorage& smem) {
    return RowState{smem.piece_lse, smem.row_scale, smem.row_norm};
  }

  // This thread's two tile rows of S (tScS_rc: the (row, column) identity in row-col view) and
  // the query rows they hold.
  template <class Problem, class TensorCRowCol>
  static __device__ __forceinline__ void tile_rows(const typename Problem::Params& params, int q_group,
                                                   const TensorCRowCol& tScS_rc, int (&tile_row)[2],
                                                   QueryRow (&rows)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_row[i] = int(cute::get<0>(tScS_rc(i, 0)));
      rows[i] = Problem::query_row(params, q_group, tile_row[i]);
    }
  }

  // stmatrix destination of group 0 in the P tile `p_tile`; group g's is group 0's XOR 32 g
  // (1024-aligned P tiles; the identity holds for every thread of CuTe's partition), so P's
  // address takes one register.
  template <class Loop, class Element>
  static __device__ __forceinline__ uint32_t p_store_base(Element* p_tile, int thread) {
    uint32_t dst[4];
    Loop::p_store_addresses(p_tile, thread, dst);
    return dst[0];
  }

  // WG0, step a: softmax of the even block (masked) against m_old(i) [kScale0]; P_e -> tSrP, the
  // row sums and O_L moved to the reference after the block (common::lazy_reference); seen_max: the true
  // row max of the blocks this warpgroup saw (max_logits).
  template <class OldMax, class TensorS, class TensorP, class TensorSRowCol, class TensorORowCol>
  static __device__ __forceinline__ void even_softmax(SharedStorage& smem, const RowState& state,
                                                      const int (&tile_row)[2], const OldMax& m_old_of,
                                                      float scale_log2, TensorS& tSrS, TensorP& tSrP,
                                                      TensorSRowCol& tSrS_rc, TensorORowCol& tOrO_rc,
                                                      float (&row_sum)[2], float (&seen_max)[2], int lane) {
    using Element = typename TensorP::value_type;
    float m_new[2], scale0[2], sum[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float m_old = m_old_of(i);
      const float block_max = block_row_max(tSrS_rc, i, scale_log2);
      m_new[i] = common::lazy_reference(m_old, block_max, seen_max[i]);
      scale0[i] = common::rescale_factor(m_old, m_new[i]);
    }
    publish_row_state(state.max, state.scale0, tile_row, m_new, scale0, lane);
    signal(smem, kScale0);
    exponentiate(tSrS_rc, tSrS_rc, scale_log2, m_new, sum);
#pragma unroll
    for (int i = 0; i < 2; ++i) row_sum[i] = row_sum[i] * scale0[i] + sum[i];
#pragma unroll
    for (int v = 0; v < cute::size(tSrS); ++v) tSrP(v) = Element(tSrS(v));
    common::rescale_rows(tOrO_rc, scale0);
  }

  // WG1, step a1: the odd block's row max (mask_odd() masks it; none when !has_odd) against the
  // reference after the even block, the pair's reference m_new and WG1's factor scale1 [kScale1];
  // the row sums and O_R moved to the even block's reference (scale0: P_e in sP0 is relative to
  // it), so O_R += P_e.V_e,R can go to the tensor pipe before the exponentials (a2). O_R moves on
  // to the pair's reference after P_e.V_e,R (odd_p_and_pv), which is rare past a row's first
  // blocks. seen_max: as in even_softmax.
  template <class MaskOdd, class TensorSRowCol, class TensorORowCol>
  static __device__ __forceinline__ void odd_max(SharedStorage& smem, const RowState& state, const int (&tile_row)[2],
                                                 bool has_odd, const MaskOdd& mask_odd, float scale_log2,
                                                 TensorSRowCol& tSrS_rc, TensorORowCol& tOrO_rc, float (&row_sum)[2],
                                                 float (&m_new)[2], float (&scale1)[2], float (&seen_max)[2],
                                                 uint32_t& phases, int lane) {
    await(smem, kScale0, phases);
    float m_mid[2], scale0[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      m_mid[i] = state.max[tile_row[i]];
      scale0[i] = state.scale0[tile_row[i]];
      m_new[i] = m_mid[i];
    }
    if (has_odd) {
      mask_odd();
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float block_max = block_row_max(tSrS_rc, i, scale_log2);
        m_new[i] = common::lazy_reference(m_mid[i], block_max, seen_max[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      scale1[i] = has_odd ? common::rescale_factor(m_mid[i], m_new[i]) : 1.0f;
    }
    publish_row_state(state.max, state.scale1, tile_row, m_new, scale1, lane);
    signal(smem, kScale1);
#pragma unroll
    for (int i = 0; i < 2; ++i) row_sum[i] *= scale0[i];
    common::rescale_rows(tOrO_rc, scale0);
  }

  // WG1, step a2: P_o = exp2(S_o - m_new) rounded into tSrP_rc (none when !has_odd) and the row sums
  // moved on to the pair's reference. Runs while O_R += P_e.V_e,R is on the tensor pipe.
  // NOTE: P_o goes to tSrP, not back into S: rewriting S's accumulator registers while a product is
  // in flight made ptxas serialise every WGMMA of the kernel (C7515; 1.3-1.56x slower).
  template <class TensorSRowCol, class TensorPRowCol>
  static __device__ __forceinline__ void odd_exponentiate(bool has_odd, float scale_log2, const TensorSRowCol& tSrS_rc,
                                                          TensorPRowCol& tSrP_rc, const float (&m_new)[2],
                                                          const float (&scale1)[2], float (&row_sum)[2]) {
    float sum[2] = {0.0f, 0.0f};
    if (has_odd) exponentiate(tSrS_rc, tSrP_rc, scale_log2, m_new, sum);
#pragma unroll
    for (int i = 0; i < 2; ++i) row_sum[i] = row_sum[i] * scale1[i] + sum[i];
  }

  // WG0, step e: the row sums and O_L to the pair's reference (WG1's factor) [waits for kScale1].
  template <class TensorORowCol>
  static __device__ __forceinline__ void even_to_pair_max(SharedStorage& smem, const RowState& state,
                                                          const int (&tile_row)[2], TensorORowCol& tOrO_rc,
                                                          float (&row_sum)[2], uint32_t& phases) {
    await(smem, kScale1, phases);
    float scale1[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) scale1[i] = state.scale1[tile_row[i]];
#pragma unroll
    for (int i = 0; i < 2; ++i) row_sum[i] *= scale1[i];
    common::rescale_rows(tOrO_rc, scale1);
  }

  // Item end: both warpgroups' row sums (quad-reduced, through smem.extra.row_sum) -> total.
  static __device__ __forceinline__ void total_row_sums(SharedStorage& smem, int wg, const int (&tile_row)[2],
                                                        float (&row_sum)[2], uint32_t& meet_phase, int lane,
                                                        float (&total)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_sum[i] = common::quad_allreduce_sum(row_sum[i]);
      if (lane % 4 == 0) smem.extra.row_sum[wg][tile_row[i]] = row_sum[i];
    }
    sync_consumers(smem, meet_phase);
#pragma unroll
    for (int i = 0; i < 2; ++i) total[i] = smem.extra.row_sum[0][tile_row[i]] + smem.extra.row_sum[1][tile_row[i]];
  }

  // Both consumer warpgroups meet here; `phase` is this thread's count of meetings, mod 2.
  static __device__ __forceinline__ void sync_consumers(SharedStorage& smem, uint32_t& phase) {
    common::mbarrier_arrive(&smem.extra.all_consumers);
    common::mbarrier_wait(&smem.extra.all_consumers, phase);
    phase ^= 1;
  }
};

}  // namespace openmla::kernels::heads_on_m

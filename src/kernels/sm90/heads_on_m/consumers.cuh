// The two consumer warpgroups of the sm90 heads-on-M attention tile, shared
// by the dense column-split decode kernel and the sparse FP8 heads-on-M
// kernels through a Problem policy (problem.cuh): rows of the 64-row tile are
// query rows, a stage holds 64 keys x d_qk, V is columns [0, 512) of the same
// stage.
//   WG1: S = Q.K^T (WGMMA 64x64x16, SS), mask, online softmax in registers,
//        O[:, 0:256) += P.V issued (RS: P from its own registers), then
//        P -> smem (stmatrix) for WG2 while it runs, epilogue of its half.
//   WG2: O[:, 256:512) += P.V with P and the row factors from smem
//        (mbarriers p_full / p_empty), epilogue of its half.
// Barriers used (SharedStorage): kv_full / kv_empty per stage, q_full /
// q_empty per item, p_full / p_empty per block; consumers_done once, before a
// cluster piece is stashed (Problem::kMayClusterSplit only).
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/barriers.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/tma.cuh"  // ld_shared_f32 / st_shared_f32
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/consumer_steps.cuh"
#include "kernels/sm90/heads_on_m/epilogue.cuh"
#include "kernels/sm90/heads_on_m/problem.cuh"

namespace openmla::kernels::heads_on_m {

// One consumer warp (lane 0) is done reading V of `stage`: the stage itself,
// or the separate V buffer (Traits::kSeparateV; the stage was released after S).
template <class Traits, class Problem>
__device__ __forceinline__ void release_v(typename Traits::SharedStorage& smem, int stage) {
  if constexpr (Traits::kSeparateV) {
    common::mbarrier_arrive(&smem.v_empty);
  } else {
    Problem::release_stage(smem, stage);
  }
}

// Both consumer warpgroups' last products are done (cluster split only): Q and
// the stages become the merge buffer after this. A CTA merges once, so phase 0.
// NOTE: an mbarrier, not a named barrier: the two warpgroups come from
// different code, and bar.sync is .aligned (one instruction for all its
// threads); compute-sanitizer synccheck reported "divergent thread(s) in
// block" there, also with one out-of-line bar.sync (docs/reliability.md).
template <class SharedStorage>
__device__ __forceinline__ void consumers_meet_before_merge(SharedStorage& smem) {
  common::mbarrier_arrive(&smem.consumers_done);
  common::mbarrier_wait(&smem.consumers_done, 0);
}

// ---- WG1: scores, softmax, left O half ------------------------------------------------------------
// Per block: S = Q.K^T, mask, online softmax, publish P, O_left += P.V_left.
// NOTE: S_{j+1} is not issued under P_j.V_j: that would hold two K/V stages
// at once and leave the producer nothing to prefetch into (measured slower at
// every shape with two stages; see docs/kernels/decode_dense.md).
template <class Traits, class Problem>
__device__ void run_softmax_warpgroup(const typename Problem::Params& params, const PartWork& part,
                                      typename Traits::SharedStorage& smem, int q_group, int thread) {
  using namespace cute;
  using Element = typename Traits::Element;
  using Loop = ConsumerSteps<Traits>;
  const int lane = thread % 32;

  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPVRegs mma_pv_regs;
  auto thr_qk = mma_qk.get_thread_slice(thread);

  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BLOCK_M>, Int<BLOCK_N>>{});          // (MMA, 1, 1) fp32
  Tensor tSrP = make_tensor_like<Element>(tSrS);                                            // (MMA, 1, 1) P
  Tensor tOrO = partition_fragment_C(mma_pv_regs, Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{});  // (MMA, 1, 1) fp32
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<BLOCK_M>, Int<BLOCK_N>>{}));  // (MMA, 1, 1) coords
  Tensor tSrS_rc = common::make_rowcol_view(tSrS);  // (2 rows, 16 cols)
  Tensor tScS_rc = common::make_rowcol_view(tScS);  // (2 rows, 16 cols)
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 64 values: 256 columns)

  uint32_t p_dst[4];
  Loop::p_store_addresses(smem.p, thread, p_dst);

  QueryRow rows[2];
  uint32_t scale_dst[2], norm_dst[2];  // this thread's row-factor slots (shared window)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    rows[i] = Problem::query_row(params, q_group, int(get<0>(tScS_rc(i, 0))));
    scale_dst[i] = common::smem_u32(&smem.row_scale[rows[i].tile_row]);
    norm_dst[i] = common::smem_u32(&smem.row_norm[rows[i].tile_row]);
  }

  common::OnlineSoftmax<2, kSoftmaxPolyPeriod> softmax;
  const float scale_log2 = Problem::score_scale_log2(params);
  // Cluster split: the piece's factors and LSE, kept for the merge (an empty
  // piece keeps O = 0, norm 0 and LSE -inf).
  const bool clustered = Problem::kMayClusterSplit && Problem::clustered(params);
  float piece_norm[2] = {0.0f, 0.0f};
  float piece_lse[2] = {-INFINITY, -INFINITY};
  clear(tOrO);
  int block_counter = 0;
  int item_counter = 0;
  for (int item = part.begin_item; item <= part.end_item; ++item) {
    const ItemBlocks blocks = Problem::item_blocks(params, part, item);
    if (blocks.begin_block >= blocks.end_block) continue;
    const typename Problem::ItemMask mask = Problem::item_mask(params, blocks, rows);
    softmax.reset();
    clear(tOrO);
    common::mbarrier_wait(&smem.q_full, item_counter & 1);

    for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
      const int stage = block_counter % Traits::kNumStages;
      const uint32_t phase = (block_counter / Traits::kNumStages) & 1;
      const bool last = block == blocks.end_block - 1;
      typename Traits::ElementQK* stage_base = smem.kv[stage];
      Problem::fill_stage(smem, block_counter, /*warpgroup=*/1, thread);
      common::mbarrier_wait(&smem.kv_full[stage], phase);

      Problem::prepare_stage(mask, smem, stage, stage_base, block, thread);

      // ---- S = Q.K^T, then hand Q back once the item's last product is done ----
      Loop::issue_qk(mma_qk, smem.q, stage_base, thread, tSrS);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      if (last) {
        __syncwarp();
        if (lane == 0) common::mbarrier_arrive(&smem.q_empty);
      }
      if constexpr (Traits::kSeparateV) {  // K is done with; V lives in its own buffer
        __syncwarp();
        if (lane == 0) Problem::release_stage(smem, stage);
      }

      // ---- mask + online softmax ----
      Problem::mask_scores(mask, smem, stage, tSrS_rc, lane, block);
      float row_scale[2];
      softmax.update(tSrS_rc, scale_log2, row_scale);
#pragma unroll
      for (int v = 0; v < size(tSrS); ++v) tSrP(v) = Element(tSrS(v));
      float row_sum[2] = {0.0f, 0.0f};
      float norm[2] = {0.0f, 0.0f};
      if (last) {
        softmax.total_sums(row_sum);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          norm[i] = Problem::row_norm(params, item, blocks, rows[i], softmax.row_max[i], row_sum[i]);
        }
      }

      // ---- O_left = O_left * scale + P.V_left, P straight from registers ----
      // Issued before P is published: the tensor pipe starts on it while
      // this warpgroup stores P for WG2 (the P registers are only read).
      common::rescale_rows(tOrO_rc, row_scale);
      if constexpr (Traits::kSeparateV) common::mbarrier_wait(&smem.v_full, block_counter & 1);
      Loop::issue_pv_regs(mma_pv_regs, tSrP, Traits::v_base(smem, stage), thread, tOrO);

      // ---- publish P and the row factors to WG2 ----
      common::mbarrier_wait(&smem.p_empty, ((block_counter & 1) ^ 1));  // WG2 is done with the previous P
      Loop::store_p(tSrP, [&](int g) { return p_dst[g]; });
      if (lane % 4 == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          common::st_shared_f32(scale_dst[i], row_scale[i]);
          if (last) common::st_shared_f32(norm_dst[i], norm[i]);
        }
      }
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.p_full);  // every writer releases its part
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      __syncwarp();
      if (lane == 0) release_v<Traits, Problem>(smem, stage);

      if (last && clustered) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          piece_norm[i] = norm[i];
          piece_lse[i] = row_sum[i] > 0.0f ? (softmax.row_max[i] + log2f(row_sum[i])) * common::kLn2 : -INFINITY;
        }
      } else if (last) {
        Epilogue<Traits, Problem>::store_o(params, item, blocks, tOrO_rc, rows, norm, 0, lane);
        Epilogue<Traits, Problem>::store_lse(params, item, blocks, rows, softmax.row_max, row_sum, softmax.seen_max,
                                             lane);
      }
    }
    ++item_counter;
  }
  if constexpr (Problem::kMayClusterSplit) {
    if (!clustered) return;
    consumers_meet_before_merge(smem);
    Problem::stash_piece_o(smem, tOrO_rc, rows, piece_norm, 0, lane);
    if (lane % 4 == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) smem.piece_lse[rows[i].tile_row] = piece_lse[i];
    }
  }
}

// ---- WG2: right O half ----------------------------------------------------------------------------
template <class Traits, class Problem>
__device__ void run_pv_warpgroup(const typename Problem::Params& params, const PartWork& part,
                                 typename Traits::SharedStorage& smem, int q_group, int thread) {
  using namespace cute;
  using Loop = ConsumerSteps<Traits>;
  const int lane = thread % 32;

  typename Traits::TiledMmaPV mma_pv;
  auto thr_pv = mma_pv.get_thread_slice(thread);
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{});  // (MMA, 1, 1) fp32
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{}));
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 64 values: 256 columns)
  Tensor tOcO_rc = common::make_rowcol_view(tOcO);

  QueryRow rows[2];
  uint32_t scale_src[2], norm_src[2];  // this thread's row-factor slots (shared window)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    rows[i] = Problem::query_row(params, q_group, int(get<0>(tOcO_rc(i, 0))));
    scale_src[i] = common::smem_u32(&smem.row_scale[rows[i].tile_row]);
    norm_src[i] = common::smem_u32(&smem.row_norm[rows[i].tile_row]);
  }

  const bool clustered = Problem::kMayClusterSplit && Problem::clustered(params);
  float piece_norm[2] = {0.0f, 0.0f};  // cluster split: kept for the merge (see WG1)
  clear(tOrO);
  int block_counter = 0;
  for (int item = part.begin_item; item <= part.end_item; ++item) {
    const ItemBlocks blocks = Problem::item_blocks(params, part, item);
    if (blocks.begin_block >= blocks.end_block) continue;
    clear(tOrO);
    for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
      const int stage = block_counter % Traits::kNumStages;
      const uint32_t phase = (block_counter / Traits::kNumStages) & 1;
      const bool last = block == blocks.end_block - 1;
      Problem::fill_stage(smem, block_counter, /*warpgroup=*/2, thread);
      if constexpr (Traits::kSeparateV) {
        Problem::fill_v(smem, blocks, block, block_counter, thread);  // WG2's share of the V buffer
        common::mbarrier_wait(&smem.v_full, block_counter & 1);
      } else {
        common::mbarrier_wait(&smem.kv_full[stage], phase);
      }
      common::mbarrier_wait(&smem.p_full, block_counter & 1);

      float row_scale[2];
      float norm[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        row_scale[i] = common::ld_shared_f32(scale_src[i]);
        if (last) norm[i] = common::ld_shared_f32(norm_src[i]);
      }
      common::rescale_rows(tOrO_rc, row_scale);
      Loop::issue_pv(mma_pv, smem.p, Traits::v_base(smem, stage) + Traits::kVHalfOffset, thread, tOrO);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      __syncwarp();
      if (lane == 0) release_v<Traits, Problem>(smem, stage);
      common::mbarrier_arrive(&smem.p_empty);  // P and the row factors are consumed

      if (last && clustered) {
        piece_norm[0] = norm[0];
        piece_norm[1] = norm[1];
      } else if (last) {
        Epilogue<Traits, Problem>::store_o(params, item, blocks, tOrO_rc, rows, norm, HEAD_DIM_V_HALF, lane);
      }
    }
  }
  if constexpr (Problem::kMayClusterSplit) {
    if (!clustered) return;
    consumers_meet_before_merge(smem);
    Problem::stash_piece_o(smem, tOrO_rc, rows, piece_norm, HEAD_DIM_V_HALF, lane);
  }
}

}  // namespace openmla::kernels::heads_on_m

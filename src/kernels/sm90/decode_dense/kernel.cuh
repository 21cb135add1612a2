// sm90 dense MLA decode attention (BF16/FP16 paged KV cache).
//
// Computes, for one (query tile, KV head) = blockIdx.x and one SM part =
// blockIdx.y of the split-KV schedule, softmax(scale * Q.K^T) V over the part's
// (request, 64-token block) range, with Q the 64 packed query rows
// (s, head) of the tile and K/V read through the block table.
//
// Warp roles (384 threads, one CTA per SM):
//   WG0 producer (setmaxnreg 40): warp 0 runs the K/V TMA ring (all lanes
//       issue boxes); warps 1-3 gather the item's Q tile with cp.async.
//   WG1 softmax (setmaxnreg 232): S = Q.K^T (WGMMA 64x64x16, SS), mask, online
//       softmax in registers, P -> smem (stmatrix), O[:, 0:256) += P.V (SS).
//   WG2 (setmaxnreg 232): O[:, 256:512) += P.V with P and the row scales read
//       from smem after WG1 publishes them (mbarriers p_full / p_empty).
// Cluster split (DecodePlan::cluster_split = C > 1, short calls): blockIdx =
// (request * C + rank, q-group) in clusters of C along x; rank r takes an even
// share of the request's blocks, and the pieces are merged in the kernel
// through distributed shared memory (cluster_merge.cuh) instead of by the
// schedule and combine grids.
// Shared memory: Q 72 KB + 2 K/V stages 144 KB + P 8 KB + row stats (traits.h).
// Pipeline depth: 2 K/V stages; one Q buffer (reloaded per item while the
// previous item's softmax/P.V/epilogue still run).
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <climits>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/decode_dense/cluster_merge.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/epilogue.cuh"
#include "kernels/sm90/decode_dense/mainloop.cuh"
#include "kernels/sm90/decode_dense/traits.h"

namespace openmla::kernels::decode_dense {

// O rows *= the block's row factors, skipped when the warp's 16 rows all keep
// their maximum (factor exactly 1): 128 multiplies fewer between softmax and P.V.
template <class TensorORowCol>
__device__ __forceinline__ void rescale_rows(TensorORowCol& tOrO_rc, const float (&row_scale)[2]) {
  if (__all_sync(0xffffffffu, row_scale[0] == 1.0f && row_scale[1] == 1.0f)) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < cute::size<1>(tOrO_rc); ++j) tOrO_rc(i, j) *= row_scale[i];
  }
}

// ---- WG1: scores, softmax, left O half ------------------------------------------------------------
// Per block: S = Q.K^T, mask, online softmax, publish P, O_left += P.V_left.
// NOTE: S_{j+1} is not issued under P_j.V_j: that would hold two K/V stages
// at once and leave the producer nothing to prefetch into (measured slower at
// every shape with two stages; see docs/kernels/decode_dense.md).
template <class Traits>
__device__ void run_softmax_warpgroup(const KernelParams& params, const PartWork& part,
                                      typename Traits::SharedStorage& smem, int kv_head, int m_tile,
                                      int thread) {
  using namespace cute;
  using Element = typename Traits::Element;
  using Loop = Mainloop<Traits>;
  const int lane = thread % 32;

  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(thread);
  auto thr_pv = mma_pv.get_thread_slice(thread);

  Tensor sP = make_tensor(make_smem_ptr(smem.p), typename Traits::SmemLayoutP{});  // (64, 64)
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BLOCK_M>, Int<BLOCK_N>>{});          // (MMA, 1, 1) fp32
  Tensor tSrP = make_tensor_like<Element>(tSrS);                                            // (MMA, 1, 1) P
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{});  // (MMA, 1, 1) fp32
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<BLOCK_M>, Int<BLOCK_N>>{}));  // (MMA, 1, 1) coords
  Tensor tSrS_rc = common::make_rowcol_view(tSrS);  // (2 rows, 32 cols)
  Tensor tScS_rc = common::make_rowcol_view(tScS);  // (2 rows, 32 cols)
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 128 cols)

  auto smem_copy_p = make_tiled_copy_C(typename Traits::SmemCopyAtomP{}, mma_qk);
  auto thr_copy_p = smem_copy_p.get_thread_slice(thread);
  Tensor tPsP = thr_copy_p.partition_D(sP);  // (CPY, CPY_M, CPY_N)

  QueryRow rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) rows[i] = make_query_row(params, kv_head, m_tile, int(get<0>(tScS_rc(i, 0))));

  common::OnlineSoftmax<2> softmax;
  // Cluster split: the piece's factors and LSE, kept for the merge (an empty
  // piece keeps O = 0, norm 0 and LSE -inf).
  const bool clustered = params.cluster_split > 1;
  float piece_norm[2] = {0.0f, 0.0f};
  float piece_lse[2] = {-INFINITY, -INFINITY};
  clear(tOrO);
  int block_counter = 0;
  int item_counter = 0;
  for (int item = part.begin_item; item <= part.end_item; ++item) {
    const ItemBlocks blocks = item_blocks(params, part, item);
    if (blocks.begin_block >= blocks.end_block) continue;
    // Causal: query token s sees keys [0, length - s_q + s]; padding rows see nothing.
    int row_limit[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_limit[i] = !rows[i].real ? 0
                     : params.causal ? blocks.length - params.s_q + rows[i].s + 1
                                     : blocks.length;
    }
    // Blocks ending at or before this token need no mask for this thread's
    // real rows (padding rows are never stored, and Q is zero there).
    int unmasked_end = INT_MAX;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (rows[i].real) unmasked_end = min(unmasked_end, row_limit[i]);
    }
    softmax.reset();
    clear(tOrO);
    common::mbarrier_wait(&smem.q_full, item_counter & 1);

    for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
      const int stage = block_counter % kNumStages;
      const uint32_t phase = (block_counter / kNumStages) & 1;
      const bool last = block == blocks.end_block - 1;
      Element* stage_base = smem.kv[stage];
      common::mbarrier_wait(&smem.kv_full[stage], phase);

      const int valid = block_valid_tokens(blocks.length, block);
      if (valid < BLOCK_N) {
        Loop::zero_tail_rows(stage_base, valid, thread);
        common::fence_view_async_shared();
        common::named_barrier_sync(kBarrierSoftmaxWg, kWarpgroupThreads);
      }

      // ---- S = Q.K^T, then hand Q back once the item's last product is done ----
      Loop::issue_qk(mma_qk, smem.q, stage_base, thread, tSrS);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      if (last) {
        __syncwarp();
        if (lane == 0) common::mbarrier_arrive(&smem.q_empty);
      }

      // ---- mask + online softmax ----
      if ((block + 1) * BLOCK_N > unmasked_end) Loop::mask_scores(tSrS_rc, lane, block * BLOCK_N, row_limit);
      float row_scale[2];
      softmax.update(tSrS_rc, params.scale_log2, row_scale);
#pragma unroll
      for (int v = 0; v < size(tSrS); ++v) tSrP(v) = Element(tSrS(v));
      float row_sum[2] = {0.0f, 0.0f};
      float norm[2] = {0.0f, 0.0f};
      if (last) {
        softmax.total_sums(row_sum);
#pragma unroll
        for (int i = 0; i < 2; ++i) norm[i] = row_sum[i] > 0.0f ? 1.0f / row_sum[i] : 0.0f;
      }

      // ---- publish P and the row factors to WG2 ----
      common::mbarrier_wait(&smem.p_empty, ((block_counter & 1) ^ 1));  // WG2 is done with the previous P
      copy(smem_copy_p, thr_copy_p.retile_S(tSrP), tPsP);
      if (lane % 4 == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          smem.row_scale[rows[i].tile_row] = row_scale[i];
          if (last) smem.row_norm[rows[i].tile_row] = norm[i];
        }
      }
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.p_full);                             // every writer releases its part
      common::named_barrier_sync(kBarrierSoftmaxWg, kWarpgroupThreads);  // all of P is in smem (for WG1's MMA)

      // ---- O_left = O_left * scale + P.V_left ----
      rescale_rows(tOrO_rc, row_scale);
      Loop::issue_pv(mma_pv, smem.p, stage_base, thread, tOrO);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      __syncwarp();
      if (lane == 0) common::mbarrier_arrive(&smem.kv_empty[stage]);

      if (last && clustered) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          piece_norm[i] = norm[i];
          piece_lse[i] = row_sum[i] > 0.0f ? (softmax.row_max[i] + log2f(row_sum[i])) * common::kLn2 : -INFINITY;
        }
      } else if (last) {
        Epilogue<Traits>::store_o(params, item, blocks, tOrO_rc, rows, norm, 0, lane);
        Epilogue<Traits>::store_lse(params, item, blocks, rows, softmax.row_max, row_sum, lane);
      }
    }
    ++item_counter;
  }
  if (clustered) {
    // Both warpgroups' last products are done: Q and the stages become the merge buffer.
    common::named_barrier_sync(kBarrierConsumers, 2 * kWarpgroupThreads);
    ClusterMerge<Traits>::stash_o(smem, tOrO_rc, rows, piece_norm, 0, lane);
    if (lane % 4 == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) smem.piece_lse[rows[i].tile_row] = piece_lse[i];
    }
  }
}

// ---- WG2: right O half ----------------------------------------------------------------------------
template <class Traits>
__device__ void run_pv_warpgroup(const KernelParams& params, const PartWork& part,
                                 typename Traits::SharedStorage& smem, int kv_head, int m_tile, int thread) {
  using namespace cute;
  using Loop = Mainloop<Traits>;
  const int lane = thread % 32;

  typename Traits::TiledMmaPV mma_pv;
  auto thr_pv = mma_pv.get_thread_slice(thread);
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{});  // (MMA, 1, 1) fp32
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<BLOCK_M>, Int<HEAD_DIM_V_HALF>>{}));
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (2 rows, 128 cols)
  Tensor tOcO_rc = common::make_rowcol_view(tOcO);

  QueryRow rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) rows[i] = make_query_row(params, kv_head, m_tile, int(get<0>(tOcO_rc(i, 0))));

  const bool clustered = params.cluster_split > 1;
  float piece_norm[2] = {0.0f, 0.0f};  // cluster split: kept for the merge (see WG1)
  clear(tOrO);
  int block_counter = 0;
  for (int item = part.begin_item; item <= part.end_item; ++item) {
    const ItemBlocks blocks = item_blocks(params, part, item);
    if (blocks.begin_block >= blocks.end_block) continue;
    clear(tOrO);
    for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
      const int stage = block_counter % kNumStages;
      const uint32_t phase = (block_counter / kNumStages) & 1;
      const bool last = block == blocks.end_block - 1;
      common::mbarrier_wait(&smem.kv_full[stage], phase);
      common::mbarrier_wait(&smem.p_full, block_counter & 1);

      float row_scale[2];
      float norm[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        row_scale[i] = smem.row_scale[rows[i].tile_row];
        if (last) norm[i] = smem.row_norm[rows[i].tile_row];
      }
      rescale_rows(tOrO_rc, row_scale);
      Loop::issue_pv(mma_pv, smem.p, smem.kv[stage] + Traits::kVHalfOffset, thread, tOrO);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      __syncwarp();
      if (lane == 0) common::mbarrier_arrive(&smem.kv_empty[stage]);
      common::mbarrier_arrive(&smem.p_empty);  // P and the row factors are consumed

      if (last && clustered) {
        piece_norm[0] = norm[0];
        piece_norm[1] = norm[1];
      } else if (last) {
        Epilogue<Traits>::store_o(params, item, blocks, tOrO_rc, rows, norm, HEAD_DIM_V_HALF, lane);
      }
    }
  }
  if (clustered) {
    common::named_barrier_sync(kBarrierConsumers, 2 * kWarpgroupThreads);
    ClusterMerge<Traits>::stash_o(smem, tOrO_rc, rows, piece_norm, HEAD_DIM_V_HALF, lane);
  }
}

// ---- cluster split: this CTA's piece ---------------------------------------------------------------------
// Rank r of the C CTAs of request `item` takes blocks [r nb / C, (r + 1) nb / C)
// of its nb blocks (an empty request has one, empty, block). Read after the
// wait for the previous grid, like every input.
__device__ __forceinline__ PartWork cluster_piece(const KernelParams& params, int item, int rank) {
  const int length = min(max(params.seqlens[item], 0), params.max_length);
  const int num_blocks = max(1, (length + BLOCK_N - 1) / BLOCK_N);
  PartWork piece{};
  piece.begin_item = item;
  piece.end_item = item;
  piece.begin_block = rank * num_blocks / params.cluster_split;
  piece.end_block = (rank + 1) * num_blocks / params.cluster_split;
  piece.first_slot = -1;
  piece.flags = 0;  // never partial: the piece goes to the merge buffer, not partial_o
  return piece;
}

// ---- the kernel ----------------------------------------------------------------------------------------
template <class Traits>
__global__ void __launch_bounds__(kNumThreads, 1) decode_dense_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + Traits::kSmemAlignSlack - 1) &
      ~uintptr_t(Traits::kSmemAlignSlack - 1));

  // Split-KV schedule: blockIdx = (q-group, part). Cluster split: blockIdx =
  // (request * C + rank, q-group), clusters of C along x.
  const bool clustered = params.cluster_split > 1;
  const int q_group = clustered ? int(blockIdx.y) : int(blockIdx.x);
  const int kv_head = q_group / params.num_m_tiles;
  const int m_tile = q_group % params.num_m_tiles;
  const int rank = clustered ? int(blockIdx.x) % params.cluster_split : 0;
  // Warp-uniform role index (keeps the role branches free of divergence).
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = threadIdx.x % kWarpgroupThreads;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kNumStages; ++s) {
      common::mbarrier_init(&smem.kv_full[s], 1);
      common::mbarrier_init(&smem.kv_empty[s], 2 * kWarpgroupThreads / 32);
    }
    common::mbarrier_init(&smem.q_full, kQLoadThreads);
    common::mbarrier_init(&smem.q_empty, kWarpgroupThreads / 32);
    common::mbarrier_init(&smem.p_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads);
    common::mbarrier_init_fence();
    common::tma_prefetch_descriptor(&params.tma_kv);
  }
  // The schedule comes from the previous grid (launched as its dependent).
  common::wait_for_previous_grid();
  common::allow_next_grid();
  const PartWork part = clustered ? cluster_piece(params, int(blockIdx.x) / params.cluster_split, rank)
                                  : params.parts[blockIdx.y];
  // NOTE: an empty piece of a cluster still takes part in the merge.
  if (!clustered && (part.flags & kPartEmpty)) return;  // uniform over the CTA
  __syncthreads();

  // NOTE: each role branch runs its own cluster barriers (and the consumers
  // the merge): code after the branches joins would be compiled for the
  // producers' 40 registers.
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    const int warp = thread / 32;
    if (warp == 0) {
      Mainloop<Traits>::produce_kv(params, part, smem, kv_head, thread);
    } else {
      Mainloop<Traits>::produce_q(params, part, smem, kv_head, m_tile, thread - 32);
    }
    if (clustered) {
      cute::cluster_sync();
      cute::cluster_sync();
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (warpgroup == 1) {
      run_softmax_warpgroup<Traits>(params, part, smem, kv_head, m_tile, thread);
    } else {
      run_pv_warpgroup<Traits>(params, part, smem, kv_head, m_tile, thread);
    }
    if (clustered) {
      cute::cluster_sync();  // every piece's O and LSE are in its CTA's shared memory
      ClusterMerge<Traits>::merge(params, smem, part.begin_item, rank, kv_head, m_tile,
                                  int(threadIdx.x) - kWarpgroupThreads);
      cute::cluster_sync();  // no CTA leaves while another still reads its shared memory
    }
  }
}

// ---- host launch of one instantiation -----------------------------------------------------------------
template <DType kDType, int kHeadDimQK>
Status launch_kernel(const KernelParams& params, dim3 grid, int cluster, cudaStream_t stream) {
  using KernelTraits = Traits<kDType, kHeadDimQK>;
  return common::launch_dependent("decode_dense", &decode_dense_kernel<KernelTraits>, grid, dim3(kNumThreads),
                                  KernelTraits::kSmemBytes, stream, cluster, params);
}

}  // namespace openmla::kernels::decode_dense

// sm90 dense MLA decode attention (BF16/FP16 paged KV cache), the
// column-split kernel (DecodeKernel::kDenseColumnSplit and, with a cluster,
// kDenseColumnSplitCluster): each consumer warpgroup owns half of O's columns.
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
//       softmax in registers, O[:, 0:256) += P.V (RS: P from WG1's registers),
//       then P -> smem (stmatrix) for WG2 while that product runs.
//   WG2 (setmaxnreg 232): O[:, 256:512) += P.V with P and the row scales read
//       from smem after WG1 publishes them (mbarriers p_full / p_empty).
//   Both consumers are the shared heads-on-M ones (heads_on_m/consumers.cuh),
//   with DenseProblem (problem.cuh).
// Cluster split (kDenseColumnSplitCluster, C = cluster_split > 1, short calls): blockIdx =
// (request * C + rank, q-group) in clusters of C along x; rank r takes an even
// share of the request's blocks, and the pieces are merged in the kernel
// through distributed shared memory (cluster_merge.cuh) instead of by the
// schedule and combine grids.
// Shared memory: Q 72 KB + 2 K/V stages 144 KB + P 8 KB + row stats (heads_on_m/traits.h).
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
#include "kernels/common/prologue.cuh"
#include "kernels/common/schedule/own_part.cuh"
#include "kernels/sm90/decode_dense/cluster_merge.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/problem.cuh"
#include "kernels/sm90/decode_dense/producers.cuh"
#include "kernels/sm90/heads_on_m/consumers.cuh"
#include "kernels/sm90/heads_on_m/traits.h"

namespace openmla::kernels::decode_dense {

// ---- cluster split: this CTA's piece ---------------------------------------------------------------------
// Rank r of the C CTAs of request `item` takes blocks [r nb / C, (r + 1) nb / C)
// of its nb blocks (an empty request has one, empty, block). Read after the
// wait for the previous grid, like every input.
__device__ __forceinline__ PartWork cluster_piece(const KernelParams& params, int item, int rank) {
  const int length = min(max(params.seqlens[item], 0), params.max_length);
  const int num_blocks = max(1, (length - 1) / BLOCK_N + 1);  // no overflow at INT32_MAX
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
__global__ void __launch_bounds__(kNumThreads, 1) decode_dense_column_split_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = common::aligned_shared_storage<SharedStorage, Traits::kSmemAlignSlack>(smem_raw);

  // Split-KV schedule: blockIdx = (q-group, part). Cluster split: blockIdx =
  // (request * C + rank, q-group), clusters of C along x.
  const bool clustered = params.cluster_split > 1;
  const int q_group = clustered ? int(blockIdx.y) : int(blockIdx.x);
  const int kv_head = q_group / params.num_m_tiles;
  const int m_tile = q_group % params.num_m_tiles;
  const int rank = clustered ? int(blockIdx.x) % params.cluster_split : 0;
  const int warpgroup = common::warp_uniform_warpgroup(kWarpgroupThreads);
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
    common::mbarrier_init(&smem.consumers_done, 2 * kWarpgroupThreads);
    common::mbarrier_init_fence();
    common::tma_prefetch_descriptor(&params.tma_kv);
  }
  // The lengths and the schedule may come from the previous grid (launched as its dependent).
  PartWork part;
  if (clustered) {
    common::wait_for_previous_grid();
    common::allow_next_grid();
    part = cluster_piece(params, int(blockIdx.x) / params.cluster_split, rank);
  } else {
    part = common::own_part(params.schedule, common::schedule_scratch(smem.kv));
  }
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
      Producers<Traits>::produce_kv(params, part, smem, kv_head, thread);
    } else {
      Producers<Traits>::produce_q(params, part, smem, kv_head, m_tile, thread - 32);
    }
    if (clustered) {
      // NOTE: barrier.cluster.*.aligned wants every warp converged: reconverge
      // after the lane-divergent producer loops.
      __syncwarp();
      cute::cluster_sync();
      cute::cluster_sync();
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (warpgroup == 1) {
      heads_on_m::run_softmax_warpgroup<Traits, DenseProblem<Traits>>(params, part, smem, q_group, thread);
    } else {
      heads_on_m::run_pv_warpgroup<Traits, DenseProblem<Traits>>(params, part, smem, q_group, thread);
    }
    if (clustered) {
      __syncwarp();          // converged warps for the aligned cluster barrier (see the producers)
      cute::cluster_sync();  // every piece's O and LSE are in its CTA's shared memory
      ClusterMerge<Traits>::merge(params, smem, part.begin_item, rank, kv_head, m_tile,
                                  int(threadIdx.x) - kWarpgroupThreads);
      __syncwarp();
      cute::cluster_sync();  // no CTA leaves while another still reads its shared memory
    }
  }
}

// ---- host launch of one instantiation -----------------------------------------------------------------
template <DType kDType, int kHeadDimQK>
Status launch_column_split_kernel(const KernelParams& params, dim3 grid, int cluster, cudaStream_t stream) {
  using KernelTraits = heads_on_m::Traits<kDType, kHeadDimQK, kNumStages>;
  return common::launch_dependent("decode_dense", &decode_dense_column_split_kernel<KernelTraits>, grid,
                                  dim3(kNumThreads), KernelTraits::kSmemBytes, stream, cluster, params);
}

}  // namespace openmla::kernels::decode_dense

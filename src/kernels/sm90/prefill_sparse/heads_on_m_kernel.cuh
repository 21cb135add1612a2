// sm90 sparse prefill (DecodeKernel::kSparsePrefillHeadsOnM): for heads
// [64 g, 64 g + 64) = q-group blockIdx.x and SM part blockIdx.y of the
// split-KV schedule, softmax(scale * q.k) v over the BF16 rows that each query
// token's indices name, for every token in the part's range.
//
// Warp roles (384 threads, one CTA per SM):
//   WG0 (setmaxnreg 40): GatherProducer (producer.cuh): indices -> cp.async of
//       whole rows into two 64-row stages; Q per token.
//   WG1 / WG2: the shared heads-on-M consumers (heads_on_m/consumers.cuh) with
//       PrefillProblem (problem.cuh): S = Q.K^T 64 heads x 64 rows per block,
//       P.V with N = 256 per warpgroup.
// One instantiation per d_qk: instantiations/d576.cu, d512.cu.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/prologue.cuh"
#include "kernels/sm90/heads_on_m/consumers.cuh"
#include "kernels/sm90/prefill_sparse/config.h"
#include "kernels/sm90/prefill_sparse/problem.cuh"
#include "kernels/sm90/prefill_sparse/producer.cuh"

namespace openmla::kernels::prefill_sparse {

template <class Traits>
__global__ void __launch_bounds__(heads_on_m::kNumThreads, 1)
    prefill_sparse_heads_on_m_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  using Problem = PrefillProblem<Traits>;
  using Producer = GatherProducer<Traits>;
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = common::aligned_shared_storage<SharedStorage, Traits::kSmemAlignSlack>(smem_raw);

  const int q_group = int(blockIdx.x);
  const int warpgroup = common::warp_uniform_warpgroup(kWarpgroupThreads);
  const int thread = threadIdx.x % kWarpgroupThreads;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Traits::kNumStages; ++s) {
      common::mbarrier_init(&smem.kv_full[s], Producer::kFullArrivals);
      common::mbarrier_init(&smem.kv_empty[s], 2 * kWarpsPerWarpgroup);  // lane 0 of each consumer warp
    }
    common::mbarrier_init(&smem.q_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.q_empty, kWarpsPerWarpgroup);
    common::mbarrier_init(&smem.p_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads);
    common::mbarrier_init_fence();
  }
  const PartWork part = common::scheduled_part(params.parts);
  if (part.flags & kPartEmpty) return;  // uniform over the CTA
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    Producer::run(params, part, smem, q_group, thread);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (warpgroup == 1) {
      heads_on_m::run_softmax_warpgroup<Traits, Problem>(params, part, smem, q_group, thread);
    } else {
      heads_on_m::run_pv_warpgroup<Traits, Problem>(params, part, smem, q_group, thread);
    }
  }
}

// ---- host launch of one d_qk's instantiation ----------------------------------------------------
template <class Traits>
Status launch_heads_on_m(const char* name, const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return common::launch_dependent(name, &prefill_sparse_heads_on_m_kernel<Traits>, grid,
                                  dim3(heads_on_m::kNumThreads), Traits::kSmemBytes, stream, /*cluster_x=*/1, params);
}

}  // namespace openmla::kernels::prefill_sparse

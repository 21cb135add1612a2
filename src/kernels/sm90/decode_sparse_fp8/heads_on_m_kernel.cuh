// sm90 sparse FP8 MLA decode for h_q = 64 and 128: the heads-on-M kernels
// (DecodeKernel::kSparseHeadsOnM, kSparseHeadsOnMCtaPair).
//
// Computes, for heads [64 g, 64 g + 64) = q-group blockIdx.x and SM part
// blockIdx.y of the split-KV schedule, softmax(scale * q.k) v over the index
// positions of each (request, query token) item in the part's range. Heads
// are on the MMA's M, so the two consumer warpgroups are the shared heads-on-M
// ones (heads_on_m/consumers.cuh, with HeadsOnMProblem): S = Q.K^T is
// 64 heads x 64 tokens per block, P.V has N = 256 per warpgroup.
//
// Warp roles (384 threads, one CTA per SM), two producer designs:
//   HeadsOnMProducer (h_q = 64, kSparseHeadsOnM): WG0 (setmaxnreg 40) looks
//       up indices, gathers the 656-byte rows into a raw stage (cp.async,
//       zero fill for invalid rows), dequantises scale groups 0-1 raw -> the
//       one bf16 stage and copies Q per item; before each block WG2
//       dequantises groups 2-3 and WG1 copies the RoPE. Shared memory: Q 72 KB
//       + one bf16 stage 72 KB + P 8 KB + raw stage 41 KB; the gather overlaps
//       the consumers, the fill (~0.7 us a block) does not
//       (heads_on_m_mainloop.cuh).
//   CtaPairProducer (h_q = 128, kSparseHeadsOnMCtaPair): the part's two CTAs
//       are a cluster; WG0 (setmaxnreg 120) of CTA r loads rows [32 r, 32 r + 32)
//       of every block into registers a block ahead and dequantises them into
//       both CTAs' stages; two bf16 stages, no raw stage (cta_pair_producer.cuh).
//   WG1 / WG2 consumers: heads_on_m/consumers.cuh (setmaxnreg 232 or 192).
// One instantiation file per producer: instantiations/heads_on_m.cu,
// instantiations/heads_on_m_cta_pair.cu.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include <string>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/prologue.cuh"
#include "kernels/common/schedule/own_part.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/heads_on_m_problem.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/consumers.cuh"

namespace openmla::kernels::decode_sparse_fp8 {

template <class Traits, class Producer>
__global__ void __launch_bounds__(heads_on_m::kNumThreads, 1)
    decode_sparse_fp8_heads_on_m_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  using Problem = HeadsOnMProblem<Traits, Producer>;
  constexpr int kClusterCtas = Producer::kClusterCtas;
  // setmaxnreg: what the producer gives back goes to the two consumers.
  constexpr int kConsumerRegs = (kNumWarpgroups * kEntryRegs - Producer::kRegs) / 2;
  static_assert(kConsumerRegs % 8 == 0 && kConsumerRegs <= 256, "setmaxnreg takes multiples of 8 up to 256");
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = common::aligned_shared_storage<SharedStorage, Traits::kSmemAlignSlack>(smem_raw);

  const int q_group = int(blockIdx.x);
  const int warpgroup = common::warp_uniform_warpgroup(kWarpgroupThreads);
  const int thread = threadIdx.x % kWarpgroupThreads;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Traits::kNumStages; ++s) {
      common::mbarrier_init(&smem.kv_full[s], Producer::kFullArrivals);
      // In a CTA pair both CTAs' consumer warps release a stage (HeadsOnMProblem::release_stage).
      common::mbarrier_init(&smem.kv_empty[s], 2 * kWarpsPerWarpgroup * kClusterCtas);
    }
    common::mbarrier_init(&smem.q_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.q_empty, kWarpsPerWarpgroup);
    common::mbarrier_init(&smem.p_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads);
    Producer::init_barriers(smem);
    common::mbarrier_init_fence();
  }
  const PartWork part = common::own_part(params.schedule, common::schedule_scratch(smem.kv));
  if (part.flags & kPartEmpty) return;  // uniform over the CTA (and the cluster: one part)
  // In a CTA pair the peer's barriers are initialised before anything arrives on them.
  if constexpr (kClusterCtas > 1) {
    cute::cluster_sync();
  } else {
    __syncthreads();
  }

  // NOTE: each role branch runs its own closing cluster barrier: code after
  // the branches join would be compiled for the producer's registers.
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Producer::kRegs>();
    Producer::run(params, part, smem, q_group, thread);
    if constexpr (kClusterCtas > 1) cute::cluster_sync();  // the peer's last arrivals and stores target us
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (warpgroup == 1) {
      heads_on_m::run_softmax_warpgroup<Traits, Problem>(params, part, smem, q_group, thread);
    } else {
      heads_on_m::run_pv_warpgroup<Traits, Problem>(params, part, smem, q_group, thread);
    }
    if constexpr (kClusterCtas > 1) cute::cluster_sync();
  }
}

// ---- host launch of one producer's instantiation ----------------------------------------------------
template <class Traits, class Producer>
Status launch_heads_on_m(const char* name, const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return common::launch_dependent(name, &decode_sparse_fp8_heads_on_m_kernel<Traits, Producer>, grid,
                                  dim3(heads_on_m::kNumThreads), Traits::kSmemBytes, stream,
                                  /*cluster_x=*/Producer::kClusterCtas, params);
}

}  // namespace openmla::kernels::decode_sparse_fp8

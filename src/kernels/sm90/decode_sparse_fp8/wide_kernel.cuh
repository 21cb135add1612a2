// sm90 sparse FP8 MLA decode for h_q = 64 and 128 (the wide-head kernel).
//
// Computes, for heads [64 g, 64 g + 64) = q-group blockIdx.x and SM part
// blockIdx.y of the split-KV schedule, softmax(scale * q.k) v over the index
// positions of each (request, query token) item in the part's range. Heads
// are on the MMA's M, so the two consumer warpgroups are the dense decode
// kernel's (decode_dense/consumers.cuh, with WideProblem): S = Q.K^T is
// 64 heads x 64 tokens per block, P.V has N = 256 per warpgroup. h_q = 128 runs
// as two independent CTAs per part, each dequantising every row it uses (the
// second gather of a row mostly hits L2).
//
// Warp roles (384 threads, one CTA per SM):
//   WG0 producer (setmaxnreg 40): looks up indices and gathers the 656-byte
//       rows into the raw stage (cp.async, zero fill for invalid rows),
//       dequantises scale groups 0-1 raw -> bf16 stage (smem -> smem) and
//       copies Q per item.
//   WG1 / WG2 consumers (setmaxnreg 232): as in the dense kernel; before
//       each block WG2 dequantises groups 2-3 and WG1 copies the RoPE.
// Shared memory: Q 72 KB + one bf16 stage 72 KB + P 8 KB + raw stage 41 KB
// (WideTraits). Pipeline depth: one bf16 stage and one raw stage; the gather
// of block n + 1 overlaps the consumers' work on block n, filling the bf16
// stage (~0.7 us a block, all three warpgroups) does not (wide_mainloop.cuh).
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include <string>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/sm90/decode_dense/consumers.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/wide_mainloop.cuh"

namespace openmla::kernels::decode_sparse_fp8 {

template <class Traits>
__global__ void __launch_bounds__(decode_dense::kNumThreads, 1)
    decode_sparse_fp8_wide_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  using Problem = WideProblem<Traits>;
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + Traits::kSmemAlignSlack - 1) &
      ~uintptr_t(Traits::kSmemAlignSlack - 1));

  const int q_group = int(blockIdx.x);
  // Warp-uniform role index (keeps the role branches free of divergence).
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = threadIdx.x % kWarpgroupThreads;

  if (threadIdx.x == 0) {
    common::mbarrier_init(&smem.kv_full[0], kWideFillThreads);
    common::mbarrier_init(&smem.kv_empty[0], 2 * kWarpsPerWarpgroup);
    common::mbarrier_init(&smem.q_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.q_empty, kWarpsPerWarpgroup);
    common::mbarrier_init(&smem.p_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads);
    common::mbarrier_init(&smem.extra.raw_full, kWarpgroupThreads);
    common::mbarrier_init_fence();
  }
  // The schedule comes from the previous grid (launched as its dependent).
  common::wait_for_previous_grid();
  common::allow_next_grid();
  const PartWork part = params.parts[blockIdx.y];
  if (part.flags & kPartEmpty) return;  // uniform over the CTA
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<decode_dense::kProducerRegs>();
    WideProducer<Traits>::run(params, part, smem, q_group, thread);
  } else {
    cutlass::arch::warpgroup_reg_alloc<decode_dense::kConsumerRegs>();
    if (warpgroup == 1) {
      decode_dense::run_softmax_warpgroup<Traits, Problem>(params, part, smem, q_group, thread);
    } else {
      decode_dense::run_pv_warpgroup<Traits, Problem>(params, part, smem, q_group, thread);
    }
  }
}

}  // namespace openmla::kernels::decode_sparse_fp8

// sm90 dense MLA decode attention over an FP8 (e4m3, per-tensor scale) paged
// KV cache with e4m3 queries: the column-split kernel of the BF16 family
// (decode_dense/column_split_kernel.cuh) with S = Q.K^T on FP8 tensor cores.
//
// Computes, for one (query tile, KV head) = blockIdx.x and one SM part =
// blockIdx.y of the split-KV schedule, softmax(scale * dq * dk * Q8.K8^T) *
// dk * V8 over the part's (request, 64-token block) range; dq, dk are the
// per-tensor descales, read on the device (graph replays may change them).
//
// Warp roles (384 threads, one CTA per SM):
//   WG0 producer (setmaxnreg 40): warp 0 runs the e4m3 K/V TMA ring (the
//       dense producer, 64-byte boxes); warps 1-3 gather each item's e4m3 Q
//       tile and, with WG2, dequantise every stage's V into the BF16 V buffer
//       (fp8_v_dequant.cuh).
//   WG1, WG2: the heads-on-M consumers (heads_on_m/consumers.cuh) with
//       DenseProblem: WG1 S = Q.K^T (WGMMA 64x64x32 e4m3, SS), online softmax,
//       O[:, 0:256) += P.V (bf16, RS); WG2 dequantises its share of V, then
//       O[:, 256:512) += P.V (bf16, SS).
//       WG1 frees a stage after its S; P.V waits for the V buffer instead.
// Shared memory: Q 36 KB + 3 e4m3 stages 108 KB + V 64 KB + P 8 KB (fp8_traits.h).
// Pipeline depth: 3 K/V stages, one V buffer, one Q buffer. No cluster split.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/prologue.cuh"
#include "kernels/common/schedule/own_part.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/problem.cuh"
#include "kernels/sm90/decode_dense/producers.cuh"
#include "kernels/sm90/decode_dense/fp8_traits.h"
#include "kernels/sm90/decode_dense/fp8_v_dequant.cuh"
#include "kernels/sm90/heads_on_m/consumers.cuh"

namespace openmla::kernels::decode_dense {

inline constexpr int kFp8NumStages = 3;

// The dense problem without the cluster split (its merge buffer is the BF16
// tile's), and with the stage tail left alone: the dequantisers zero V's tail
// and S masks K's.
template <class Traits>
struct Fp8DenseProblem : DenseProblem<Traits> {
  static constexpr bool kMayClusterSplit = false;
  template <class Mask, class Storage, class StageElement>
  static __device__ __forceinline__ void prepare_stage(const Mask&, Storage&, int, StageElement*, int, int) {}

  // WG2's share of V for `block`, before its P.V waits for v_full (fp8_v_dequant.cuh).
  static __device__ __forceinline__ void fill_v(typename Traits::SharedStorage& smem, const heads_on_m::ItemBlocks& blocks,
                                                int block, int block_counter, int thread) {
    Fp8VDequant<Traits>::fill_share(smem, block_counter, heads_on_m::block_valid_tokens(blocks.length, block), thread);
  }
};

template <class Traits>
__global__ void __launch_bounds__(heads_on_m::kNumThreads, 1)
    decode_dense_fp8_column_split_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  using heads_on_m::kWarpgroupThreads;
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& smem = common::aligned_shared_storage<SharedStorage, Traits::kSmemAlignSlack>(smem_raw);

  const int q_group = int(blockIdx.x);
  const int kv_head = q_group / params.num_m_tiles;
  const int m_tile = q_group % params.num_m_tiles;
  const int warpgroup = common::warp_uniform_warpgroup(kWarpgroupThreads);
  const int thread = threadIdx.x % kWarpgroupThreads;

  if (threadIdx.x == 0) {
    constexpr int kWarps = kWarpgroupThreads / 32;
#pragma unroll
    for (int s = 0; s < Traits::kNumStages; ++s) {
      common::mbarrier_init(&smem.kv_full[s], 1);
      common::mbarrier_init(&smem.kv_empty[s], kWarps + kFp8DequantThreads / 32);  // WG1, the dequantisers
    }
    common::mbarrier_init(&smem.v_full, kFp8DequantThreads);
    common::mbarrier_init(&smem.v_empty, 2 * kWarps);
    common::mbarrier_init(&smem.q_full, kQLoadThreads);
    common::mbarrier_init(&smem.q_empty, kWarps);
    common::mbarrier_init(&smem.p_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.p_empty, kWarpgroupThreads);
    common::mbarrier_init_fence();
    common::tma_prefetch_descriptor(&params.tma_kv);
  }
  const PartWork part = common::own_part(params.schedule, common::schedule_scratch(smem.kv));
  if (part.flags & kPartEmpty) return;  // uniform over the CTA
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (thread < 32) {
      Producers<Traits>::produce_kv(params, part, smem, kv_head, thread);
    } else {
      Fp8VDequant<Traits>::produce_q_and_v(params, part, smem, kv_head, m_tile, thread - 32);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    if (warpgroup == 1) {
      heads_on_m::run_softmax_warpgroup<Traits, Fp8DenseProblem<Traits>>(params, part, smem, q_group, thread);
    } else {
      heads_on_m::run_pv_warpgroup<Traits, Fp8DenseProblem<Traits>>(params, part, smem, q_group, thread);
    }
  }
}

template <int kHeadDimQK>
Status launch_fp8_column_split_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  using KernelTraits = Fp8Traits<kHeadDimQK, kFp8NumStages>;
  return common::launch_dependent("decode_dense_fp8", &decode_dense_fp8_column_split_kernel<KernelTraits>, grid,
                                  dim3(heads_on_m::kNumThreads), KernelTraits::kSmemBytes, stream, 1, params);
}

}  // namespace openmla::kernels::decode_dense

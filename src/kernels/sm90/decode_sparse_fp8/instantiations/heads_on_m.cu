// Sparse FP8 decode, wide-head kernel: 64 query heads per CTA on the MMA's M
// (h_q = 64: one CTA per part, h_q = 128: two).
#include "kernels/sm90/decode_sparse_fp8/wide_kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {

// h_q = 128 runs its two q-groups (grid.x) as a crossover cluster.
Status launch_wide_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  if (params.h_q == 2 * kWideHeadsPerCta) {
    return common::launch_dependent(
        "decode_sparse_fp8_crossover", &decode_sparse_fp8_wide_kernel<CrossoverTraits, CrossoverProducer<CrossoverTraits>>,
        grid, dim3(decode_dense::kNumThreads), CrossoverTraits::kSmemBytes, stream, /*cluster_x=*/2, params);
  }
  return common::launch_dependent("decode_sparse_fp8_wide",
                                  &decode_sparse_fp8_wide_kernel<WideTraits, WideProducer<WideTraits>>, grid,
                                  dim3(decode_dense::kNumThreads), WideTraits::kSmemBytes, stream,
                                  /*cluster_x=*/1, params);
}

}  // namespace openmla::kernels::decode_sparse_fp8

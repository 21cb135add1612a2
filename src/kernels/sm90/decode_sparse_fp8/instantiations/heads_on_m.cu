// Sparse FP8 decode, heads-on-M kernel (DecodeKernel::kSparseHeadsOnM): h_q = 64,
// 64 query heads per CTA on the MMA's M, one CTA per part.
#include "kernels/sm90/decode_sparse_fp8/heads_on_m_kernel.cuh"
#include "kernels/sm90/decode_sparse_fp8/heads_on_m_mainloop.cuh"

namespace openmla::kernels::decode_sparse_fp8 {

Status launch_heads_on_m_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_heads_on_m<HeadsOnMTraits, HeadsOnMProducer<HeadsOnMTraits>>("decode_sparse_fp8_heads_on_m", params,
                                                                              grid, stream);
}

}  // namespace openmla::kernels::decode_sparse_fp8

// Sparse FP8 decode kernel, 16 query heads per CTA, clusters of 1 (h_q = 16).
#include "kernels/sm90/decode_sparse_fp8/kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {
template Status launch_kernel<16, 1>(const KernelParams& params, dim3 grid, cudaStream_t stream);
}  // namespace openmla::kernels::decode_sparse_fp8

// Sparse FP8 decode kernel, 8 query heads per CTA, clusters of 1 (h_q = 8).
#include "kernels/sm90/decode_sparse_fp8/kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {
template Status launch_kernel<8, 1>(const KernelParams& params, dim3 grid, cudaStream_t stream);
}  // namespace openmla::kernels::decode_sparse_fp8

// Sparse FP8 decode kernel, 32 query heads per CTA, clusters of 4 (h_q = 128: a cluster of four CTAs).
#include "kernels/sm90/decode_sparse_fp8/kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {
template Status launch_kernel<32, 4>(const KernelParams& params, dim3 grid, cudaStream_t stream);
template Status max_active_clusters<32, 4>(int* count);
}  // namespace openmla::kernels::decode_sparse_fp8

// Sparse FP8 decode, narrow kernel: 32 query heads per CTA (h_q = 32).
#include "kernels/sm90/decode_sparse_fp8/kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {
template Status launch_kernel<32>(const KernelParams& params, dim3 grid, cudaStream_t stream);
}  // namespace openmla::kernels::decode_sparse_fp8

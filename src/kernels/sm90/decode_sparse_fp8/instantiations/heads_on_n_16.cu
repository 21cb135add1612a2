// Sparse FP8 decode, heads-on-N kernel (DecodeKernel::kSparseHeadsOnN): 16 query heads per CTA (h_q = 16).
#include "kernels/sm90/decode_sparse_fp8/heads_on_n_kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {
template Status launch_heads_on_n_kernel<16>(const KernelParams& params, dim3 grid, cudaStream_t stream);
}  // namespace openmla::kernels::decode_sparse_fp8

// Sparse FP8 decode, heads-on-N kernel (DecodeKernel::kSparseHeadsOnN): 8 query heads per CTA (h_q = 8).
#include "kernels/sm90/decode_sparse_fp8/heads_on_n_kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {
template Status launch_heads_on_n_kernel<8>(const KernelParams& params, dim3 grid, cudaStream_t stream);
}  // namespace openmla::kernels::decode_sparse_fp8

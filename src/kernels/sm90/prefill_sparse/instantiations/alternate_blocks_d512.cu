// Sparse prefill, the alternate-blocks kernel (DecodeKernel::kSparsePrefillAlternateBlocks), d_qk = 512.
#include "kernels/sm90/prefill_sparse/alternate_blocks_kernel.cuh"

namespace openmla::kernels::prefill_sparse {

Status launch_alternate_blocks_d512(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_alternate_blocks<kHeadDimLatent>("prefill_sparse_alternate_blocks_d512", params, grid, stream);
}

}  // namespace openmla::kernels::prefill_sparse

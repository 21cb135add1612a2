// Sparse prefill, the alternate-blocks kernel (DecodeKernel::kSparsePrefillAlternateBlocks), d_qk = 576.
#include "kernels/sm90/prefill_sparse/alternate_blocks_kernel.cuh"

namespace openmla::kernels::prefill_sparse {

Status launch_alternate_blocks_d576(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_alternate_blocks<kHeadDimQK>("prefill_sparse_alternate_blocks_d576", params, grid, stream);
}

}  // namespace openmla::kernels::prefill_sparse

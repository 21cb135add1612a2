// Sparse prefill, the alternate-blocks kernel (DecodeKernel::kSparsePrefillAlternateBlocks) in
// FP8-cache mode: K/V from the 656-byte paged FP8 cache, d_qk = 576.
#include "kernels/sm90/prefill_sparse/alternate_blocks_kernel.cuh"

namespace openmla::kernels::prefill_sparse {

Status launch_alternate_blocks_fp8_cache(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_alternate_blocks<kHeadDimQK, true>("prefill_sparse_alternate_blocks_fp8_cache", params, grid, stream);
}

}  // namespace openmla::kernels::prefill_sparse

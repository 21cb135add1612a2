// Sparse prefill kernel (DecodeKernel::kSparsePrefillHeadsOnM), d_qk = 576 (latent + RoPE).
#include "kernels/sm90/prefill_sparse/heads_on_m_kernel.cuh"

namespace openmla::kernels::prefill_sparse {

Status launch_d576(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_heads_on_m<PrefillTraits<kHeadDimQK>>("prefill_sparse_heads_on_m_d576", params, grid, stream);
}

}  // namespace openmla::kernels::prefill_sparse

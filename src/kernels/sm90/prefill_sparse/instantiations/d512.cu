// Sparse prefill kernel (DecodeKernel::kSparsePrefillHeadsOnM), d_qk = 512 (latent only).
#include "kernels/sm90/prefill_sparse/heads_on_m_kernel.cuh"

namespace openmla::kernels::prefill_sparse {

Status launch_d512(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_heads_on_m<PrefillTraits<kHeadDimLatent>>("prefill_sparse_heads_on_m_d512", params, grid, stream);
}

}  // namespace openmla::kernels::prefill_sparse

// Sparse FP8 decode, heads-on-M CTA-pair kernel (DecodeKernel::kSparseHeadsOnMCtaPair):
// h_q = 128, the part's two q-groups of 64 heads run as a cluster of two CTAs.
#include "kernels/sm90/decode_sparse_fp8/cta_pair_producer.cuh"
#include "kernels/sm90/decode_sparse_fp8/heads_on_m_kernel.cuh"

namespace openmla::kernels::decode_sparse_fp8 {

Status launch_heads_on_m_cta_pair_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  return launch_heads_on_m<CtaPairTraits, CtaPairProducer<CtaPairTraits>>("decode_sparse_fp8_heads_on_m_cta_pair",
                                                                          params, grid, stream);
}

}  // namespace openmla::kernels::decode_sparse_fp8

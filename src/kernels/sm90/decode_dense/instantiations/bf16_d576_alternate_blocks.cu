// sm90 dense decode, alternate-blocks kernel: bf16 Q/KV/out, d_qk = 576.
#include "kernels/sm90/decode_dense/alternate_blocks_kernel.cuh"

namespace openmla::kernels::decode_dense {
template Status launch_alternate_blocks_kernel<DType::kBF16>(const KernelParams&, dim3, cudaStream_t);
}  // namespace openmla::kernels::decode_dense

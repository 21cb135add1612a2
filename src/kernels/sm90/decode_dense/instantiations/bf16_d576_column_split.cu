// sm90 dense decode kernel: bf16 Q/KV/out, d_qk = 576.
#include "kernels/sm90/decode_dense/kernel.cuh"
#include "kernels/sm90/decode_dense/pair_kernel.cuh"

namespace openmla::kernels::decode_dense {
template Status launch_kernel<DType::kBF16, 576>(const KernelParams&, dim3, int, cudaStream_t);
template Status launch_pair_kernel<DType::kBF16>(const KernelParams&, dim3, cudaStream_t);
}  // namespace openmla::kernels::decode_dense

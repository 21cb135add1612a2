// sm90 dense FP8 decode: e4m3 Q/KV, bf16 out, d_qk = 512.
#include "kernels/sm90/decode_dense_fp8/kernel.cuh"

namespace openmla::kernels::decode_dense_fp8 {
template Status launch_kernel<512>(const decode_dense::KernelParams&, dim3, cudaStream_t);
}  // namespace openmla::kernels::decode_dense_fp8

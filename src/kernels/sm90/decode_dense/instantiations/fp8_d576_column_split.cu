// sm90 dense decode, FP8 column-split kernel: e4m3 Q/KV, bf16 out, d_qk = 576.
#include "kernels/sm90/decode_dense/fp8_column_split_kernel.cuh"

namespace openmla::kernels::decode_dense {
template Status launch_fp8_column_split_kernel<576>(const KernelParams&, dim3, cudaStream_t);
}  // namespace openmla::kernels::decode_dense

// sm90 dense decode, column-split kernel: fp16 Q/KV/out, d_qk = 576.
#include "kernels/sm90/decode_dense/column_split_kernel.cuh"

namespace openmla::kernels::decode_dense {
template Status launch_column_split_kernel<DType::kFP16, 576>(const KernelParams&, dim3, int, cudaStream_t);
}  // namespace openmla::kernels::decode_dense

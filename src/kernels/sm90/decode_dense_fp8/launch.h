// Host entry of the sm90 dense FP8 decode kernel, one instantiation per d_qk
// (instantiations/d<d_qk>.cu). decode_dense/launch.cu encodes the e4m3
// paged-KV TMA descriptor into the dense kernel parameters and calls it for
// FP8 calls; the plan's kernel is DecodeKernel::kDenseColumnSplit.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/sm90/decode_dense/config.h"
#include "openmla/status.h"

namespace openmla::kernels::decode_dense_fp8 {

// grid = (plan.num_q_groups, plan.num_parts); params.q_scale / kv_scale set.
template <int kHeadDimQK>
Status launch_kernel(const decode_dense::KernelParams& params, dim3 grid, cudaStream_t stream);

}  // namespace openmla::kernels::decode_dense_fp8

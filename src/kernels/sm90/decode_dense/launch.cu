// Host entry of the sm90 dense decode kernels: checks the plan it was handed,
// encodes the paged-KV TMA descriptor and dispatches the plan's kernel and
// (dtype, d_qk) to one instantiation (instantiations/<dtype>_d<d_qk>_<kernel>.cu).
#include "kernels/sm90/decode_dense/launch.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/sm90/decode_dense/config.h"
#include "openmla/types.h"

#ifndef OPENMLA_ENABLE_FP16
#define OPENMLA_ENABLE_FP16 1  // CMake defines it (option OPENMLA_ENABLE_FP16)
#endif

namespace openmla::kernels::decode_dense {
namespace {

constexpr const char* kEntry = "dense_decode_run";
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kTmaAlignment = 16;  // bytes: global base address and strides

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry point, so the
// library needs no link against libcuda.
EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query{};
    const cudaError_t error =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query);
    return (error == cudaSuccess && query == cudaDriverEntryPointSuccess) ? reinterpret_cast<EncodeTiledFn>(ptr)
                                                                           : nullptr;
  }();
  return fn;
}

}  // namespace

namespace {

Status check_supported(const DenseDecodeParams& params, const DecodePlan& plan, float* partial_o,
                       float* partial_lse) {
  const DenseDecodeShape& shape = params.shape;
  if (shape.h_kv < 1 || shape.h_q % shape.h_kv != 0) {
    return Status::invalid_argument(std::string(kEntry) + ": h_q = " + std::to_string(shape.h_q) +
                                    " must be a positive multiple of h_kv = " + std::to_string(shape.h_kv));
  }
  if (plan.num_q_groups != dense_q_groups(shape) || plan.num_parts < 1 ||
      plan.rows_per_item != shape.s_q * shape.h_q) {
    return Status::invalid_argument(std::string(kEntry) + ": plan does not match the shape: got num_q_groups = " +
                                    std::to_string(plan.num_q_groups) + ", num_parts = " +
                                    std::to_string(plan.num_parts) + ", expected num_q_groups = " +
                                    std::to_string(dense_q_groups(shape)) + " and num_parts >= 1");
  }
  if (plan.kernel != DecodeKernel::kDenseColumnSplitCluster && plan.num_slots > 0 && (partial_o == nullptr || partial_lse == nullptr)) {
    return Status::invalid_argument(std::string(kEntry) + ": plan has " + std::to_string(plan.num_slots) +
                                    " partial slots but partial_o/partial_lse is null");
  }
  if (reinterpret_cast<uintptr_t>(params.kv_cache) % kTmaAlignment != 0) {
    return Status::invalid_argument(std::string(kEntry) + ": kv_cache must be 16-byte aligned for TMA");
  }
  return Status::ok();
}

// 4-D view (d_qk, h_kv, page_size, num_pages) of the cache; one box is 64
// columns x box_tokens tokens of one head of one page.
Status encode_kv_tensor_map(const DenseDecodeParams& params, int box_tokens, CUtensorMap* map) {
  const DenseDecodeShape& shape = params.shape;
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) {
    return Status::cuda_error(std::string(kEntry) + ": cuTensorMapEncodeTiled is unavailable from the driver");
  }
  const uint64_t elem = dtype_size(shape.kv_dtype);
  const cuuint64_t dims[4] = {cuuint64_t(shape.d_qk), cuuint64_t(shape.h_kv), cuuint64_t(shape.page_size),
                              cuuint64_t(shape.num_pages)};
  // NOTE: a stride of a size-1 dimension is never used; give it a legal value
  // (TMA wants multiples of 16 bytes) whatever the caller passed.
  auto stride_bytes = [&](int64_t stride_elems, uint64_t extent, uint64_t fallback) -> cuuint64_t {
    const uint64_t bytes = uint64_t(stride_elems) * elem;
    return extent == 1 || bytes == 0 ? fallback : bytes;
  };
  const uint64_t row_bytes = (uint64_t(shape.d_qk) * elem + 15) / 16 * 16;
  const cuuint64_t head_stride = stride_bytes(params.kv_stride_head, dims[1], row_bytes);
  const cuuint64_t token_stride = stride_bytes(params.kv_stride_token, dims[2], head_stride * dims[1]);
  const cuuint64_t page_stride = stride_bytes(params.kv_stride_page, dims[3], token_stride * dims[2]);
  const cuuint64_t strides[3] = {head_stride, token_stride, page_stride};
  const cuuint32_t box[4] = {cuuint32_t(kChunkCols), 1, cuuint32_t(box_tokens), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  // A 64-column box row is 128 bytes of bf16/fp16 (128B swizzle) or 64 bytes
  // of e4m3 (64B swizzle), matching the kernels' shared-memory atoms.
  const bool fp8 = shape.kv_dtype == DType::kFP8E4M3;
  const CUtensorMapDataType dtype = fp8                                ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                    : shape.kv_dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMapSwizzle swizzle = fp8 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  const CUresult result = encode(map, dtype, 4, const_cast<void*>(params.kv_cache), dims, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    return Status::invalid_argument(
        std::string(kEntry) + ": cuTensorMapEncodeTiled rejected the kv_cache layout (error " +
        std::to_string(int(result)) + "): strides (head, token, page) = (" + std::to_string(strides[0]) + ", " +
        std::to_string(strides[1]) + ", " + std::to_string(strides[2]) +
        ") bytes must be multiples of 16 and below 2^40");
  }
  return Status::ok();
}

}  // namespace

#if !OPENMLA_ENABLE_FP16
// NOTE: built without the FP16 instantiations (OPENMLA_ENABLE_FP16=OFF, their
// files are not compiled): these stand in for them; the capability check
// (validate/build_options.h) refuses fp16 first, so run() never reaches them.
template <>
Status launch_column_split_kernel<DType::kFP16, kHeadDimQK>(const KernelParams&, dim3, int, cudaStream_t) {
  return Status::not_supported(std::string(kEntry) + ": fp16 kernels not built (OPENMLA_ENABLE_FP16=OFF)");
}
template <>
Status launch_column_split_kernel<DType::kFP16, kHeadDimLatent>(const KernelParams&, dim3, int, cudaStream_t) {
  return Status::not_supported(std::string(kEntry) + ": fp16 kernels not built (OPENMLA_ENABLE_FP16=OFF)");
}
template <>
Status launch_alternate_blocks_kernel<DType::kFP16>(const KernelParams&, dim3, cudaStream_t) {
  return Status::not_supported(std::string(kEntry) + ": fp16 kernels not built (OPENMLA_ENABLE_FP16=OFF)");
}
#endif

Status launch(const DenseDecodeParams& params, const DecodePlan& plan, const PartSchedule& schedule, float* partial_o,
              float* partial_lse, cudaStream_t stream) {
  OPENMLA_RETURN_IF_ERROR(check_supported(params, plan, partial_o, partial_lse));
  const DenseDecodeShape& shape = params.shape;
  if (shape.batch == 0) return Status::ok();

  KernelParams kp{};
  kp.box_tokens = shape.page_size < BLOCK_N ? shape.page_size : BLOCK_N;
  OPENMLA_RETURN_IF_ERROR(encode_kv_tensor_map(params, kp.box_tokens, &kp.tma_kv));
  kp.q = params.q;
  kp.q_stride_b = params.q_stride_b;
  kp.q_stride_s = params.q_stride_s;
  kp.q_stride_h = params.q_stride_h;
  kp.block_table = params.block_table;
  kp.block_table_stride_b = params.block_table_stride_b;
  kp.seqlens = params.seqlens;
  kp.out = params.out;
  kp.out_stride_b = params.out_stride_b;
  kp.out_stride_s = params.out_stride_s;
  kp.out_stride_h = params.out_stride_h;
  kp.lse = params.lse;
  kp.lse_stride_b = params.lse_stride_b;
  kp.lse_stride_h = params.lse_stride_h;
  kp.partial_o = partial_o;
  kp.partial_lse = partial_lse;
  kp.schedule = schedule;
  kp.q_scale = params.q_scale;
  kp.kv_scale = params.kv_scale;
  kp.scale_log2 = params.softmax_scale * kLog2e;
  kp.s_q = shape.s_q;
  kp.h_q = shape.h_q;
  kp.heads_per_kv = shape.h_q / shape.h_kv;
  kp.rows_per_kv = dense_rows_per_kv_head(shape);
  kp.num_m_tiles = dense_query_tiles(shape);
  kp.page_size = shape.page_size;
  kp.max_length = shape.max_pages_per_seq * shape.page_size;
  kp.causal = params.causal ? 1 : 0;
  const bool clustered = plan.kernel == DecodeKernel::kDenseColumnSplitCluster;
  kp.cluster_split = clustered ? plan.cluster_size : 0;

  const int cluster = clustered ? plan.cluster_size : 1;
  const dim3 grid = clustered ? dim3(unsigned(shape.batch * cluster), unsigned(plan.num_q_groups))
                              : dim3(unsigned(plan.num_q_groups), unsigned(plan.num_parts));
  const bool bf16 = shape.kv_dtype == DType::kBF16;
  if (shape.kv_dtype == DType::kFP8E4M3) {
    // One FP8 kernel: the column split without clusters (plan_dense_decode).
    if (plan.kernel != DecodeKernel::kDenseColumnSplit) {
      return Status::invalid_argument(std::string(kEntry) + ": argument 'plan' names kernel " +
                                      decode_kernel_name(plan.kernel) +
                                      " for an fp8_e4m3 call: expected a plan from plan_dense_decode for this shape");
    }
    return shape.d_qk == kHeadDimQK ? launch_fp8_column_split_kernel<kHeadDimQK>(kp, grid, stream)
                                    : launch_fp8_column_split_kernel<kHeadDimLatent>(kp, grid, stream);
  }
  switch (plan.kernel) {
    case DecodeKernel::kDenseAlternateBlocks:
      if (shape.d_qk != kHeadDimQK) break;
      return bf16 ? launch_alternate_blocks_kernel<DType::kBF16>(kp, grid, stream)
                  : launch_alternate_blocks_kernel<DType::kFP16>(kp, grid, stream);
    case DecodeKernel::kDenseColumnSplit:
    case DecodeKernel::kDenseColumnSplitCluster:
      if (shape.d_qk == kHeadDimQK) {
        return bf16 ? launch_column_split_kernel<DType::kBF16, kHeadDimQK>(kp, grid, cluster, stream)
                    : launch_column_split_kernel<DType::kFP16, kHeadDimQK>(kp, grid, cluster, stream);
      }
      return bf16 ? launch_column_split_kernel<DType::kBF16, kHeadDimLatent>(kp, grid, cluster, stream)
                  : launch_column_split_kernel<DType::kFP16, kHeadDimLatent>(kp, grid, cluster, stream);
    default: break;
  }
  return Status::invalid_argument(std::string(kEntry) + ": argument 'plan' names kernel " +
                                  decode_kernel_name(plan.kernel) + ", which does not run this shape (d_qk = " +
                                  std::to_string(shape.d_qk) + "): expected a plan from plan_dense_decode");
}

}  // namespace openmla::kernels::decode_dense

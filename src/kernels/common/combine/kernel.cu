// Split-KV combine kernel.
//   grid  (num_entries, ceil(rows_per_item / kRowsPerCta)); entries that are not
//         split (num_pieces < 2) exit at once.
//   block kRowsPerCta warps; one warp merges one query row: each lane owns
//         16 of the 512 output columns (4 x float4).
// Pieces are merged in slot (= KV) order, so the result does not depend on timing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>
#include <string>

#include "kernels/common/combine/launch.h"
#include "openmla/schedule.h"

namespace openmla::kernels::combine {
namespace {

constexpr int kRowsPerCta = 4;
constexpr int kWarpSize = 32;
constexpr int kHeadDim = 512;
constexpr int kVecPerLane = kHeadDim / (kWarpSize * 4);  // float4 per lane

template <class Out>
__device__ __forceinline__ void store4(Out* dst, float4 v) {
  if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 packed{*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
    *reinterpret_cast<uint2*>(dst) = packed;
  } else {
    __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
    uint2 packed{*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

template <class Out>
__global__ void __launch_bounds__(kRowsPerCta * kWarpSize)
    combine_kernel(CombineParams params, int rows_per_item) {
  const CombineEntry entry = params.entries[blockIdx.x];
  if (entry.num_pieces < 2) return;
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  const int row = int(blockIdx.y) * kRowsPerCta + warp;  // (token, head) row of the item
  if (row >= rows_per_item) return;

  // ---- row weights: LSE = log sum exp(lse_i); pieces that saw no key have -inf
  float max_lse = -INFINITY;
  for (int k = lane; k < entry.num_pieces; k += kWarpSize) {
    max_lse = fmaxf(max_lse, params.partial_lse[size_t(entry.first_slot + k) * rows_per_item + row]);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  }
  float sum = 0.f;
  if (max_lse != -INFINITY) {
    for (int k = lane; k < entry.num_pieces; k += kWarpSize) {
      sum += __expf(params.partial_lse[size_t(entry.first_slot + k) * rows_per_item + row] - max_lse);
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  const bool empty = max_lse == -INFINITY;
  const float lse = empty ? INFINITY : max_lse + logf(sum);

  // ---- weighted sum of the partial rows, in slot order
  float4 acc[kVecPerLane];
#pragma unroll
  for (int v = 0; v < kVecPerLane; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!empty) {
    for (int k = 0; k < entry.num_pieces; ++k) {
      const size_t slot_row = size_t(entry.first_slot + k) * rows_per_item + row;
      const float weight = __expf(params.partial_lse[slot_row] - lse);
      const float4* src = reinterpret_cast<const float4*>(params.partial_o + slot_row * kHeadDim);
#pragma unroll
      for (int v = 0; v < kVecPerLane; ++v) {
        const float4 x = src[v * kWarpSize + lane];
        acc[v].x += weight * x.x;
        acc[v].y += weight * x.y;
        acc[v].z += weight * x.z;
        acc[v].w += weight * x.w;
      }
    }
  }

  // ---- attention sink scales O only: O *= 1 / (1 + exp(sink - LSE))
  const int head = row % params.h_q;
  if (params.attn_sink != nullptr && !empty) {
    const float sink_scale = 1.f / (1.f + __expf(params.attn_sink[head] - lse));
#pragma unroll
    for (int v = 0; v < kVecPerLane; ++v) {
      acc[v].x *= sink_scale; acc[v].y *= sink_scale; acc[v].z *= sink_scale; acc[v].w *= sink_scale;
    }
  }

  // ---- write the final row
  const int items_per_request = params.s_q / params.q_tokens_per_item;
  const int batch = entry.item / items_per_request;
  const int token = (entry.item % items_per_request) * params.q_tokens_per_item + row / params.h_q;
  Out* out = static_cast<Out*>(params.out) + batch * params.out_stride_b + token * params.out_stride_s +
             head * params.out_stride_h;
#pragma unroll
  for (int v = 0; v < kVecPerLane; ++v) store4(out + (v * kWarpSize + lane) * 4, acc[v]);
  if (lane == 0) params.lse[batch * params.lse_stride_b + head * params.lse_stride_h + token] = lse;
}

}  // namespace

Status launch(const CombineParams& params, int rows_per_item, cudaStream_t stream) {
  const dim3 grid(unsigned(params.num_entries), unsigned((rows_per_item + kRowsPerCta - 1) / kRowsPerCta));
  const dim3 block(kRowsPerCta * kWarpSize);
  if (params.out_dtype == DType::kFP16) {
    combine_kernel<__half><<<grid, block, 0, stream>>>(params, rows_per_item);
  } else {
    combine_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(params, rows_per_item);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return Status::cuda_error(std::string("combine kernel launch failed: ") + cudaGetErrorString(error));
  }
  return Status::ok();
}

}  // namespace openmla::kernels::combine

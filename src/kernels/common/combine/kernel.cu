// Split-KV combine kernel.
//   grid  (num_entries, row groups); entries that are not split
//         (num_pieces < 2) exit at once; a CTA walks row groups blockIdx.y,
//         blockIdx.y + gridDim.y, ...
//   block 128 threads = 4 / kWarpsPerRow rows; the 32 * kWarpsPerRow threads
//         of a row own 512 / (32 * kWarpsPerRow) output columns each.
// Latency bounds this kernel for small calls, so the O loads of several
// pieces are issued together with the LSE loads. Items with few rows use four
// warps per row (16 pieces in flight per thread); items with many rows use a
// warp per row, which keeps the grid to one wave. With four warps per row, an
// item of at most kFewPieces pieces (large batches) takes a short merge: no warp
// reduction, no unrolled slots for pieces it does not have.
// Pieces are merged in slot (= KV) order, so the result does not depend on timing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/common/combine/launch.h"
#include "kernels/common/dependent_launch.cuh"
#include "openmla/schedule.h"

namespace openmla::kernels::combine {
namespace {

constexpr int kWarpSize = 32;
constexpr int kHeadDim = 512;
constexpr int kThreads = 128;
constexpr int kFloat4InFlight = 16;  // partial-O float4 loads per thread before any is summed
constexpr int kMaxGridY = 65535;
constexpr int kFewRows = 32;         // rows per item up to which a row gets four warps
constexpr int kFewPieces = 4;        // pieces per item up to which merge_few_pieces runs

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

// acc += weight * x: one piece's float4s of this thread, weighted.
template <int kVecs>
__device__ __forceinline__ void add_weighted(float4 (&acc)[kVecs], float weight, const float4 (&x)[kVecs]) {
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    acc[v].x += weight * x[v].x;
    acc[v].y += weight * x[v].y;
    acc[v].z += weight * x[v].z;
    acc[v].w += weight * x[v].w;
  }
}

// Each merge returns the row's LSE (+inf when no piece saw a key) and sets acc to the row's
// weighted sum of the pieces' O (this thread's float4s), weight of piece k = exp(lse_k - LSE).
// lse_of(k): pointer to piece k's LSE of the row; o_of(k, v): pointer to its v-th float4 for this thread.

// Up to kFewPieces pieces (a batch split over the SMs leaves one or two per item), four warps per row
// (the kernel's choice, below): every thread reads the few LSEs itself (the row's threads read the same
// words) and all O loads are issued at once.
// ncu (H200, b = 128, h_q = 32, s_k ~ 4096): the general path below ran 12.9 M instructions here,
// 10x FlashMLA's combine, and the kernel was bound by issuing them.
template <int kVecs, class LseOf, class OOf>
__device__ __forceinline__ float merge_few_pieces(LseOf lse_of, OOf o_of, int num_pieces, float4 (&acc)[kVecs]) {
  float piece_lse[kFewPieces];
  float4 x[kFewPieces][kVecs];
#pragma unroll
  for (int k = 0; k < kFewPieces; ++k) {
    piece_lse[k] = k < num_pieces ? __ldg(lse_of(k)) : -INFINITY;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) x[k][v] = k < num_pieces ? __ldg(o_of(k, v)) : float4{};
  }
  float max_lse = piece_lse[0];
#pragma unroll
  for (int k = 1; k < kFewPieces; ++k) max_lse = fmaxf(max_lse, piece_lse[k]);
  // NOTE: no branch on an empty row (max -inf) before the O loads are used: ptxas moved the loads it
  // could prove unconditional (pieces 0, 1) past such a branch, behind the LSE loads' round trip.
  const bool empty = max_lse == -INFINITY;
  const float shift = empty ? 0.f : max_lse;
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kFewPieces; ++k) sum += __expf(piece_lse[k] - shift);  // exp(-inf) = 0: absent pieces
  const float lse = empty ? INFINITY : shift + logf(sum);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int k = 0; k < kFewPieces; ++k) {
    add_weighted(acc, __expf(piece_lse[k] - lse), x[k]);  // weight 0 for every piece of an empty row
  }
  return lse;
}

// Any number of pieces (a short batch split over many SMs): the warp's lanes reduce the LSEs, and
// kPiecesInFlight pieces' O loads are issued together, the first ones while the LSE is reduced.
template <int kVecs, int kPiecesInFlight, class LseOf, class OOf>
__device__ __forceinline__ float merge_many_pieces(LseOf lse_of, OOf o_of, int num_pieces, int lane,
                                                   float4 (&acc)[kVecs]) {
  float4 x[kPiecesInFlight][kVecs];
#pragma unroll
  for (int j = 0; j < kPiecesInFlight; ++j) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) x[j][v] = j < num_pieces ? __ldg(o_of(j, v)) : float4{};
  }

  // row LSE = log sum exp(lse_k); pieces that saw no key have -inf (each warp computes it)
  // NOTE: rolled loops (one trip up to 32 pieces): the unrolled copies only
  // lengthened a kernel that runs once per call from a cold instruction cache.
  float max_lse = -INFINITY;
#pragma unroll 1
  for (int k = lane; k < num_pieces; k += kWarpSize) max_lse = fmaxf(max_lse, __ldg(lse_of(k)));
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  }
  const bool empty = max_lse == -INFINITY;
  float sum = 0.f;
  if (!empty) {
#pragma unroll 1
    for (int k = lane; k < num_pieces; k += kWarpSize) sum += __expf(__ldg(lse_of(k)) - max_lse);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float lse = empty ? INFINITY : max_lse + logf(sum);

#pragma unroll
  for (int v = 0; v < kVecs; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
  // weighted sum in slot order
  if (!empty) {
#pragma unroll 1
    for (int k0 = 0; k0 < num_pieces; k0 += kPiecesInFlight) {
      if (k0 > 0) {
#pragma unroll
        for (int j = 0; j < kPiecesInFlight; ++j) {
#pragma unroll
          for (int v = 0; v < kVecs; ++v) x[j][v] = k0 + j < num_pieces ? __ldg(o_of(k0 + j, v)) : float4{};
        }
      }
#pragma unroll
      for (int j = 0; j < kPiecesInFlight; ++j) {
        add_weighted(acc, k0 + j < num_pieces ? __expf(__ldg(lse_of(k0 + j)) - lse) : 0.f, x[j]);
      }
    }
  }
  return lse;
}

template <class Out, int kWarpsPerRow>
__global__ void __launch_bounds__(kThreads) combine_kernel(CombineParams params, int rows_per_item) {
  constexpr int kRowThreads = kWarpsPerRow * kWarpSize;
  constexpr int kRowsPerCta = kThreads / kRowThreads;
  constexpr int kVecs = kHeadDim / 4 / kRowThreads;             // float4 per piece per thread: 1 or 4
  constexpr int kPiecesInFlight = kFloat4InFlight / kVecs;      // 16 or 4
  common::wait_for_previous_grid();  // the partials come from the attention grid
  const CombineEntry entry = params.entries[blockIdx.x];
  if (entry.num_pieces < 2) return;
  const int lane = int(threadIdx.x) % kWarpSize;
  const int row_thread = int(threadIdx.x) % kRowThreads;
  const int num_pieces = entry.num_pieces;

  for (int row0 = int(blockIdx.y) * kRowsPerCta; row0 < rows_per_item; row0 += int(gridDim.y) * kRowsPerCta) {
    const int row = row0 + int(threadIdx.x) / kRowThreads;
    if (row >= rows_per_item) break;  // uniform per warp
    // partial_lse[slot, row] and this thread's float4 v of partial_o[slot, row, :] for piece k
    auto lse_of = [&](int k) { return params.partial_lse + size_t(entry.first_slot + k) * rows_per_item + row; };
    auto o_of = [&](int k, int v) {
      return reinterpret_cast<const float4*>(params.partial_o +
                                             (size_t(entry.first_slot + k) * rows_per_item + row) * kHeadDim) +
             v * kRowThreads + row_thread;
    };

    float lse;
    float4 acc[kVecs];
    // A warp per row keeps the general merge: the short one measured 1-2 % slower there (sparse decode,
    // h_q 64 / 128, graph replay; the general merge issues 4 pieces' O loads first either way).
    if (kWarpsPerRow > 1 && num_pieces <= kFewPieces) {
      lse = merge_few_pieces<kVecs>(lse_of, o_of, num_pieces, acc);
    } else {
      lse = merge_many_pieces<kVecs, kPiecesInFlight>(lse_of, o_of, num_pieces, lane, acc);
    }
    const bool empty = lse == INFINITY;

    // ---- attention sink scales O only: O *= 1 / (1 + exp(sink - LSE))
    const int head = row % params.h_q;
    if (params.attn_sink != nullptr && !empty) {
      const float sink_scale = 1.f / (1.f + __expf(params.attn_sink[head] - lse));
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        acc[v].x *= sink_scale; acc[v].y *= sink_scale; acc[v].z *= sink_scale; acc[v].w *= sink_scale;
      }
    }

    // ---- write the final row
    const int items_per_request = params.s_q / params.q_tokens_per_item;
    const int batch = entry.item / items_per_request;
    const int token = (entry.item % items_per_request) * params.q_tokens_per_item + row / params.h_q;
    Out* out = static_cast<Out*>(params.out) + batch * params.out_stride_b + token * params.out_stride_s +
               head * params.out_stride_h;  // [512] row of out
#pragma unroll
    for (int v = 0; v < kVecs; ++v) store4(out + (v * kRowThreads + row_thread) * 4, acc[v]);
    if (row_thread == 0) params.lse[batch * params.lse_stride_b + head * params.lse_stride_h + token] = lse;
    if (params.max_logits != nullptr) {  // sparse prefill: the max over the pieces (-inf when all are empty)
      float max_logit = -INFINITY;
#pragma unroll 1
      for (int k = lane; k < num_pieces; k += kWarpSize) {
        max_logit = fmaxf(max_logit, __ldg(params.partial_max + size_t(entry.first_slot + k) * rows_per_item + row));
      }
      for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));
      }
      if (row_thread == 0) {
        params.max_logits[batch * params.max_logits_stride_b + head * params.max_logits_stride_h + token] = max_logit;
      }
    }
  }
}

template <class Out>
Status launch_for(const CombineParams& params, int rows_per_item, cudaStream_t stream) {
  const dim3 block(kThreads);
  if (rows_per_item <= kFewRows) {
    const dim3 grid(unsigned(params.num_entries), unsigned(rows_per_item));
    return common::launch_dependent("combine", &combine_kernel<Out, 4>, grid, block, 0, stream, 1, params,
                                    rows_per_item);
  }
  constexpr int kRowsPerCta = kThreads / kWarpSize;
  const dim3 grid(unsigned(params.num_entries),
                  unsigned(std::min((rows_per_item + kRowsPerCta - 1) / kRowsPerCta, kMaxGridY)));
  return common::launch_dependent("combine", &combine_kernel<Out, 1>, grid, block, 0, stream, 1, params, rows_per_item);
}

}  // namespace

Status launch(const CombineParams& params, int rows_per_item, cudaStream_t stream) {
  return params.out_dtype == DType::kFP16 ? launch_for<__half>(params, rows_per_item, stream)
                                          : launch_for<__nv_bfloat16>(params, rows_per_item, stream);
}

}  // namespace openmla::kernels::combine

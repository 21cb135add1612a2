// Epilogue of the sm90 sparse FP8 decode kernel: the consumer's 512 x N O^T,
// normalised per head column, and the per-head LSE.
//   item not split: out[b, s, head, :] bf16 (attention sink folded into the
//                   column norm), lse[b, head, s] natural log; an empty row
//                   gives O = 0, LSE = +inf
//   split piece:    partial_o[slot, head, :] fp32, partial_lse[slot, head]
//                   natural log; an empty piece gives O = 0, LSE = -inf
// Stores go straight from the accumulator fragment (O^T is transposed with
// respect to out, so each value is its own 2- or 4-byte store; 8 lanes of a
// warp cover 8 consecutive dims of one head).
#pragma once

#include <cute/tensor.hpp>
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/mainloop.cuh"

namespace openmla::kernels::decode_sparse_fp8 {

// Where one item's results go.
struct ItemOutput {
  int b;
  int s;
  bool partial;
  int slot;
};

__device__ __forceinline__ ItemOutput item_output(const KernelParams& params, const PartWork& part, int item) {
  ItemOutput r;
  r.b = item / params.s_q;
  r.s = item - r.b * params.s_q;
  r.partial = part_item_is_partial(part, item);
  r.slot = r.partial ? part_item_slot(part, item) : 0;
  return r;
}

template <class Traits>
struct Epilogue {
  // tOrO_rc: (rows = dims, cols = heads) view of the fp32 accumulator;
  // tOcO_rc: the same view of this thread's identity partition of the
  // 512 x N tile, tOcO0_rc: thread 0's (compile-time coordinates);
  // col_norm: this thread's column factors; head0: the CTA's first head.
  // NOTE: coordinates are this thread's (0, 0) plus thread 0's: the MMA
  // fragment layout is a thread offset plus a value offset without carries.
  // Building them that way keeps the coordinates out of registers (the
  // compiler would otherwise hoist them out of the item loop and spill).
  template <class TensorORowCol, class TensorCRowCol, class TensorC0RowCol, int kCols>
  static __device__ __forceinline__ void store_o(const KernelParams& params, const ItemOutput& target, int head0,
                                                 const TensorORowCol& tOrO_rc, const TensorCRowCol& tOcO_rc,
                                                 const TensorC0RowCol& tOcO0_rc, const float (&col_norm)[kCols]) {
    using namespace cute;
    static_assert(decltype(size<1>(tOrO_rc))::value == kCols, "one factor per head column");
    constexpr int kRowsPerThread = decltype(size<0>(tOrO_rc))::value;
    const int dim0 = int(get<0>(tOcO_rc(0, 0)));
    const int head = head0 + int(get<1>(tOcO_rc(0, 0)));
    if (target.partial) {
      float* base = params.partial_o + (int64_t(target.slot) * params.h_q + head) * HEAD_DIM_V + dim0;
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        const int dh = int(get<1>(tOcO0_rc(0, jj)));
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          base[dh * HEAD_DIM_V + int(get<0>(tOcO0_rc(i, jj)))] = tOrO_rc(i, jj) * col_norm[jj];
        }
      }
    } else {
      uint16_t* base = params.out + target.b * params.out_stride_b + target.s * params.out_stride_s +
                       head * params.out_stride_h + dim0;
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        const int dh = int(get<1>(tOcO0_rc(0, jj)));
        uint16_t* row = base + dh * params.out_stride_h;
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          row[int(get<0>(tOcO0_rc(i, jj)))] =
              __bfloat16_as_ushort(__float2bfloat16_rn(tOrO_rc(i, jj) * col_norm[jj]));
        }
      }
    }
  }

  // One head's LSE. lse_nat: natural-log LSE of the row (ignored when empty);
  // max_log2: the row max of the scaled logits in the log2 domain (max_logits, when asked for).
  static __device__ __forceinline__ void store_lse(const KernelParams& params, const ItemOutput& target, int head,
                                                   bool empty, float lse_nat, float max_log2) {
    if (target.partial) {
      params.partial_lse[int64_t(target.slot) * params.h_q + head] = empty ? -INFINITY : lse_nat;
    } else {
      params.lse[target.b * params.lse_stride_b + head * params.lse_stride_h + target.s] =
          empty ? INFINITY : lse_nat;
    }
    if (params.max_logits != nullptr) {  // sparse prefill over the FP8 cache
      const float max_logit = empty ? -INFINITY : max_log2 * common::kLn2;
      if (target.partial) {
        params.partial_max[int64_t(target.slot) * params.h_q + head] = max_logit;
      } else {
        params.max_logits[int64_t(target.b * params.s_q + target.s) * params.h_q + head] = max_logit;
      }
    }
  }
};

}  // namespace openmla::kernels::decode_sparse_fp8

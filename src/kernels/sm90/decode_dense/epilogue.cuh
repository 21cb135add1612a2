// Epilogue of the sm90 dense decode kernel: normalise one consumer's 64 x 256
// O half and write it, plus the row LSE (softmax warpgroup only).
//   final item:   out[b, s, head, :] in the input dtype, lse[b, head, s] (natural log;
//                 +inf and O = 0 for a row that sees no key)
//   split piece:  partial_o[slot, s * h_q + head, :] fp32, partial_lse[slot, row]
//                 (natural log; -inf and O = 0 for an empty piece)
// Stores go straight from the accumulator fragment: each thread holds pairs
// of adjacent columns, written as one 4-byte (bf16/fp16) or 8-byte (fp32) store.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>

#include <cmath>

#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/mainloop.cuh"

namespace openmla::kernels::decode_dense {

// The two query rows one consumer thread owns (rows r and r + 8 of the tile).
struct QueryRow {
  int tile_row;  // 0..63
  bool real;     // false for padding rows past s_q * hpk
  int s;         // query token
  int head;      // query head
};

__device__ __forceinline__ QueryRow make_query_row(const KernelParams& params, int kv_head, int m_tile,
                                                   int tile_row) {
  QueryRow row;
  row.tile_row = tile_row;
  const int packed = m_tile * BLOCK_M + tile_row;
  row.real = packed < params.rows_per_kv;
  row.s = row.real ? packed / params.heads_per_kv : 0;
  row.head = kv_head * params.heads_per_kv + (row.real ? packed % params.heads_per_kv : 0);
  return row;
}

template <class Traits>
struct Epilogue {
  using Element = typename Traits::Element;

  // tOrO: (MMA, 1, 1) fp32 accumulator of columns [col_offset, col_offset + 256);
  // tOcO: the same partition of an identity tensor (row, col) of the 64 x 256 half.
  template <class TensorO, class TensorC>
  static __device__ __forceinline__ void store_o(const KernelParams& params, int item, const ItemBlocks& blocks,
                                                 const TensorO& tOrO, const TensorC& tOcO,
                                                 const QueryRow (&rows)[2], const float (&norm)[2],
                                                 int col_offset) {
    using namespace cute;
    static_assert(decltype(size(tOrO))::value % 2 == 0);
#pragma unroll
    for (int v = 0; v < size(tOrO); v += 2) {
      const int tile_row = int(get<0>(tOcO(v)));
      const int col = col_offset + int(get<1>(tOcO(v)));
      // NOTE: the sm90 accumulator layout puts values v, v + 1 (v even) in
      // adjacent columns of one row, and rows tile_row of rows[0] / rows[1]
      // differ by 8; pick the matching QueryRow.
      const int i = tile_row == rows[0].tile_row ? 0 : 1;
      const QueryRow& row = rows[i];
      if (!row.real) continue;
      const float o0 = tOrO(v) * norm[i];
      const float o1 = tOrO(v + 1) * norm[i];
      if (blocks.partial) {
        const int64_t r = int64_t(blocks.slot) * (params.s_q * params.h_q) + row.s * params.h_q + row.head;
        *reinterpret_cast<float2*>(params.partial_o + r * HEAD_DIM_V + col) = make_float2(o0, o1);
      } else {
        cutlass::Array<Element, 2> packed;
        packed[0] = Element(o0);
        packed[1] = Element(o1);
        Element* out = static_cast<Element*>(params.out) + int64_t(item) * params.out_stride_b +
                       int64_t(row.s) * params.out_stride_s + int64_t(row.head) * params.out_stride_h + col;
        *reinterpret_cast<cutlass::Array<Element, 2>*>(out) = packed;
      }
    }
  }

  // One lane per quad writes the LSE of each of its two rows.
  // row_max: running max in the log2 domain; row_sum: whole-row sum.
  static __device__ __forceinline__ void store_lse(const KernelParams& params, int item, const ItemBlocks& blocks,
                                                   const QueryRow (&rows)[2], const float (&row_max)[2],
                                                   const float (&row_sum)[2], int lane) {
    if (lane % 4 != 0) return;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const QueryRow& row = rows[i];
      if (!row.real) continue;
      const bool empty = !(row_sum[i] > 0.0f);
      const float lse = (row_max[i] + log2f(row_sum[i])) * common::kLn2;
      if (blocks.partial) {
        const int64_t r = int64_t(blocks.slot) * (params.s_q * params.h_q) + row.s * params.h_q + row.head;
        params.partial_lse[r] = empty ? -INFINITY : lse;
      } else {
        params.lse[int64_t(item) * params.lse_stride_b + int64_t(row.head) * params.lse_stride_h + row.s] =
            empty ? INFINITY : lse;
      }
    }
  }
};

}  // namespace openmla::kernels::decode_dense

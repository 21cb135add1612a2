// Epilogue of the sm90 dense decode kernel: normalise one consumer's 64 x 256
// O half and write it, plus the row LSE (softmax warpgroup only).
//   final item:   out[b, s, head, :] in the input dtype, lse[b, head, s] (natural log;
//                 +inf and O = 0 for a row that sees no key)
//   split piece:  partial_o[slot, s * h_q + head, :] fp32, partial_lse[slot, row]
//                 (natural log; -inf and O = 0 for an empty piece)
// Stores go straight from the accumulator fragment: each thread holds pairs
// of adjacent columns, written as one 4-byte (bf16/fp16) or 8-byte (fp32) store
// at a fixed offset from the row's pointer.
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

  // tOrO_rc: (2 rows, 128 cols) row/column view of the fp32 accumulator of
  // O columns [col_offset, col_offset + 256). Column j of a thread's row is
  // col_offset + 2 * (lane % 4) + (j % 2) + 8 * (j / 2) (sm90 64xN fragment).
  // NOTE: each row's destination pointer is formed once and every store uses
  // a compile-time offset from it. Per-element address arithmetic made this
  // epilogue ~3000 straight-line instructions per warp, which cost ~30 us
  // per call in instruction fetch when a part had only one block to do.
  template <class TensorORowCol>
  static __device__ __forceinline__ void store_o(const KernelParams& params, int item, const ItemBlocks& blocks,
                                                 const TensorORowCol& tOrO_rc, const QueryRow (&rows)[2],
                                                 const float (&norm)[2], int col_offset, int lane) {
    using namespace cute;
    constexpr int kCols = decltype(size<1>(tOrO_rc))::value;  // 128
    static_assert(kCols % 2 == 0);
    const int thread_col = col_offset + 2 * (lane % 4);
    if (blocks.partial) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (!rows[i].real) continue;
        const int64_t r = int64_t(blocks.slot) * (params.s_q * params.h_q) + rows[i].s * params.h_q + rows[i].head;
        float* dst = params.partial_o + r * HEAD_DIM_V + thread_col;  // [512] row of partial_o
#pragma unroll
        for (int j = 0; j < kCols; j += 2) {
          *reinterpret_cast<float2*>(dst + 4 * j) = make_float2(tOrO_rc(i, j) * norm[i], tOrO_rc(i, j + 1) * norm[i]);
        }
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!rows[i].real) continue;
      Element* dst = static_cast<Element*>(params.out) + int64_t(item) * params.out_stride_b +
                     int64_t(rows[i].s) * params.out_stride_s + int64_t(rows[i].head) * params.out_stride_h +
                     thread_col;  // [512] row of out
#pragma unroll
      for (int j = 0; j < kCols; j += 2) {
        cutlass::Array<Element, 2> packed;
        packed[0] = Element(tOrO_rc(i, j) * norm[i]);
        packed[1] = Element(tOrO_rc(i, j + 1) * norm[i]);
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + 4 * j) = packed;
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

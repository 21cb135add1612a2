// Epilogue of the heads-on-M consumer warpgroups (consumers.cuh; the dense
// decode kernels and the sparse heads-on-M kernels): normalise one consumer's
// 64 x 256 O half and write it, plus the row LSE (softmax warpgroup only).
// Where rows go is the Problem's (problem.cuh); the layouts below are the
// dense ones.
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
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/problem.cuh"

namespace openmla::kernels::heads_on_m {

// Problem: where each row's results go (the contract: problem.cuh).
template <class Traits, class Problem>
struct Epilogue {
  using Element = typename Traits::Element;
  using Params = typename Problem::Params;

  // tOrO_rc: (2 rows, 64 values) row/column view of the fp32 accumulator of
  // O columns [col_offset, col_offset + 256). Value j of a thread's row is column
  // col_offset + 2 * (lane % 4) + (j % 2) + 8 * (j / 2) (sm90 64xN fragment).
  // NOTE: each row's destination pointer is formed once and every store uses
  // a compile-time offset from it. Per-element address arithmetic made this
  // epilogue ~3000 straight-line instructions per warp, which cost ~30 us
  // per call in instruction fetch when a part had only one block to do.
  template <class TensorORowCol>
  static __device__ __forceinline__ void store_o(const Params& params, int item, const ItemBlocks& blocks,
                                                 const TensorORowCol& tOrO_rc, const QueryRow (&rows)[2],
                                                 const float (&norm)[2], int col_offset, int lane) {
    using namespace cute;
    constexpr int kCols = decltype(size<1>(tOrO_rc))::value;  // 64 values, covering 256 columns
    static_assert(kCols % 2 == 0);
    const int thread_col = col_offset + 2 * (lane % 4);
    if (blocks.partial) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (!rows[i].real) continue;
        float* dst = params.partial_o + Problem::partial_row(params, blocks, rows[i]) * HEAD_DIM_V +
                     thread_col;  // [512] row of partial_o
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
      Element* dst = Problem::out_row(params, item, rows[i]) + thread_col;  // [512] row of out
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
  static __device__ __forceinline__ void store_lse(const Params& params, int item, const ItemBlocks& blocks,
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
        params.partial_lse[Problem::partial_row(params, blocks, row)] = empty ? -INFINITY : lse;
      } else {
        *Problem::lse_entry(params, item, row) = empty ? INFINITY : lse;
      }
      if constexpr (Problem::kWritesMaxLogits) {
        Problem::store_max_logit(params, item, blocks, row, empty ? -INFINITY : row_max[i] * common::kLn2);
      }
    }
  }
};

}  // namespace openmla::kernels::heads_on_m

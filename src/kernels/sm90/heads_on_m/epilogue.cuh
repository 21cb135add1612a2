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
// at a fixed offset from the row's pointer; or (store_o_staged, final items of
// kernels with free shared memory at the item end) through shared memory as
// 16-byte stores; or (store_o_wide, final items) as 16-byte stores after a
// transpose inside each quad, with no shared memory.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>

#include <cmath>

#include "kernels/common/online_softmax.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/problem.cuh"

namespace openmla::kernels::heads_on_m {

// Problem: where each row's results go (the contract: problem.cuh).
template <class Traits, class Problem>
struct Epilogue {
  using Element = typename Traits::Element;
  using Params = typename Problem::Params;

  // Values j and j + 1 of row i of tOrO_rc, times norm, as a pair of the output type (4 bytes).
  template <class TensorORowCol>
  static __device__ __forceinline__ cutlass::Array<Element, 2> out_pair(const TensorORowCol& tOrO_rc, int i, int j,
                                                                       float norm) {
    cutlass::Array<Element, 2> packed;
    packed[0] = Element(tOrO_rc(i, j) * norm);
    packed[1] = Element(tOrO_rc(i, j + 1) * norm);
    return packed;
  }

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
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + 4 * j) = out_pair(tOrO_rc, i, j, norm[i]);
      }
    }
  }

  // store_o of an item that goes to `out` (not a split piece) with 16-byte stores and no shared
  // memory: a quad holds whole rows, column pair q of every 8-column group in lane q; four groups at
  // a time are transposed across the quad (two shuffle rounds), so that lane q then holds group
  // g0 + q whole and writes it with one 16-byte store. A quarter of store_o's store instructions,
  // each writing 64 contiguous bytes of a row per quad. Needs 16-byte aligned rows (the API
  // validates out and its strides to 16 bytes).
  template <class TensorORowCol>
  static __device__ __forceinline__ void store_o_wide(const Params& params, int item, const TensorORowCol& tOrO_rc,
                                                      const QueryRow (&rows)[2], const float (&norm)[2],
                                                      int col_offset, int lane) {
    using namespace cute;
    constexpr int kCols = decltype(size<1>(tOrO_rc))::value;  // 64 values: a column pair of each of 32 groups
    static_assert(kCols % 8 == 0 && sizeof(Element) == 2, "four groups of bf16 / fp16 pairs per transpose");
    const int quad_lane = lane % 4;
    const bool odd = (quad_lane & 1) != 0, upper = (quad_lane & 2) != 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      Element* const row = rows[i].real ? Problem::out_row(params, item, rows[i]) + col_offset : nullptr;  // [256]
#pragma unroll
      for (int g0 = 0; g0 < kCols / 2; g0 += 4) {
        uint32_t w[4];  // w[t]: this lane's column pair of group g0 + t
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const cutlass::Array<Element, 2> packed = out_pair(tOrO_rc, i, 2 * (g0 + t), norm[i]);
          w[t] = reinterpret_cast<const uint32_t&>(packed);
        }
        // Round 1 swaps across lane bit 0, round 2 across bit 1: then w[s] is lane s's pair of group g0 + q.
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? w[2 * k] : w[2 * k + 1], 1);
          w[2 * k] = odd ? got : w[2 * k];
          w[2 * k + 1] = odd ? w[2 * k + 1] : got;
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const uint32_t got = __shfl_xor_sync(0xffffffffu, upper ? w[k] : w[k + 2], 2);
          w[k] = upper ? got : w[k];
          w[k + 2] = upper ? w[k + 2] : got;
        }
        // st.global.cs: O is written once and never read here, so its lines are allocated evict-first
        // in L2 and leave the gathered kv rows resident.
        if (row != nullptr) {
          __stcs(reinterpret_cast<uint4*>(row + 8 * (g0 + quad_lane)), make_uint4(w[0], w[1], w[2], w[3]));
        }
      }
    }
  }

  // Bytes per row of a warpgroup's O half staged by store_o_staged: 256 columns plus 16, so that
  // a warp's 4-byte stores (8 rows x 4 column pairs) fall in 32 different banks.
  static constexpr int kStageRowBytes = HEAD_DIM_V_HALF * int(sizeof(Element)) + 16;
  static constexpr int kStageBytes = BLOCK_M * kStageRowBytes;

  // store_o of an item that goes to `out` (not a split piece), through shared memory: each quad
  // stages its two rows of this warpgroup's half at `stage` (kStageBytes of free shared memory),
  // then copies them out with 16-byte stores, 64 contiguous bytes per row and instruction, a
  // quarter of store_o's store instructions. A quad holds whole rows of the half, so only the
  // warp synchronises. tile_row: the thread's two rows in the tile (rows[i] is row tile_row[i]).
  template <class TensorORowCol>
  static __device__ __forceinline__ void store_o_staged(const Params& params, int item, const TensorORowCol& tOrO_rc,
                                                        const QueryRow (&rows)[2], const int (&tile_row)[2],
                                                        const float (&norm)[2], int col_offset, int lane,
                                                        uint32_t stage) {
    using namespace cute;
    constexpr int kCols = decltype(size<1>(tOrO_rc))::value;  // 64 values, covering 256 columns
    static_assert(kCols * 4 == HEAD_DIM_V_HALF, "a thread's values span the half's 256 columns");
    static_assert(sizeof(Element) == 2, "two values per 4-byte shared store (bf16 / fp16 out)");
    const int quad_lane = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // value j (even) of the row is column 2 * quad_lane + 4 * j of the half
      const uint32_t row_stage = stage + uint32_t(tile_row[i] * kStageRowBytes + 4 * quad_lane);
#pragma unroll
      for (int j = 0; j < kCols; j += 2) {
        const cutlass::Array<Element, 2> packed = out_pair(tOrO_rc, i, j, norm[i]);
        common::st_shared_b32(row_stage + uint32_t(8 * j), reinterpret_cast<const uint32_t&>(packed));
      }
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!rows[i].real) continue;
      uint4* dst = reinterpret_cast<uint4*>(Problem::out_row(params, item, rows[i]) + col_offset) + quad_lane;
      const uint32_t row_stage = stage + uint32_t(tile_row[i] * kStageRowBytes + 16 * quad_lane);
#pragma unroll
      for (int c = 0; c < HEAD_DIM_V_HALF * int(sizeof(Element)) / 64; ++c) {
        dst[4 * c] = common::ld_shared_v4(row_stage + uint32_t(64 * c));  // 16-byte piece 4 c + quad_lane
      }
    }
  }

  // One lane per quad writes the LSE of each of its two rows.
  // row_max: running max in the log2 domain; row_sum: whole-row sum.
  static __device__ __forceinline__ void store_lse(const Params& params, int item, const ItemBlocks& blocks,
                                                   const QueryRow (&rows)[2], const float (&row_max)[2],
                                                   const float (&row_sum)[2], int lane) {
    store_lse(params, item, blocks, rows, row_max, row_sum, row_max, lane);
  }
  // The same when the sums are relative to a reference (row_max) that is not the true row max
  // (seen_max, log2 domain: what max_logits reports).
  static __device__ __forceinline__ void store_lse(const Params& params, int item, const ItemBlocks& blocks,
                                                   const QueryRow (&rows)[2], const float (&row_max)[2],
                                                   const float (&row_sum)[2], const float (&seen_max)[2],
                                                   int lane) {
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
        Problem::store_max_logit(params, item, blocks, row, empty ? -INFINITY : seen_max[i] * common::kLn2);
      }
    }
  }
};

}  // namespace openmla::kernels::heads_on_m

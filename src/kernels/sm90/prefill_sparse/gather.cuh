// Row gathers of the sm90 sparse prefill kernel (alternate_blocks_kernel.cuh):
// which kv row an index position names, and the copy of 16 whole rows (a
// token's Q) into the 128B-swizzled chunked layout of the heads-on-M tile.
// A row whose index is invalid (negative, >= s_kv, or past the token's
// topk_length) is zero-filled and never read; its column is masked by the
// validity bits the gather warpgroup publishes.
#pragma once

#include <cstdint>

#include "kernels/common/tma.cuh"
#include "kernels/sm90/prefill_sparse/config.h"

namespace openmla::kernels::prefill_sparse {

// Counted index positions of a query token: clamp(topk_length[s], 0, topk).
__device__ __forceinline__ int token_length(const KernelParams& params, int token) {
  if (params.topk_length == nullptr) return params.topk;
  return min(max(__ldg(params.topk_length + token), 0), params.topk);
}

template <class Traits>
struct RowGather {
  using Element = typename Traits::Element;
  static constexpr int kUnitsPerRow = Traits::kHeadDimQK * int(sizeof(Element)) / 16;      // 72 or 64
  static constexpr int kUnitsPerLane = (kUnitsPerRow + kWarpSize - 1) / kWarpSize;          // 3 or 2
  static constexpr uint32_t kChunkBytes = uint32_t(Traits::kChunkElems) * sizeof(Element);  // 8 KB
  static constexpr uint32_t kFullMask = 0xffffffffu;

  // Element offset of index `index` in kv, or -1 when the row is not to be read.
  static __device__ __forceinline__ int64_t row_offset(const KernelParams& params, int32_t index) {
    return index >= 0 && index < params.s_kv ? int64_t(index) * params.kv_stride_s : -1;
  }

  // Index of row `row` of block `block` of token `token` (length: its counted positions), or -1.
  static __device__ __forceinline__ int32_t block_index(const KernelParams& params, int token, int length, int block,
                                                        int row) {
    const int pos = block * BLOCK_N + row;
    return pos < length ? __ldg(params.indices + token * params.indices_stride_s + pos) : -1;
  }

  // Copy 16 whole rows into the 128B-swizzled chunked layout of a buffer or of Q:
  // row r's unit u (16 bytes) lands in chunk u / 8 at r * 128 + ((u % 8) ^ (r & 7)) * 16.
  // lane_offset: lane l < 16 holds row first_row + l's element offset (-1: zero-fill).
  static __device__ __forceinline__ void copy_rows(const uint16_t* base, int64_t lane_offset, uint32_t dst_base,
                                                   int first_row, int lane) {
    const uint32_t lane_chunk = uint32_t(lane / 8) * kChunkBytes;
    const uint32_t lane_unit = uint32_t(lane % 8);
#pragma unroll 4
    for (int j = 0; j < kRowsPerProducerWarp; ++j) {
      const int64_t offset = __shfl_sync(kFullMask, lane_offset, j);
      const bool valid = offset >= 0;
      const int row = first_row + j;
      const uint16_t* src = base + (valid ? offset : 0) + 8 * lane;  // never read when invalid
      const uint32_t dst = dst_base + lane_chunk + uint32_t(row) * Traits::kRowBytes +
                           ((lane_unit ^ uint32_t(row & 7)) << 4);
#pragma unroll
      for (int k = 0; k < kUnitsPerLane; ++k) {
        if (k * kWarpSize + lane < kUnitsPerRow) {
          common::cp_async_16_zfill(dst + uint32_t(k) * 4 * kChunkBytes, src + k * kWarpSize * 8, valid);
        }
      }
    }
  }
};

}  // namespace openmla::kernels::prefill_sparse

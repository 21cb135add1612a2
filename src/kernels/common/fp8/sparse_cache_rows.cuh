// One row of the 656-byte sparse FP8 cache through a warp: where a token
// lives, a lane's 16 codes and group scale, and their dequantised stores into
// the 128B-swizzled bf16 layout of the WGMMA tiles. Shared by the sparse
// decode producers and the sparse prefill FP8-cache gather.
// Params: any parameter block with kv_cache (bytes), kv_stride_page (bytes
// per page), page_size and num_tokens (num_pages * page_size).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/fp8/dequant.cuh"
#include "kernels/common/tma.cuh"
#include "openmla/types.h"

namespace openmla::kernels::common {

// Byte offset of a token in the cache, or -1 for any index outside it (never
// dereferenced then).
template <class Params>
__device__ __forceinline__ int64_t token_offset(const Params& params, int32_t index) {
  if (index < 0 || index >= params.num_tokens) return -1;
  const uint32_t page_size = uint32_t(params.page_size);
  uint32_t page, slot;
  if ((page_size & (page_size - 1)) == 0) {  // the usual page sizes: a shift, not a division
    page = uint32_t(index) >> (__ffs(int(page_size)) - 1);
    slot = uint32_t(index) & (page_size - 1);
  } else {
    page = uint32_t(index) / page_size;
    slot = uint32_t(index) - page * page_size;
  }
  return int64_t(page) * params.kv_stride_page + int64_t(slot) * kSparseFp8TokenBytes;
}

// Piece `lane` (0-31, a lane's position in a warp's row): 16 latent codes
// (dims 16 lane .. 16 lane + 15) and the scale of their 128-value group;
// zeros (scale 0) for an invalid token, so the dequantisation needs no branch.
template <class Params>
__device__ __forceinline__ void load_token(const Params& params, int64_t offset, int lane, uint4& codes,
                                           float& scale) {
  codes = make_uint4(0u, 0u, 0u, 0u);
  scale = 0.0f;
  if (offset >= 0) {
    const uint8_t* token = params.kv_cache + offset;  // [656]
    codes = __ldg(reinterpret_cast<const uint4*>(token) + lane);
    scale = __ldg(reinterpret_cast<const float*>(token + kSparseFp8ScaleOffset) +
                  lane / (kSparseFp8ValuesPerScale / 16));
  }
}

// Stores of a stage filler that only this CTA reads.
struct LocalStageWriter {
  __device__ __forceinline__ void store(uint32_t dst, const uint4& v) const { st_shared_v4(dst, v); }
};

// store_token without its branch, for a caller that tested a whole warp's
// scales at once: kTwoStep false needs scale <= kMaxSingleStepScale, true any
// scale up to 2^71 (two multiplies a word).
template <bool kTwoStep, class Writer>
__device__ __forceinline__ void store_token_straight(const Writer& writer, uint32_t row_addr, uint32_t unit_xor,
                                                     bool swap, const uint4& codes, float scale) {
  const uint32_t first_lo = swap ? codes.z : codes.x;
  const uint32_t first_hi = swap ? codes.w : codes.y;
  const uint32_t second_lo = swap ? codes.x : codes.z;
  const uint32_t second_hi = swap ? codes.y : codes.w;
  if constexpr (kTwoStep) {
    writer.store(row_addr + unit_xor, dequant_e4m3x8_to_bf16_two_step(first_lo, first_hi, scale));
    writer.store(row_addr + (unit_xor ^ 16u), dequant_e4m3x8_to_bf16_two_step(second_lo, second_hi, scale));
  } else {
    const __nv_bfloat162 factor = single_step_factor(scale);
    writer.store(row_addr + unit_xor, dequant_e4m3x8_to_bf16_single_step(first_lo, first_hi, factor));
    writer.store(row_addr + (unit_xor ^ 16u), dequant_e4m3x8_to_bf16_single_step(second_lo, second_hi, factor));
  }
}

// Lane l's 16 bf16 values of one token row: two 16-byte units of chunk
// l / 4. The 128B swizzle puts unit u of row r at u ^ (r & 7).
// NOTE: lanes with (l & 4) store their second unit first, so the 8 lanes of
// each quarter-warp phase hit 8 distinct 16-byte bank groups; the words are
// swapped before the dequantisation (4 selects instead of 8 after it).
// unit_xor: (first unit ^ (row & 7)) << 4 of this lane and row.
template <class Writer>
__device__ __forceinline__ void store_token(const Writer& writer, uint32_t row_addr, uint32_t unit_xor, bool swap,
                                            const uint4& codes, float scale) {
  const uint32_t first_lo = swap ? codes.z : codes.x;
  const uint32_t first_hi = swap ? codes.w : codes.y;
  const uint32_t second_lo = swap ? codes.x : codes.z;
  const uint32_t second_hi = swap ? codes.y : codes.w;
  uint4 first, second;
  if (scale <= kMaxSingleStepScale) {  // one test and one factor for both units
    const __nv_bfloat162 factor = single_step_factor(scale);
    first = dequant_e4m3x8_to_bf16_single_step(first_lo, first_hi, factor);
    second = dequant_e4m3x8_to_bf16_single_step(second_lo, second_hi, factor);
  } else {
    first = dequant_e4m3x8_to_bf16(first_lo, first_hi, scale);
    second = dequant_e4m3x8_to_bf16(second_lo, second_hi, scale);
  }
  writer.store(row_addr + unit_xor, first);
  writer.store(row_addr + (unit_xor ^ 16u), second);
}

}  // namespace openmla::kernels::common

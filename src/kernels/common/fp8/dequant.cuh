// FP8 e4m3 -> BF16 dequantisation on the integer and half-precision pipes,
// without the conversion unit.
//
// The bit trick: an e4m3 byte b = s eeee mmm, placed in a 16-bit lane as
//   bf16 bits = (b & 0x80) << 8 | (b & 0x7f) << 4
// is a bf16 whose value is exactly e4m3(b) * 2^-120, for normal e4m3 values
// (exponent field e -> bf16 exponent field e: 2^(e-127) vs 2^(e-7)) and for
// e4m3 subnormals and zero alike (both sides are then subnormal/zero with the
// same 2^-120 ratio). One bf16x2 multiply by scale * 2^120 then gives
// e4m3 * scale, exactly when the scale is a power of two (the 656-byte cache
// format's scales are: 2^ceil(log2(amax / 448))).
//
// Cost per 4 values: 2 PRMT + 2 SHF + 4 LOP3 + 2 HMUL2.BF16, versus 2 F2FP +
// 4 HADD2.F32 + 2 F2FP through the quarter-rate conversion pipe for the usual
// e4m3 -> f16 -> f32 -> bf16 chain.
//
// NOTE: e4m3 NaN codes (0x7f / 0xff) are not preserved (they decode as 480 *
// 2^-120 * f); the cache quantiser never writes them.
// PTX ISA: prmt https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-prmt
//          mul.bf16x2 https://docs.nvidia.com/cuda/parallel-thread-execution/#half-precision-floating-point-instructions-mul
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace openmla::kernels::common {

inline constexpr float kE4m3ToBf16Bias = 0x1p120f;  // undoes the 2^-120 of the bit trick
// Largest scale for which scale * 2^120 is a finite bf16 (bf16 max ~ 2^128).
inline constexpr float kMaxSingleStepScale = 0x1p7f;
// Two-step factors for larger scales: 2^64, then scale * 2^56.
inline constexpr float kTwoStepFirst = 0x1p64f;
inline constexpr float kTwoStepSecond = 0x1p56f;

// One 32-bit word of four e4m3 codes [b3 b2 b1 b0] -> two bf16x2 words
// (lo = {b0, b1}, hi = {b2, b3}, first value in the low half), each value
// being e4m3 * 2^-120.
__device__ __forceinline__ void e4m3x4_to_bf16x4_biased(uint32_t codes, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t kSignMask = 0x80008000u;
  constexpr uint32_t kMagnitudeMask = 0x07f007f0u;  // (b & 0x7f) << 4 in each 16-bit lane
  const uint32_t spread_lo = __byte_perm(codes, 0u, 0x1404);  // [b1 0 b0 0]
  const uint32_t spread_hi = __byte_perm(codes, 0u, 0x3424);  // [b3 0 b2 0]
  lo = (spread_lo & kSignMask) | ((spread_lo >> 4) & kMagnitudeMask);
  hi = (spread_hi & kSignMask) | ((spread_hi >> 4) & kMagnitudeMask);
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, __nv_bfloat162 b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a);
  x = __hmul2(x, b);
  return *reinterpret_cast<uint32_t*>(&x);
}

// Sixteen e4m3 codes times `scale` -> sixteen bf16 values (out[0..7] are
// bf16x2 words, in order). `scale` is the group's power-of-two scale.
__device__ __forceinline__ void dequant_e4m3x16_to_bf16(const uint4& codes, float scale, uint32_t (&out)[8]) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) e4m3x4_to_bf16x4_biased(words[i], out[2 * i], out[2 * i + 1]);
  if (scale <= kMaxSingleStepScale) {
    const __nv_bfloat162 factor = __float2bfloat162_rn(scale * kE4m3ToBf16Bias);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = bf16x2_mul(out[i], factor);
  } else {
    // NOTE: rare (values above 448 * 128); exact for scales up to 2^71.
    const __nv_bfloat162 first = __float2bfloat162_rn(kTwoStepFirst);
    const __nv_bfloat162 second = __float2bfloat162_rn(scale * kTwoStepSecond);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = bf16x2_mul(bf16x2_mul(out[i], first), second);
  }
}

}  // namespace openmla::kernels::common

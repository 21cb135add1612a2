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
// Two lanes at a time: PRMT in sign-extension mode widens two bytes to int16
// lanes, a 32-bit shift by 4 puts b's low 7 bits at [10:4] and a sign copy at
// bit 15, and one AND with 0x87f0 per lane clears the rest (including the 4
// bits the shift carries from the low lane into the high one). Cost per 4
// values: 2 PRMT + 2 SHL + 2 LOP3 + 2 HMUL2.BF16, all full-rate, versus the
// quarter-rate conversion chain e4m3 -> f16 -> f32 -> bf16.
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

// PRMT with the selector's sign-replication bit honoured (__byte_perm keeps
// only the low 3 bits of each selector nibble).
template <uint32_t kSelector>
__device__ __forceinline__ uint32_t prmt_sign(uint32_t x) {
  uint32_t d;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(x), "n"(kSelector));
  return d;
}

// One 32-bit word of four e4m3 codes [b3 b2 b1 b0] -> two bf16x2 words
// (lo = {b0, b1}, hi = {b2, b3}, first value in the low half), each value
// being e4m3 * 2^-120.
__device__ __forceinline__ void e4m3x4_to_bf16x4_biased(uint32_t codes, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t kLanesLo = 0x9180u;  // bytes {b0, sign(b0), b1, sign(b1)}
  constexpr uint32_t kLanesHi = 0xb3a2u;  // bytes {b2, sign(b2), b3, sign(b3)}
  constexpr uint32_t kKeepMask = 0x87f087f0u;  // sign at bit 15, b & 0x7f at [10:4], per lane
  lo = (prmt_sign<kLanesLo>(codes) << 4) & kKeepMask;
  hi = (prmt_sign<kLanesHi>(codes) << 4) & kKeepMask;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, __nv_bfloat162 b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a);
  x = __hmul2(x, b);
  return *reinterpret_cast<uint32_t*>(&x);
}

// The one bf16x2 factor of a scale <= kMaxSingleStepScale.
__device__ __forceinline__ __nv_bfloat162 single_step_factor(float scale) {
  return __float2bfloat162_rn(scale * kE4m3ToBf16Bias);
}

// Eight e4m3 codes (two words) -> four bf16x2 words of e4m3 * 2^-120.
__device__ __forceinline__ void e4m3x8_to_bf16x8_biased(uint32_t codes_lo, uint32_t codes_hi, uint32_t (&w)[4]) {
  e4m3x4_to_bf16x4_biased(codes_lo, w[0], w[1]);
  e4m3x4_to_bf16x4_biased(codes_hi, w[2], w[3]);
}

// Eight e4m3 codes (two words) times a single-step factor -> eight bf16
// values, one 16-byte unit (out.x = values 0-1, ...). Branch-free, so a loop
// over units is one basic block the scheduler can overlap.
__device__ __forceinline__ uint4 dequant_e4m3x8_to_bf16_single_step(uint32_t codes_lo, uint32_t codes_hi,
                                                                    __nv_bfloat162 factor) {
  uint32_t w[4];
  e4m3x8_to_bf16x8_biased(codes_lo, codes_hi, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = bf16x2_mul(w[i], factor);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Eight e4m3 codes times any power-of-two `scale` (scale 0 gives zeros).
__device__ __forceinline__ uint4 dequant_e4m3x8_to_bf16(uint32_t codes_lo, uint32_t codes_hi, float scale) {
  if (scale <= kMaxSingleStepScale) {
    return dequant_e4m3x8_to_bf16_single_step(codes_lo, codes_hi, single_step_factor(scale));
  }
  // NOTE: rare (values above 448 * 128); exact for scales up to 2^71.
  uint32_t w[4];
  e4m3x8_to_bf16x8_biased(codes_lo, codes_hi, w);
  const __nv_bfloat162 first = __float2bfloat162_rn(kTwoStepFirst);
  const __nv_bfloat162 second = __float2bfloat162_rn(scale * kTwoStepSecond);
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = bf16x2_mul(bf16x2_mul(w[i], first), second);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace openmla::kernels::common

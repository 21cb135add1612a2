// Host conversions for the low-precision formats (see openmla/fp8.h):
// BF16/FP16 <-> float with round-to-nearest-even, float8_e4m3fn encode/decode,
// per-tensor FP8 quantisation and the 656-byte sparse FP8 token.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "openmla/fp8.h"
#include "openmla/types.h"

namespace openmla {
namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Round half to even on an exactly representable double (|x| < 2^52), without
// depending on the floating-point environment's rounding mode.
double round_half_even(double x) {
  const double lower = std::floor(x);
  const double diff = x - lower;
  if (diff > 0.5) return lower + 1.0;
  if (diff < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0.0 ? lower : lower + 1.0;
}

// e4m3fn field layout.
constexpr int kE4m3MantissaBits = 3;
constexpr int kE4m3Bias = 7;
constexpr int kE4m3MinNormalExp = 1 - kE4m3Bias;                          // 2^-6
constexpr int kE4m3SubnormalExp = kE4m3MinNormalExp - kE4m3MantissaBits;  // 2^-9 per step
constexpr uint8_t kE4m3NaN = 0x7f;
constexpr uint8_t kE4m3MaxBits = 0x7e;  // 1.75 * 2^8 = 448

// FP16 field layout.
constexpr int kFp16Bias = 15;
constexpr int kFp16MantissaBits = 10;

}  // namespace

// ---------------------------------------------------------------------------
// BF16
// ---------------------------------------------------------------------------
uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = float_bits(value);
  if (std::isnan(value)) {
    // Keep the sign and force a quiet-NaN mantissa bit so truncation stays NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // RNE on the 16 dropped bits; a carry into the exponent gives inf on overflow.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

// ---------------------------------------------------------------------------
// FP16
// ---------------------------------------------------------------------------
uint16_t float_to_fp16_bits(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) return static_cast<uint16_t>(sign | 0x7e00u);
  const float magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return static_cast<uint16_t>(sign | 0x7c00u);

  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
  if (exponent < 1 - kFp16Bias) {
    // Subnormal (or zero) result: count units of 2^-24. The scaling is exact and
    // a result of 1024 is the bit pattern of the smallest normal.
    const double units = round_half_even(static_cast<double>(magnitude) * std::ldexp(1.0, 24));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  // Normal: keep 10 of the 23 mantissa bits, RNE on the other 13. A mantissa
  // carry moves into the exponent field; past the top exponent that is inf.
  const uint32_t mantissa = bits & 0x7fffffu;
  uint32_t half = (static_cast<uint32_t>(exponent + kFp16Bias) << kFp16MantissaBits) | (mantissa >> 13);
  const uint32_t dropped = mantissa & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;
  if (half >= 0x7c00u) half = 0x7c00u;  // exponent too large even before rounding
  return static_cast<uint16_t>(sign | half);
}

float fp16_bits_to_float(uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> kFp16MantissaBits) & 0x1f;
  const int mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + 1024), exponent - kFp16Bias - 10);
  }
  return negative ? -magnitude : magnitude;
}

// ---------------------------------------------------------------------------
// float8_e4m3fn
// ---------------------------------------------------------------------------
uint8_t float_to_e4m3_bits(float value) {
  if (std::isnan(value)) return kE4m3NaN;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const double magnitude = std::fabs(static_cast<double>(value));
  // NOTE: e4m3fn has no inf; everything at or above the largest finite value
  // (including +-inf) saturates to it.
  if (magnitude >= kE4m3Max) return static_cast<uint8_t>(sign | kE4m3MaxBits);

  if (magnitude < std::ldexp(1.0, kE4m3MinNormalExp)) {
    // Subnormal: units of 2^-9; 8 units is the smallest normal's bit pattern.
    const double units = round_half_even(std::ldexp(magnitude, -kE4m3SubnormalExp));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
  }
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  int unbiased = exponent - 1;       // magnitude in [2^unbiased, 2^(unbiased+1))
  // Significand scaled to [8, 16): 3 mantissa bits above the binary point.
  double significand = round_half_even(std::ldexp(magnitude, kE4m3MantissaBits - unbiased));
  if (significand == 16.0) {  // rounded up into the next binade
    significand = 8.0;
    ++unbiased;
  }
  // magnitude < 448 keeps the result at most 0x7e, never the NaN code.
  const int code = ((unbiased + kE4m3Bias) << kE4m3MantissaBits) | (static_cast<int>(significand) - 8);
  return static_cast<uint8_t>(sign | code);
}

float e4m3_bits_to_float(uint8_t bits) {
  if ((bits & 0x7f) == kE4m3NaN) return NAN;
  const bool negative = (bits & 0x80) != 0;
  const int exponent = (bits >> kE4m3MantissaBits) & 0xf;
  const int mantissa = bits & 0x7;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), kE4m3SubnormalExp)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - kE4m3Bias - 3);
  return negative ? -magnitude : magnitude;
}

// ---------------------------------------------------------------------------
// Per-tensor FP8
// ---------------------------------------------------------------------------
float quantize_e4m3_per_tensor(const float* values /*[n]*/, size_t n, uint8_t* out /*[n]*/) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(values[i]));  // fmax skips NaN
  const float scale = amax == 0.0f ? 1.0f : amax / kE4m3Max;
  for (size_t i = 0; i < n; ++i) out[i] = float_to_e4m3_bits(values[i] / scale);
  return scale;
}

// ---------------------------------------------------------------------------
// Sparse 656-byte token
// ---------------------------------------------------------------------------
namespace {

// 2^ceil(log2(amax / 448)), computed exactly: amax / 448 in double is exact
// whenever it is a power of two, and can never round onto one otherwise.
float sparse_group_scale(float amax) {
  if (!(amax > 0.0f)) return 1.0f;  // amax == 0 (or NaN-only group)
  int exponent;
  const double fraction = std::frexp(static_cast<double>(amax) / kE4m3Max, &exponent);
  // ratio = fraction * 2^exponent with fraction in [0.5, 1).
  const int ceil_log2 = fraction == 0.5 ? exponent - 1 : exponent;
  return std::ldexp(1.0f, ceil_log2);
}

}  // namespace

void quantize_sparse_fp8_token(const float* row /*[576]*/, uint8_t* token /*[656]*/) {
  for (int group = 0; group < kSparseFp8NumScales; ++group) {
    const float* values = row + group * kSparseFp8ValuesPerScale;  // [128]
    float amax = 0.0f;
    for (int i = 0; i < kSparseFp8ValuesPerScale; ++i) amax = std::fmax(amax, std::fabs(values[i]));
    const float scale = sparse_group_scale(amax);
    for (int i = 0; i < kSparseFp8ValuesPerScale; ++i) {
      token[group * kSparseFp8ValuesPerScale + i] = float_to_e4m3_bits(values[i] / scale);
    }
    std::memcpy(token + kSparseFp8ScaleOffset + group * sizeof(float), &scale, sizeof(float));
  }
  for (int i = 0; i < kHeadDimRope; ++i) {
    const uint16_t bits = float_to_bf16_bits(row[kHeadDimLatent + i]);
    std::memcpy(token + kSparseFp8RopeOffset + i * sizeof(uint16_t), &bits, sizeof(bits));
  }
}

void dequantize_sparse_fp8_token(const uint8_t* token /*[656]*/, float* row /*[576]*/) {
  float scales[kSparseFp8NumScales];
  std::memcpy(scales, token + kSparseFp8ScaleOffset, sizeof(scales));
  for (int i = 0; i < kHeadDimLatent; ++i) {
    row[i] = e4m3_bits_to_float(token[i]) * scales[i / kSparseFp8ValuesPerScale];
  }
  for (int i = 0; i < kHeadDimRope; ++i) {
    uint16_t bits;
    std::memcpy(&bits, token + kSparseFp8RopeOffset + i * sizeof(uint16_t), sizeof(bits));
    row[kHeadDimLatent + i] = bf16_bits_to_float(bits);
  }
}

}  // namespace openmla

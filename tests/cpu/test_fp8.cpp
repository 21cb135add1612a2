// BF16/FP16/e4m3 conversions, per-tensor FP8 and the 656-byte sparse token,
// checked against values worked out by hand and against brute-force
// nearest-value searches (independent of the encoders' arithmetic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "openmla/fp8.h"
#include "openmla/types.h"

namespace openmla {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// e4m3fn value from the format definition (bias 7, 3 mantissa bits, no inf).
double e4m3_by_definition(uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 0xf, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::nan("");
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa / 8.0, -6) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// Brute force: the finite e4m3 code nearest to `value` (ties to the even
// code), after saturation to +-448.
uint8_t e4m3_nearest(float value) {
  if (std::isnan(value)) return 0x7f;
  const double target = std::clamp(static_cast<double>(value), -448.0, 448.0);
  int best = -1;
  double best_err = 0.0;
  for (int code = 0; code < 256; ++code) {
    const double v = e4m3_by_definition(static_cast<uint8_t>(code));
    if (std::isnan(v)) continue;
    if ((code & 0x80) != (std::signbit(value) ? 0x80 : 0)) continue;  // keep the sign (and -0)
    const double err = std::fabs(v - target);
    if (best < 0 || err < best_err || (err == best_err && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// ---------------------------------------------------------------------------
// e4m3
// ---------------------------------------------------------------------------
TEST(Fp8E4m3, DecodeEveryCodeMatchesDefinitionAndRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    const float value = e4m3_bits_to_float(c);
    const double want = e4m3_by_definition(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(value)) << "code " << code;
      EXPECT_EQ(float_to_e4m3_bits(value), 0x7f) << "code " << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(value), want) << "code " << code;
    EXPECT_EQ(float_to_e4m3_bits(value), c) << "code " << code;  // includes -0 -> 0x80
  }
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0xfe), -448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
}

TEST(Fp8E4m3, EncodeExactValuesTiesSaturationNaN) {
  // exact
  EXPECT_EQ(float_to_e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3_bits(1.125f), 0x39);
  EXPECT_EQ(float_to_e4m3_bits(-2.0f), 0xc0);
  EXPECT_EQ(float_to_e4m3_bits(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(-0.0f), 0x80);
  // ties go to the even mantissa
  EXPECT_EQ(float_to_e4m3_bits(1.0625f), 0x38);  // 1 | 1.125 -> 1
  EXPECT_EQ(float_to_e4m3_bits(1.1875f), 0x3a);  // 1.125 | 1.25 -> 1.25
  EXPECT_EQ(float_to_e4m3_bits(1.9375f), 0x40);  // 1.875 | 2 -> 2 (next binade)
  EXPECT_EQ(float_to_e4m3_bits(-1.0625f), 0xb8);
  EXPECT_EQ(float_to_e4m3_bits(std::nextafter(1.0625f, 2.0f)), 0x39);  // just above a tie
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);          // 0 | 2^-9 -> 0
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.5f, -9)), 0x02);           // 1 | 2 units -> 2
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(2.5f, -9)), 0x02);           // 2 | 3 units -> 2
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(7.5f, -9)), 0x08);           // largest subnormal | smallest normal
  EXPECT_EQ(float_to_e4m3_bits(1e-10f), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(-1e-10f), 0x80);
  // saturation: no inf in e4m3fn
  EXPECT_EQ(float_to_e4m3_bits(449.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(464.0f), 0x7e);  // the tie above 448 must not become NaN
  EXPECT_EQ(float_to_e4m3_bits(1e6f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(-1e6f), 0xfe);
  EXPECT_EQ(float_to_e4m3_bits(kInf), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(-kInf), 0xfe);
  // NaN
  EXPECT_EQ(float_to_e4m3_bits(kNaN), 0x7f);
  EXPECT_EQ(float_to_e4m3_bits(-kNaN), 0x7f);
}

TEST(Fp8E4m3, EncodeMatchesBruteForceNearest) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-14, 10);
  for (int i = 0; i < 40000; ++i) {
    const float value = std::ldexp(mantissa(rng), exponent(rng));
    ASSERT_EQ(float_to_e4m3_bits(value), e4m3_nearest(value)) << "value " << value;
  }
  // every midpoint between neighbouring codes (the tie cases)
  for (int code = 0; code < 0x7e; ++code) {
    const float mid = static_cast<float>((e4m3_by_definition(code) + e4m3_by_definition(code + 1)) / 2);
    ASSERT_EQ(float_to_e4m3_bits(mid), e4m3_nearest(mid)) << "midpoint above code " << code;
    ASSERT_EQ(float_to_e4m3_bits(-mid), e4m3_nearest(-mid)) << "midpoint below code " << (code | 0x80);
  }
}

// ---------------------------------------------------------------------------
// BF16 / FP16
// ---------------------------------------------------------------------------
// The encoded value must be a nearest representable value, ties to even.
template <class Decode>
void expect_nearest_even(float value, uint16_t code, Decode decode, const char* what) {
  const double x = value;
  const double got = decode(code);
  const uint16_t up = static_cast<uint16_t>(code + 1), down = static_cast<uint16_t>(code - 1);
  for (uint16_t neighbour : {up, down}) {
    if ((neighbour ^ code) & 0x8000) continue;  // stay on one side of zero
    const double other = decode(neighbour);
    if (std::isnan(other)) continue;
    const double err = std::fabs(got - x), other_err = std::fabs(other - x);
    ASSERT_TRUE(err < other_err || (err == other_err && (code & 1) == 0))
        << what << " value " << value << " -> code " << code << " (" << got << "), neighbour " << neighbour
        << " (" << other << ") is nearer or an even tie";
  }
}

TEST(Fp8Bf16, RoundToNearestEvenCases) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f808001)), 0x3f81);  // just above a tie
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f807fff)), 0x3f80);  // just below a tie
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x00018000)), 0x0002);  // subnormal tie, even above
  EXPECT_EQ(float_to_bf16_bits(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-kInf), 0xff80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // overflow -> inf
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(kNaN))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(from_bits(0x7f800001)))));  // low-payload NaN
  EXPECT_EQ(bf16_bits_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(0xc0a0), -5.0f);
}

TEST(Fp8Bf16, EveryCodeRoundTripsAndRandomValuesRoundToNearest) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const float value = bf16_bits_to_float(static_cast<uint16_t>(code));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(value))));
    } else {
      ASSERT_EQ(float_to_bf16_bits(value), code);
    }
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float value = from_bits(bits);
    if (!std::isfinite(value) || std::fabs(value) > 3.3e38f) continue;
    expect_nearest_even(value, float_to_bf16_bits(value), bf16_bits_to_float, "bf16");
  }
}

TEST(Fp8Fp16, RoundToNearestEvenCases) {
  EXPECT_EQ(float_to_fp16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even below
  EXPECT_EQ(float_to_fp16_bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, even above
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7bff);                      // max
  EXPECT_EQ(float_to_fp16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7c00);  // tie above max -> inf
  EXPECT_EQ(float_to_fp16_bits(1e6f), 0x7c00);
  EXPECT_EQ(float_to_fp16_bits(-kInf), 0xfc00);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> 0
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.5f, -24)), 0x0002);  // tie -> 2
  EXPECT_EQ(float_to_fp16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1023.5f, -24)), 0x0400);  // rounds into the normals
  EXPECT_EQ(float_to_fp16_bits(1e-10f), 0x0000);
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(kNaN))));
  EXPECT_EQ(fp16_bits_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_bits_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_bits_to_float(0x7c00), kInf);
  EXPECT_EQ(fp16_bits_to_float(0xc500), -5.0f);
}

TEST(Fp8Fp16, EveryCodeRoundTripsAndRandomValuesRoundToNearest) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const float value = fp16_bits_to_float(static_cast<uint16_t>(code));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(value))));
    } else {
      ASSERT_EQ(float_to_fp16_bits(value), code);
    }
  }
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-26, 15);
  for (int i = 0; i < 20000; ++i) {
    const float value = std::ldexp(mantissa(rng), exponent(rng));
    if (std::fabs(value) >= 65504.0f) continue;
    expect_nearest_even(value, float_to_fp16_bits(value), fp16_bits_to_float, "fp16");
  }
}

// ---------------------------------------------------------------------------
// Per-tensor FP8
// ---------------------------------------------------------------------------
TEST(Fp8PerTensor, ScaleIsAmaxOver448AndErrorIsBounded) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(4099);
  for (float& v : values) v = normal(rng);
  values[1234] = -20.0f;  // the amax, negative on purpose
  std::vector<uint8_t> codes(values.size());
  const float scale = quantize_e4m3_per_tensor(values.data(), values.size(), codes.data());
  EXPECT_EQ(scale, 20.0f / 448.0f);
  EXPECT_EQ(codes[1234], 0xfe);  // -448
  for (size_t i = 0; i < values.size(); ++i) {
    const double back = static_cast<double>(e4m3_bits_to_float(codes[i])) * scale;
    // Half an ulp: 2^-4 relative for normals, 2^-10 * scale in the subnormal range.
    const double bound = std::max(std::fabs(values[i]) * 0x1p-4, 0x1p-10 * scale) * (1 + 1e-6);
    ASSERT_LE(std::fabs(back - values[i]), bound) << "index " << i;
  }

  std::vector<float> zeros(10, 0.0f);
  std::vector<uint8_t> zero_codes(zeros.size(), 0xaa);
  EXPECT_EQ(quantize_e4m3_per_tensor(zeros.data(), zeros.size(), zero_codes.data()), 1.0f);
  for (uint8_t c : zero_codes) EXPECT_EQ(c, 0x00);
}

// ---------------------------------------------------------------------------
// Sparse 656-byte token
// ---------------------------------------------------------------------------
float token_scale(const uint8_t* token, int group) {
  float scale;
  std::memcpy(&scale, token + kSparseFp8ScaleOffset + 4 * group, 4);
  return scale;
}

TEST(Fp8SparseToken, BytesLayoutExactlyAsSpecified) {
  std::vector<float> row(kHeadDimQK, 0.0f);
  // group 0: amax 448 -> scale 1; group 1: amax 449 -> scale 2;
  // group 2: amax 1 -> scale 2^ceil(log2(1/448)) = 2^-8; group 3: all zero -> scale 1.
  row[0] = 448.0f;
  row[1] = -1.0f;
  row[2] = 1.0625f;  // a tie: rounds to even 1.0
  row[128] = -449.0f;
  row[129] = 3.0f;
  row[256] = 1.0f;
  row[257] = -0.5f;
  for (int i = 0; i < kHeadDimRope; ++i) row[kHeadDimLatent + i] = static_cast<float>(i) - 31.5f;
  row[kHeadDimLatent + 0] = 1.0f;
  row[kHeadDimLatent + 1] = 1.00390625f;  // 1 + 2^-8: bf16 tie, rounds to 1.0

  std::vector<uint8_t> token(kSparseFp8TokenBytes, 0xcd);
  quantize_sparse_fp8_token(row.data(), token.data());

  EXPECT_EQ(token_scale(token.data(), 0), 1.0f);
  EXPECT_EQ(token_scale(token.data(), 1), 2.0f);
  EXPECT_EQ(token_scale(token.data(), 2), std::ldexp(1.0f, -8));
  EXPECT_EQ(token_scale(token.data(), 3), 1.0f);
  // little-endian fp32 bytes of 2.0 = 0x40000000 at 516..519
  EXPECT_EQ(token[516], 0x00);
  EXPECT_EQ(token[519], 0x40);

  EXPECT_EQ(token[0], 0x7e);  // 448 / 1
  EXPECT_EQ(token[1], 0xb8);  // -1
  EXPECT_EQ(token[2], 0x38);  // 1.0625 -> 1
  EXPECT_EQ(token[3], 0x00);
  EXPECT_EQ(token[128], 0xf6);  // -449 / 2 = -224.5 -> -224 = -1.75 * 2^7 (exponent field 14, mantissa 6)
  EXPECT_EQ(token[129], 0x3c);  // 3 / 2 = 1.5 = 1.5 * 2^0 (field 7, mantissa 4)
  EXPECT_EQ(token[256], 0x78);  // 1 / 2^-8 = 256 = 2^8 (field 15, mantissa 0)
  EXPECT_EQ(token[257], 0xf0);  // -0.5 / 2^-8 = -128 = -2^7 (field 14, mantissa 0)
  for (int i = 384; i < 512; ++i) EXPECT_EQ(token[i], 0x00) << i;

  uint16_t rope0, rope1, rope2;
  std::memcpy(&rope0, token.data() + kSparseFp8RopeOffset, 2);
  std::memcpy(&rope1, token.data() + kSparseFp8RopeOffset + 2, 2);
  std::memcpy(&rope2, token.data() + kSparseFp8RopeOffset + 4, 2);
  EXPECT_EQ(rope0, 0x3f80);
  EXPECT_EQ(rope1, 0x3f80);
  EXPECT_EQ(rope2, float_to_bf16_bits(2.0f - 31.5f));
  EXPECT_EQ(token[kSparseFp8RopeOffset], 0x80);  // little-endian bf16 1.0
  EXPECT_EQ(token[kSparseFp8RopeOffset + 1], 0x3f);
}

TEST(Fp8SparseToken, RoundTripErrorAndPowerOfTwoScales) {
  std::mt19937_64 rng(19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude_exp(-20, 12);
  std::vector<float> row(kHeadDimQK), back(kHeadDimQK);
  std::vector<uint8_t> token(kSparseFp8TokenBytes);
  for (int trial = 0; trial < 200; ++trial) {
    for (int g = 0; g < kSparseFp8NumScales; ++g) {
      const float magnitude = std::ldexp(1.0f, magnitude_exp(rng));
      for (int i = 0; i < kSparseFp8ValuesPerScale; ++i) row[g * 128 + i] = magnitude * normal(rng);
    }
    for (int i = 0; i < kHeadDimRope; ++i) row[kHeadDimLatent + i] = normal(rng) * 10.0f;
    quantize_sparse_fp8_token(row.data(), token.data());
    dequantize_sparse_fp8_token(token.data(), back.data());

    for (int g = 0; g < kSparseFp8NumScales; ++g) {
      double amax = 0.0, err2 = 0.0, norm2 = 0.0, max_err = 0.0;
      for (int i = g * 128; i < g * 128 + 128; ++i) {
        amax = std::max(amax, std::fabs(static_cast<double>(row[i])));
        const double err = static_cast<double>(back[i]) - row[i];
        err2 += err * err;
        norm2 += static_cast<double>(row[i]) * row[i];
        max_err = std::max(max_err, std::fabs(err));
      }
      const float scale = token_scale(token.data(), g);
      int exponent;
      ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << "scale " << scale << " is not a power of two";
      // scale = 2^ceil(log2(amax / 448)): amax / scale in (224, 448].
      ASSERT_LE(amax / scale, 448.0);
      ASSERT_GT(amax / scale, 224.0);
      ASSERT_LE(max_err, amax * 0x1p-4) << "trial " << trial << " group " << g;
      // Uniform rounding error within +-2^-4 relative has an RMS of at most 2^-4 / sqrt(3).
      ASSERT_LE(std::sqrt(err2 / norm2), 0.04) << "trial " << trial << " group " << g;
    }
    for (int i = kHeadDimLatent; i < kHeadDimQK; ++i) {
      ASSERT_EQ(back[i], bf16_bits_to_float(float_to_bf16_bits(row[i])));
    }
  }
}

TEST(Fp8SparseToken, ZeroRowHasUnitScalesAndZeroCodes) {
  std::vector<float> row(kHeadDimQK, 0.0f), back(kHeadDimQK, 1.0f);
  std::vector<uint8_t> token(kSparseFp8TokenBytes, 0xcd);
  quantize_sparse_fp8_token(row.data(), token.data());
  for (int g = 0; g < kSparseFp8NumScales; ++g) EXPECT_EQ(token_scale(token.data(), g), 1.0f);
  for (int i = 0; i < kHeadDimLatent; ++i) EXPECT_EQ(token[i], 0x00);
  dequantize_sparse_fp8_token(token.data(), back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace openmla

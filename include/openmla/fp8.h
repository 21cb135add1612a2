// Host helpers for the low-precision formats: BF16/FP16 <-> float and the two
// FP8 layouts (per-tensor e4m3, and the 656-byte sparse token). Used by the
// CPU reference, the tests and callers that prepare caches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace openmla {

// Round-to-nearest-even conversions; NaN stays NaN, overflow goes to inf.
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(uint16_t bits);

// float8_e4m3fn: finite-only (no inf), max 448, one NaN pattern (0x7f/0xff).
// Encoding saturates to +-448; NaN encodes to 0x7f.
inline constexpr float kE4m3Max = 448.0f;
uint8_t float_to_e4m3_bits(float value);
float e4m3_bits_to_float(uint8_t bits);

// Per-tensor FP8: scale = amax / 448 (1 when amax == 0), value = e4m3 * scale.
// Returns the scale; writes n e4m3 bytes.
float quantize_e4m3_per_tensor(const float* values, size_t n, uint8_t* out);

// Sparse FP8 token (656 bytes, see types.h): quantise a 576-wide row (512
// latent values per 128-wide group with a power-of-two scale
// 2^ceil(log2(amax / 448)), 64 RoPE values kept as bf16), and back.
void quantize_sparse_fp8_token(const float* row /*[576]*/, uint8_t* token /*[656]*/);
void dequantize_sparse_fp8_token(const uint8_t* token /*[656]*/, float* row /*[576]*/);

}  // namespace openmla

// Random MLA inputs shared by the CPU and GPU tests (header-only).
//
// For each family: a config (shape knobs), an inputs struct that owns host
// buffers laid out exactly as the kernels read them, and make_*_inputs(config,
// seed) that fills them. params() returns the family's params struct pointing
// at the host buffers (GPU tests copy the buffers and swap the pointers).
//
// What the builders do on purpose, because kernels have got each wrong:
//   - block tables come from a random permutation of pages; entries past a
//     sequence's last page hold kGarbagePage (never dereference them);
//   - unused cache slots (tokens >= seqlen in the last page, whole unused
//     pages, stride padding) are NaN: reading one leaks NaN into the output;
//   - outputs (out, lse, max_logits) start as NaN, so unwritten rows show;
//   - sparse index lists mix -1, out-of-range (>= num tokens, and negative
//     other than -1) and valid indices; valid ones point only at live tokens,
//     and positions past topk_length point at poisoned ones.
// Plus the comparison helpers (rel-L2, LSE with identical inf/NaN positions).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "openmla/fp8.h"
#include "openmla/params.h"
#include "openmla/types.h"

namespace openmla::test {

// ---------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------
inline constexpr int32_t kGarbagePage = 2147480000;  // block-table filler past the last page
inline constexpr uint16_t kBf16NaN = 0x7fc0;
inline constexpr uint16_t kFp16NaN = 0x7e00;
inline constexpr uint8_t kE4m3NaN = 0x7f;
inline constexpr uint32_t kFloatNaNBits = 0x7fc00000u;
inline constexpr size_t kBufferAlignment = 256;  // as a cudaMalloc'd buffer

// ---------------------------------------------------------------------------
// Aligned host buffers: validation wants 16-byte aligned tensors.
// ---------------------------------------------------------------------------
template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(
        ::operator new(std::max<size_t>(n, 1) * sizeof(T), std::align_val_t(kBufferAlignment)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(kBufferAlignment)); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};
template <class T>
using HostVector = std::vector<T, AlignedAllocator<T>>;

// ---------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(engine_); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine_); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine_); }  // [lo, hi]
  bool bernoulli(double p) { return std::bernoulli_distribution(p)(engine_); }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

// ---------------------------------------------------------------------------
// Element helpers
// ---------------------------------------------------------------------------
inline void store_nan(DType dtype, void* base, int64_t index) {
  switch (dtype) {
    case DType::kBF16: static_cast<uint16_t*>(base)[index] = kBf16NaN; break;
    case DType::kFP16: static_cast<uint16_t*>(base)[index] = kFp16NaN; break;
    case DType::kFP8E4M3: static_cast<uint8_t*>(base)[index] = kE4m3NaN; break;
    default: static_cast<float*>(base)[index] = std::numeric_limits<float>::quiet_NaN(); break;
  }
}

// Fill a whole byte buffer of `dtype` elements with NaN.
inline void fill_nan(DType dtype, HostVector<uint8_t>& bytes) {
  const int64_t count = static_cast<int64_t>(bytes.size() / dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) store_nan(dtype, bytes.data(), i);
}

// bf16/fp16 value (already rounded by the caller's choice of dtype).
inline void store_half(DType dtype, void* base, int64_t index, float value) {
  static_cast<uint16_t*>(base)[index] =
      dtype == DType::kFP16 ? float_to_fp16_bits(value) : float_to_bf16_bits(value);
}

inline float load_value(DType dtype, const void* base, int64_t index) {
  switch (dtype) {
    case DType::kBF16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP16: return fp16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP8E4M3: return e4m3_bits_to_float(static_cast<const uint8_t*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

// Stride padding in elements for `pad_bytes` extra bytes (a multiple of 16).
inline int64_t pad_elements(int pad_bytes, DType dtype) {
  return pad_bytes / static_cast<int64_t>(dtype_size(dtype));
}

// ---------------------------------------------------------------------------
// Dense decode
// ---------------------------------------------------------------------------
struct DenseDecodeConfig {
  int batch = 2;
  int s_q = 1;
  int h_q = 16;
  int h_kv = 1;
  int d_qk = kHeadDimQK;  // 576 or 512
  int page_size = 64;
  DType dtype = DType::kBF16;  // q and kv; out is bf16 for fp8
  bool causal = false;
  std::vector<int32_t> seqlens;  // [batch]; empty: random in [0, max_seqlen], with a 0 and a 1 mixed in
  int max_seqlen = 300;
  int extra_pages = 2;          // whole pages no request uses (poisoned)
  int extra_table_columns = 1;  // block-table columns past the longest request (garbage)
  int stride_pad_bytes = 0;     // extra bytes on every strided dim (multiple of 16)
  float softmax_scale = 0.0f;   // 0: 1 / sqrt(d_qk)
  // fp8: > 0 fixes the tensor's dequant scale (e.g. 2^-8, 2^8): codes are then
  // N(0, kFixedScaleCodeStd) and values codes * scale; 0 derives it from amax.
  float fp8_q_scale = 0.0f;
  float fp8_kv_scale = 0.0f;
};

// Spread of the e4m3 codes under a fixed scale: well inside the 448 range, and
// wide enough to use every exponent from subnormal up.
inline constexpr float kFixedScaleCodeStd = 2.0f;

struct DenseDecodeInputs {
  DenseDecodeShape shape;
  HostVector<uint8_t> q;             // [batch, s_q, h_q, d_qk] elements of q_dtype, strided
  HostVector<uint8_t> kv_cache;      // [num_pages, page_size, h_kv, d_qk] elements of kv_dtype, strided
  HostVector<int32_t> block_table;   // [batch, max_pages_per_seq]
  HostVector<int32_t> seqlens;       // [batch]
  HostVector<uint8_t> out;           // [batch, s_q, h_q, d_v] elements of out_dtype, strided; NaN
  HostVector<float> lse;             // [batch, h_q, s_q] strided; NaN
  HostVector<float> q_scale{1.0f};   // [1]; fp8 dequant scale
  HostVector<float> kv_scale{1.0f};  // [1]
  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;
  int64_t kv_stride_page = 0, kv_stride_token = 0, kv_stride_head = 0;
  int64_t block_table_stride_b = 0;
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;
  int64_t lse_stride_b = 0, lse_stride_h = 0;
  float softmax_scale = 0.0f;
  bool causal = false;

  DenseDecodeParams params() {
    DenseDecodeParams p;
    p.shape = shape;
    p.q = q.data();
    p.q_stride_b = q_stride_b, p.q_stride_s = q_stride_s, p.q_stride_h = q_stride_h;
    p.kv_cache = kv_cache.data();
    p.kv_stride_page = kv_stride_page, p.kv_stride_token = kv_stride_token, p.kv_stride_head = kv_stride_head;
    p.block_table = block_table.data();
    p.block_table_stride_b = block_table_stride_b;
    p.seqlens = seqlens.data();
    p.out = out.data();
    p.out_stride_b = out_stride_b, p.out_stride_s = out_stride_s, p.out_stride_h = out_stride_h;
    p.lse = lse.data();
    p.lse_stride_b = lse_stride_b, p.lse_stride_h = lse_stride_h;
    if (shape.q_dtype == DType::kFP8E4M3) {
      p.q_scale = q_scale.data();
      p.kv_scale = kv_scale.data();
    }
    p.softmax_scale = softmax_scale;
    p.causal = causal;
    return p;
  }

  int64_t out_index(int b, int s, int h) const {
    return b * out_stride_b + s * out_stride_s + h * out_stride_h;
  }
  int64_t lse_index(int b, int h, int s) const { return b * lse_stride_b + h * lse_stride_h + s; }
  // Logical [batch, s_q, h_q, d_v] and [batch, h_q, s_q] copies of the outputs.
  std::vector<float> out_values() const {
    std::vector<float> values;
    for (int b = 0; b < shape.batch; ++b)
      for (int s = 0; s < shape.s_q; ++s)
        for (int h = 0; h < shape.h_q; ++h)
          for (int d = 0; d < shape.d_v; ++d)
            values.push_back(load_value(shape.out_dtype, out.data(), out_index(b, s, h) + d));
    return values;
  }
  std::vector<float> lse_values() const {
    std::vector<float> values;
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.h_q; ++h)
        for (int s = 0; s < shape.s_q; ++s) values.push_back(lse[lse_index(b, h, s)]);
    return values;
  }
  // Reset the outputs to NaN (before running a second implementation).
  void poison_outputs() {
    fill_nan(shape.out_dtype, out);
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
  }
};

inline DenseDecodeInputs make_dense_decode_inputs(const DenseDecodeConfig& config, uint64_t seed) {
  Rng rng(seed);
  DenseDecodeInputs in;
  DenseDecodeShape& sh = in.shape;
  sh.batch = config.batch;
  sh.s_q = config.s_q;
  sh.h_q = config.h_q;
  sh.h_kv = config.h_kv;
  sh.d_qk = config.d_qk;
  sh.d_v = kHeadDimV;
  sh.page_size = config.page_size;
  sh.q_dtype = sh.kv_dtype = config.dtype;
  sh.out_dtype = config.dtype == DType::kFP8E4M3 ? DType::kBF16 : config.dtype;
  in.causal = config.causal;
  in.softmax_scale =
      config.softmax_scale > 0.0f ? config.softmax_scale : 1.0f / std::sqrt(float(config.d_qk));

  // ---- lengths: given, or random with an empty and a one-token request ----
  in.seqlens.assign(config.batch, 0);
  for (int b = 0; b < config.batch; ++b) {
    if (!config.seqlens.empty()) {
      in.seqlens[b] = config.seqlens[b];
    } else if (b == 1) {
      in.seqlens[b] = 0;
    } else if (b == 2) {
      in.seqlens[b] = 1;
    } else {
      in.seqlens[b] = rng.uniform_int(0, config.max_seqlen);
    }
  }

  // ---- pages: a random permutation, handed out request by request ----
  std::vector<int> pages_needed(config.batch);
  int total_pages = 0, longest = 1;
  for (int b = 0; b < config.batch; ++b) {
    pages_needed[b] = (in.seqlens[b] + config.page_size - 1) / config.page_size;
    total_pages += pages_needed[b];
    longest = std::max(longest, pages_needed[b]);
  }
  sh.num_pages = std::max(1, total_pages + config.extra_pages);
  sh.max_pages_per_seq = longest + config.extra_table_columns;
  std::vector<int32_t> permutation(sh.num_pages);
  std::iota(permutation.begin(), permutation.end(), 0);
  std::shuffle(permutation.begin(), permutation.end(), rng.engine());
  in.block_table_stride_b = sh.max_pages_per_seq;
  in.block_table.assign(static_cast<size_t>(config.batch) * sh.max_pages_per_seq, kGarbagePage);
  for (int b = 0, next = 0; b < config.batch; ++b) {
    for (int j = 0; j < pages_needed[b]; ++j)
      in.block_table[b * in.block_table_stride_b + j] = permutation[next++];
  }

  // ---- layouts (padding on every strided dim when asked) ----
  const int64_t in_pad = pad_elements(config.stride_pad_bytes, config.dtype);
  in.q_stride_h = sh.d_qk + in_pad;
  in.q_stride_s = sh.h_q * in.q_stride_h + in_pad;
  in.q_stride_b = sh.s_q * in.q_stride_s + in_pad;
  in.kv_stride_head = sh.d_qk + in_pad;
  in.kv_stride_token = sh.h_kv * in.kv_stride_head + in_pad;
  in.kv_stride_page = sh.page_size * in.kv_stride_token + in_pad;
  const int64_t out_pad = pad_elements(config.stride_pad_bytes, sh.out_dtype);
  in.out_stride_h = sh.d_v + out_pad;
  in.out_stride_s = sh.h_q * in.out_stride_h + out_pad;
  in.out_stride_b = sh.s_q * in.out_stride_s + out_pad;
  const int64_t lse_pad = config.stride_pad_bytes > 0 ? 1 : 0;
  in.lse_stride_h = sh.s_q + lse_pad;
  in.lse_stride_b = sh.h_q * in.lse_stride_h + lse_pad;

  const size_t in_bytes = dtype_size(config.dtype);
  in.q.resize(static_cast<size_t>(sh.batch * in.q_stride_b) * in_bytes);
  in.kv_cache.resize(static_cast<size_t>(sh.num_pages * in.kv_stride_page) * in_bytes);
  in.out.resize(static_cast<size_t>(sh.batch * in.out_stride_b) * dtype_size(sh.out_dtype));
  in.lse.assign(static_cast<size_t>(sh.batch * in.lse_stride_b), std::numeric_limits<float>::quiet_NaN());
  fill_nan(config.dtype, in.q);
  fill_nan(config.dtype, in.kv_cache);  // every slot no request owns stays NaN
  fill_nan(sh.out_dtype, in.out);

  // ---- values: N(0, 1); fp8 goes through one per-tensor scale each ----
  std::vector<int64_t> q_slots, kv_slots;  // element indices that hold data
  for (int b = 0; b < sh.batch; ++b)
    for (int s = 0; s < sh.s_q; ++s)
      for (int h = 0; h < sh.h_q; ++h)
        for (int d = 0; d < sh.d_qk; ++d)
          q_slots.push_back(b * in.q_stride_b + s * in.q_stride_s + h * in.q_stride_h + d);
  for (int b = 0; b < sh.batch; ++b) {
    for (int t = 0; t < in.seqlens[b]; ++t) {
      const int64_t page = in.block_table[b * in.block_table_stride_b + t / sh.page_size];
      for (int g = 0; g < sh.h_kv; ++g)
        for (int d = 0; d < sh.d_qk; ++d)
          kv_slots.push_back(page * in.kv_stride_page + (t % sh.page_size) * in.kv_stride_token +
                             g * in.kv_stride_head + d);
    }
  }
  const auto fill = [&](const std::vector<int64_t>& slots, HostVector<uint8_t>& bytes, float* scale,
                        float fixed_scale) {
    std::vector<float> values(slots.size());
    for (float& v : values) v = rng.normal();
    if (config.dtype == DType::kFP8E4M3 && fixed_scale > 0.0f) {
      *scale = fixed_scale;
      for (size_t i = 0; i < slots.size(); ++i) bytes[slots[i]] = float_to_e4m3_bits(values[i] * kFixedScaleCodeStd);
    } else if (config.dtype == DType::kFP8E4M3) {
      std::vector<uint8_t> codes(values.size());
      *scale = quantize_e4m3_per_tensor(values.data(), values.size(), codes.data());
      for (size_t i = 0; i < slots.size(); ++i) bytes[slots[i]] = codes[i];
    } else {
      for (size_t i = 0; i < slots.size(); ++i) store_half(config.dtype, bytes.data(), slots[i], values[i]);
    }
  };
  fill(q_slots, in.q, in.q_scale.data(), config.fp8_q_scale);
  fill(kv_slots, in.kv_cache, in.kv_scale.data(), config.fp8_kv_scale);
  return in;
}

// ---------------------------------------------------------------------------
// Sparse decode (656-byte FP8 cache)
// ---------------------------------------------------------------------------
struct SparseDecodeConfig {
  int batch = 2;
  int s_q = 1;
  int h_q = 16;    // 8, 16, 32, 64 or 128
  int topk = 128;  // multiple of 64
  int page_size = 64;
  int num_pages = 6;
  double dead_token_fraction = 0.2;     // tokens left poisoned inside live pages
  int dead_pages = 1;                   // whole pages left poisoned
  double invalid_fraction = 0.15;       // -1 entries
  double out_of_range_fraction = 0.05;  // >= num_pages * page_size
  double negative_fraction = 0.05;      // negative, not -1
  bool all_invalid_row = true;          // item (batch - 1, 0) gets no valid index
  bool use_topk_length = false;         // topk_length[b] random in [0, topk]
  bool use_attn_sink = false;           // sink[h] random; head 0 = +inf, head 1 = -inf
  int stride_pad_bytes = 0;             // extra bytes on every strided dim (multiple of 16)
  float softmax_scale = 0.0f;           // 0: 1 / sqrt(576)
};

struct SparseDecodeInputs {
  SparseDecodeShape shape;
  HostVector<uint16_t> q;           // [batch, s_q, h_q, 576] bf16, strided
  HostVector<uint8_t> kv_cache;     // [num_pages, page_size, 1, 656] bytes, page stride kv_stride_page_bytes
  HostVector<int32_t> indices;      // [batch, s_q, topk], strided
  HostVector<int32_t> topk_length;  // [batch] (empty: not used)
  HostVector<float> attn_sink;      // [h_q] (empty: not used)
  HostVector<uint16_t> out;         // [batch, s_q, h_q, 512] bf16, strided; NaN
  HostVector<float> lse;            // [batch, h_q, s_q], strided; NaN
  std::vector<uint8_t> token_live;  // [num_pages * page_size]: 1 where the cache holds data
  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;
  int64_t kv_stride_page_bytes = 0;
  int64_t indices_stride_b = 0, indices_stride_s = 0;
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;
  int64_t lse_stride_b = 0, lse_stride_h = 0;
  float softmax_scale = 0.0f;

  SparseDecodeParams params() {
    SparseDecodeParams p;
    p.shape = shape;
    p.q = q.data();
    p.q_stride_b = q_stride_b, p.q_stride_s = q_stride_s, p.q_stride_h = q_stride_h;
    p.kv_cache = kv_cache.data();
    p.kv_stride_page_bytes = kv_stride_page_bytes;
    p.indices = indices.data();
    p.indices_stride_b = indices_stride_b, p.indices_stride_s = indices_stride_s;
    p.topk_length = topk_length.empty() ? nullptr : topk_length.data();
    p.attn_sink = attn_sink.empty() ? nullptr : attn_sink.data();
    p.out = out.data();
    p.out_stride_b = out_stride_b, p.out_stride_s = out_stride_s, p.out_stride_h = out_stride_h;
    p.lse = lse.data();
    p.lse_stride_b = lse_stride_b, p.lse_stride_h = lse_stride_h;
    p.softmax_scale = softmax_scale;
    return p;
  }

  const uint8_t* token(int64_t index) const {  // [656]
    return kv_cache.data() + (index / shape.page_size) * kv_stride_page_bytes +
           (index % shape.page_size) * kSparseFp8TokenBytes;
  }
  int64_t out_index(int b, int s, int h) const {
    return b * out_stride_b + s * out_stride_s + h * out_stride_h;
  }
  int64_t lse_index(int b, int h, int s) const { return b * lse_stride_b + h * lse_stride_h + s; }
  std::vector<float> out_values() const {
    std::vector<float> values;
    for (int b = 0; b < shape.batch; ++b)
      for (int s = 0; s < shape.s_q; ++s)
        for (int h = 0; h < shape.h_q; ++h)
          for (int d = 0; d < shape.d_v; ++d)
            values.push_back(bf16_bits_to_float(out[out_index(b, s, h) + d]));
    return values;
  }
  std::vector<float> lse_values() const {
    std::vector<float> values;
    for (int b = 0; b < shape.batch; ++b)
      for (int h = 0; h < shape.h_q; ++h)
        for (int s = 0; s < shape.s_q; ++s) values.push_back(lse[lse_index(b, h, s)]);
    return values;
  }
  void poison_outputs() {
    std::fill(out.begin(), out.end(), kBf16NaN);
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
  }
};

// A poisoned 656-byte token: NaN latent codes, NaN scales, NaN RoPE.
inline void poison_sparse_token(uint8_t* token /*[656]*/) {
  std::memset(token, kE4m3NaN, kSparseFp8ScaleOffset);
  for (int i = 0; i < kSparseFp8NumScales; ++i)
    std::memcpy(token + kSparseFp8ScaleOffset + 4 * i, &kFloatNaNBits, 4);
  for (int i = 0; i < kHeadDimRope; ++i) std::memcpy(token + kSparseFp8RopeOffset + 2 * i, &kBf16NaN, 2);
}

// ---------------------------------------------------------------------------
// Shared by the sparse generators: per-row counted lengths, attention sinks
// (with +inf and -inf heads) and index rows mixing live, dead and invalid tokens.
// ---------------------------------------------------------------------------
inline void fill_topk_lengths(Rng& rng, HostVector<int32_t>& lengths, int count, int topk) {  // [count]
  lengths.resize(static_cast<size_t>(count));
  for (int32_t& length : lengths) length = rng.uniform_int(0, topk);
}

inline void fill_attn_sink(Rng& rng, HostVector<float>& sink, int h_q) {  // [h_q]
  sink.resize(static_cast<size_t>(h_q));
  for (float& x : sink) x = rng.uniform(1.0f, 7.0f);
  sink[0] = std::numeric_limits<float>::infinity();
  if (h_q > 1) sink[1] = -std::numeric_limits<float>::infinity();
}

// Fractions of the counted positions that hold each kind of invalid index.
struct InvalidIndexMix {
  double invalid;       // -1
  double out_of_range;  // >= num_tokens
  double negative;      // other negative values
};

// One row of `topk` indices: positions past `counted` point at dead tokens
// (invalid ones when none are dead), a `no_valid` row holds only invalid
// indices, and counted positions follow `mix`, else a random live token.
inline void fill_index_row(Rng& rng, int32_t* row, int topk, int32_t counted, bool no_valid, int64_t num_tokens,
                           const InvalidIndexMix& mix, const std::vector<int32_t>& live,
                           const std::vector<int32_t>& dead) {
  const auto pick_invalid = [&]() -> int32_t {
    const int kind = rng.uniform_int(0, 2);
    if (kind == 0) return -1;
    if (kind == 1) return static_cast<int32_t>(num_tokens + rng.uniform_int(0, 1000));
    return -rng.uniform_int(2, 1 << 20);
  };
  const double invalid_total = mix.invalid + mix.out_of_range + mix.negative;
  for (int k = 0; k < topk; ++k) {
    int32_t index;
    if (k >= counted) {
      index = dead.empty() ? pick_invalid() : dead[rng.uniform_int(0, static_cast<int>(dead.size()) - 1)];
    } else if (no_valid) {
      index = pick_invalid();
    } else {
      const double u = rng.uniform(0.0f, 1.0f);
      if (u < mix.invalid)
        index = -1;
      else if (u < mix.invalid + mix.out_of_range)
        index = static_cast<int32_t>(num_tokens + rng.uniform_int(0, 1000));
      else if (u < invalid_total)
        index = -rng.uniform_int(2, 1 << 20);
      else
        index = live[rng.uniform_int(0, static_cast<int>(live.size()) - 1)];
    }
    row[k] = index;
  }
}

inline SparseDecodeInputs make_sparse_decode_inputs(const SparseDecodeConfig& config, uint64_t seed) {
  Rng rng(seed);
  SparseDecodeInputs in;
  SparseDecodeShape& sh = in.shape;
  sh.batch = config.batch;
  sh.s_q = config.s_q;
  sh.h_q = config.h_q;
  sh.d_qk = kHeadDimQK;
  sh.d_v = kHeadDimV;
  sh.topk = config.topk;
  sh.page_size = config.page_size;
  sh.num_pages = config.num_pages;
  in.softmax_scale = config.softmax_scale > 0.0f ? config.softmax_scale : 1.0f / std::sqrt(float(kHeadDimQK));
  const int64_t num_tokens = static_cast<int64_t>(sh.num_pages) * sh.page_size;

  // ---- layouts ----
  const int64_t bf16_pad = config.stride_pad_bytes / 2;
  in.q_stride_h = kHeadDimQK + bf16_pad;
  in.q_stride_s = sh.h_q * in.q_stride_h + bf16_pad;
  in.q_stride_b = sh.s_q * in.q_stride_s + bf16_pad;
  in.kv_stride_page_bytes =
      static_cast<int64_t>(sh.page_size) * kSparseFp8TokenBytes + config.stride_pad_bytes;
  const int64_t index_pad = config.stride_pad_bytes / 4;
  in.indices_stride_s = sh.topk + index_pad;
  in.indices_stride_b = sh.s_q * in.indices_stride_s + index_pad;
  in.out_stride_h = kHeadDimV + bf16_pad;
  in.out_stride_s = sh.h_q * in.out_stride_h + bf16_pad;
  in.out_stride_b = sh.s_q * in.out_stride_s + bf16_pad;
  const int64_t lse_pad = config.stride_pad_bytes > 0 ? 1 : 0;
  in.lse_stride_h = sh.s_q + lse_pad;
  in.lse_stride_b = sh.h_q * in.lse_stride_h + lse_pad;

  // ---- q ----
  in.q.assign(static_cast<size_t>(sh.batch * in.q_stride_b), kBf16NaN);
  for (int b = 0; b < sh.batch; ++b)
    for (int s = 0; s < sh.s_q; ++s)
      for (int h = 0; h < sh.h_q; ++h)
        for (int d = 0; d < kHeadDimQK; ++d)
          in.q[b * in.q_stride_b + s * in.q_stride_s + h * in.q_stride_h + d] =
              float_to_bf16_bits(rng.normal());

  // ---- cache: live tokens quantised, the rest (and page padding) poisoned ----
  in.kv_cache.assign(static_cast<size_t>(sh.num_pages * in.kv_stride_page_bytes), kE4m3NaN);
  in.token_live.assign(static_cast<size_t>(num_tokens), 0);
  std::vector<int> page_order(sh.num_pages);
  std::iota(page_order.begin(), page_order.end(), 0);
  std::shuffle(page_order.begin(), page_order.end(), rng.engine());
  std::vector<uint8_t> page_dead(sh.num_pages, 0);
  for (int i = 0; i < std::min(config.dead_pages, sh.num_pages - 1); ++i) page_dead[page_order[i]] = 1;
  std::vector<float> row(kHeadDimQK);
  std::vector<int32_t> live, dead;  // token indices
  for (int64_t t = 0; t < num_tokens; ++t) {
    uint8_t* token = in.kv_cache.data() + (t / sh.page_size) * in.kv_stride_page_bytes +
                     (t % sh.page_size) * kSparseFp8TokenBytes;
    const bool is_live = !page_dead[t / sh.page_size] && !rng.bernoulli(config.dead_token_fraction);
    if (!is_live) {
      poison_sparse_token(token);
      dead.push_back(static_cast<int32_t>(t));
      continue;
    }
    // Each 128-value group gets its own magnitude, so the four scales differ.
    for (int g = 0; g < kSparseFp8NumScales; ++g) {
      const float magnitude = std::ldexp(1.0f, rng.uniform_int(-3, 3));
      for (int i = 0; i < kSparseFp8ValuesPerScale; ++i)
        row[g * kSparseFp8ValuesPerScale + i] = magnitude * rng.normal();
    }
    for (int i = 0; i < kHeadDimRope; ++i) row[kHeadDimLatent + i] = rng.normal();
    quantize_sparse_fp8_token(row.data(), token);
    in.token_live[t] = 1;
    live.push_back(static_cast<int32_t>(t));
  }
  if (live.empty()) {  // keep at least one live token so valid indices exist
    uint8_t* token = in.kv_cache.data();
    for (float& v : row) v = rng.normal();
    quantize_sparse_fp8_token(row.data(), token);
    in.token_live[0] = 1;
    live.push_back(0);
    dead.erase(std::remove(dead.begin(), dead.end(), 0), dead.end());
  }

  // ---- topk_length and sinks ----
  if (config.use_topk_length) fill_topk_lengths(rng, in.topk_length, sh.batch, sh.topk);
  if (config.use_attn_sink) fill_attn_sink(rng, in.attn_sink, sh.h_q);

  // ---- indices: valid -> live tokens; uncounted positions -> dead tokens ----
  in.indices.assign(static_cast<size_t>(sh.batch * in.indices_stride_b), -1);
  const InvalidIndexMix mix{config.invalid_fraction, config.out_of_range_fraction, config.negative_fraction};
  for (int b = 0; b < sh.batch; ++b) {
    const int32_t counted = in.topk_length.empty() ? sh.topk : in.topk_length[b];
    for (int s = 0; s < sh.s_q; ++s) {
      int32_t* index_row = in.indices.data() + b * in.indices_stride_b + s * in.indices_stride_s;
      const bool no_valid = config.all_invalid_row && b == sh.batch - 1 && s == 0;
      fill_index_row(rng, index_row, sh.topk, counted, no_valid, num_tokens, mix, live, dead);
    }
  }

  // ---- outputs ----
  in.out.assign(static_cast<size_t>(sh.batch * in.out_stride_b), kBf16NaN);
  in.lse.assign(static_cast<size_t>(sh.batch * in.lse_stride_b), std::numeric_limits<float>::quiet_NaN());
  return in;
}

// ---------------------------------------------------------------------------
// Sparse prefill
// ---------------------------------------------------------------------------
struct SparsePrefillConfig {
  int s_q = 4;
  int h_q = 16;
  int s_kv = 200;
  int d_qk = kHeadDimQK;  // 576 or 512
  int topk = 96;
  double dead_kv_fraction = 0.1;        // kv rows left NaN (never indexed where counted)
  double invalid_fraction = 0.15;       // -1
  double out_of_range_fraction = 0.05;  // >= s_kv
  double negative_fraction = 0.05;      // negative, not -1
  bool all_invalid_row = true;          // query token s_q - 1 gets no valid index
  bool use_topk_length = false;
  bool use_attn_sink = false;  // head 0 = +inf, head 1 = -inf
  int stride_pad_bytes = 0;
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(d_qk)
  int fp8_cache_page_size = 0;  // > 0: FP8-cache mode with these pages (s_kv a multiple of it)
  float kv_value_scale = 1.0f;  // kv values ~ normal * this (FP8 group scales above 2^7 past ~1e4)
};

struct SparsePrefillInputs {
  SparsePrefillShape shape;
  HostVector<uint16_t> q;           // [s_q, h_q, d_qk] bf16, strided
  HostVector<uint16_t> kv;          // [s_kv, 1, d_qk] bf16, strided; dead rows NaN
  HostVector<int32_t> indices;      // [s_q, 1, topk], strided
  HostVector<int32_t> topk_length;  // [s_q] (empty: not used)
  HostVector<float> attn_sink;      // [h_q] (empty: not used)
  HostVector<uint16_t> out;         // [s_q, h_q, d_v] bf16, strided; NaN
  HostVector<float> max_logits;     // [s_q, h_q]; NaN
  HostVector<float> lse;            // [s_q, h_q]; NaN
  std::vector<uint8_t> kv_live;     // [s_kv]
  // FP8-cache mode (use_fp8_cache): kv quantised into the 656-byte paged cache; dead rows 0xff.
  HostVector<uint8_t> kv_cache;     // [num_pages, page_size, 1, 656] (empty: BF16 kv mode)
  int64_t kv_stride_page_bytes = 0;
  int64_t q_stride_s = 0, q_stride_h = 0;
  int64_t kv_stride_s = 0;
  int64_t indices_stride_s = 0;
  int64_t out_stride_s = 0, out_stride_h = 0;
  float softmax_scale = 0.0f;

  SparsePrefillParams params() {
    SparsePrefillParams p;
    p.shape = shape;
    p.q = q.data();
    p.q_stride_s = q_stride_s, p.q_stride_h = q_stride_h;
    p.kv = kv.data();
    p.kv_stride_s = kv_stride_s;
    if (shape.fp8_kv_cache) {
      p.kv = nullptr;
      p.kv_cache = kv_cache.data();
      p.kv_stride_page_bytes = kv_stride_page_bytes;
    }
    p.indices = indices.data();
    p.indices_stride_s = indices_stride_s;
    p.topk_length = topk_length.empty() ? nullptr : topk_length.data();
    p.attn_sink = attn_sink.empty() ? nullptr : attn_sink.data();
    p.out = out.data();
    p.out_stride_s = out_stride_s, p.out_stride_h = out_stride_h;
    p.max_logits = max_logits.data();
    p.lse = lse.data();
    p.softmax_scale = softmax_scale;
    return p;
  }

  int64_t out_index(int s, int h) const { return s * out_stride_s + h * out_stride_h; }
  std::vector<float> out_values() const {
    std::vector<float> values;
    for (int s = 0; s < shape.s_q; ++s)
      for (int h = 0; h < shape.h_q; ++h)
        for (int d = 0; d < shape.d_v; ++d) values.push_back(bf16_bits_to_float(out[out_index(s, h) + d]));
    return values;
  }
  void poison_outputs() {
    std::fill(out.begin(), out.end(), kBf16NaN);
    std::fill(max_logits.begin(), max_logits.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
  }
};

inline SparsePrefillInputs make_sparse_prefill_inputs(const SparsePrefillConfig& config, uint64_t seed) {
  Rng rng(seed);
  SparsePrefillInputs in;
  SparsePrefillShape& sh = in.shape;
  sh.s_q = config.s_q;
  sh.h_q = config.h_q;
  sh.s_kv = config.s_kv;
  sh.d_qk = config.d_qk;
  sh.d_v = kHeadDimV;
  sh.topk = config.topk;
  in.softmax_scale =
      config.softmax_scale > 0.0f ? config.softmax_scale : 1.0f / std::sqrt(float(config.d_qk));

  const int64_t pad = config.stride_pad_bytes / 2;
  in.q_stride_h = sh.d_qk + pad;
  in.q_stride_s = sh.h_q * in.q_stride_h + pad;
  in.kv_stride_s = sh.d_qk + pad;
  in.indices_stride_s = sh.topk + config.stride_pad_bytes / 4;
  in.out_stride_h = sh.d_v + pad;
  in.out_stride_s = sh.h_q * in.out_stride_h + pad;

  in.q.assign(static_cast<size_t>(sh.s_q * in.q_stride_s), kBf16NaN);
  for (int s = 0; s < sh.s_q; ++s)
    for (int h = 0; h < sh.h_q; ++h)
      for (int d = 0; d < sh.d_qk; ++d)
        in.q[s * in.q_stride_s + h * in.q_stride_h + d] = float_to_bf16_bits(rng.normal());

  in.kv.assign(static_cast<size_t>(sh.s_kv * in.kv_stride_s), kBf16NaN);
  in.kv_live.assign(sh.s_kv, 0);
  std::vector<int32_t> live, dead;
  for (int t = 0; t < sh.s_kv; ++t) {
    if (t > 0 && rng.bernoulli(config.dead_kv_fraction)) {  // row 0 stays live: valid indices exist
      dead.push_back(t);
      continue;
    }
    for (int d = 0; d < sh.d_qk; ++d) {
      in.kv[t * in.kv_stride_s + d] = float_to_bf16_bits(rng.normal() * config.kv_value_scale);
    }
    in.kv_live[t] = 1;
    live.push_back(t);
  }

  if (config.use_topk_length) fill_topk_lengths(rng, in.topk_length, sh.s_q, sh.topk);
  if (config.use_attn_sink) fill_attn_sink(rng, in.attn_sink, sh.h_q);

  in.indices.assign(static_cast<size_t>(sh.s_q * in.indices_stride_s), -1);
  const InvalidIndexMix mix{config.invalid_fraction, config.out_of_range_fraction, config.negative_fraction};
  for (int s = 0; s < sh.s_q; ++s) {
    const int32_t counted = in.topk_length.empty() ? sh.topk : in.topk_length[s];
    const bool no_valid = config.all_invalid_row && s == sh.s_q - 1;
    fill_index_row(rng, in.indices.data() + s * in.indices_stride_s, sh.topk, counted, no_valid, sh.s_kv, mix, live,
                   dead);
  }

  in.out.assign(static_cast<size_t>(sh.s_q * in.out_stride_s), kBf16NaN);
  in.max_logits.assign(static_cast<size_t>(sh.s_q) * sh.h_q, std::numeric_limits<float>::quiet_NaN());
  in.lse.assign(static_cast<size_t>(sh.s_q) * sh.h_q, std::numeric_limits<float>::quiet_NaN());

  if (config.fp8_cache_page_size > 0) {
    // FP8-cache mode: the live rows quantised into 656-byte tokens, dead rows all 0xff
    // (NaN codes and scales); s_kv must be a whole number of pages.
    const int page_size = config.fp8_cache_page_size;
    sh.fp8_kv_cache = true;
    sh.page_size = page_size;
    sh.num_pages = sh.s_kv / page_size;
    in.kv_stride_page_bytes = int64_t(page_size) * kSparseFp8TokenBytes + config.stride_pad_bytes;
    in.kv_cache.assign(static_cast<size_t>(sh.num_pages * in.kv_stride_page_bytes), 0xff);
    std::vector<float> row(kHeadDimQK);
    for (int t = 0; t < sh.num_pages * page_size; ++t) {
      if (!in.kv_live[t]) continue;
      for (int d = 0; d < kHeadDimQK; ++d) row[d] = bf16_bits_to_float(in.kv[t * in.kv_stride_s + d]);
      quantize_sparse_fp8_token(row.data(), in.kv_cache.data() + (t / page_size) * in.kv_stride_page_bytes +
                                                (t % page_size) * kSparseFp8TokenBytes);
    }
  }
  return in;
}

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------
// ||got - want|| / ||want||; +inf when got has a non-finite value where want is
// finite (NaN must never pass). ||got - want|| alone when want is all zero.
inline double rel_l2(std::span<const float> got, std::span<const double> want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double diff = static_cast<double>(got[i]) - want[i];
    err += diff * diff;
    norm += want[i] * want[i];
  }
  return norm > 0.0 ? std::sqrt(err / norm) : std::sqrt(err);
}

inline double rel_l2(std::span<const float> got, std::span<const float> want) {
  std::vector<double> wide(want.begin(), want.end());
  return rel_l2(got, std::span<const double>(wide));
}

struct LseComparison {
  bool ok = true;
  double max_abs_error = 0.0;  // over positions where both are finite
  std::string message;         // the first mismatch, when !ok
};

// Finite positions within `tolerance`; +inf, -inf and NaN at identical positions.
inline LseComparison compare_lse(std::span<const float> got, std::span<const double> want, double tolerance) {
  LseComparison result;
  if (got.size() != want.size()) {
    result.ok = false;
    result.message = "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    return result;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool same_class = std::isnan(g) == std::isnan(w) && std::isinf(g) == std::isinf(w) &&
                            (!std::isinf(g) || (g > 0) == (w > 0));
    if (!same_class) {
      if (result.ok) {
        std::ostringstream os;
        os << "position " << i << ": got " << g << ", expected " << w;
        result.message = os.str();
      }
      result.ok = false;
      continue;
    }
    if (std::isfinite(g)) {
      const double err = std::fabs(g - w);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (err > tolerance && result.ok) {
        std::ostringstream os;
        os << "position " << i << ": got " << g << ", expected " << w << " (|err| " << err << " > "
           << tolerance << ")";
        result.message = os.str();
        result.ok = false;
      }
    }
  }
  return result;
}

inline LseComparison compare_lse(std::span<const float> got, std::span<const float> want, double tolerance) {
  std::vector<double> wide(want.begin(), want.end());
  return compare_lse(got, std::span<const double>(wide), tolerance);
}

}  // namespace openmla::test

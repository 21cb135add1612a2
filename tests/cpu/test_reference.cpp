// The CPU reference against an independent float64 implementation written
// here (plain loops over the raw input bytes, own decoders), on fresh random
// inputs from test_util/mla_inputs.h; and the split path (partials + combine)
// against the direct path, with hand-made and planner-made schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "openmla/plan.h"
#include "openmla/reference.h"
#include "openmla/schedule.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {

using test::HostVector;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------
// Float64 ground truth: own decoders, own softmax
// ---------------------------------------------------------------------------
double naive_bf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

double naive_fp16(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? std::nan("") : kInf;
  else
    magnitude = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

double naive_e4m3(uint8_t code) {
  const int exponent = (code >> 3) & 0xf, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::nan("");
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa / 8.0, -6) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return (code & 0x80) ? -magnitude : magnitude;
}

double naive_element(DType dtype, const uint8_t* bytes, int64_t index) {
  switch (dtype) {
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, bytes + 2 * index, 2);
      return naive_bf16(b);
    }
    case DType::kFP16: {
      uint16_t b;
      std::memcpy(&b, bytes + 2 * index, 2);
      return naive_fp16(b);
    }
    case DType::kFP8E4M3: return naive_e4m3(bytes[index]);
    default: return std::nan("");
  }
}

// One row: O normalised over its keys, natural LSE, max score. No keys: O = 0,
// lse = max = -inf (the "piece" convention).
struct NaiveRow {
  std::vector<double> o;
  double lse = -kInf;
  double max_logit = -kInf;
};

// keys: full rows (V = their first d_v values).
NaiveRow naive_attend(const std::vector<double>& q, const std::vector<const std::vector<double>*>& keys,
                      double scale, int d_v) {
  NaiveRow row;
  row.o.assign(d_v, 0.0);
  if (keys.empty()) return row;
  std::vector<double> scores;
  for (const std::vector<double>* k : keys) {
    double dot = 0.0;
    for (size_t d = 0; d < q.size(); ++d) dot += q[d] * (*k)[d];
    scores.push_back(scale * dot);
    row.max_logit = std::max(row.max_logit, scale * dot);
  }
  double sum = 0.0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const double p = std::exp(scores[j] - row.max_logit);
    sum += p;
    for (int d = 0; d < d_v; ++d) row.o[d] += p * (*keys[j])[d];
  }
  for (double& v : row.o) v /= sum;
  row.lse = row.max_logit + std::log(sum);
  return row;
}

// Final convention: empty -> O = 0, LSE = +inf; sink scales O by 1/(1+exp(sink-lse)).
void naive_finish(NaiveRow& row, const float* sink) {
  if (row.lse == -kInf) {
    row.lse = kInf;
    return;
  }
  if (sink != nullptr) {
    const double factor = 1.0 / (1.0 + std::exp(static_cast<double>(*sink) - row.lse));
    for (double& v : row.o) v *= factor;
  }
}

// ---- dense ----
// Rows (s, h) of request b over tokens [t0, t1), causal window applied.
std::vector<NaiveRow> naive_dense_request(const test::DenseDecodeInputs& in, int b, int t0, int t1) {
  const DenseDecodeShape& sh = in.shape;
  const int length = in.seqlens[b];
  const bool fp8 = sh.q_dtype == DType::kFP8E4M3;
  const double q_scale = fp8 ? in.q_scale[0] : 1.0, kv_scale = fp8 ? in.kv_scale[0] : 1.0;
  // keys[g][t]
  std::vector<std::vector<std::vector<double>>> keys(sh.h_kv);
  for (int g = 0; g < sh.h_kv; ++g) {
    for (int t = 0; t < length; ++t) {
      const int64_t page = in.block_table[b * in.block_table_stride_b + t / sh.page_size];
      std::vector<double> k(sh.d_qk);
      for (int d = 0; d < sh.d_qk; ++d) {
        const int64_t index =
            page * in.kv_stride_page + (t % sh.page_size) * in.kv_stride_token + g * in.kv_stride_head + d;
        k[d] = naive_element(sh.kv_dtype, in.kv_cache.data(), index) * kv_scale;
      }
      keys[g].push_back(k);
    }
  }
  std::vector<NaiveRow> rows;
  for (int s = 0; s < sh.s_q; ++s) {
    const int last = in.causal ? length - sh.s_q + s : length - 1;  // last visible key
    for (int h = 0; h < sh.h_q; ++h) {
      std::vector<double> q(sh.d_qk);
      for (int d = 0; d < sh.d_qk; ++d) {
        const int64_t index = b * in.q_stride_b + s * in.q_stride_s + h * in.q_stride_h + d;
        q[d] = naive_element(sh.q_dtype, in.q.data(), index) * q_scale;
      }
      const int g = h / (sh.h_q / sh.h_kv);
      std::vector<const std::vector<double>*> row_keys;
      for (int t = std::max(t0, 0); t < std::min(t1, length); ++t) {
        if (t <= last) row_keys.push_back(&keys[g][t]);
      }
      rows.push_back(naive_attend(q, row_keys, in.softmax_scale, sh.d_v));
    }
  }
  return rows;
}

struct NaiveOutputs {
  std::vector<double> out;         // logical [.., d_v] in the order of inputs.out_values()
  std::vector<double> lse;         // logical order of inputs.lse_values()
  std::vector<double> max_logits;  // prefill only
};

NaiveOutputs naive_dense(const test::DenseDecodeInputs& in) {
  const DenseDecodeShape& sh = in.shape;
  NaiveOutputs result;
  result.lse.assign(static_cast<size_t>(sh.batch) * sh.h_q * sh.s_q, 0.0);
  for (int b = 0; b < sh.batch; ++b) {
    std::vector<NaiveRow> rows = naive_dense_request(in, b, 0, in.seqlens[b]);
    for (int s = 0; s < sh.s_q; ++s) {
      for (int h = 0; h < sh.h_q; ++h) {
        NaiveRow& row = rows[s * sh.h_q + h];
        naive_finish(row, nullptr);
        result.out.insert(result.out.end(), row.o.begin(), row.o.end());
        result.lse[(static_cast<size_t>(b) * sh.h_q + h) * sh.s_q + s] = row.lse;
      }
    }
  }
  return result;
}

// ---- sparse decode ----
int naive_counted(const HostVector<int32_t>& topk_length, int i, int topk) {
  if (topk_length.empty()) return topk;
  return std::min(std::max(topk_length[i], 0), topk);
}

std::vector<double> naive_sparse_token(const test::SparseDecodeInputs& in, int64_t index) {
  const uint8_t* token = in.kv_cache.data() + (index / in.shape.page_size) * in.kv_stride_page_bytes +
                         (index % in.shape.page_size) * 656;
  std::vector<double> row(576);
  for (int i = 0; i < 512; ++i) {
    float scale;
    std::memcpy(&scale, token + 512 + 4 * (i / 128), 4);
    row[i] = naive_e4m3(token[i]) * scale;
  }
  for (int i = 0; i < 64; ++i) {
    uint16_t bits;
    std::memcpy(&bits, token + 528 + 2 * i, 2);
    row[512 + i] = naive_bf16(bits);
  }
  return row;
}

// Heads of query token (b, s) over index positions [p0, p1).
std::vector<NaiveRow> naive_sparse_query(const test::SparseDecodeInputs& in, int b, int s, int p0, int p1) {
  const SparseDecodeShape& sh = in.shape;
  const int counted = naive_counted(in.topk_length, b, sh.topk);
  std::vector<std::vector<double>> tokens;
  for (int k = p0; k < std::min(p1, counted); ++k) {
    const int32_t index = in.indices[b * in.indices_stride_b + s * in.indices_stride_s + k];
    if (index >= 0 && index < static_cast<int64_t>(sh.num_pages) * sh.page_size)
      tokens.push_back(naive_sparse_token(in, index));
  }
  std::vector<const std::vector<double>*> keys;
  for (const auto& t : tokens) keys.push_back(&t);
  std::vector<NaiveRow> rows;
  for (int h = 0; h < sh.h_q; ++h) {
    std::vector<double> q(576);
    for (int d = 0; d < 576; ++d)
      q[d] = naive_bf16(in.q[b * in.q_stride_b + s * in.q_stride_s + h * in.q_stride_h + d]);
    rows.push_back(naive_attend(q, keys, in.softmax_scale, sh.d_v));
  }
  return rows;
}

NaiveOutputs naive_sparse(const test::SparseDecodeInputs& in) {
  const SparseDecodeShape& sh = in.shape;
  NaiveOutputs result;
  result.lse.assign(static_cast<size_t>(sh.batch) * sh.h_q * sh.s_q, 0.0);
  for (int b = 0; b < sh.batch; ++b) {
    for (int s = 0; s < sh.s_q; ++s) {
      std::vector<NaiveRow> rows = naive_sparse_query(in, b, s, 0, sh.topk);
      for (int h = 0; h < sh.h_q; ++h) {
        naive_finish(rows[h], in.attn_sink.empty() ? nullptr : &in.attn_sink[h]);
        result.out.insert(result.out.end(), rows[h].o.begin(), rows[h].o.end());
        result.lse[(static_cast<size_t>(b) * sh.h_q + h) * sh.s_q + s] = rows[h].lse;
      }
    }
  }
  return result;
}

// ---- sparse prefill ----
NaiveOutputs naive_prefill(const test::SparsePrefillInputs& in) {
  const SparsePrefillShape& sh = in.shape;
  NaiveOutputs result;
  for (int s = 0; s < sh.s_q; ++s) {
    const int counted = naive_counted(in.topk_length, s, sh.topk);
    std::vector<std::vector<double>> tokens;
    for (int k = 0; k < counted; ++k) {
      const int32_t index = in.indices[s * in.indices_stride_s + k];
      if (index < 0 || index >= sh.s_kv) continue;
      std::vector<double> row(sh.d_qk);
      for (int d = 0; d < sh.d_qk; ++d) row[d] = naive_bf16(in.kv[index * in.kv_stride_s + d]);
      tokens.push_back(row);
    }
    std::vector<const std::vector<double>*> keys;
    for (const auto& t : tokens) keys.push_back(&t);
    for (int h = 0; h < sh.h_q; ++h) {
      std::vector<double> q(sh.d_qk);
      for (int d = 0; d < sh.d_qk; ++d) q[d] = naive_bf16(in.q[s * in.q_stride_s + h * in.q_stride_h + d]);
      NaiveRow row = naive_attend(q, keys, in.softmax_scale, sh.d_v);
      result.max_logits.push_back(row.max_logit);
      naive_finish(row, in.attn_sink.empty() ? nullptr : &in.attn_sink[h]);
      result.out.insert(result.out.end(), row.o.begin(), row.o.end());
      result.lse.push_back(row.lse);
    }
  }
  return result;
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------
// Half an ulp of the output dtype, relative: where rounding alone can move a value.
double half_ulp(DType dtype) { return dtype == DType::kFP16 ? 0x1p-11 : 0x1p-9; }

// Rounded outputs vs float64: rel-L2 and, element by element, rounding (with
// room for float32 accumulation) plus a small share of the row scale.
void expect_output_close(const std::vector<float>& got, const std::vector<double>& want, DType dtype) {
  ASSERT_EQ(got.size(), want.size());
  double norm2 = 0.0;
  for (double w : want) norm2 += w * w;
  const double rms = std::sqrt(norm2 / std::max<size_t>(want.size(), 1));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i]))
        << "output " << i << " = " << got[i] << " (NaN leaked or never written)";
    ASSERT_LE(std::fabs(got[i] - want[i]), 2 * half_ulp(dtype) * std::fabs(want[i]) + 1e-5 * rms)
        << "output " << i << ": got " << got[i] << ", expected " << want[i];
  }
  EXPECT_LE(test::rel_l2(got, want), dtype == DType::kFP16 ? 1e-3 : 4e-3);
}

void expect_lse_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance) {
  const test::LseComparison cmp = test::compare_lse(got, want, tolerance);
  EXPECT_TRUE(cmp.ok) << cmp.message;
}

// Split vs direct: both rounded from float32 results that differ only in
// summation order, so every element is within one ulp of the output dtype,
// plus float32 noise on the scale of the whole output (1e-6 of its rms) for
// elements far smaller than their neighbours.
void expect_within_one_ulp(const std::vector<float>& got, const std::vector<float>& want, DType dtype) {
  ASSERT_EQ(got.size(), want.size());
  const int mantissa_bits = dtype == DType::kFP16 ? 10 : 7;
  double norm2 = 0.0;
  for (float w : want) norm2 += double(w) * w;
  const double noise = 1e-6 * std::sqrt(norm2 / std::max<size_t>(want.size(), 1));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " = " << got[i];
    const float magnitude = std::max(std::fabs(got[i]), std::fabs(want[i]));
    // Subnormals have a fixed spacing: 2^-24 (fp16), 2^-133 (bf16).
    const double min_ulp = dtype == DType::kFP16 ? 0x1p-24 : 0x1p-133;
    const double ulp =
        magnitude == 0.0f ? 0.0 : std::max(std::ldexp(1.0, std::ilogb(magnitude) - mantissa_bits), min_ulp);
    ASSERT_LE(std::fabs(got[i] - want[i]), ulp + noise)
        << "output " << i << ": split " << got[i] << ", direct " << want[i];
  }
}

// ---------------------------------------------------------------------------
// Dense decode vs float64
// ---------------------------------------------------------------------------
struct DenseCase {
  const char* name;
  test::DenseDecodeConfig config;
};

test::DenseDecodeConfig dense_config(int batch, int s_q, int h_q, int h_kv, int page_size, DType dtype,
                                     bool causal, int d_qk = kHeadDimQK, int max_seqlen = 200, int pad = 0) {
  test::DenseDecodeConfig c;
  c.batch = batch, c.s_q = s_q, c.h_q = h_q, c.h_kv = h_kv, c.page_size = page_size;
  c.dtype = dtype, c.causal = causal, c.d_qk = d_qk, c.max_seqlen = max_seqlen, c.stride_pad_bytes = pad;
  return c;
}

std::vector<DenseCase> dense_cases() {
  return {
      {"bf16_h16_page64", dense_config(4, 1, 16, 1, 64, DType::kBF16, false)},
      {"bf16_h3_sq2_page16_causal", dense_config(4, 2, 3, 1, 16, DType::kBF16, true, kHeadDimQK, 150, 16)},
      {"bf16_h1_sq5_page1_causal", dense_config(4, 5, 1, 1, 1, DType::kBF16, true, kHeadDimQK, 70)},
      {"bf16_h128_hkv2_d512", dense_config(3, 1, 128, 2, 64, DType::kBF16, false, kHeadDimLatent, 90)},
      {"fp16_h16_hkv2_sq2_page16_causal",
       dense_config(4, 2, 16, 2, 16, DType::kFP16, true, kHeadDimQK, 200, 32)},
      {"fp16_h3_sq5_page64", dense_config(3, 5, 3, 1, 64, DType::kFP16, false, kHeadDimLatent, 100)},
      {"fp8_h16_page64", dense_config(4, 1, 16, 1, 64, DType::kFP8E4M3, false)},
      {"fp8_h16_hkv2_sq5_page16_causal",
       dense_config(3, 5, 16, 2, 16, DType::kFP8E4M3, true, kHeadDimQK, 120, 16)},
  };
}

void PrintTo(const DenseCase& c, std::ostream* os) { *os << c.name; }

class ReferenceDense : public ::testing::TestWithParam<DenseCase> {};

TEST_P(ReferenceDense, MatchesFloat64) {
  const DenseCase& c = GetParam();
  for (uint64_t seed : {1u, 2u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    test::DenseDecodeInputs in = test::make_dense_decode_inputs(c.config, seed);
    const Status status = reference_dense_decode(in.params());
    ASSERT_TRUE(status.is_ok()) << status.message();
    const NaiveOutputs want = naive_dense(in);
    expect_output_close(in.out_values(), want.out, in.shape.out_dtype);
    expect_lse_close(in.lse_values(), want.lse, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(ReferenceShapes, ReferenceDense, ::testing::ValuesIn(dense_cases()),
                         [](const ::testing::TestParamInfo<DenseCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(ReferenceDenseRows, EmptyRequestsAndCausalRowsWithoutKeys) {
  // Request 0: 3 tokens, s_q = 5, causal -> rows 0 and 1 see no key.
  // Request 1: empty. Request 2: 70 tokens over pages of 16 (last page partly poisoned).
  test::DenseDecodeConfig config = dense_config(3, 5, 4, 1, 16, DType::kBF16, true);
  config.seqlens = {3, 0, 70};
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 5);
  ASSERT_TRUE(reference_dense_decode(in.params()).is_ok());
  const auto out_bits = [&](int b, int s, int h, int d) {
    uint16_t bits;
    std::memcpy(&bits, in.out.data() + 2 * (in.out_index(b, s, h) + d), 2);
    return bits;
  };
  for (int h = 0; h < 4; ++h) {
    for (int s = 0; s < 5; ++s) {
      const bool empty_row = s < 2;
      if (empty_row) {
        EXPECT_EQ(in.lse[in.lse_index(0, h, s)], INFINITY) << "s " << s;
      } else {
        EXPECT_TRUE(std::isfinite(in.lse[in.lse_index(0, h, s)])) << "s " << s;
      }
      EXPECT_EQ(in.lse[in.lse_index(1, h, s)], INFINITY);
      EXPECT_TRUE(std::isfinite(in.lse[in.lse_index(2, h, s)]));
      for (int d = 0; d < kHeadDimV; ++d) {
        if (empty_row) {
          ASSERT_EQ(out_bits(0, s, h, d), 0) << "row s=" << s << " must be exact zeros";
        }
        ASSERT_EQ(out_bits(1, s, h, d), 0) << "empty request must give exact zeros";
      }
    }
    // Row s = 2 sees exactly one key: O is that key's V (bf16 -> float -> bf16 is exact).
    const int64_t page = in.block_table[0];
    for (int d = 0; d < kHeadDimV; ++d) {
      uint16_t key;
      std::memcpy(&key, in.kv_cache.data() + 2 * (page * in.kv_stride_page + d), 2);
      ASSERT_EQ(out_bits(0, 2, h, d), key) << "d " << d;
    }
  }
}

// ---------------------------------------------------------------------------
// Sparse decode vs float64
// ---------------------------------------------------------------------------
struct SparseCase {
  const char* name;
  test::SparseDecodeConfig config;
};

test::SparseDecodeConfig sparse_config(int batch, int s_q, int h_q, int topk, int page_size, int num_pages,
                                       bool topk_length, bool sink, int pad = 0) {
  test::SparseDecodeConfig c;
  c.batch = batch, c.s_q = s_q, c.h_q = h_q, c.topk = topk, c.page_size = page_size, c.num_pages = num_pages;
  c.use_topk_length = topk_length, c.use_attn_sink = sink, c.stride_pad_bytes = pad;
  return c;
}

std::vector<SparseCase> sparse_cases() {
  return {
      {"h16_topk128_page64", sparse_config(2, 1, 16, 128, 64, 6, false, false)},
      {"h8_sq2_topk64_page1_len_sink", sparse_config(3, 2, 8, 64, 1, 300, true, true)},
      {"h64_sq4_topk192_page16_len_sink_pad", sparse_config(2, 4, 64, 192, 16, 20, true, true, 32)},
      {"h128_topk64_page64_sink", sparse_config(2, 1, 128, 64, 64, 3, false, true)},
      {"h32_sq3_topk256_page64_len", sparse_config(3, 3, 32, 256, 64, 5, true, false, 16)},
  };
}

void PrintTo(const SparseCase& c, std::ostream* os) { *os << c.name; }

class ReferenceSparse : public ::testing::TestWithParam<SparseCase> {};

TEST_P(ReferenceSparse, MatchesFloat64) {
  const SparseCase& c = GetParam();
  for (uint64_t seed : {3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    test::SparseDecodeInputs in = test::make_sparse_decode_inputs(c.config, seed);
    const Status status = reference_sparse_decode(in.params());
    ASSERT_TRUE(status.is_ok()) << status.message();
    const NaiveOutputs want = naive_sparse(in);
    expect_output_close(in.out_values(), want.out, DType::kBF16);
    expect_lse_close(in.lse_values(), want.lse, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(ReferenceShapes, ReferenceSparse, ::testing::ValuesIn(sparse_cases()),
                         [](const ::testing::TestParamInfo<SparseCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(ReferenceSparseRows, AllInvalidRowsSinksAndClampedTopkLength) {
  test::SparseDecodeConfig config = sparse_config(3, 2, 8, 128, 16, 12, true, true);
  test::SparseDecodeInputs in = test::make_sparse_decode_inputs(config, 6);
  // Out-of-range lengths clamp to [0, topk].
  in.topk_length[0] = -5;
  in.topk_length[1] = 128 + 100;
  in.topk_length[2] = 77;
  // Positions the builder left uncounted point at poisoned tokens; now that
  // they count, point them at live ones.
  const int32_t live_token =
      static_cast<int32_t>(std::find(in.token_live.begin(), in.token_live.end(), 1) - in.token_live.begin());
  for (int b = 1; b < 3; ++b) {
    for (int s = 0; s < 2; ++s) {
      for (int k = 0; k < 128; ++k) {
        int32_t& index = in.indices[b * in.indices_stride_b + s * in.indices_stride_s + k];
        if (index >= 0 && index < 12 * 16 && !in.token_live[index])
          index = (b == 2 && s == 0) ? -1 : live_token;
      }
    }
  }
  ASSERT_TRUE(reference_sparse_decode(in.params()).is_ok());
  const NaiveOutputs want = naive_sparse(in);
  expect_output_close(in.out_values(), want.out, DType::kBF16);
  expect_lse_close(in.lse_values(), want.lse, 1e-4);

  const auto out_bits = [&](int b, int s, int h, int d) { return in.out[in.out_index(b, s, h) + d]; };
  for (int h = 0; h < 8; ++h) {
    for (int s = 0; s < 2; ++s) {
      // Request 0 counts nothing; request 2 row s = 0 has no valid index: O = 0, LSE = +inf.
      EXPECT_EQ(in.lse[in.lse_index(0, h, s)], INFINITY);
      for (int d = 0; d < kHeadDimV; ++d) ASSERT_EQ(out_bits(0, s, h, d), 0);
    }
    EXPECT_EQ(in.lse[in.lse_index(2, h, 0)], INFINITY);
    for (int d = 0; d < kHeadDimV; ++d) ASSERT_EQ(out_bits(2, 0, h, d), 0);
    // Request 1 (all 128 positions) has valid keys: LSE finite (the sink never changes it).
    EXPECT_TRUE(std::isfinite(in.lse[in.lse_index(1, h, 0)]));
  }
  // Sink +inf (head 0) zeroes O on rows with keys; sink -inf (head 1) leaves O as without a sink.
  for (int d = 0; d < kHeadDimV; ++d) ASSERT_EQ(bf16_bits_to_float(out_bits(1, 0, 0, d)), 0.0f);  // +-0
  std::vector<float> with_sink;
  for (int d = 0; d < kHeadDimV; ++d) with_sink.push_back(bf16_bits_to_float(out_bits(1, 1, 1, d)));
  in.attn_sink.clear();
  in.poison_outputs();
  ASSERT_TRUE(reference_sparse_decode(in.params()).is_ok());
  for (int d = 0; d < kHeadDimV; ++d) ASSERT_EQ(with_sink[d], bf16_bits_to_float(out_bits(1, 1, 1, d)));
}

// ---------------------------------------------------------------------------
// Sparse prefill vs float64
// ---------------------------------------------------------------------------
struct PrefillCase {
  const char* name;
  test::SparsePrefillConfig config;
};

test::SparsePrefillConfig prefill_config(int s_q, int h_q, int s_kv, int topk, int d_qk, bool topk_length,
                                         bool sink, int pad = 0) {
  test::SparsePrefillConfig c;
  c.s_q = s_q, c.h_q = h_q, c.s_kv = s_kv, c.topk = topk, c.d_qk = d_qk;
  c.use_topk_length = topk_length, c.use_attn_sink = sink, c.stride_pad_bytes = pad;
  return c;
}

std::vector<PrefillCase> prefill_cases() {
  return {
      {"h16_skv200_topk96", prefill_config(4, 16, 200, 96, kHeadDimQK, false, false)},
      {"h1_skv50_topk33_d512_len_sink", prefill_config(3, 1, 50, 33, kHeadDimLatent, true, true)},
      {"h3_skv700_topk130_sink_pad", prefill_config(5, 3, 700, 130, kHeadDimQK, false, true, 16)},
      {"h128_skv100_topk64_len", prefill_config(2, 128, 100, 64, kHeadDimQK, true, false)},
  };
}

void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.name; }

class ReferencePrefill : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(ReferencePrefill, MatchesFloat64) {
  const PrefillCase& c = GetParam();
  for (uint64_t seed : {7u, 8u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    test::SparsePrefillInputs in = test::make_sparse_prefill_inputs(c.config, seed);
    const Status status = reference_sparse_prefill(in.params());
    ASSERT_TRUE(status.is_ok()) << status.message();
    const NaiveOutputs want = naive_prefill(in);
    expect_output_close(in.out_values(), want.out, DType::kBF16);
    const std::vector<float> lse(in.lse.begin(), in.lse.end());
    const std::vector<float> max_logits(in.max_logits.begin(), in.max_logits.end());
    expect_lse_close(lse, want.lse, 1e-4);
    expect_lse_close(max_logits, want.max_logits, 1e-4);
    // The last query token has no valid index: max_logits -inf, LSE +inf.
    for (int h = 0; h < in.shape.h_q; ++h) {
      EXPECT_EQ(in.max_logits[(in.shape.s_q - 1) * in.shape.h_q + h], -INFINITY);
      EXPECT_EQ(in.lse[(in.shape.s_q - 1) * in.shape.h_q + h], INFINITY);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ReferenceShapes, ReferencePrefill, ::testing::ValuesIn(prefill_cases()),
                         [](const ::testing::TestParamInfo<PrefillCase>& info) {
                           return std::string(info.param.name);
                         });

// ---------------------------------------------------------------------------
// Split path: schedules made here (independent of the planner)
// ---------------------------------------------------------------------------
struct Schedule {
  DecodePlan plan;
  HostSchedule schedule;
};

// Cut the flattened (item, block) list into num_parts near-equal contiguous
// ranges; slots in part order, each split item's pieces consecutive.
Schedule even_split(int q_tokens_per_item, int rows_per_item, const std::vector<int32_t>& blocks,
                    int num_parts) {
  Schedule result;
  const int num_items = static_cast<int>(blocks.size());
  DecodePlan& plan = result.plan;
  plan.num_items = num_items;
  plan.q_tokens_per_item = q_tokens_per_item;
  plan.rows_per_item = rows_per_item;
  plan.num_parts = num_parts;
  plan.num_slots = num_parts > 1 ? 2 * (num_parts - 1) : 0;
  plan.d_v = kHeadDimV;

  std::vector<int64_t> prefix(num_items + 1, 0);
  for (int i = 0; i < num_items; ++i) prefix[i + 1] = prefix[i] + blocks[i];
  const int64_t total = prefix[num_items];
  const auto locate = [&](int64_t position) {  // flat position -> (item, block)
    int item = 0;
    while (prefix[item + 1] <= position) ++item;
    return std::pair<int, int>(item, static_cast<int>(position - prefix[item]));
  };
  std::vector<int> parts_of_item(num_items, 0);
  std::vector<int> first_slot_of_item(num_items, -1);
  std::vector<int> first_part_of_item(num_items, -1);
  int next_slot = 0;
  for (int p = 0; p < num_parts; ++p) {
    const int64_t lo = total * p / num_parts, hi = total * (p + 1) / num_parts;
    PartWork work{-1, 0, -1, 0, -1, kPartEmpty, {0, 0}};
    if (lo < hi) {
      const auto [begin_item, begin_block] = locate(lo);
      const auto [end_item, last_block] = locate(hi - 1);
      work.begin_item = begin_item, work.begin_block = begin_block;
      work.end_item = end_item, work.end_block = last_block + 1;
      const bool single = begin_item == end_item;
      const bool begin_partial = begin_block > 0 || (single && work.end_block < blocks[begin_item]);
      const bool end_partial = !single && work.end_block < blocks[end_item];
      work.flags = (begin_partial ? kPartBeginPartial : 0) | (end_partial ? kPartEndPartial : 0);
      const int pieces = int(begin_partial) + int(end_partial);
      work.first_slot = pieces > 0 ? next_slot : -1;
      if (begin_partial) {
        if (first_slot_of_item[begin_item] < 0)
          first_slot_of_item[begin_item] = next_slot, first_part_of_item[begin_item] = p;
        ++parts_of_item[begin_item];
      }
      if (end_partial) {
        first_slot_of_item[end_item] = next_slot + int(begin_partial), first_part_of_item[end_item] = p;
        ++parts_of_item[end_item];
      }
      next_slot += pieces;
    }
    result.schedule.parts.push_back(work);
  }
  EXPECT_LE(next_slot, plan.num_slots);
  result.schedule.combine.assign(num_parts, CombineEntry{-1, -1, 0, 0});
  for (int i = 0; i < num_items; ++i) {
    if (parts_of_item[i] >= 2) {
      result.schedule.combine[first_part_of_item[i]] =
          CombineEntry{i, first_slot_of_item[i], parts_of_item[i], 0};
    }
  }
  return result;
}

int count_split_items(const HostSchedule& schedule) {
  int count = 0;
  for (const CombineEntry& entry : schedule.combine) count += entry.num_pieces >= 2 ? 1 : 0;
  return count;
}

// Call visit(item, begin_block, end_block, slot) for every partial piece.
template <class Visit>
void for_each_partial_piece(const Schedule& s, const std::vector<int32_t>& blocks, Visit visit) {
  for (int p = 0; p < s.plan.num_parts; ++p) {
    const PartWork& part = s.schedule.parts[p];
    if (part.flags & kPartEmpty) continue;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      if (!part_item_is_partial(part, item)) continue;
      const int begin = part_item_begin_block(part, item);
      const int end = item == part.end_item ? part.end_block : blocks[item];
      visit(item, begin, end, part_item_slot(part, item));
    }
  }
}

// Compare one slot of partials with float64 pieces at float32 level.
void expect_slot_matches(const HostVector<float>& partial_o, const HostVector<float>& partial_lse, int slot,
                         int rows_per_item, const std::vector<NaiveRow>& want_rows) {
  std::vector<float> got_o(partial_o.begin() + int64_t(slot) * rows_per_item * kHeadDimV,
                           partial_o.begin() + int64_t(slot + 1) * rows_per_item * kHeadDimV);
  std::vector<float> got_lse(partial_lse.begin() + int64_t(slot) * rows_per_item,
                             partial_lse.begin() + int64_t(slot + 1) * rows_per_item);
  std::vector<double> want_o, want_lse;
  for (const NaiveRow& row : want_rows) {
    want_o.insert(want_o.end(), row.o.begin(), row.o.end());
    want_lse.push_back(row.lse);
  }
  EXPECT_LE(test::rel_l2(got_o, want_o), 1e-5) << "slot " << slot;
  // float32 scores carry error relative to their size; sparse rows reach LSE ~ 15.
  double largest = 1.0;
  for (double lse : want_lse) largest = std::isfinite(lse) ? std::max(largest, std::fabs(lse)) : largest;
  expect_lse_close(got_lse, want_lse, 1e-5 * largest);
}

// Split + combine on `in`; checks partial pieces against float64 and the final
// result against the direct path. Returns the number of split items.
int check_dense_split(test::DenseDecodeInputs& in, const Schedule& s) {
  const DenseDecodeShape& sh = in.shape;
  const DenseDecodeParams params = in.params();
  in.poison_outputs();
  EXPECT_TRUE(reference_dense_decode(params).is_ok());
  const std::vector<float> direct_out = in.out_values(), direct_lse = in.lse_values();

  in.poison_outputs();
  const int rows = sh.s_q * sh.h_q;
  HostVector<float> partial_o(std::max<size_t>(1, size_t(s.plan.num_slots) * rows * kHeadDimV), kNaNf);
  HostVector<float> partial_lse(std::max<size_t>(1, size_t(s.plan.num_slots) * rows), kNaNf);
  const Status status =
      reference_dense_decode_split(params, s.plan, s.schedule, partial_o.data(), partial_lse.data());
  EXPECT_TRUE(status.is_ok()) << status.message();

  std::vector<int32_t> blocks;
  for (int b = 0; b < sh.batch; ++b) blocks.push_back(std::max(1, (in.seqlens[b] + 63) / 64));
  for_each_partial_piece(s, blocks, [&](int item, int begin, int end, int slot) {
    SCOPED_TRACE("item " + std::to_string(item) + " blocks [" + std::to_string(begin) + ", " +
                 std::to_string(end) + ")");
    expect_slot_matches(partial_o, partial_lse, slot, rows,
                        naive_dense_request(in, item, 64 * begin, 64 * end));
  });

  CombineParams combine;
  combine.batch = sh.batch, combine.s_q = sh.s_q, combine.h_q = sh.h_q, combine.d_v = sh.d_v;
  combine.q_tokens_per_item = sh.s_q;
  combine.num_entries = s.plan.num_parts, combine.num_slots = s.plan.num_slots;
  combine.entries = s.schedule.combine.data();
  combine.partial_o = partial_o.data(), combine.partial_lse = partial_lse.data();
  combine.out = in.out.data(), combine.out_dtype = sh.out_dtype;
  combine.out_stride_b = in.out_stride_b, combine.out_stride_s = in.out_stride_s,
  combine.out_stride_h = in.out_stride_h;
  combine.lse = in.lse.data(), combine.lse_stride_b = in.lse_stride_b, combine.lse_stride_h = in.lse_stride_h;
  const Status combined = reference_combine(combine);
  EXPECT_TRUE(combined.is_ok()) << combined.message();

  expect_within_one_ulp(in.out_values(), direct_out, sh.out_dtype);
  const test::LseComparison cmp = test::compare_lse(in.lse_values(), direct_lse, 1e-5);
  EXPECT_TRUE(cmp.ok) << cmp.message;
  return count_split_items(s.schedule);
}

int check_sparse_split(test::SparseDecodeInputs& in, const Schedule& s) {
  const SparseDecodeShape& sh = in.shape;
  const SparseDecodeParams params = in.params();
  in.poison_outputs();
  EXPECT_TRUE(reference_sparse_decode(params).is_ok());
  const std::vector<float> direct_out = in.out_values(), direct_lse = in.lse_values();

  in.poison_outputs();
  HostVector<float> partial_o(std::max<size_t>(1, size_t(s.plan.num_slots) * sh.h_q * kHeadDimV), kNaNf);
  HostVector<float> partial_lse(std::max<size_t>(1, size_t(s.plan.num_slots) * sh.h_q), kNaNf);
  const Status status =
      reference_sparse_decode_split(params, s.plan, s.schedule, partial_o.data(), partial_lse.data());
  EXPECT_TRUE(status.is_ok()) << status.message();

  std::vector<int32_t> blocks;
  for (int item = 0; item < sh.batch * sh.s_q; ++item) {
    blocks.push_back(std::max(1, (naive_counted(in.topk_length, item / sh.s_q, sh.topk) + 63) / 64));
  }
  for_each_partial_piece(s, blocks, [&](int item, int begin, int end, int slot) {
    SCOPED_TRACE("item " + std::to_string(item) + " blocks [" + std::to_string(begin) + ", " +
                 std::to_string(end) + ")");
    expect_slot_matches(partial_o, partial_lse, slot, sh.h_q,
                        naive_sparse_query(in, item / sh.s_q, item % sh.s_q, 64 * begin, 64 * end));
  });

  CombineParams combine;
  combine.batch = sh.batch, combine.s_q = sh.s_q, combine.h_q = sh.h_q, combine.d_v = sh.d_v;
  combine.q_tokens_per_item = 1;
  combine.num_entries = s.plan.num_parts, combine.num_slots = s.plan.num_slots;
  combine.entries = s.schedule.combine.data();
  combine.partial_o = partial_o.data(), combine.partial_lse = partial_lse.data();
  combine.attn_sink = params.attn_sink;
  combine.out = in.out.data(), combine.out_dtype = DType::kBF16;
  combine.out_stride_b = in.out_stride_b, combine.out_stride_s = in.out_stride_s,
  combine.out_stride_h = in.out_stride_h;
  combine.lse = in.lse.data(), combine.lse_stride_b = in.lse_stride_b, combine.lse_stride_h = in.lse_stride_h;
  const Status combined = reference_combine(combine);
  EXPECT_TRUE(combined.is_ok()) << combined.message();

  expect_within_one_ulp(in.out_values(), direct_out, DType::kBF16);
  const test::LseComparison cmp = test::compare_lse(in.lse_values(), direct_lse, 1e-5);
  EXPECT_TRUE(cmp.ok) << cmp.message;
  return count_split_items(s.schedule);
}

TEST(ReferenceSplit, DenseEvenSchedulesMatchDirect) {
  int splits = 0;
  for (const DenseCase& c : dense_cases()) {
    test::DenseDecodeConfig config = c.config;
    config.max_seqlen = 300;  // several 64-token blocks per request
    test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 21);
    std::vector<int32_t> blocks;
    for (int b = 0; b < config.batch; ++b) blocks.push_back(std::max(1, (in.seqlens[b] + 63) / 64));
    for (int parts : {1, 2, 3, 7, 40}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(parts) + " parts");
      splits += check_dense_split(in, even_split(config.s_q, config.s_q * config.h_q, blocks, parts));
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(splits, 20);
}

TEST(ReferenceSplit, SparseEvenSchedulesMatchDirect) {
  int splits = 0;
  for (const SparseCase& c : sparse_cases()) {
    test::SparseDecodeInputs in = test::make_sparse_decode_inputs(c.config, 22);
    std::vector<int32_t> blocks;
    for (int item = 0; item < c.config.batch * c.config.s_q; ++item) {
      blocks.push_back(
          std::max(1, (naive_counted(in.topk_length, item / c.config.s_q, c.config.topk) + 63) / 64));
    }
    for (int parts : {1, 2, 5, 11}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(parts) + " parts");
      splits += check_sparse_split(in, even_split(1, c.config.h_q, blocks, parts));
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(splits, 5);
}

// ---------------------------------------------------------------------------
// Split path: schedules from the planner (plan_* + build_schedule_host)
// ---------------------------------------------------------------------------
TEST(ReferenceSplit, DensePlannerSchedulesMatchDirect) {
  int splits = 0;
  for (const DenseCase& c : dense_cases()) {
    // Long requests (the planner only splits what is worth it) and few heads
    // (h_q = 128 is covered by the even schedules) keep this fast.
    test::DenseDecodeConfig config = c.config;
    config.seqlens = {800, 0, 500, 1};
    config.seqlens.resize(config.batch);
    config.h_q = std::min(config.h_q, 16);
    test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 23);
    for (int parts : {2, 7}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(parts) + " parts");
      Schedule s;
      ASSERT_TRUE(plan_dense_decode(in.shape, DeviceInfo{}, &s.plan,
                                    PlanOptions{.max_parts = parts, .min_parts = parts})
                      .is_ok());
      ItemLengths lengths = s.plan.lengths;
      lengths.lengths = in.seqlens.data();
      ASSERT_TRUE(build_schedule_host(s.plan, lengths, &s.schedule).is_ok());
      const Status valid = check_plan(s.plan, lengths, s.schedule);
      ASSERT_TRUE(valid.is_ok()) << valid.message();
      splits += check_dense_split(in, s);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(splits, 10);
}

TEST(ReferenceSplit, SparsePlannerSchedulesMatchDirect) {
  int splits = 0;
  for (const SparseCase& c : sparse_cases()) {
    test::SparseDecodeConfig config = c.config;
    config.topk = 512;  // enough blocks per item for the planner to split
    test::SparseDecodeInputs in = test::make_sparse_decode_inputs(config, 24);
    for (int parts : {3, 8}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(parts) + " parts");
      Schedule s;
      ASSERT_TRUE(plan_sparse_decode(in.shape, DeviceInfo{}, &s.plan,
                                     PlanOptions{.max_parts = parts, .min_parts = parts})
                      .is_ok());
      ItemLengths lengths = s.plan.lengths;
      lengths.lengths = in.topk_length.empty() ? nullptr : in.topk_length.data();
      ASSERT_TRUE(build_schedule_host(s.plan, lengths, &s.schedule).is_ok());
      const Status valid = check_plan(s.plan, lengths, s.schedule);
      ASSERT_TRUE(valid.is_ok()) << valid.message();
      splits += check_sparse_split(in, s);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(splits, 5);
}

// ---------------------------------------------------------------------------
// Combine on its own: hand-made partials
// ---------------------------------------------------------------------------
TEST(ReferenceCombine, MergesPiecesHandlesEmptyPiecesAndSinks) {
  // batch 1, s_q 1, h_q 3 (rows = heads), one entry with three pieces.
  constexpr int kHeads = 3, kPieces = 3;
  HostVector<float> partial_o(kPieces * kHeads * kHeadDimV);
  HostVector<float> partial_lse(kPieces * kHeads);
  const float lses[kHeads][kPieces] = {{1.0f, 2.5f, -0.5f},                 // three live pieces
                                       {-INFINITY, 0.25f, -INFINITY},       // one live piece
                                       {-INFINITY, -INFINITY, -INFINITY}};  // all empty
  for (int p = 0; p < kPieces; ++p) {
    for (int h = 0; h < kHeads; ++h) {
      partial_lse[p * kHeads + h] = lses[h][p];
      for (int d = 0; d < kHeadDimV; ++d) {
        // Empty pieces hold NaN: the combine must never read their O.
        partial_o[(p * kHeads + h) * kHeadDimV + d] =
            lses[h][p] == -INFINITY ? kNaNf : float(p + 1) + 0.001f * d;
      }
    }
  }
  const HostVector<CombineEntry> entries{CombineEntry{0, 0, kPieces, 0}, CombineEntry{-1, -1, 0, 0}};
  HostVector<uint16_t> out(kHeads * kHeadDimV, test::kFp16NaN);
  HostVector<float> lse(kHeads, kNaNf);
  const HostVector<float> sink{-INFINITY, 1.0f, INFINITY};

  for (bool with_sink : {false, true}) {
    CombineParams params;
    params.batch = 1, params.s_q = 1, params.h_q = kHeads, params.q_tokens_per_item = 1;
    params.num_entries = 2, params.num_slots = kPieces;
    params.entries = entries.data(), params.partial_o = partial_o.data(),
    params.partial_lse = partial_lse.data();
    params.attn_sink = with_sink ? sink.data() : nullptr;
    params.out = out.data(), params.out_dtype = DType::kFP16;
    params.out_stride_b = kHeads * kHeadDimV, params.out_stride_s = kHeads * kHeadDimV,
    params.out_stride_h = kHeadDimV;
    params.lse = lse.data(), params.lse_stride_b = kHeads, params.lse_stride_h = 1;
    const Status status = reference_combine(params);
    ASSERT_TRUE(status.is_ok()) << status.message();

    for (int h = 0; h < kHeads; ++h) {
      double max_lse = -kInf, sum = 0.0;
      for (int p = 0; p < kPieces; ++p) max_lse = std::max(max_lse, double(lses[h][p]));
      for (int p = 0; p < kPieces; ++p) sum += std::exp(lses[h][p] - max_lse);
      const double want_lse = max_lse == -kInf ? kInf : max_lse + std::log(sum);
      if (std::isinf(want_lse)) {
        EXPECT_EQ(lse[h], INFINITY);
      } else {
        EXPECT_NEAR(lse[h], want_lse, 1e-6);
      }
      double factor = 1.0;
      if (with_sink && std::isfinite(want_lse)) factor = 1.0 / (1.0 + std::exp(double(sink[h]) - want_lse));
      for (int d = 0; d < kHeadDimV; ++d) {
        double want = 0.0;
        for (int p = 0; p < kPieces; ++p) {
          if (lses[h][p] != -INFINITY) want += std::exp(lses[h][p] - want_lse) * (p + 1 + 0.001 * d);
        }
        if (!std::isfinite(want_lse)) want = 0.0;
        want *= factor;
        const float got = fp16_bits_to_float(out[h * kHeadDimV + d]);
        ASSERT_NEAR(got, want, 2 * half_ulp(DType::kFP16) * std::fabs(want) + 1e-7)
            << "head " << h << " d " << d;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Validation and the input builders themselves
// ---------------------------------------------------------------------------
TEST(ReferenceValidation, BadArgumentsAreRejectedWithTheEntryName) {
  test::DenseDecodeInputs dense =
      test::make_dense_decode_inputs(dense_config(2, 1, 4, 1, 16, DType::kBF16, false), 9);
  DenseDecodeParams params = dense.params();
  params.shape.h_kv = 3;  // 4 % 3 != 0
  Status status = reference_dense_decode(params);
  EXPECT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("reference_dense_decode"), std::string::npos) << status.message();

  test::SparseDecodeInputs sparse =
      test::make_sparse_decode_inputs(sparse_config(1, 1, 16, 64, 64, 2, false, false), 9);
  SparseDecodeParams sparse_params = sparse.params();
  sparse_params.shape.topk = 100;  // not a multiple of 64
  status = reference_sparse_decode(sparse_params);
  EXPECT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("reference_sparse_decode"), std::string::npos) << status.message();

  // A schedule that does not belong to the params.
  Schedule s = even_split(1, 4, {1, 1, 1}, 2);
  HostVector<float> partial_o(2 * 4 * kHeadDimV), partial_lse(2 * 4);
  status =
      reference_dense_decode_split(dense.params(), s.plan, s.schedule, partial_o.data(), partial_lse.data());
  EXPECT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("reference_dense_decode_split"), std::string::npos) << status.message();
}

TEST(ReferenceInputs, BuildersPoisonWhatMustNotBeRead) {
  test::DenseDecodeConfig config = dense_config(4, 2, 4, 1, 16, DType::kBF16, false);
  config.seqlens = {37, 0, 16, 5};
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 10);
  const int pages_used[] = {3, 0, 1, 1};
  std::vector<int> seen(in.shape.num_pages, 0);
  for (int b = 0; b < 4; ++b) {
    for (int j = 0; j < in.shape.max_pages_per_seq; ++j) {
      const int32_t entry = in.block_table[b * in.block_table_stride_b + j];
      if (j < pages_used[b]) {
        ASSERT_GE(entry, 0);
        ASSERT_LT(entry, in.shape.num_pages);
        ++seen[entry];
      } else {
        ASSERT_EQ(entry, test::kGarbagePage);
      }
    }
  }
  // Token slots that no request owns are NaN; owned ones are finite.
  for (int page = 0; page < in.shape.num_pages; ++page) {
    int owner = -1, first_page_index = 0;
    for (int b = 0; b < 4; ++b)
      for (int j = 0; j < pages_used[b]; ++j)
        if (in.block_table[b * in.block_table_stride_b + j] == page) owner = b, first_page_index = j;
    ASSERT_LE(seen[page], 1);
    for (int slot = 0; slot < 16; ++slot) {
      const bool owned = owner >= 0 && first_page_index * 16 + slot < in.seqlens[owner];
      const double value = naive_element(DType::kBF16, in.kv_cache.data(),
                                         page * in.kv_stride_page + slot * in.kv_stride_token);
      ASSERT_EQ(std::isnan(value), !owned) << "page " << page << " slot " << slot;
    }
  }
  for (float v : in.out_values()) ASSERT_TRUE(std::isnan(v));
  for (float v : in.lse_values()) ASSERT_TRUE(std::isnan(v));

  // Sparse: every kind of index appears; counted valid ones point at live tokens.
  test::SparseDecodeInputs sparse =
      test::make_sparse_decode_inputs(sparse_config(3, 2, 16, 256, 16, 20, true, true), 11);
  const int64_t num_tokens = int64_t(sparse.shape.num_pages) * sparse.shape.page_size;
  int minus_one = 0, too_large = 0, negative = 0, valid = 0, uncounted_dead = 0;
  for (int b = 0; b < 3; ++b) {
    for (int s = 0; s < 2; ++s) {
      for (int k = 0; k < 256; ++k) {
        const int32_t index = sparse.indices[b * sparse.indices_stride_b + s * sparse.indices_stride_s + k];
        const bool counted = k < sparse.topk_length[b];
        const bool in_range = index >= 0 && index < num_tokens;
        if (!counted) {
          uncounted_dead += in_range && !sparse.token_live[index];
          continue;
        }
        if (index == -1)
          ++minus_one;
        else if (index >= num_tokens)
          ++too_large;
        else if (index < 0)
          ++negative;
        else {
          ++valid;
          ASSERT_TRUE(sparse.token_live[index]) << "counted index " << index << " points at a poisoned token";
        }
      }
    }
  }
  EXPECT_GT(minus_one, 0);
  EXPECT_GT(too_large, 0);
  EXPECT_GT(negative, 0);
  EXPECT_GT(valid, 0);
  EXPECT_GT(uncounted_dead, 0);
  EXPECT_TRUE(std::isinf(sparse.attn_sink[0]) && sparse.attn_sink[0] > 0);
}

// A page id out of range inside a request's length is refused, not dereferenced.
TEST(ReferenceDenseDecode, RejectsOutOfRangePageIds) {
  test::DenseDecodeConfig config;
  config.seqlens = {100, 50};
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config, 17);
  inputs.block_table[1] = inputs.shape.num_pages + 5;  // request 0, page 1 holds tokens 64..99
  const Status status = reference_dense_decode(inputs.params());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("argument 'block_table' holds an invalid page"), std::string::npos)
      << status.message();
  inputs.block_table[1] = -3;
  EXPECT_EQ(reference_dense_decode(inputs.params()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace openmla

// Argument validation: each family starts from a params struct that passes,
// then one table row changes one field and checks the status code, the entry
// and argument the message names, and the phrase after "expected".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "validate/validate.h"
#include "openmla/openmla.h"
#include "test_util/host_buffer.h"

namespace openmla {
namespace {

// ---- host buffers and pointer helpers ------------------------------------------
using Buffer = test::HostBuffer;
constexpr auto make_buffer = test::make_host_buffer;

template <class T>
T* offset_bytes(T* p, size_t bytes) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + bytes);
}

const float kUnitScale = 1.0f;  // fp8 dequant scales for the fp8 rows
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- the table row and the message check -----------------------------------------
template <class Params>
struct BadCase {
  std::string label;                    // test name suffix
  std::function<void(Params&)> mutate;  // one change to a valid struct
  StatusCode code;
  std::string arg;       // the message must name this argument
  std::string expected;  // and contain this after ", expected "
};

template <class Params>
void PrintTo(const BadCase<Params>& c, std::ostream* os) {
  *os << c.label;
}

template <class Case>
std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.label;
}

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kUnsupported = StatusCode::kNotSupported;

// "<entry>: argument '<arg>' <problem>: got <value>, expected <expected ...>"
void expect_rejected(const Status& status, const std::string& entry, StatusCode code,
                     const std::string& arg, const std::string& expected) {
  const std::string& m = status.message();
  EXPECT_EQ(status.code(), code) << status_code_name(status.code()) << ": " << m;
  EXPECT_EQ(m.rfind(entry + ": argument '" + arg + "' ", 0), 0u) << m;
  const size_t got = m.find(": got ");
  const size_t exp = m.find(", expected ");
  ASSERT_NE(got, std::string::npos) << m;
  ASSERT_NE(exp, std::string::npos) << m;
  EXPECT_LT(got, exp) << m;
  EXPECT_NE(m.find(expected, exp), std::string::npos) << "want \"" << expected << "\" in: " << m;
}

template <class Params>
using Mutation = std::function<void(Params&)>;

// The family's valid setup is accepted; with the case's mutation it is
// rejected with the case's code, argument and expectation.
template <class Setup, class Case, class CanImplement>
void check_rejected(const Case& c, const CanImplement& can_implement, const char* entry) {
  Setup setup;
  ASSERT_TRUE(can_implement(setup.p)) << can_implement(setup.p).message();
  c.mutate(setup.p);
  expect_rejected(can_implement(setup.p), entry, c.code, c.arg, c.expected);
}

// Every variant of the family's valid setup is accepted.
template <class Setup, class Params, class CanImplement>
void check_accepted(const std::vector<std::pair<const char*, Mutation<Params>>>& variants,
                    const CanImplement& can_implement) {
  for (const auto& [what, mutate] : variants) {
    Setup setup;
    mutate(setup.p);
    const Status status = can_implement(setup.p);
    EXPECT_TRUE(status) << what << ": " << status.message();
  }
}

// ===========================================================================
// Dense decode
// ===========================================================================
// batch 2, s_q 2, h_q 16, h_kv 2, d_qk 576, 8 pages of 16 tokens, all contiguous.
struct DenseSetup {
  Buffer q, kv, block_table, seqlens, out, lse;
  DenseDecodeParams p;

  DenseSetup() {
    DenseDecodeShape& s = p.shape;
    s.batch = 2, s.s_q = 2, s.h_q = 16, s.h_kv = 2;
    s.page_size = 16, s.num_pages = 8, s.max_pages_per_seq = 4;
    const int64_t d = s.d_qk, dv = s.d_v;
    q = make_buffer(size_t(s.batch) * s.s_q * s.h_q * d * 2);
    kv = make_buffer(size_t(s.num_pages) * s.page_size * s.h_kv * d * 2);
    block_table = make_buffer(size_t(s.batch) * s.max_pages_per_seq * 4);
    seqlens = make_buffer(size_t(s.batch) * 4);
    out = make_buffer(size_t(s.batch) * s.s_q * s.h_q * dv * 2);
    lse = make_buffer(size_t(s.batch) * s.h_q * s.s_q * 4);

    p.q = q.get();
    p.q_stride_h = d, p.q_stride_s = s.h_q * d, p.q_stride_b = s.s_q * s.h_q * d;
    p.kv_cache = kv.get();
    p.kv_stride_head = d;
    p.kv_stride_token = s.h_kv * d;
    p.kv_stride_page = s.page_size * s.h_kv * d;
    p.block_table = static_cast<const int32_t*>(block_table.get());
    p.block_table_stride_b = s.max_pages_per_seq;
    p.seqlens = static_cast<const int32_t*>(seqlens.get());
    p.out = out.get();
    p.out_stride_h = dv, p.out_stride_s = s.h_q * dv, p.out_stride_b = s.s_q * s.h_q * dv;
    p.lse = static_cast<float*>(lse.get());
    p.lse_stride_h = s.s_q, p.lse_stride_b = s.h_q * s.s_q;
    p.softmax_scale = 1.0f / std::sqrt(576.0f);
  }
};

void make_fp8(DenseDecodeParams& p) {
  p.shape.q_dtype = p.shape.kv_dtype = DType::kFP8E4M3;
  p.shape.out_dtype = DType::kBF16;
  p.q_scale = &kUnitScale;
  p.kv_scale = &kUnitScale;
}

using DenseCase = BadCase<DenseDecodeParams>;

std::vector<DenseCase> dense_cases() {
  using P = DenseDecodeParams;
  return {
      // ---- shape ----
      {"batch_zero", [](P& p) { p.shape.batch = 0; }, kInvalid, "batch", "1 <= batch <= 16777216"},
      {"batch_above_limit", [](P& p) { p.shape.batch = (1 << 24) + 1; }, kUnsupported, "batch",
       "1 <= batch <= 16777216"},
      {"s_q_zero", [](P& p) { p.shape.s_q = 0; }, kInvalid, "s_q", "1 <= s_q <= 1024"},
      {"s_q_1025", [](P& p) { p.shape.s_q = 1025; }, kUnsupported, "s_q", "1 <= s_q <= 1024"},
      {"h_q_zero", [](P& p) { p.shape.h_q = 0; }, kInvalid, "h_q", "1 <= h_q <= 128"},
      {"h_q_256", [](P& p) { p.shape.h_q = 256; }, kUnsupported, "h_q", "1 <= h_q <= 128"},
      {"h_kv_zero", [](P& p) { p.shape.h_kv = 0; }, kInvalid, "h_kv", "1 <= h_kv <= 8"},
      {"h_kv_9", [](P& p) { p.shape.h_kv = 9; }, kUnsupported, "h_kv", "1 <= h_kv <= 8"},
      {"h_q_not_multiple_of_h_kv", [](P& p) { p.shape.h_q = 100, p.shape.h_kv = 3; }, kInvalid,
       "h_q", "h_q % h_kv == 0"},
      {"d_qk_128", [](P& p) { p.shape.d_qk = 128; }, kUnsupported, "d_qk", "one of {576, 512}"},
      {"d_v_256", [](P& p) { p.shape.d_v = 256; }, kUnsupported, "d_v", "d_v == 512"},
      {"page_size_zero", [](P& p) { p.shape.page_size = 0; }, kInvalid, "page_size",
       "1 <= page_size <= 1048576"},
      {"page_size_above_limit", [](P& p) { p.shape.page_size = (1 << 20) + 1; }, kUnsupported,
       "page_size", "1 <= page_size <= 1048576"},
      {"num_pages_zero", [](P& p) { p.shape.num_pages = 0; }, kInvalid, "num_pages",
       "num_pages >= 1"},
      {"max_pages_per_seq_zero", [](P& p) { p.shape.max_pages_per_seq = 0; }, kInvalid,
       "max_pages_per_seq", "max_pages_per_seq >= 1"},
      {"token_space_overflows_int32",
       [](P& p) { p.shape.num_pages = 1 << 22, p.shape.page_size = 1 << 10; }, kUnsupported,
       "num_pages", "num_pages * page_size <= 2147483647"},
      // ---- dtypes ----
      {"q_dtype_fp32",
       [](P& p) { p.shape.q_dtype = p.shape.kv_dtype = p.shape.out_dtype = DType::kFP32; },
       kUnsupported, "q_dtype", "one of {bf16, fp16, fp8_e4m3}"},
      {"kv_dtype_mismatch", [](P& p) { p.shape.kv_dtype = DType::kFP16; }, kUnsupported, "kv_dtype",
       "kv_dtype == q_dtype"},
      {"kv_fp8_with_bf16_q", [](P& p) { p.shape.kv_dtype = DType::kFP8E4M3; }, kUnsupported,
       "kv_dtype", "kv_dtype == q_dtype"},
      {"out_dtype_mismatch", [](P& p) { p.shape.out_dtype = DType::kFP16; }, kUnsupported,
       "out_dtype", "out_dtype == q_dtype"},
      {"fp8_out_dtype_fp8", [](P& p) { make_fp8(p), p.shape.out_dtype = DType::kFP8E4M3; },
       kUnsupported, "out_dtype", "out_dtype == bf16"},
      {"fp8_without_q_scale", [](P& p) { make_fp8(p), p.q_scale = nullptr; }, kInvalid, "q_scale",
       "a non-null pointer"},
      {"fp8_without_kv_scale", [](P& p) { make_fp8(p), p.kv_scale = nullptr; }, kInvalid,
       "kv_scale", "a non-null pointer"},
      // ---- pointers ----
      {"q_null", [](P& p) { p.q = nullptr; }, kInvalid, "q", "a non-null pointer"},
      {"kv_cache_null", [](P& p) { p.kv_cache = nullptr; }, kInvalid, "kv_cache",
       "a non-null pointer"},
      {"block_table_null", [](P& p) { p.block_table = nullptr; }, kInvalid, "block_table",
       "a non-null pointer"},
      {"seqlens_null", [](P& p) { p.seqlens = nullptr; }, kInvalid, "seqlens",
       "a non-null pointer"},
      {"out_null", [](P& p) { p.out = nullptr; }, kInvalid, "out", "a non-null pointer"},
      {"lse_null", [](P& p) { p.lse = nullptr; }, kInvalid, "lse", "a non-null pointer"},
      {"q_misaligned", [](P& p) { p.q = offset_bytes(p.q, 1); }, kInvalid, "q",
       "an address that is a multiple of 16"},
      {"kv_cache_misaligned", [](P& p) { p.kv_cache = offset_bytes(p.kv_cache, 8); }, kInvalid,
       "kv_cache", "an address that is a multiple of 16"},
      {"out_misaligned", [](P& p) { p.out = offset_bytes(p.out, 2); }, kInvalid, "out",
       "an address that is a multiple of 16"},
      {"block_table_misaligned", [](P& p) { p.block_table = offset_bytes(p.block_table, 2); },
       kInvalid, "block_table", "an address that is a multiple of 4"},
      {"seqlens_misaligned", [](P& p) { p.seqlens = offset_bytes(p.seqlens, 1); }, kInvalid,
       "seqlens", "an address that is a multiple of 4"},
      {"lse_misaligned", [](P& p) { p.lse = offset_bytes(p.lse, 2); }, kInvalid, "lse",
       "an address that is a multiple of 4"},
      {"fp8_q_scale_misaligned", [](P& p) { make_fp8(p), p.q_scale = offset_bytes(p.q_scale, 1); },
       kInvalid, "q_scale", "an address that is a multiple of 4"},
      // ---- strides ----
      {"q_stride_h_below_d_qk", [](P& p) { p.q_stride_h = 575; }, kInvalid, "q_stride_h",
       "q_stride_h >= d_qk = 576"},
      {"q_stride_h_negative", [](P& p) { p.q_stride_h = -576; }, kInvalid, "q_stride_h",
       "q_stride_h >= 0"},
      {"q_stride_h_not_16_bytes", [](P& p) { p.q_stride_h = 580; }, kInvalid, "q_stride_h",
       "q_stride_h * 2 % 16 == 0"},
      {"q_stride_s_overlaps_heads", [](P& p) { p.q_stride_s = 576; }, kInvalid, "q_stride_s",
       "q_stride_s >= h_q * q_stride_h = 9216"},
      {"q_stride_b_overlaps_tokens", [](P& p) { p.q_stride_b = 9216; }, kInvalid, "q_stride_b",
       "q_stride_b >= s_q * q_stride_s = 18432"},
      {"kv_stride_head_below_d_qk", [](P& p) { p.kv_stride_head = 512; }, kInvalid,
       "kv_stride_head", "kv_stride_head >= d_qk = 576"},
      {"kv_stride_token_overlaps_heads", [](P& p) { p.kv_stride_token = 576; }, kInvalid,
       "kv_stride_token", "kv_stride_token >= h_kv * kv_stride_head = 1152"},
      {"kv_stride_page_overlaps_tokens", [](P& p) { p.kv_stride_page = 1152; }, kInvalid,
       "kv_stride_page", "kv_stride_page >= page_size * kv_stride_token = 18432"},
      {"kv_stride_page_negative", [](P& p) { p.kv_stride_page = -18432; }, kInvalid,
       "kv_stride_page", "kv_stride_page >= 0"},
      {"kv_cache_too_large_to_address", [](P& p) { p.kv_stride_page = int64_t(1) << 61; }, kInvalid,
       "kv_cache", "num_pages * kv_stride_page * 2 <= INT64_MAX bytes"},
      {"block_table_stride_b_small", [](P& p) { p.block_table_stride_b = 3; }, kInvalid,
       "block_table_stride_b", "block_table_stride_b >= max_pages_per_seq = 4"},
      {"out_stride_h_below_d_v", [](P& p) { p.out_stride_h = 511; }, kInvalid, "out_stride_h",
       "out_stride_h >= d_v = 512"},
      {"out_stride_s_not_16_bytes", [](P& p) { p.out_stride_s = 16 * 512 + 4; }, kInvalid,
       "out_stride_s", "out_stride_s * 2 % 16 == 0"},
      {"out_stride_b_overlaps_tokens", [](P& p) { p.out_stride_b = 8192; }, kInvalid,
       "out_stride_b", "out_stride_b >= s_q * out_stride_s = 16384"},
      {"lse_stride_h_below_s_q", [](P& p) { p.lse_stride_h = 1; }, kInvalid, "lse_stride_h",
       "lse_stride_h >= s_q = 2"},
      {"lse_stride_b_overlaps_heads", [](P& p) { p.lse_stride_b = 2; }, kInvalid, "lse_stride_b",
       "lse_stride_b >= h_q * lse_stride_h = 32"},
      // ---- softmax scale ----
      {"softmax_scale_nan", [](P& p) { p.softmax_scale = kNan; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
      {"softmax_scale_negative", [](P& p) { p.softmax_scale = -0.125f; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
      {"softmax_scale_zero", [](P& p) { p.softmax_scale = 0.0f; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
      {"softmax_scale_inf", [](P& p) { p.softmax_scale = kInf; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
  };
}

class ValidationDenseDecode : public testing::TestWithParam<DenseCase> {};

TEST_P(ValidationDenseDecode, RejectsBadInput) {
  check_rejected<DenseSetup>(GetParam(), dense_decode_can_implement, "dense_decode_can_implement");
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationDenseDecode, testing::ValuesIn(dense_cases()),
                         case_name<DenseCase>);

TEST(ValidationDenseDecodeOk, AcceptsSupportedVariants) {
  const std::vector<std::pair<const char*, Mutation<DenseDecodeParams>>> variants = {
      {"baseline", [](DenseDecodeParams&) {}},
      {"fp16",
       [](DenseDecodeParams& p) {
         p.shape.q_dtype = p.shape.kv_dtype = p.shape.out_dtype = DType::kFP16;
       }},
      {"fp8 with scales", make_fp8},
      {"d_qk 512 (latent only)", [](DenseDecodeParams& p) { p.shape.d_qk = 512; }},
      {"padded head stride",
       [](DenseDecodeParams& p) {
         p.q_stride_h = 640, p.q_stride_s = 16 * 640, p.q_stride_b = 2 * 16 * 640;
       }},
      // NOTE: a stride over a single element is never applied, so anything >= 0 goes.
      {"s_q = 1 ignores token strides",
       [](DenseDecodeParams& p) {
         p.shape.s_q = 1, p.q_stride_s = 0, p.out_stride_s = 3, p.q_stride_b = 16 * 576;
         p.out_stride_b = 16 * 512;
       }},
      {"batch = 1 ignores batch strides",
       [](DenseDecodeParams& p) {
         p.shape.batch = 1, p.q_stride_b = 0, p.out_stride_b = 0, p.lse_stride_b = 0;
         p.block_table_stride_b = 4;
       }},
      {"page_size 1", [](DenseDecodeParams& p) { p.shape.page_size = 1; }},
      {"h_q 128, h_kv 8",
       [](DenseDecodeParams& p) {
         p.shape.h_q = 128, p.shape.h_kv = 8, p.q_stride_s = p.q_stride_b = p.out_stride_s = 0;
         p.shape.batch = 1, p.shape.s_q = 1, p.lse_stride_h = 1;
         p.kv_stride_token = 8 * 576, p.kv_stride_page = 16 * 8 * 576;
       }},
  };
  // The argument checks (what the CPU reference runs); fp8 and page 1 have no
  // GPU kernel, which can_implement adds (test_capabilities.cpp).
  check_accepted<DenseSetup>(variants, [](const DenseDecodeParams& p) {
    return detail::validate_dense_decode("dense_decode_can_implement", p);
  });
}

TEST(ValidationDenseDecodeOk, MessageHasTheDocumentedShape) {
  DenseSetup setup;
  setup.p.shape.h_q = 100, setup.p.shape.h_kv = 3;
  const Status status = detail::validate_dense_decode("dense_decode_run", setup.p);
  EXPECT_EQ(status.message(),
            "dense_decode_run: argument 'h_q' must be a multiple of h_kv: got h_q = 100, h_kv = 3, "
            "expected h_q % h_kv == 0");
}

TEST(ValidationDenseDecodeOk, ShapeCheckUsesTheCallersEntry) {
  DenseSetup setup;
  EXPECT_TRUE(detail::validate_dense_decode_shape("plan_dense_decode", setup.p.shape));
  setup.p.shape.h_kv = 9;
  expect_rejected(detail::validate_dense_decode_shape("plan_dense_decode", setup.p.shape),
                  "plan_dense_decode", kUnsupported, "h_kv", "1 <= h_kv <= 8");
}

// ===========================================================================
// Sparse decode (656-byte FP8 cache)
// ===========================================================================
// batch 2, s_q 2, h_q 16, topk 128, 4 pages of 64 tokens.
struct SparseDecodeSetup {
  Buffer q, kv, indices, topk_length, attn_sink, out, lse;
  SparseDecodeParams p;

  SparseDecodeSetup() {
    SparseDecodeShape& s = p.shape;
    s.batch = 2, s.s_q = 2, s.h_q = 16, s.topk = 128, s.page_size = 64, s.num_pages = 4;
    const int64_t d = s.d_qk, dv = s.d_v;
    q = make_buffer(size_t(s.batch) * s.s_q * s.h_q * d * 2);
    kv = make_buffer(size_t(s.num_pages) * s.page_size * kSparseFp8TokenBytes);
    indices = make_buffer(size_t(s.batch) * s.s_q * s.topk * 4);
    topk_length = make_buffer(size_t(s.batch) * 4);
    attn_sink = make_buffer(size_t(s.h_q) * 4);
    out = make_buffer(size_t(s.batch) * s.s_q * s.h_q * dv * 2);
    lse = make_buffer(size_t(s.batch) * s.h_q * s.s_q * 4);

    p.q = q.get();
    p.q_stride_h = d, p.q_stride_s = s.h_q * d, p.q_stride_b = s.s_q * s.h_q * d;
    p.kv_cache = static_cast<const uint8_t*>(kv.get());
    p.kv_stride_page_bytes = int64_t(s.page_size) * kSparseFp8TokenBytes;
    p.indices = static_cast<const int32_t*>(indices.get());
    p.indices_stride_s = s.topk, p.indices_stride_b = s.s_q * s.topk;
    p.topk_length = static_cast<const int32_t*>(topk_length.get());
    p.attn_sink = static_cast<const float*>(attn_sink.get());
    p.out = out.get();
    p.out_stride_h = dv, p.out_stride_s = s.h_q * dv, p.out_stride_b = s.s_q * s.h_q * dv;
    p.lse = static_cast<float*>(lse.get());
    p.lse_stride_h = s.s_q, p.lse_stride_b = s.h_q * s.s_q;
    p.softmax_scale = 1.0f / std::sqrt(576.0f);
  }
};

using SparseDecodeCase = BadCase<SparseDecodeParams>;

std::vector<SparseDecodeCase> sparse_decode_cases() {
  using P = SparseDecodeParams;
  return {
      // ---- shape ----
      {"batch_zero", [](P& p) { p.shape.batch = 0; }, kInvalid, "batch", "1 <= batch <= 16777216"},
      {"s_q_zero", [](P& p) { p.shape.s_q = 0; }, kInvalid, "s_q", "1 <= s_q <= 4"},
      {"s_q_5", [](P& p) { p.shape.s_q = 5; }, kUnsupported, "s_q", "1 <= s_q <= 4"},
      {"h_q_zero", [](P& p) { p.shape.h_q = 0; }, kInvalid, "h_q", "h_q >= 1"},
      {"h_q_24", [](P& p) { p.shape.h_q = 24; }, kUnsupported, "h_q",
       "one of {8, 16, 32, 64, 128}"},
      {"h_q_256", [](P& p) { p.shape.h_q = 256; }, kUnsupported, "h_q",
       "one of {8, 16, 32, 64, 128}"},
      {"d_qk_512", [](P& p) { p.shape.d_qk = 512; }, kUnsupported, "d_qk", "d_qk == 576"},
      {"d_v_256", [](P& p) { p.shape.d_v = 256; }, kUnsupported, "d_v", "d_v == 512"},
      {"topk_zero", [](P& p) { p.shape.topk = 0; }, kInvalid, "topk", "topk >= 1"},
      {"topk_32", [](P& p) { p.shape.topk = 32; }, kUnsupported, "topk", "64 <= topk <= 16384"},
      {"topk_not_multiple_of_64", [](P& p) { p.shape.topk = 100; }, kUnsupported, "topk",
       "topk % 64 == 0"},
      {"topk_16448", [](P& p) { p.shape.topk = 16448; }, kUnsupported, "topk",
       "64 <= topk <= 16384"},
      {"page_size_zero", [](P& p) { p.shape.page_size = 0; }, kInvalid, "page_size",
       "page_size >= 1"},
      {"num_pages_zero", [](P& p) { p.shape.num_pages = 0; }, kInvalid, "num_pages",
       "num_pages >= 1"},
      {"token_space_overflows_int32", [](P& p) { p.shape.num_pages = 1 << 26; }, kUnsupported,
       "num_pages", "num_pages * page_size <= 2147483647"},
      // ---- pointers ----
      {"q_null", [](P& p) { p.q = nullptr; }, kInvalid, "q", "a non-null pointer"},
      {"kv_cache_null", [](P& p) { p.kv_cache = nullptr; }, kInvalid, "kv_cache",
       "a non-null pointer"},
      {"indices_null", [](P& p) { p.indices = nullptr; }, kInvalid, "indices",
       "a non-null pointer"},
      {"out_null", [](P& p) { p.out = nullptr; }, kInvalid, "out", "a non-null pointer"},
      {"lse_null", [](P& p) { p.lse = nullptr; }, kInvalid, "lse", "a non-null pointer"},
      {"q_misaligned", [](P& p) { p.q = offset_bytes(p.q, 1); }, kInvalid, "q",
       "an address that is a multiple of 16"},
      {"kv_cache_misaligned", [](P& p) { p.kv_cache = offset_bytes(p.kv_cache, 8); }, kInvalid,
       "kv_cache", "an address that is a multiple of 16"},
      {"indices_misaligned", [](P& p) { p.indices = offset_bytes(p.indices, 4); }, kInvalid,
       "indices", "an address that is a multiple of 16"},
      {"out_misaligned", [](P& p) { p.out = offset_bytes(p.out, 1); }, kInvalid, "out",
       "an address that is a multiple of 16"},
      {"lse_misaligned", [](P& p) { p.lse = offset_bytes(p.lse, 1); }, kInvalid, "lse",
       "an address that is a multiple of 4"},
      {"topk_length_misaligned", [](P& p) { p.topk_length = offset_bytes(p.topk_length, 1); },
       kInvalid, "topk_length", "an address that is a multiple of 4"},
      {"attn_sink_misaligned", [](P& p) { p.attn_sink = offset_bytes(p.attn_sink, 2); }, kInvalid,
       "attn_sink", "an address that is a multiple of 4"},
      // ---- strides ----
      {"kv_page_stride_small", [](P& p) { p.kv_stride_page_bytes = 64 * 656 - 16; }, kInvalid,
       "kv_stride_page_bytes", "kv_stride_page_bytes >= page_size * 656 = 41984"},
      {"kv_page_stride_not_16_bytes", [](P& p) { p.kv_stride_page_bytes = 64 * 656 + 8; }, kInvalid,
       "kv_stride_page_bytes", "kv_stride_page_bytes % 16 == 0"},
      {"kv_cache_too_large_to_address", [](P& p) { p.kv_stride_page_bytes = int64_t(1) << 62; },
       kInvalid, "kv_cache", "num_pages * kv_stride_page_bytes <= INT64_MAX bytes"},
      {"q_stride_h_below_d_qk", [](P& p) { p.q_stride_h = 512; }, kInvalid, "q_stride_h",
       "q_stride_h >= d_qk = 576"},
      {"q_stride_b_negative", [](P& p) { p.q_stride_b = -1; }, kInvalid, "q_stride_b",
       "q_stride_b >= 0"},
      {"indices_stride_s_below_topk", [](P& p) { p.indices_stride_s = 64; }, kInvalid,
       "indices_stride_s", "indices_stride_s >= topk = 128"},
      {"indices_stride_s_not_16_bytes", [](P& p) { p.indices_stride_s = 129; }, kInvalid,
       "indices_stride_s", "indices_stride_s * 4 % 16 == 0"},
      {"indices_stride_b_overlaps_tokens", [](P& p) { p.indices_stride_b = 128; }, kInvalid,
       "indices_stride_b", "indices_stride_b >= s_q * indices_stride_s = 256"},
      {"out_stride_b_overlaps_tokens", [](P& p) { p.out_stride_b = 512; }, kInvalid, "out_stride_b",
       "out_stride_b >= s_q * out_stride_s = 16384"},
      {"lse_stride_h_below_s_q", [](P& p) { p.lse_stride_h = 1; }, kInvalid, "lse_stride_h",
       "lse_stride_h >= s_q = 2"},
      // ---- softmax scale ----
      {"softmax_scale_nan", [](P& p) { p.softmax_scale = kNan; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
      {"softmax_scale_negative", [](P& p) { p.softmax_scale = -1.0f; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
  };
}

class ValidationSparseDecode : public testing::TestWithParam<SparseDecodeCase> {};

TEST_P(ValidationSparseDecode, RejectsBadInput) {
  check_rejected<SparseDecodeSetup>(GetParam(), sparse_decode_can_implement, "sparse_decode_can_implement");
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationSparseDecode,
                         testing::ValuesIn(sparse_decode_cases()), case_name<SparseDecodeCase>);

TEST(ValidationSparseDecodeOk, AcceptsSupportedVariants) {
  const std::vector<std::pair<const char*, Mutation<SparseDecodeParams>>> variants = {
      {"baseline", [](SparseDecodeParams&) {}},
      {"optional pointers null",
       [](SparseDecodeParams& p) { p.topk_length = nullptr, p.attn_sink = nullptr; }},
      {"padded page stride",
       [](SparseDecodeParams& p) { p.kv_stride_page_bytes = 64 * 656 + 256; }},
      {"h_q 8, s_q 4",
       [](SparseDecodeParams& p) {
         p.shape.h_q = 8, p.shape.s_q = 4, p.shape.batch = 1, p.lse_stride_h = 4;
         p.indices_stride_b = 0, p.q_stride_b = 0, p.out_stride_b = 0;
       }},
      {"topk 16384",
       [](SparseDecodeParams& p) {
         p.shape.topk = 16384, p.indices_stride_s = 16384, p.indices_stride_b = 2 * 16384;
       }},
      {"page_size 1",
       [](SparseDecodeParams& p) { p.shape.page_size = 1, p.kv_stride_page_bytes = 656; }},
  };
  check_accepted<SparseDecodeSetup>(variants, sparse_decode_can_implement);
}

TEST(ValidationSparseDecodeOk, ShapeCheckListsSupportedHeads) {
  SparseDecodeSetup setup;
  EXPECT_TRUE(detail::validate_sparse_decode_shape("plan_sparse_decode", setup.p.shape));
  setup.p.shape.h_q = 24;
  const Status status = detail::validate_sparse_decode_shape("plan_sparse_decode", setup.p.shape);
  EXPECT_EQ(status.code(), kUnsupported);
  EXPECT_EQ(status.message(),
            "plan_sparse_decode: argument 'h_q' is not supported: got h_q = 24, "
            "expected one of {8, 16, 32, 64, 128}");
}

// ===========================================================================
// Sparse prefill
// ===========================================================================
// s_q 4, h_q 16, s_kv 256, topk 100 (the reference takes any topk).
struct SparsePrefillSetup {
  Buffer q, kv, indices, out, max_logits, lse;
  SparsePrefillParams p;

  SparsePrefillSetup() {
    SparsePrefillShape& s = p.shape;
    s.s_q = 4, s.h_q = 16, s.s_kv = 256, s.topk = 100;
    const int64_t d = s.d_qk, dv = s.d_v;
    q = make_buffer(size_t(s.s_q) * s.h_q * d * 2);
    kv = make_buffer(size_t(s.s_kv) * d * 2);
    indices = make_buffer(size_t(s.s_q) * s.topk * 4);
    out = make_buffer(size_t(s.s_q) * s.h_q * dv * 2);
    max_logits = make_buffer(size_t(s.s_q) * s.h_q * 4);
    lse = make_buffer(size_t(s.s_q) * s.h_q * 4);

    p.q = q.get();
    p.q_stride_h = d, p.q_stride_s = s.h_q * d;
    p.kv = kv.get();
    p.kv_stride_s = d;
    p.indices = static_cast<const int32_t*>(indices.get());
    p.indices_stride_s = s.topk;
    p.out = out.get();
    p.out_stride_h = dv, p.out_stride_s = s.h_q * dv;
    p.max_logits = static_cast<float*>(max_logits.get());
    p.lse = static_cast<float*>(lse.get());
    p.softmax_scale = 1.0f / std::sqrt(576.0f);
  }
};

using SparsePrefillCase = BadCase<SparsePrefillParams>;

std::vector<SparsePrefillCase> sparse_prefill_cases() {
  using P = SparsePrefillParams;
  return {
      // ---- shape ----
      {"s_q_zero", [](P& p) { p.shape.s_q = 0; }, kInvalid, "s_q", "s_q >= 1"},
      {"h_q_zero", [](P& p) { p.shape.h_q = 0; }, kInvalid, "h_q", "1 <= h_q <= 128"},
      {"h_q_129", [](P& p) { p.shape.h_q = 129; }, kUnsupported, "h_q", "1 <= h_q <= 128"},
      {"s_kv_zero", [](P& p) { p.shape.s_kv = 0; }, kInvalid, "s_kv", "s_kv >= 1"},
      {"d_qk_128", [](P& p) { p.shape.d_qk = 128; }, kUnsupported, "d_qk", "one of {576, 512}"},
      {"d_v_256", [](P& p) { p.shape.d_v = 256; }, kUnsupported, "d_v", "d_v == 512"},
      {"topk_zero", [](P& p) { p.shape.topk = 0; }, kInvalid, "topk", "1 <= topk <= 16384"},
      {"topk_16448", [](P& p) { p.shape.topk = 16448; }, kUnsupported, "topk",
       "1 <= topk <= 16384"},
      // ---- pointers ----
      {"q_null", [](P& p) { p.q = nullptr; }, kInvalid, "q", "a non-null pointer"},
      {"kv_null", [](P& p) { p.kv = nullptr; }, kInvalid, "kv", "a non-null pointer"},
      {"indices_null", [](P& p) { p.indices = nullptr; }, kInvalid, "indices",
       "a non-null pointer"},
      {"out_null", [](P& p) { p.out = nullptr; }, kInvalid, "out", "a non-null pointer"},
      {"max_logits_null", [](P& p) { p.max_logits = nullptr; }, kInvalid, "max_logits",
       "a non-null pointer"},
      {"lse_null", [](P& p) { p.lse = nullptr; }, kInvalid, "lse", "a non-null pointer"},
      {"q_misaligned", [](P& p) { p.q = offset_bytes(p.q, 1); }, kInvalid, "q",
       "an address that is a multiple of 16"},
      {"kv_misaligned", [](P& p) { p.kv = offset_bytes(p.kv, 8); }, kInvalid, "kv",
       "an address that is a multiple of 16"},
      {"out_misaligned", [](P& p) { p.out = offset_bytes(p.out, 4); }, kInvalid, "out",
       "an address that is a multiple of 16"},
      {"indices_misaligned", [](P& p) { p.indices = offset_bytes(p.indices, 2); }, kInvalid,
       "indices", "an address that is a multiple of 4"},
      {"max_logits_misaligned", [](P& p) { p.max_logits = offset_bytes(p.max_logits, 1); },
       kInvalid, "max_logits", "an address that is a multiple of 4"},
      // ---- strides ----
      {"kv_stride_s_below_d_qk", [](P& p) { p.kv_stride_s = 575; }, kInvalid, "kv_stride_s",
       "kv_stride_s >= d_qk = 576"},
      {"kv_stride_s_not_16_bytes", [](P& p) { p.kv_stride_s = 580; }, kInvalid, "kv_stride_s",
       "kv_stride_s * 2 % 16 == 0"},
      {"q_stride_s_overlaps_heads", [](P& p) { p.q_stride_s = 576; }, kInvalid, "q_stride_s",
       "q_stride_s >= h_q * q_stride_h = 9216"},
      {"out_stride_h_below_d_v", [](P& p) { p.out_stride_h = 256; }, kInvalid, "out_stride_h",
       "out_stride_h >= d_v = 512"},
      {"indices_stride_s_below_topk", [](P& p) { p.indices_stride_s = 99; }, kInvalid,
       "indices_stride_s", "indices_stride_s >= topk = 100"},
      // ---- softmax scale ----
      {"softmax_scale_negative", [](P& p) { p.softmax_scale = -0.5f; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
      {"softmax_scale_inf", [](P& p) { p.softmax_scale = kInf; }, kInvalid, "softmax_scale",
       "0 < softmax_scale < inf"},
  };
}

// The argument checks alone: sparse_prefill_can_implement adds the GPU
// capability table, which has no prefill kernel yet (test_capabilities.cpp).
Status sparse_prefill_checks(const SparsePrefillParams& p) {
  return detail::validate_sparse_prefill("sparse_prefill_can_implement", p);
}

class ValidationSparsePrefill : public testing::TestWithParam<SparsePrefillCase> {};

TEST_P(ValidationSparsePrefill, RejectsBadInput) {
  check_rejected<SparsePrefillSetup>(GetParam(), sparse_prefill_checks, "sparse_prefill_can_implement");
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationSparsePrefill,
                         testing::ValuesIn(sparse_prefill_cases()), case_name<SparsePrefillCase>);

TEST(ValidationSparsePrefillOk, AcceptsSupportedVariants) {
  const std::vector<std::pair<const char*, Mutation<SparsePrefillParams>>> variants = {
      {"baseline", [](SparsePrefillParams&) {}},
      {"h_q 1", [](SparsePrefillParams& p) { p.shape.h_q = 1; }},
      {"d_qk 512", [](SparsePrefillParams& p) { p.shape.d_qk = 512; }},
      {"topk 1", [](SparsePrefillParams& p) { p.shape.topk = 1; }},
  };
  check_accepted<SparsePrefillSetup>(variants, sparse_prefill_checks);
}

// ===========================================================================
// Split-KV combine
// ===========================================================================
// batch 2, s_q 2, h_q 16, dense-style items (q_tokens_per_item = s_q), 6 slots.
struct CombineSetup {
  Buffer entries, partial_o, partial_lse, out, lse;
  CombineParams p;

  CombineSetup() {
    p.batch = 2, p.s_q = 2, p.h_q = 16, p.q_tokens_per_item = 2, p.num_entries = 4, p.num_slots = 6;
    const size_t rows = size_t(p.q_tokens_per_item) * p.h_q;
    entries = make_buffer(size_t(p.num_entries) * sizeof(CombineEntry));
    partial_o = make_buffer(size_t(p.num_slots) * rows * p.d_v * 4);
    partial_lse = make_buffer(size_t(p.num_slots) * rows * 4);
    out = make_buffer(size_t(p.batch) * p.s_q * p.h_q * p.d_v * 2);
    lse = make_buffer(size_t(p.batch) * p.h_q * p.s_q * 4);

    p.entries = static_cast<const CombineEntry*>(entries.get());
    p.partial_o = static_cast<const float*>(partial_o.get());
    p.partial_lse = static_cast<const float*>(partial_lse.get());
    p.out = out.get();
    p.out_stride_h = p.d_v, p.out_stride_s = int64_t(p.h_q) * p.d_v;
    p.out_stride_b = int64_t(p.s_q) * p.h_q * p.d_v;
    p.lse = static_cast<float*>(lse.get());
    p.lse_stride_h = p.s_q, p.lse_stride_b = int64_t(p.h_q) * p.s_q;
  }
};

using CombineCase = BadCase<CombineParams>;

std::vector<CombineCase> combine_cases() {
  using P = CombineParams;
  return {
      {"batch_zero", [](P& p) { p.batch = 0; }, kInvalid, "batch", "batch >= 1"},
      {"s_q_zero", [](P& p) { p.s_q = 0; }, kInvalid, "s_q", "s_q >= 1"},
      {"h_q_zero", [](P& p) { p.h_q = 0; }, kInvalid, "h_q", "h_q >= 1"},
      {"d_v_256", [](P& p) { p.d_v = 256; }, kUnsupported, "d_v", "d_v == 512"},
      {"q_tokens_per_item_3", [](P& p) { p.q_tokens_per_item = 3; }, kInvalid, "q_tokens_per_item",
       "q_tokens_per_item == 1 or q_tokens_per_item == s_q"},
      {"q_tokens_per_item_zero", [](P& p) { p.q_tokens_per_item = 0; }, kInvalid,
       "q_tokens_per_item", "q_tokens_per_item == 1 or q_tokens_per_item == s_q"},
      {"num_entries_zero", [](P& p) { p.num_entries = 0; }, kInvalid, "num_entries",
       "num_entries >= 1"},
      {"num_slots_negative", [](P& p) { p.num_slots = -1; }, kInvalid, "num_slots",
       "num_slots >= 0"},
      {"out_dtype_fp8", [](P& p) { p.out_dtype = DType::kFP8E4M3; }, kUnsupported, "out_dtype",
       "one of {bf16, fp16}"},
      {"out_dtype_fp32", [](P& p) { p.out_dtype = DType::kFP32; }, kUnsupported, "out_dtype",
       "one of {bf16, fp16}"},
      {"entries_null", [](P& p) { p.entries = nullptr; }, kInvalid, "entries",
       "a non-null pointer"},
      {"out_null", [](P& p) { p.out = nullptr; }, kInvalid, "out", "a non-null pointer"},
      {"lse_null", [](P& p) { p.lse = nullptr; }, kInvalid, "lse", "a non-null pointer"},
      {"partial_o_null_with_slots", [](P& p) { p.partial_o = nullptr; }, kInvalid, "partial_o",
       "a non-null pointer"},
      {"partial_lse_null_with_slots", [](P& p) { p.partial_lse = nullptr; }, kInvalid,
       "partial_lse", "a non-null pointer"},
      {"entries_misaligned", [](P& p) { p.entries = offset_bytes(p.entries, 4); }, kInvalid,
       "entries", "an address that is a multiple of 16"},
      {"partial_o_misaligned", [](P& p) { p.partial_o = offset_bytes(p.partial_o, 4); }, kInvalid,
       "partial_o", "an address that is a multiple of 16"},
      {"partials_too_large_to_address",
       [](P& p) { p.s_q = p.q_tokens_per_item = 1 << 30, p.h_q = 1 << 30; }, kInvalid, "partial_o",
       "INT64_MAX bytes"},
      {"out_stride_h_below_d_v", [](P& p) { p.out_stride_h = 500; }, kInvalid, "out_stride_h",
       "out_stride_h >= d_v = 512"},
      {"out_stride_s_overlaps_heads", [](P& p) { p.out_stride_s = 512; }, kInvalid, "out_stride_s",
       "out_stride_s >= h_q * out_stride_h = 8192"},
      {"lse_stride_h_negative", [](P& p) { p.lse_stride_h = -2; }, kInvalid, "lse_stride_h",
       "lse_stride_h >= 0"},
      {"lse_stride_b_overlaps_heads", [](P& p) { p.lse_stride_b = 16; }, kInvalid, "lse_stride_b",
       "lse_stride_b >= h_q * lse_stride_h = 32"},
  };
}

class ValidationCombine : public testing::TestWithParam<CombineCase> {};

TEST_P(ValidationCombine, RejectsBadInput) {
  check_rejected<CombineSetup>(GetParam(), combine_can_implement, "combine_can_implement");
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationCombine, testing::ValuesIn(combine_cases()),
                         case_name<CombineCase>);

TEST(ValidationCombineOk, AcceptsSupportedVariants) {
  const std::vector<std::pair<const char*, Mutation<CombineParams>>> variants = {
      {"baseline", [](CombineParams&) {}},
      {"no slots, no partials",
       [](CombineParams& p) { p.num_slots = 0, p.partial_o = nullptr, p.partial_lse = nullptr; }},
      {"sparse-style items", [](CombineParams& p) { p.q_tokens_per_item = 1; }},
      {"fp16 out", [](CombineParams& p) { p.out_dtype = DType::kFP16; }},
  };
  check_accepted<CombineSetup>(variants, combine_can_implement);
}

// ===========================================================================
// DeviceInfo and workspace
// ===========================================================================
using DeviceCase = BadCase<DeviceInfo>;

std::vector<DeviceCase> device_cases() {
  using P = DeviceInfo;
  return {
      {"num_sms_zero", [](P& d) { d.num_sms = 0; }, kInvalid, "num_sms", "1 <= num_sms <= 1024"},
      {"num_sms_1025", [](P& d) { d.num_sms = 1025; }, kInvalid, "num_sms", "1 <= num_sms <= 1024"},
      {"max_smem_zero", [](P& d) { d.max_smem_per_block = 0; }, kInvalid, "max_smem_per_block",
       "max_smem_per_block >= 1"},
      {"cc_major_zero", [](P& d) { d.cc_major = 0; }, kInvalid, "cc_major", "cc_major >= 1"},
  };
}

class ValidationDeviceInfo : public testing::TestWithParam<DeviceCase> {};

TEST_P(ValidationDeviceInfo, RejectsBadInput) {
  DeviceInfo device;  // defaults describe an H100/H200
  ASSERT_TRUE(detail::validate_device_info("plan_dense_decode", device));
  GetParam().mutate(device);
  expect_rejected(detail::validate_device_info("plan_dense_decode", device), "plan_dense_decode",
                  GetParam().code, GetParam().arg, GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationDeviceInfo, testing::ValuesIn(device_cases()),
                         case_name<DeviceCase>);

// The arguments of validate_workspace, so the table can mutate them.
struct WorkspaceArgs {
  DecodePlan plan;
  Buffer storage;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

constexpr size_t kPlanWorkspaceBytes = 4096;

using WorkspaceCase = BadCase<WorkspaceArgs>;

std::vector<WorkspaceCase> workspace_cases() {
  using P = WorkspaceArgs;
  return {
      {"workspace_null", [](P& w) { w.workspace = nullptr; }, kInvalid, "workspace",
       "a non-null pointer to plan.workspace.total_bytes = 4096 bytes"},
      {"workspace_misaligned", [](P& w) { w.workspace = offset_bytes(w.workspace, 64); }, kInvalid,
       "workspace", "an address that is a multiple of 256"},
      {"workspace_too_small", [](P& w) { w.workspace_bytes = kPlanWorkspaceBytes - 1; }, kInvalid,
       "workspace_bytes", "workspace_bytes >= plan.workspace.total_bytes = 4096"},
      {"workspace_bytes_zero", [](P& w) { w.workspace_bytes = 0; }, kInvalid, "workspace_bytes",
       "workspace_bytes >= plan.workspace.total_bytes = 4096"},
  };
}

class ValidationWorkspace : public testing::TestWithParam<WorkspaceCase> {};

TEST_P(ValidationWorkspace, RejectsBadInput) {
  WorkspaceArgs w;
  w.plan.workspace.total_bytes = kPlanWorkspaceBytes;
  w.storage = make_buffer(2 * kPlanWorkspaceBytes);
  w.workspace = w.storage.get();
  w.workspace_bytes = kPlanWorkspaceBytes;
  ASSERT_TRUE(
      detail::validate_workspace("dense_decode_run", w.plan, w.workspace, w.workspace_bytes));
  GetParam().mutate(w);
  expect_rejected(
      detail::validate_workspace("dense_decode_run", w.plan, w.workspace, w.workspace_bytes),
      "dense_decode_run", GetParam().code, GetParam().arg, GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationWorkspace, testing::ValuesIn(workspace_cases()),
                         case_name<WorkspaceCase>);

TEST(ValidationWorkspaceOk, EmptyPlanTakesNullWorkspace) {
  DecodePlan plan;  // total_bytes == 0: nothing is split, nothing to schedule into
  EXPECT_TRUE(detail::validate_workspace("sparse_decode_run", plan, nullptr, 0));
}

// ===========================================================================
// Coverage of the tables above
// ===========================================================================
// Every row of the tables above must reject for a reason of its own: run
// each row and collect the messages it produces. Two rows giving the same
// message test the same check, and at least forty distinct checks must fire.
template <class Setup, class Case, class Check>
void collect_messages(const std::vector<Case>& cases, const Check& check, std::set<std::string>* messages,
                      std::vector<std::string>* repeats) {
  for (const Case& c : cases) {
    Setup setup;
    c.mutate(setup.p);
    const Status status = check(setup.p);
    ASSERT_FALSE(status.is_ok()) << c.label;
    if (!messages->insert(status.message()).second) repeats->push_back(c.label + ": " + status.message());
  }
}

TEST(ValidationCoverage, EveryRowRejectsForItsOwnReason) {
  std::set<std::string> messages;
  std::vector<std::string> repeats;
  collect_messages<DenseSetup>(dense_cases(), dense_decode_can_implement, &messages, &repeats);
  collect_messages<SparseDecodeSetup>(sparse_decode_cases(), sparse_decode_can_implement, &messages, &repeats);
  collect_messages<SparsePrefillSetup>(sparse_prefill_cases(), sparse_prefill_checks, &messages, &repeats);
  collect_messages<CombineSetup>(combine_cases(), combine_can_implement, &messages, &repeats);
  for (const std::string& repeat : repeats) ADD_FAILURE() << "a second row gives the same message: " << repeat;
  EXPECT_GE(messages.size(), 40u);
  RecordProperty("distinct_rejections", static_cast<int>(messages.size()));
}

}  // namespace
}  // namespace openmla

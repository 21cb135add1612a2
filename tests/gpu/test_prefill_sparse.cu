// GPU tests of sparse prefill (sparse_prefill_run: device schedule -> sm90
// prefill_sparse kernel -> combine) against the CPU reference.
//
// Inputs come from tests/test_util/mla_inputs.h (make_sparse_prefill_inputs):
// fresh random values, kv rows no counted index names poisoned with NaN, -1 /
// out-of-range / negative indices, positions past topk_length pointing at
// poisoned rows, an all-invalid last token, optional attention sinks (+inf
// and -inf included) and padded strides. Outputs start as NaN, so an
// unwritten element fails. Checks per query token (all of them, or a sample
// that always holds the first and the all-invalid last token, so the CPU
// reference stays within a few seconds): O rel-L2 <= 1e-2 per (token, head)
// row (absolute for all-zero reference rows), max_logits and LSE abs error
// <= 1e-3 with identical inf/NaN positions.
//
// Large: s_kv = 1,048,576 rows and s_q = 131,072 tokens (64-bit offsets),
// values filled on the device, sampled tokens checked.
// GraphReplay: one captured call replayed with new indices and topk_length.
// DISABLED_Timing (--gtest_also_run_disabled_tests): the bench's shapes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "openmla/fp8.h"
#include "openmla/openmla.h"
#include "openmla/plan.h"
#include "openmla/reference.h"
#include "test_util/device_buffer.h"
#include "test_util/device_fill.cuh"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {

using test::device_info;
using test::fill_bf16_kernel;
using test::hash32;
using test::kFillBlocks;
using test::kFillThreads;
using test::DeviceBuffer;
using test::download;
using test::upload;


constexpr double kOutTolerance = 1e-2;     // rel-L2 per (token, head) row
constexpr double kLogitTolerance = 1e-3;   // max_logits and LSE, absolute
constexpr double kReferenceBudget = 4e10;  // reference multiply-adds per case (16 host threads)

// ---------------------------------------------------------------------------
// Device copies of one call's tensors.
// ---------------------------------------------------------------------------
struct DevicePrefill {
  DeviceBuffer<uint16_t> q, kv, out;
  DeviceBuffer<uint8_t> kv_cache;
  DeviceBuffer<int32_t> indices, topk_length;
  DeviceBuffer<float> sink, max_logits, lse;

  void upload_all(const test::SparsePrefillInputs& in) {
    upload(q, in.q);
    if (in.shape.fp8_kv_cache) {
      upload(kv_cache, in.kv_cache);
    } else {
      upload(kv, in.kv);
    }
    upload(indices, in.indices);
    upload(topk_length, in.topk_length);
    upload(sink, in.attn_sink);
    upload(out, in.out);
    upload(max_logits, in.max_logits);
    upload(lse, in.lse);
  }
  SparsePrefillParams params(test::SparsePrefillInputs& in) {
    SparsePrefillParams p = in.params();
    p.q = q.ptr;
    p.kv = in.shape.fp8_kv_cache ? nullptr : kv.ptr;
    p.kv_cache = in.shape.fp8_kv_cache ? kv_cache.ptr : nullptr;
    p.indices = indices.ptr;
    p.topk_length = in.topk_length.empty() ? nullptr : topk_length.ptr;
    p.attn_sink = in.attn_sink.empty() ? nullptr : sink.ptr;
    p.out = out.ptr;
    p.max_logits = max_logits.ptr;
    p.lse = lse.ptr;
    return p;
  }
  void download_outputs(test::SparsePrefillInputs& in) {
    download(in.out, out);
    download(in.max_logits, max_logits);
    download(in.lse, lse);
  }
};

// ---------------------------------------------------------------------------
// Reference of chosen tokens: each token is its own call (s_q = 1), so a
// sample costs only its tokens; the calls run on every host thread.
// ---------------------------------------------------------------------------
struct TokenResults {
  std::vector<float> out;         // [tokens, h_q, 512]
  std::vector<double> max_logits;  // [tokens, h_q]
  std::vector<double> lse;         // [tokens, h_q]
};

TokenResults reference_tokens(const test::SparsePrefillInputs& in, const std::vector<int>& tokens) {
  const int h_q = in.shape.h_q, d_v = in.shape.d_v;
  TokenResults r;
  r.out.resize(tokens.size() * size_t(h_q) * d_v);
  r.max_logits.resize(tokens.size() * size_t(h_q));
  r.lse.resize(tokens.size() * size_t(h_q));
  const auto run_token = [&](size_t i) {
    const int s = tokens[i];
    std::vector<uint16_t> out(size_t(h_q) * d_v);
    std::vector<float> max_logits(h_q), lse(h_q);
    SparsePrefillParams p = const_cast<test::SparsePrefillInputs&>(in).params();
    p.shape.s_q = 1;
    p.q = in.q.data() + s * in.q_stride_s;
    p.indices = in.indices.data() + s * in.indices_stride_s;
    if (p.topk_length != nullptr) p.topk_length = in.topk_length.data() + s;
    p.out = out.data();
    p.out_stride_s = int64_t(h_q) * d_v;
    p.out_stride_h = d_v;
    p.max_logits = max_logits.data();
    p.lse = lse.data();
    const Status status = reference_sparse_prefill(p);
    if (!status.is_ok()) std::fprintf(stderr, "reference_sparse_prefill: %s\n", status.message().c_str());
    for (size_t e = 0; e < out.size(); ++e) r.out[i * out.size() + e] = bf16_bits_to_float(out[e]);
    for (int h = 0; h < h_q; ++h) {
      r.max_logits[i * h_q + h] = max_logits[h];
      r.lse[i * h_q + h] = lse[h];
    }
  };
  const size_t num_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::future<void>> workers;
  for (size_t t = 0; t < num_threads; ++t) {
    workers.push_back(std::async(std::launch::async, [&, t] {
      for (size_t i = t; i < tokens.size(); i += num_threads) run_token(i);
    }));
  }
  for (auto& w : workers) w.get();
  return r;
}

// All tokens when the reference can afford them, else a spread sample with
// the first and last (the all-invalid row) always in it.
std::vector<int> tokens_to_check(const SparsePrefillShape& shape) {
  const double per_token = double(shape.h_q) * std::min(shape.topk, shape.s_kv) * (shape.d_qk + shape.d_v);
  const int budget = int(std::clamp(kReferenceBudget / per_token, 4.0, 1e9));
  std::vector<int> tokens;
  if (shape.s_q <= budget) {
    for (int s = 0; s < shape.s_q; ++s) tokens.push_back(s);
    return tokens;
  }
  test::Rng rng(uint64_t(shape.s_q) * 7919u + uint64_t(shape.h_q));
  tokens.push_back(0);
  for (int i = 0; i < budget - 2; ++i) tokens.push_back(rng.uniform_int(1, shape.s_q - 2));
  tokens.push_back(shape.s_q - 1);
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  return tokens;
}

// Compares the device outputs of `tokens` (in `in`) with the reference.
void expect_tokens_match(const test::SparsePrefillInputs& in, const std::vector<int>& tokens, const std::string& what) {
  const TokenResults want = reference_tokens(in, tokens);
  const int h_q = in.shape.h_q, d_v = in.shape.d_v;
  std::vector<float> got_row(d_v), got_max, got_lse;
  int bad_rows = 0;
  double worst = 0.0;
  std::string first;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int s = tokens[i];
    for (int h = 0; h < h_q; ++h) {
      for (int d = 0; d < d_v; ++d) got_row[d] = bf16_bits_to_float(in.out[in.out_index(s, h) + d]);
      const std::span<const float> want_row(want.out.data() + (i * h_q + h) * size_t(d_v), size_t(d_v));
      std::vector<double> want_d(want_row.begin(), want_row.end());
      const double err = test::rel_l2(got_row, want_d);
      worst = std::max(worst, err);
      if (!(err <= kOutTolerance)) {
        if (bad_rows == 0) first = "token " + std::to_string(s) + " head " + std::to_string(h) + " rel-L2 " + std::to_string(err);
        ++bad_rows;
      }
      got_max.push_back(in.max_logits[size_t(s) * h_q + h]);
      got_lse.push_back(in.lse[size_t(s) * h_q + h]);
    }
  }
  EXPECT_EQ(bad_rows, 0) << what << ": " << bad_rows << " rows over " << kOutTolerance << ", first: " << first;
  const test::LseComparison max_cmp = test::compare_lse(got_max, want.max_logits, kLogitTolerance);
  EXPECT_TRUE(max_cmp.ok) << what << " max_logits: " << max_cmp.message;
  const test::LseComparison lse_cmp = test::compare_lse(got_lse, want.lse, kLogitTolerance);
  EXPECT_TRUE(lse_cmp.ok) << what << " LSE: " << lse_cmp.message;
  ::testing::Test::RecordProperty(what + "_worst_rel_l2", std::to_string(worst));
  ::testing::Test::RecordProperty(what + "_tokens_checked", std::to_string(tokens.size()));
}

// Plans, runs on the device (workspace poisoned) and downloads the outputs into `in`.
void run_on_device(test::SparsePrefillInputs& in, DevicePrefill& dev, const PlanOptions& options) {
  DecodePlan plan;
  ASSERT_OK(plan_sparse_prefill(in.shape, device_info(), &plan, options));
  if (options.max_parts == 1) ASSERT_EQ(plan.num_slots, 0);
  // BF16 kv: the prefill kernel; FP8 cache: the sparse decode kernel of the head count.
  if (!in.shape.fp8_kv_cache) EXPECT_EQ(plan.kernel, DecodeKernel::kSparsePrefillAlternateBlocks);
  if (in.shape.fp8_kv_cache) EXPECT_NE(plan.kernel, DecodeKernel::kSparsePrefillAlternateBlocks);
  DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
  ASSERT_CUDA(cudaMemset(workspace.ptr, 0xff, plan.workspace.total_bytes));  // stale garbage
  const SparsePrefillParams params = dev.params(in);
  ASSERT_OK(sparse_prefill_can_implement(params));
  ASSERT_OK(sparse_prefill_run(params, plan, workspace.ptr, plan.workspace.total_bytes, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  dev.download_outputs(in);
}

struct Case {
  std::string name;
  test::SparsePrefillConfig config;
  PlanOptions options;
  uint64_t seed = 1;
};

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  test::SparsePrefillInputs inputs = test::make_sparse_prefill_inputs(c.config, c.seed);
  DevicePrefill dev;
  dev.upload_all(inputs);
  run_on_device(inputs, dev, c.options);
  if (::testing::Test::HasFatalFailure()) return;
  expect_tokens_match(inputs, tokens_to_check(inputs.shape), c.name);
}

test::SparsePrefillConfig make_config(int s_q, int h_q, int s_kv, int topk, int d_qk = kHeadDimQK) {
  test::SparsePrefillConfig config;
  config.s_q = s_q;
  config.h_q = h_q;
  config.s_kv = s_kv;
  config.topk = topk;
  config.d_qk = d_qk;
  return config;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  uint64_t seed = 100;
  const auto add = [&](std::string name, test::SparsePrefillConfig config, PlanOptions options = {}) {
    cases.push_back(Case{std::move(name), config, options, ++seed});
  };
  // Every supported head count, both d_qk, s_q = 62, sinks and topk_length on and off.
  for (const int d_qk : {kHeadDimQK, kHeadDimLatent}) {
    for (const int h_q : {8, 16, 32, 64, 128}) {
      auto config = make_config(62, h_q, 3000, 384, d_qk);
      config.use_topk_length = h_q % 32 == 0;
      config.use_attn_sink = h_q != 32;
      add("d" + std::to_string(d_qk) + "_h" + std::to_string(h_q) + "_s62_topk384", config);
    }
  }
  // Head counts that are not a power of two pad the last 64-head tile.
  add("h24_s13_topk128", make_config(13, 24, 500, 128));
  {
    auto config = make_config(9, 100, 700, 256);
    config.use_attn_sink = true;
    add("h100_s9_topk256_sink", config);
  }
  // Fewer kv rows than topk: most indices invalid.
  add("h64_skv32_topk64", make_config(30, 64, 32, 64));
  add("h128_skv32_topk128_d512", make_config(7, 128, 32, 128, kHeadDimLatent));
  // One token: its blocks are split over many parts (combine takes max_logits).
  {
    auto config = make_config(1, 128, 65536, 2048);
    config.all_invalid_row = false;
    config.use_attn_sink = true;
    add("h128_s1_topk2048_split", config);
  }
  {
    auto config = make_config(1, 16, 40000, 8192);
    config.all_invalid_row = false;
    config.use_topk_length = true;
    add("h16_s1_topk8192_split_topk_length", config);
  }
  // Longer: sampled tokens.
  {
    auto config = make_config(213, 128, 65536, 2048);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    add("h128_s213_topk2048_skv65536", config);
  }
  add("h64_s213_topk8192_skv65536_d512", make_config(213, 64, 65536, 8192, kHeadDimLatent));
  add("h128_s4096_topk2048_skv8192", make_config(4096, 128, 8192, 2048));
  add("h16_s4096_topk2048_skv32768", make_config(4096, 16, 32768, 2048));
  // A sharp softmax (softmax_scale 0.35, about 8x the default): the lazy reference max moves again after a token's
  // first blocks (heads_on_m/block_pairs.cuh), and max_logits is the true max, not the reference.
  {
    auto config = make_config(62, 128, 8192, 2048);
    config.softmax_scale = 0.35f;
    config.use_attn_sink = true;
    add("h128_s62_topk2048_sharp", config);
    auto narrow = make_config(62, 64, 8192, 1024, kHeadDimLatent);
    narrow.softmax_scale = 0.35f;
    narrow.use_topk_length = true;
    add("h64_s62_topk1024_sharp_d512", narrow);
  }
  // Forced split of every token; one part for all tokens.
  {
    auto config = make_config(20, 64, 5000, 1024);
    config.use_attn_sink = true;
    config.use_topk_length = true;
    add("h64_s20_forced_split", config, PlanOptions{.max_parts = 0, .min_parts = 200});
  }
  {
    auto config = make_config(40, 128, 2000, 256);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    add("h128_s40_one_part", config, PlanOptions{.max_parts = 1});
  }
  // Every index invalid: O = 0, max_logits = -inf, LSE = +inf everywhere.
  {
    auto config = make_config(16, 128, 1000, 192);
    config.invalid_fraction = 0.5;
    config.out_of_range_fraction = 0.3;
    config.negative_fraction = 0.2;
    add("h128_all_invalid", config);
  }
  // FP8-cache mode: the 656-byte paged cache read in place (every head count, pages of 64
  // and 37 tokens, sinks and topk_length, a split single token, padded page strides).
  for (const int h_q : {8, 16, 32, 64, 128}) {
    auto config = make_config(21, h_q, 64 * 50, 320);
    config.fp8_cache_page_size = 64;
    config.use_topk_length = h_q >= 64;
    config.use_attn_sink = h_q != 16;
    add("fp8_cache_h" + std::to_string(h_q) + "_s21_topk320", config);
  }
  {
    auto config = make_config(40, 128, 37 * 80, 512);
    config.fp8_cache_page_size = 37;
    config.stride_pad_bytes = 48;
    config.use_attn_sink = true;
    add("fp8_cache_h128_page37_padded", config);
  }
  {
    auto config = make_config(1, 64, 64 * 300, 2048);
    config.fp8_cache_page_size = 64;
    config.all_invalid_row = false;
    add("fp8_cache_h64_s1_split", config);
  }
  {
    auto config = make_config(213, 128, 64 * 512, 2048);
    config.fp8_cache_page_size = 64;
    config.use_topk_length = true;
    add("fp8_cache_h128_s213_topk2048", config);
  }
  {  // one token over every CTA pair: the CTA-pair kernel's split pieces and their max_logits
    auto config = make_config(1, 128, 64 * 300, 2048);
    config.fp8_cache_page_size = 64;
    config.all_invalid_row = false;
    config.use_attn_sink = true;
    add("fp8_cache_h128_s1_split", config);
  }
  // Group scales above 2^7: the dequantisation's two-step path.
  {
    auto config = make_config(19, 64, 64 * 40, 512);
    config.fp8_cache_page_size = 64;
    config.kv_value_scale = 1.0e5f;  // amax ~ 4e5: scales 2^10
    config.softmax_scale = 1.0f / (24.0f * 1.0e5f);
    config.use_topk_length = true;
    add("fp8_cache_h64_large_scales", config);
  }
  {
    auto config = make_config(17, 128, 64 * 40, 384);
    config.fp8_cache_page_size = 64;
    config.kv_value_scale = 1.0e5f;  // amax ~ 4e5: scales 2^10
    config.softmax_scale = 1.0f / (24.0f * 1.0e5f);
    add("fp8_cache_h128_large_scales", config);
  }
  // Padded strides (rows still 16-byte aligned).
  {
    auto config = make_config(33, 64, 900, 320);
    config.stride_pad_bytes = 32;
    config.use_topk_length = true;
    config.use_attn_sink = true;
    add("h64_padded_strides", config);
  }
  return cases;
}

class PrefillSparseCases : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillSparseCases, MatchesReference) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(PrefillSparseGpu, PrefillSparseCases, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Large shapes: 64-bit offsets. Values are filled on the device (bf16 from a
// hash, test_util/device_fill.cuh), then copied to the host for the sampled reference.
// ---------------------------------------------------------------------------
// Indices [s_q, topk]: valid rows spread over [0, s_kv) (the top end included),
// every 7th position -1 and every 11th past the end.
__global__ void fill_indices_kernel(int32_t* indices, int s_q, int topk, int s_kv, uint64_t seed) {
  const size_t n = size_t(s_q) * topk;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int k = int(i % topk);
    int32_t index = int32_t(hash32(i + seed) % uint32_t(s_kv));
    if (k == 0) index = s_kv - 1;
    if (k % 7 == 3) index = -1;
    if (k % 11 == 5) index = s_kv + int32_t(k);
    indices[i] = index;
  }
}


void run_large_case(int s_q, int h_q, int s_kv, int topk, uint64_t seed) {
  test::SparsePrefillInputs in;
  SparsePrefillShape& sh = in.shape;
  sh = SparsePrefillShape{s_q, h_q, s_kv, kHeadDimQK, kHeadDimV, topk};
  in.softmax_scale = 1.0f / std::sqrt(float(kHeadDimQK));
  in.q_stride_h = kHeadDimQK;
  in.q_stride_s = int64_t(h_q) * kHeadDimQK;
  in.kv_stride_s = kHeadDimQK;
  in.indices_stride_s = topk;
  in.out_stride_h = kHeadDimV;
  in.out_stride_s = int64_t(h_q) * kHeadDimV;

  DevicePrefill dev;
  const size_t q_elems = size_t(s_q) * h_q * kHeadDimQK, kv_elems = size_t(s_kv) * kHeadDimQK;
  const size_t out_elems = size_t(s_q) * h_q * kHeadDimV, rows = size_t(s_q) * h_q;
  dev.q.allocate(q_elems);
  dev.kv.allocate(kv_elems);
  dev.indices.allocate(size_t(s_q) * topk);
  dev.out.allocate(out_elems);
  dev.max_logits.allocate(rows);
  dev.lse.allocate(rows);
  fill_bf16_kernel<<<kFillBlocks, kFillThreads>>>(dev.q.ptr, q_elems, seed);
  fill_bf16_kernel<<<kFillBlocks, kFillThreads>>>(dev.kv.ptr, kv_elems, seed + 1);
  fill_indices_kernel<<<kFillBlocks, kFillThreads>>>(dev.indices.ptr, s_q, topk, s_kv, seed + 2);
  ASSERT_CUDA(cudaMemset(dev.out.ptr, 0xff, out_elems * sizeof(uint16_t)));  // NaN
  ASSERT_CUDA(cudaMemset(dev.max_logits.ptr, 0xff, rows * sizeof(float)));
  ASSERT_CUDA(cudaMemset(dev.lse.ptr, 0xff, rows * sizeof(float)));
  ASSERT_CUDA(cudaDeviceSynchronize());
  in.q.resize(q_elems);
  in.kv.resize(kv_elems);
  in.indices.resize(size_t(s_q) * topk);
  in.out.resize(out_elems);
  in.max_logits.resize(rows);
  in.lse.resize(rows);
  download(in.q, dev.q);
  download(in.kv, dev.kv);
  download(in.indices, dev.indices);

  run_on_device(in, dev, {});
  if (::testing::Test::HasFatalFailure()) return;
  size_t unwritten = 0;
  for (const float x : in.lse) unwritten += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(unwritten, 0u) << "LSE entries left NaN";
  expect_tokens_match(in, tokens_to_check(sh), "large");
}

TEST(PrefillSparseLarge, LongContextMillionRows) { run_large_case(96, 128, 1 << 20, 2048, 7); }
TEST(PrefillSparseLarge, ManyQueryTokens) { run_large_case(131072, 16, 50000, 128, 11); }

// ---------------------------------------------------------------------------
// CUDA graph: one captured call, replayed with new indices and topk_length.
// ---------------------------------------------------------------------------
TEST(PrefillSparseGraph, ReplayWithNewIndices) {
  auto config = make_config(48, 128, 4000, 512);
  config.use_topk_length = true;
  config.use_attn_sink = true;
  config.dead_kv_fraction = 0.0;  // the replays' indices may name any row of the first call's kv
  test::SparsePrefillInputs in = test::make_sparse_prefill_inputs(config, 501);
  DevicePrefill dev;
  dev.upload_all(in);
  DecodePlan plan;
  ASSERT_OK(plan_sparse_prefill(in.shape, device_info(), &plan));
  DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
  const SparsePrefillParams params = dev.params(in);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status captured = sparse_prefill_run(params, plan, workspace.ptr, plan.workspace.total_bytes, stream);
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_OK(captured);
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (uint64_t round = 0; round < 3; ++round) {
    test::SparsePrefillInputs next = test::make_sparse_prefill_inputs(config, 600 + round);
    // Same q, kv and sink; new indices and lengths, poisoned outputs.
    next.q = in.q;
    next.kv = in.kv;
    next.attn_sink = in.attn_sink;
    next.kv_live = in.kv_live;
    // Into the captured buffers (upload() would reallocate them under the graph).
    test::overwrite(dev.indices, next.indices);
    test::overwrite(dev.topk_length, next.topk_length);
    test::overwrite(dev.out, next.out);
    test::overwrite(dev.max_logits, next.max_logits);
    test::overwrite(dev.lse, next.lse);
    ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    dev.download_outputs(next);
    expect_tokens_match(next, tokens_to_check(next.shape), "replay " + std::to_string(round));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace openmla

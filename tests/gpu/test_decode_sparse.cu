// GPU tests of sparse FP8 decode (sparse_decode_run: device schedule ->
// sm90 decode_sparse_fp8 kernel -> combine) against the CPU reference.
//
// Inputs come from tests/test_util/mla_inputs.h: fresh random values, dead
// (NaN-poisoned) cache tokens and pages, -1 / out-of-range / negative indices,
// positions past topk_length pointing at poisoned tokens, an all-invalid row,
// optional attention sinks (+inf and -inf included) and padded strides.
// Outputs start as NaN, so an unwritten element fails. Checks: per-row rel-L2
// of O <= 1e-2 (absolute for all-zero reference rows), LSE abs error <= 1e-3
// with identical inf/NaN positions.
//
// BigBatch: b = 16384, s_q = 1, h_q = 128, topk = 2048 within 64 MiB of
// workspace, a sample of requests against the reference, every output written.
// GraphReplay: one captured call replayed with new indices and topk_length.
// DISABLED_Timing (--gtest_also_run_disabled_tests): b = 128, topk = 2048,
// h_q in {16, 64, 128}, s_q in {1, 2}, CUDA events, L2 flushed, median of 20.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "openmla/fp8.h"
#include "openmla/openmla.h"
#include "openmla/plan.h"
#include "openmla/reference.h"
#include "test_util/device_buffer.h"
#include "test_util/device_fill.cuh"
#include "test_util/mla_inputs.h"
#include "test_util/schedule_records.h"

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


constexpr double kOutTolerance = 1e-2;  // rel-L2 per (b, s, h) row
constexpr double kLseTolerance = 1e-3;  // absolute, natural log
constexpr size_t kBigBatchWorkspaceLimit = size_t(64) << 20;

// ---------------------------------------------------------------------------
// Comparison: per-row O, LSE classes and values.
// ---------------------------------------------------------------------------
void expect_rows_match(std::span<const float> got, std::span<const float> want, int row_length,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad_rows = 0;
  double worst = 0.0;
  std::string first;
  for (size_t start = 0; start < got.size(); start += size_t(row_length)) {
    const double err = test::rel_l2(got.subspan(start, size_t(row_length)), want.subspan(start, size_t(row_length)));
    worst = std::max(worst, err);
    if (!(err <= kOutTolerance)) {
      if (bad_rows == 0) first = "row " + std::to_string(start / size_t(row_length)) + " rel-L2 " + std::to_string(err);
      ++bad_rows;
    }
  }
  EXPECT_EQ(bad_rows, 0) << what << ": " << bad_rows << " rows over " << kOutTolerance << ", first: " << first;
  ::testing::Test::RecordProperty(what + "_worst_rel_l2", std::to_string(worst));
}

void expect_lse_match(std::span<const float> got, std::span<const float> want, const std::string& what) {
  const test::LseComparison lse = test::compare_lse(got, want, kLseTolerance);
  EXPECT_TRUE(lse.ok) << what << " LSE: " << lse.message;
}

// ---------------------------------------------------------------------------
// One call through the public API on device copies of `inputs`.
// ---------------------------------------------------------------------------
struct DeviceInputs {
  DeviceBuffer<uint16_t> q;
  DeviceBuffer<uint8_t> kv;
  DeviceBuffer<int32_t> indices, topk_length;
  DeviceBuffer<float> sink, lse;
  DeviceBuffer<uint16_t> out;

  void upload_all(const test::SparseDecodeInputs& in) {
    upload(q, in.q);
    upload(kv, in.kv_cache);
    upload(indices, in.indices);
    upload(topk_length, in.topk_length);
    upload(sink, in.attn_sink);
    upload(out, in.out);
    upload(lse, in.lse);
  }
  SparseDecodeParams params(test::SparseDecodeInputs& in) {
    SparseDecodeParams p = in.params();
    p.q = q.ptr;
    p.kv_cache = kv.ptr;
    p.indices = indices.ptr;
    p.topk_length = in.topk_length.empty() ? nullptr : topk_length.ptr;
    p.attn_sink = in.attn_sink.empty() ? nullptr : sink.ptr;
    p.out = out.ptr;
    p.lse = lse.ptr;
    return p;
  }
};

struct Case {
  std::string name;
  test::SparseDecodeConfig config;
  PlanOptions options;
  uint64_t seed = 1;
};

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  test::SparseDecodeInputs inputs = test::make_sparse_decode_inputs(c.config, c.seed);

  // ---- reference (host) ----
  test::SparseDecodeInputs reference = inputs;
  ASSERT_OK(reference_sparse_decode(reference.params()));
  const std::vector<float> want_out = reference.out_values();
  const std::vector<float> want_lse = reference.lse_values();

  // ---- plan, workspace, device run ----
  DecodePlan plan;
  ASSERT_OK(plan_sparse_decode(inputs.shape, device_info(), &plan, c.options));
  if (c.options.max_parts == 1) ASSERT_EQ(plan.num_slots, 0);
  DeviceInputs dev;
  dev.upload_all(inputs);
  DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
  ASSERT_CUDA(cudaMemset(workspace.ptr, 0xff, plan.workspace.total_bytes));  // stale garbage
  const SparseDecodeParams params = dev.params(inputs);
  const auto initial_out = inputs.out;  // poisoned: restored before the runs with the other schedule placement
  const auto initial_lse = inputs.lse;
  ASSERT_OK(sparse_decode_run(params, plan, workspace.ptr, plan.workspace.total_bytes, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  download(inputs.out, dev.out);
  download(inputs.lse, dev.lse);

  expect_rows_match(inputs.out_values(), want_out, kHeadDimV, c.name);
  expect_lse_match(inputs.lse_values(), want_lse, c.name);

  // ---- the schedule built in the attention kernel and in the schedule kernel
  // (options.schedule_placement): the host's records in the workspace each time, and bitwise the
  // same outputs ----
  const int32_t* host_lengths = inputs.topk_length.empty() ? nullptr : inputs.topk_length.data();
  test::expect_workspace_schedule(plan, workspace.ptr, host_lengths);
  const std::vector<uint8_t> out_bytes = test::download_bytes(dev.out);
  const std::vector<uint8_t> lse_bytes = test::download_bytes(dev.lse);
  for (SchedulePlacement placement : {SchedulePlacement::kScheduleKernel, SchedulePlacement::kAttentionKernel}) {
    PlanOptions options = c.options;
    options.schedule_placement = placement;
    DecodePlan other;
    ASSERT_OK(plan_sparse_decode(inputs.shape, device_info(), &other, options));
    if (other.schedule_in_kernel == plan.schedule_in_kernel) continue;  // the run above
    SCOPED_TRACE(other.schedule_in_kernel ? "schedule in the attention kernel" : "schedule kernel");
    ASSERT_EQ(other.workspace.total_bytes, plan.workspace.total_bytes);
    test::overwrite(dev.out, initial_out);
    test::overwrite(dev.lse, initial_lse);
    test::poison(workspace);
    ASSERT_OK(sparse_decode_run(params, other, workspace.ptr, other.workspace.total_bytes, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    test::expect_workspace_schedule(other, workspace.ptr, host_lengths);
    EXPECT_TRUE(test::download_bytes(dev.out) == out_bytes) << "out differs";
    EXPECT_TRUE(test::download_bytes(dev.lse) == lse_bytes) << "LSE differs";
  }
}

test::SparseDecodeConfig make_config(int batch, int s_q, int h_q, int topk, int page_size, int num_pages) {
  test::SparseDecodeConfig config;
  config.batch = batch;
  config.s_q = s_q;
  config.h_q = h_q;
  config.topk = topk;
  config.page_size = page_size;
  config.num_pages = num_pages;
  return config;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const auto add = [&](std::string name, test::SparseDecodeConfig config, PlanOptions options, uint64_t seed) {
    cases.push_back(Case{std::move(name), config, options, seed});
  };
  // Every head count, every s_q, automatic plans.
  add("h8_s1", make_config(4, 1, 8, 64, 64, 6), {}, 11);
  add("h16_s2_page16", make_config(3, 2, 16, 192, 16, 40), {}, 12);
  add("h32_s3_page1", make_config(2, 3, 32, 320, 1, 600), {}, 13);
  add("h64_s4", make_config(2, 4, 64, 256, 64, 8), {}, 14);
  add("h128_s1", make_config(3, 1, 128, 512, 64, 12), {}, 15);
  add("h128_s2_page37", make_config(2, 2, 128, 384, 37, 20), {}, 16);
  {
    auto config = make_config(3, 2, 16, 320, 64, 10);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    config.stride_pad_bytes = 32;
    add("h16_s2_topk_length_sink_padded", config, {}, 17);
  }
  {
    auto config = make_config(2, 1, 128, 1024, 64, 24);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    add("h128_topk_length_sink", config, {}, 18);
  }
  {
    // CTA pairs (kSparseHeadsOnMCtaPair) with s_q = 4, a page size that is not a power of two
    // and padded strides (page stride above page_size * 656 bytes).
    auto config = make_config(2, 4, 128, 448, 48, 24);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    config.stride_pad_bytes = 48;
    add("h128_s4_page48_padded", config, {}, 31);
  }
  // Forced split: items cut into many pieces; the combine applies the sink.
  {
    auto config = make_config(2, 2, 128, 1024, 64, 24);
    config.use_attn_sink = true;
    config.use_topk_length = true;
    add("h128_s2_split", config, PlanOptions{.max_parts = 0, .min_parts = 60}, 19);
  }
  {
    auto config = make_config(3, 1, 16, 640, 32, 40);
    config.use_attn_sink = true;
    add("h16_split", config, PlanOptions{.max_parts = 0, .min_parts = 100}, 20);
  }
  {
    auto config = make_config(2, 4, 8, 256, 64, 10);
    config.use_topk_length = true;
    add("h8_s4_split_topk_length", config, PlanOptions{.max_parts = 0, .min_parts = 30}, 21);
  }
  {
    auto config = make_config(4, 1, 64, 448, 64, 12);
    config.use_attn_sink = true;
    add("h64_split", config, PlanOptions{.max_parts = 0, .min_parts = 50}, 22);
  }
  // No split: one part walks many items (Q reloads, stage/phase continuity).
  {
    auto config = make_config(40, 2, 8, 128, 64, 12);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    add("h8_s2_nosplit_many_items", config, PlanOptions{.max_parts = 1}, 23);
  }
  {
    auto config = make_config(12, 1, 64, 448, 16, 50);
    config.use_topk_length = true;
    add("h64_nosplit", config, PlanOptions{.max_parts = 1}, 24);
  }
  {
    auto config = make_config(5, 3, 128, 192, 64, 10);
    config.use_attn_sink = true;
    add("h128_s3_nosplit", config, PlanOptions{.max_parts = 1}, 25);
  }
  {
    auto config = make_config(9, 2, 32, 256, 64, 10);
    config.use_topk_length = true;
    add("h32_s2_few_parts", config, PlanOptions{.max_parts = 3, .min_parts = 0}, 26);
  }
  // A sharp softmax (softmax_scale 0.35, about 8x the default: logits spread over tens of nats): the
  // column-split consumers' lazy reference max (common::lazy_reference) moves again after a row's first
  // blocks, split and not.
  {
    auto config = make_config(3, 2, 64, 1024, 64, 40);
    config.softmax_scale = 0.35f;
    add("h64_sharp", config, {}, 32);
    add("h64_sharp_split", config, PlanOptions{.max_parts = 0, .min_parts = 40}, 33);
    auto wide = make_config(2, 1, 128, 512, 64, 20);
    wide.softmax_scale = 0.35f;
    wide.use_attn_sink = true;
    add("h128_sharp_sink", wide, {}, 34);
  }
  // Longest topk.
  add("h16_topk16384", make_config(1, 1, 16, 16384, 64, 300), {}, 27);
  // Mostly invalid indices.
  {
    auto config = make_config(3, 2, 64, 256, 64, 6);
    config.invalid_fraction = 0.6;
    config.out_of_range_fraction = 0.2;
    config.negative_fraction = 0.15;
    add("h64_mostly_invalid", config, {}, 28);
  }
  // Heads-on-M kernels (h_q = 64 / 128): every index invalid, one-token pages
  // with a long topk, and many short items with zero lengths in few parts.
  {
    auto config = make_config(2, 2, 128, 192, 64, 6);
    config.invalid_fraction = 1.0;
    config.out_of_range_fraction = 0.0;
    config.negative_fraction = 0.0;
    add("h128_all_invalid", config, {}, 29);
  }
  add("h64_s2_page1_topk4096", make_config(1, 2, 64, 4096, 1, 5000), {}, 30);
  {
    auto config = make_config(24, 2, 128, 256, 64, 12);
    config.use_topk_length = true;
    config.use_attn_sink = true;
    add("h128_many_items_topk_length", config, PlanOptions{.max_parts = 2, .min_parts = 0}, 31);
  }
  return cases;
}

class DecodeSparseCases : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeSparseCases, MatchesReference) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(DecodeSparseGpu, DecodeSparseCases, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Device helpers for large inputs (fills: test_util/device_fill.cuh)
// ---------------------------------------------------------------------------
__global__ void count_nan_bf16_kernel(const uint16_t* data, size_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    local += (data[i] & 0x7fffu) > 0x7f80u ? 1 : 0;
  }
  if (local) atomicAdd(count, local);
}

__global__ void count_nan_f32_kernel(const float* data, size_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    local += isnan(data[i]) ? 1 : 0;
  }
  if (local) atomicAdd(count, local);
}


// A cache of `num_tokens` live tokens (page size 64, no padding).
std::vector<uint8_t> make_cache(int num_tokens, uint64_t seed) {
  std::vector<uint8_t> cache(size_t(num_tokens) * kSparseFp8TokenBytes);
  test::Rng rng(seed);
  std::vector<float> row(kHeadDimQK);
  for (int t = 0; t < num_tokens; ++t) {
    for (int g = 0; g < kSparseFp8NumScales; ++g) {
      const float magnitude = std::ldexp(1.0f, rng.uniform_int(-3, 3));
      for (int i = 0; i < kSparseFp8ValuesPerScale; ++i) row[g * kSparseFp8ValuesPerScale + i] = magnitude * rng.normal();
    }
    for (int i = 0; i < kHeadDimRope; ++i) row[kHeadDimLatent + i] = rng.normal();
    quantize_sparse_fp8_token(row.data(), cache.data() + size_t(t) * kSparseFp8TokenBytes);
  }
  return cache;
}

// ---------------------------------------------------------------------------
// b = 16384: bounded workspace, sampled requests against the reference.
// ---------------------------------------------------------------------------
TEST(DecodeSparseGpu, BigBatchWorkspaceBound) {
  constexpr int kBatch = 16384, kHeads = 128, kTopk = 2048, kPageSize = 64, kNumPages = 512;
  constexpr int kTokens = kPageSize * kNumPages;  // a 32768-token context
  SparseDecodeShape shape{.batch = kBatch, .s_q = 1, .h_q = kHeads, .topk = kTopk, .page_size = kPageSize,
                          .num_pages = kNumPages};
  DecodePlan plan;
  ASSERT_OK(plan_sparse_decode(shape, device_info(), &plan));
  EXPECT_LE(plan.workspace.total_bytes, kBigBatchWorkspaceLimit);
  ::testing::Test::RecordProperty("workspace_bytes", std::to_string(plan.workspace.total_bytes));

  // ---- inputs: q on the device, cache and indices on the host ----
  const size_t q_elems = size_t(kBatch) * kHeads * kHeadDimQK;
  const size_t out_elems = size_t(kBatch) * kHeads * kHeadDimV;
  const std::vector<uint8_t> cache = make_cache(kTokens, 31);
  std::vector<int32_t> indices(size_t(kBatch) * kTopk);
  std::mt19937_64 rng(32);
  for (auto& index : indices) {
    const uint64_t r = rng();
    index = (r & 15) == 0 ? -1 : int32_t((r >> 8) % kTokens);  // ~6% skipped
  }
  DeviceBuffer<uint16_t> d_q(q_elems), d_out(out_elems);
  DeviceBuffer<uint8_t> d_cache;
  DeviceBuffer<int32_t> d_indices;
  DeviceBuffer<float> d_lse(size_t(kBatch) * kHeads);
  DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
  ASSERT_NE(d_q.ptr, nullptr);
  ASSERT_NE(d_out.ptr, nullptr);
  upload(d_cache, cache);
  upload(d_indices, indices);
  fill_bf16_kernel<<<kFillBlocks, kFillThreads>>>(d_q.ptr, q_elems, 33);
  ASSERT_CUDA(cudaMemset(d_out.ptr, 0xff, out_elems * 2));  // NaN
  ASSERT_CUDA(cudaMemset(d_lse.ptr, 0xff, d_lse.count * 4));

  SparseDecodeParams params;
  params.shape = shape;
  params.q = d_q.ptr;
  params.q_stride_h = kHeadDimQK;
  params.q_stride_s = int64_t(kHeads) * kHeadDimQK;
  params.q_stride_b = params.q_stride_s;
  params.kv_cache = d_cache.ptr;
  params.kv_stride_page_bytes = int64_t(kPageSize) * kSparseFp8TokenBytes;
  params.indices = d_indices.ptr;
  params.indices_stride_s = kTopk;
  params.indices_stride_b = kTopk;
  params.out = d_out.ptr;
  params.out_stride_h = kHeadDimV;
  params.out_stride_s = int64_t(kHeads) * kHeadDimV;
  params.out_stride_b = params.out_stride_s;
  params.lse = d_lse.ptr;
  params.lse_stride_h = 1;
  params.lse_stride_b = kHeads;
  params.softmax_scale = 1.0f / std::sqrt(float(kHeadDimQK));
  ASSERT_OK(sparse_decode_run(params, plan, workspace.ptr, plan.workspace.total_bytes, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());

  // ---- every output written ----
  DeviceBuffer<unsigned long long> d_count(2);
  ASSERT_CUDA(cudaMemset(d_count.ptr, 0, 16));
  count_nan_bf16_kernel<<<kFillBlocks, kFillThreads>>>(d_out.ptr, out_elems, d_count.ptr);
  count_nan_f32_kernel<<<kFillBlocks, kFillThreads>>>(d_lse.ptr, d_lse.count, d_count.ptr + 1);
  unsigned long long counts[2];
  ASSERT_CUDA(cudaMemcpy(counts, d_count.ptr, 16, cudaMemcpyDeviceToHost));
  EXPECT_EQ(counts[0], 0ull) << "out elements left NaN";
  EXPECT_EQ(counts[1], 0ull) << "lse elements left NaN";

  // ---- sampled requests against the reference (in parallel on the host) ----
  const std::vector<int> samples = {0, 1, 4097, 8191, 12345, kBatch - 1};
  std::vector<std::future<void>> jobs;
  std::vector<std::vector<float>> want_out(samples.size()), want_lse(samples.size());
  std::vector<test::HostVector<uint16_t>> got_out(samples.size());
  std::vector<std::vector<float>> got_lse(samples.size());
  std::vector<test::HostVector<uint16_t>> q_rows(samples.size());
  for (size_t k = 0; k < samples.size(); ++k) {
    const int b = samples[k];
    q_rows[k].resize(size_t(kHeads) * kHeadDimQK);
    got_out[k].resize(size_t(kHeads) * kHeadDimV);
    got_lse[k].resize(kHeads);
    ASSERT_CUDA(cudaMemcpy(q_rows[k].data(), d_q.ptr + size_t(b) * kHeads * kHeadDimQK, q_rows[k].size() * 2,
                           cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(got_out[k].data(), d_out.ptr + size_t(b) * kHeads * kHeadDimV, got_out[k].size() * 2,
                           cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(got_lse[k].data(), d_lse.ptr + size_t(b) * kHeads, kHeads * 4, cudaMemcpyDeviceToHost));
  }
  for (size_t k = 0; k < samples.size(); ++k) {
    jobs.push_back(std::async(std::launch::async, [&, k] {
      const int b = samples[k];
      test::HostVector<uint16_t> out(size_t(kHeads) * kHeadDimV);
      std::vector<float> lse(kHeads);
      SparseDecodeParams one = params;
      one.shape.batch = 1;
      one.q = q_rows[k].data();
      one.kv_cache = cache.data();
      one.indices = indices.data() + size_t(b) * kTopk;
      one.out = out.data();
      one.lse = lse.data();
      if (!reference_sparse_decode(one).is_ok()) return;
      want_out[k].resize(out.size());
      for (size_t i = 0; i < out.size(); ++i) want_out[k][i] = bf16_bits_to_float(out[i]);
      want_lse[k] = lse;
    }));
  }
  for (auto& job : jobs) job.get();
  for (size_t k = 0; k < samples.size(); ++k) {
    ASSERT_EQ(want_out[k].size(), size_t(kHeads) * kHeadDimV) << "reference failed";
    std::vector<float> got(got_out[k].size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_bits_to_float(got_out[k][i]);
    expect_rows_match(got, want_out[k], kHeadDimV, "request " + std::to_string(samples[k]));
    expect_lse_match(got_lse[k], want_lse[k], "request " + std::to_string(samples[k]));
  }
}

// ---------------------------------------------------------------------------
// CUDA graph: capture once, replay with new indices and topk_length; one
// head count per kernel (heads on N, heads on M, heads-on-M CTA pairs).
// ---------------------------------------------------------------------------
class DecodeSparseGraph : public ::testing::TestWithParam<int> {};

TEST_P(DecodeSparseGraph, ReplayWithNewIndices) {
  auto config = make_config(6, 2, /*h_q=*/GetParam(), 512, 64, 16);
  config.use_topk_length = true;
  config.use_attn_sink = true;
  test::SparseDecodeInputs inputs = test::make_sparse_decode_inputs(config, 41);
  DecodePlan plan;
  ASSERT_OK(plan_sparse_decode(inputs.shape, device_info(), &plan, PlanOptions{.max_parts = 0, .min_parts = 40}));
  ASSERT_GT(plan.num_slots, 0);  // the combine is part of the graph
  DeviceInputs dev;
  dev.upload_all(inputs);
  DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
  const SparseDecodeParams params = dev.params(inputs);

  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_OK(sparse_decode_run(params, plan, workspace.ptr, plan.workspace.total_bytes, stream));
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 0; replay < 4; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    // Same shapes and cache, new index lists and lengths (replay 2: a smaller live batch).
    test::SparseDecodeInputs next = test::make_sparse_decode_inputs(config, 100 + replay);
    next.q = inputs.q;
    next.kv_cache = inputs.kv_cache;
    next.token_live = inputs.token_live;
    next.attn_sink = inputs.attn_sink;
    // The index lists must point at tokens live in *this* cache: rebuild them.
    test::Rng rng(200 + replay);
    std::vector<int32_t> live, dead;
    for (size_t t = 0; t < inputs.token_live.size(); ++t) (inputs.token_live[t] ? live : dead).push_back(int32_t(t));
    for (int b = 0; b < inputs.shape.batch; ++b) {
      next.topk_length[b] = replay == 2 && b >= 2 ? 0 : rng.uniform_int(0, inputs.shape.topk);
      for (int s = 0; s < inputs.shape.s_q; ++s) {
        int32_t* row = next.indices.data() + b * next.indices_stride_b + s * next.indices_stride_s;
        for (int k = 0; k < inputs.shape.topk; ++k) {
          if (k >= next.topk_length[b]) {
            row[k] = dead.empty() ? -1 : dead[rng.uniform_int(0, int(dead.size()) - 1)];
          } else {
            row[k] = rng.bernoulli(0.2) ? -1 : live[rng.uniform_int(0, int(live.size()) - 1)];
          }
        }
      }
    }
    next.poison_outputs();
    test::SparseDecodeInputs reference = next;
    ASSERT_OK(reference_sparse_decode(reference.params()));

    ASSERT_CUDA(cudaMemcpyAsync(dev.indices.ptr, next.indices.data(), next.indices.size() * 4,
                                cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaMemcpyAsync(dev.topk_length.ptr, next.topk_length.data(), next.topk_length.size() * 4,
                                cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaMemcpyAsync(dev.out.ptr, next.out.data(), next.out.size() * 2, cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaMemcpyAsync(dev.lse.ptr, next.lse.data(), next.lse.size() * 4, cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    download(next.out, dev.out);
    download(next.lse, dev.lse);
    expect_rows_match(next.out_values(), reference.out_values(), kHeadDimV, "replay");
    expect_lse_match(next.lse_values(), reference.lse_values(), "replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Heads, DecodeSparseGraph, ::testing::Values(16, 64, 128),
                         [](const ::testing::TestParamInfo<int>& info) { return "h" + std::to_string(info.param); });

// ---------------------------------------------------------------------------
// Timing (not a correctness test).
// ---------------------------------------------------------------------------
TEST(DecodeSparseGpu, DISABLED_Timing) {
  constexpr int kBatch = 128, kTopk = 2048, kPageSize = 64, kNumPages = 512, kRuns = 20;
  constexpr int kTokens = kPageSize * kNumPages;
  const std::vector<uint8_t> cache = make_cache(kTokens, 51);
  DeviceBuffer<uint8_t> d_cache;
  upload(d_cache, cache);
  DeviceBuffer<uint8_t> flush(size_t(256) << 20);
  cudaEvent_t start, stop;
  ASSERT_CUDA(cudaEventCreate(&start));
  ASSERT_CUDA(cudaEventCreate(&stop));
  std::printf("%-24s %10s %10s %14s\n", "case", "us", "TFLOP/s", "us/query-token");
  for (int h_q : {16, 64, 128}) {
    for (int s_q : {1, 2}) {
      SparseDecodeShape shape{.batch = kBatch, .s_q = s_q, .h_q = h_q, .topk = kTopk, .page_size = kPageSize,
                              .num_pages = kNumPages};
      DecodePlan plan;
      ASSERT_OK(plan_sparse_decode(shape, device_info(), &plan));
      std::vector<int32_t> indices(size_t(kBatch) * s_q * kTopk);
      std::mt19937_64 rng(52);
      for (auto& index : indices) index = int32_t(rng() % kTokens);
      DeviceBuffer<uint16_t> d_q(size_t(kBatch) * s_q * h_q * kHeadDimQK), d_out(size_t(kBatch) * s_q * h_q * kHeadDimV);
      DeviceBuffer<int32_t> d_indices;
      DeviceBuffer<float> d_lse(size_t(kBatch) * s_q * h_q);
      DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
      upload(d_indices, indices);
      fill_bf16_kernel<<<kFillBlocks, kFillThreads>>>(d_q.ptr, d_q.count, 53);
      SparseDecodeParams params;
      params.shape = shape;
      params.q = d_q.ptr;
      params.q_stride_h = kHeadDimQK;
      params.q_stride_s = int64_t(h_q) * kHeadDimQK;
      params.q_stride_b = int64_t(s_q) * params.q_stride_s;
      params.kv_cache = d_cache.ptr;
      params.kv_stride_page_bytes = int64_t(kPageSize) * kSparseFp8TokenBytes;
      params.indices = d_indices.ptr;
      params.indices_stride_s = kTopk;
      params.indices_stride_b = int64_t(s_q) * kTopk;
      params.out = d_out.ptr;
      params.out_stride_h = kHeadDimV;
      params.out_stride_s = int64_t(h_q) * kHeadDimV;
      params.out_stride_b = int64_t(s_q) * params.out_stride_s;
      params.lse = d_lse.ptr;
      params.lse_stride_h = s_q;
      params.lse_stride_b = int64_t(h_q) * s_q;
      params.softmax_scale = 1.0f / std::sqrt(float(kHeadDimQK));
      for (int w = 0; w < 3; ++w) ASSERT_OK(sparse_decode_run(params, plan, workspace.ptr, plan.workspace.total_bytes, nullptr));
      std::vector<float> times;
      for (int r = 0; r < kRuns; ++r) {
        ASSERT_CUDA(cudaMemsetAsync(flush.ptr, r & 0xff, flush.count));
        ASSERT_CUDA(cudaEventRecord(start));
        ASSERT_OK(sparse_decode_run(params, plan, workspace.ptr, plan.workspace.total_bytes, nullptr));
        ASSERT_CUDA(cudaEventRecord(stop));
        ASSERT_CUDA(cudaEventSynchronize(stop));
        float ms = 0.f;
        ASSERT_CUDA(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms * 1000.f);
      }
      std::sort(times.begin(), times.end());
      const double us = times[times.size() / 2];
      const double flops = double(kBatch) * s_q * h_q * kTopk * 2.0 * (kHeadDimQK + kHeadDimV);
      char name[64];
      std::snprintf(name, sizeof(name), "b%d_s%d_h%d_topk%d", kBatch, s_q, h_q, kTopk);
      std::printf("%-24s %10.1f %10.1f %14.3f\n", name, us, flops / us * 1e-6, us / (kBatch * s_q));
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace openmla

// GPU tests of the sm90 dense decode kernel (kernels::decode_dense::launch)
// against the CPU reference.
//
// Each case: random inputs with NaN-poisoned unused pages/slots and garbage
// block-table tails (tests/test_util/mla_inputs.h), a plan and a host-built
// schedule, the kernel on the GPU, then, when the plan can split, the CPU
// combine (reference_combine) over the partials the kernel wrote. Output and
// LSE start as NaN, so an unwritten element fails. Checks: per-row rel-L2 of O
// <= 1e-2, LSE abs error <= 1e-3 with identical inf/NaN positions.
//
// DISABLED_Timing (run with --gtest_also_run_disabled_tests) times the
// b = 128, s_k = 16384 cases with CUDA events, L2 flushed between runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/combine/launch.h"
#include "kernels/common/workspace.h"
#include "kernels/sm90/decode_dense/launch.h"
#include "openmla/openmla.h"
#include "openmla/plan.h"
#include "openmla/reference.h"
#include "test_util/device_buffer.h"
#include "test_util/mla_inputs.h"
#include "test_util/schedule_records.h"

namespace openmla {
namespace {

using test::device_info;
using test::DeviceBuffer;
using test::upload;


constexpr double kOutTolerance = 1e-2;  // rel-L2 per row
constexpr double kLseTolerance = 1e-3;  // absolute, natural log
// FP8: S accumulates e4m3 products on the tensor cores (#23's bar).
constexpr double kLseToleranceFp8 = 2e-3;

struct Case {
  std::string name;
  test::DenseDecodeConfig config;
  PlanOptions options;
  uint64_t seed = 1;
  // FP8's S error is relative to the logits' size; cases with logits far beyond +-15 widen it.
  double lse_tolerance_fp8 = kLseToleranceFp8;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// Runs one case with `options`; returns through gtest assertions and, in
// *cluster_split, the plan's cluster split.
void run_case_with(const Case& c, const PlanOptions& options, int* cluster_split) {
  SCOPED_TRACE(c.name + (options.cluster_split == 1 && c.options.cluster_split != 1 ? " (schedule path)" : ""));
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(c.config, c.seed);
  const DenseDecodeShape& shape = inputs.shape;

  // ---- reference (host) ----
  test::DenseDecodeInputs reference = inputs;
  ASSERT_TRUE(reference_dense_decode(reference.params()).is_ok());
  const std::vector<float> want_out = reference.out_values();
  const std::vector<float> want_lse = reference.lse_values();

  // ---- plan + host schedule ----
  DecodePlan plan;
  const Status planned = plan_dense_decode(shape, device_info(), &plan, options);
  ASSERT_TRUE(planned.is_ok()) << planned.message();
  *cluster_split = plan.kernel == DecodeKernel::kDenseColumnSplitCluster ? plan.cluster_size : 0;
  ItemLengths lengths = plan.lengths;
  lengths.lengths = inputs.seqlens.data();
  HostSchedule schedule;
  ASSERT_TRUE(build_schedule_host(plan, lengths, &schedule).is_ok());
  const Status checked = check_plan(plan, lengths, schedule);
  ASSERT_TRUE(checked.is_ok()) << checked.message();

  // ---- device copies (outputs stay NaN-poisoned) ----
  DeviceBuffer<uint8_t> d_q, d_kv, d_out;
  DeviceBuffer<int32_t> d_table, d_seqlens;
  DeviceBuffer<float> d_lse;
  DeviceBuffer<PartWork> d_parts;
  DeviceBuffer<float> d_q_scale, d_kv_scale;  // fp8 only: the kernel reads the descales on the device
  const bool fp8 = shape.kv_dtype == DType::kFP8E4M3;
  if (fp8) {
    upload(d_q_scale, inputs.q_scale);
    upload(d_kv_scale, inputs.kv_scale);
  }
  upload(d_q, inputs.q);
  upload(d_kv, inputs.kv_cache);
  upload(d_out, inputs.out);
  upload(d_table, inputs.block_table);
  upload(d_seqlens, inputs.seqlens);
  upload(d_lse, inputs.lse);
  upload(d_parts, schedule.parts);
  const size_t partial_rows = size_t(plan.num_slots) * plan.rows_per_item;
  std::vector<float> partial_o(partial_rows * kHeadDimV, std::nanf(""));
  std::vector<float> partial_lse(partial_rows, std::nanf(""));
  DeviceBuffer<float> d_partial_o, d_partial_lse;
  if (partial_rows > 0) {
    upload(d_partial_o, partial_o);
    upload(d_partial_lse, partial_lse);
  }
  if (::testing::Test::HasFatalFailure()) return;

  DenseDecodeParams params = inputs.params();
  params.q = d_q.ptr;
  params.kv_cache = d_kv.ptr;
  params.block_table = d_table.ptr;
  params.seqlens = d_seqlens.ptr;
  params.out = d_out.ptr;
  params.lse = d_lse.ptr;
  if (fp8) {
    params.q_scale = d_q_scale.ptr;
    params.kv_scale = d_kv_scale.ptr;
  }

  const auto initial_out = inputs.out;  // NaN-poisoned: restored for the in-kernel schedule's run below
  const auto initial_lse = inputs.lse;
  const Status launched = kernels::decode_dense::launch(params, plan, kernels::read_parts(d_parts.ptr), d_partial_o.ptr,
                                                        d_partial_lse.ptr, nullptr);
  ASSERT_TRUE(launched.is_ok()) << launched.message();
  ASSERT_CUDA(cudaDeviceSynchronize());

  ASSERT_CUDA(cudaMemcpy(inputs.out.data(), d_out.ptr, inputs.out.size(), cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(inputs.lse.data(), d_lse.ptr, inputs.lse.size() * sizeof(float), cudaMemcpyDeviceToHost));

  // ---- the same kernel building its own schedule (SchedulePlacement::kAttentionKernel, where the
  // plan has a schedule): the records it leaves for the combine and for reusing calls are the host
  // schedule's bytes, and out, LSE and partials are bitwise those of the run above ----
  DecodePlan in_kernel_plan;
  if (!options.batch_invariant && plan.kernel != DecodeKernel::kDenseColumnSplitCluster) {
    PlanOptions in_kernel = options;
    in_kernel.schedule_placement = SchedulePlacement::kAttentionKernel;
    ASSERT_OK(plan_dense_decode(shape, device_info(), &in_kernel_plan, in_kernel));
  }
  if (in_kernel_plan.schedule_in_kernel) {
    const std::vector<uint8_t> first_partial_o = test::download_bytes(d_partial_o);
    const std::vector<uint8_t> first_partial_lse = test::download_bytes(d_partial_lse);
    test::overwrite(d_out, initial_out);
    test::overwrite(d_lse, initial_lse);
    if (partial_rows > 0) {
      test::overwrite(d_partial_o, partial_o);
      test::overwrite(d_partial_lse, partial_lse);
    }
    const test::ScheduleRecords records(in_kernel_plan);
    const Status rebuilt = kernels::decode_dense::launch(
        params, in_kernel_plan,
        kernels::part_schedule(in_kernel_plan, records.buffers(), d_seqlens.ptr, /*build_schedule=*/true),
        d_partial_o.ptr, d_partial_lse.ptr, nullptr);
    ASSERT_TRUE(rebuilt.is_ok()) << rebuilt.message();
    ASSERT_CUDA(cudaDeviceSynchronize());
    records.expect_equal(schedule);
    const std::vector<uint8_t> out_bytes = test::download_bytes(d_out);
    const std::vector<uint8_t> lse_bytes = test::download_bytes(d_lse);
    ASSERT_EQ(out_bytes.size(), inputs.out.size());
    ASSERT_EQ(lse_bytes.size(), inputs.lse.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(out_bytes.data(), inputs.out.data(), out_bytes.size()), 0) << "out differs";
    EXPECT_EQ(std::memcmp(lse_bytes.data(), inputs.lse.data(), lse_bytes.size()), 0) << "LSE differs";
    EXPECT_TRUE(test::download_bytes(d_partial_o) == first_partial_o) << "partial O differs";
    EXPECT_TRUE(test::download_bytes(d_partial_lse) == first_partial_lse) << "partial LSE differs";
  }

  // ---- split items: merge the kernel's partials on the host (a cluster
  // split merges in the kernel and writes out / lse itself) ----
  if (partial_rows > 0 && plan.kernel != DecodeKernel::kDenseColumnSplitCluster) {
    ASSERT_CUDA(cudaMemcpy(partial_o.data(), d_partial_o.ptr, partial_o.size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(partial_lse.data(), d_partial_lse.ptr, partial_lse.size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
    CombineParams combine;
    combine.batch = shape.batch;
    combine.s_q = shape.s_q;
    combine.h_q = shape.h_q;
    combine.d_v = kHeadDimV;
    combine.q_tokens_per_item = plan.q_tokens_per_item;
    combine.num_entries = plan.num_parts;
    combine.num_slots = plan.num_slots;
    combine.entries = schedule.combine.data();
    combine.partial_o = partial_o.data();
    combine.partial_lse = partial_lse.data();
    combine.out = inputs.out.data();
    combine.out_dtype = shape.out_dtype;
    combine.out_stride_b = inputs.out_stride_b;
    combine.out_stride_s = inputs.out_stride_s;
    combine.out_stride_h = inputs.out_stride_h;
    combine.lse = inputs.lse.data();
    combine.lse_stride_b = inputs.lse_stride_b;
    combine.lse_stride_h = inputs.lse_stride_h;
    const Status combined = reference_combine(combine);
    ASSERT_TRUE(combined.is_ok()) << combined.message();
  }

  // ---- compare ----
  const std::vector<float> got_out = inputs.out_values();
  const std::vector<float> got_lse = inputs.lse_values();
  ASSERT_EQ(got_out.size(), want_out.size());
  const double total_err = test::rel_l2(got_out, want_out);
  EXPECT_LE(total_err, kOutTolerance) << "whole-output rel-L2";
  int bad_rows = 0;
  for (int b = 0; b < shape.batch; ++b) {
    for (int s = 0; s < shape.s_q; ++s) {
      for (int h = 0; h < shape.h_q; ++h) {
        const size_t row = (size_t(b) * shape.s_q + s) * shape.h_q + h;
        const std::span<const float> got(got_out.data() + row * kHeadDimV, kHeadDimV);
        const std::span<const float> want(want_out.data() + row * kHeadDimV, kHeadDimV);
        const double err = test::rel_l2(got, want);
        if (!(err <= kOutTolerance)) {
          if (bad_rows < 5) {
            ADD_FAILURE() << "O row (b " << b << ", s " << s << ", h " << h << ") rel-L2 " << err << " (seqlen "
                          << inputs.seqlens[b] << "), got[0] " << got[0] << " want[0] " << want[0];
          }
          ++bad_rows;
        }
      }
    }
  }
  EXPECT_EQ(bad_rows, 0) << "rows over tolerance";
  const test::LseComparison lse = test::compare_lse(got_lse, want_lse, fp8 ? c.lse_tolerance_fp8 : kLseTolerance);
  EXPECT_TRUE(lse.ok) << "LSE: " << lse.message;
  if (fp8) {  // recorded for docs/accuracy: FP8 S accumulates on the tensor cores
    std::printf("[ fp8 accuracy ] %s: out rel-L2 %.3g, LSE max abs error %.3g\n", c.name.c_str(), total_err,
                lse.max_abs_error);
  }
}

// ---------------------------------------------------------------------------
// The case list: a representative cross-product, sized so the CPU reference
// keeps the whole suite well under a minute.
// ---------------------------------------------------------------------------
test::DenseDecodeConfig config(int batch, int s_q, int h_q, int h_kv, int page_size, bool causal,
                               DType dtype = DType::kBF16, int d_qk = kHeadDimQK, int max_seqlen = 300) {
  test::DenseDecodeConfig c;
  c.batch = batch;
  c.s_q = s_q;
  c.h_q = h_q;
  c.h_kv = h_kv;
  c.page_size = page_size;
  c.causal = causal;
  c.dtype = dtype;
  c.d_qk = d_qk;
  c.max_seqlen = max_seqlen;
  return c;
}

std::string dtype_tag(DType dtype) {
  return dtype == DType::kBF16 ? "bf16" : dtype == DType::kFP16 ? "fp16" : "fp8";
}

// Runs one case. When the automatic plan makes it a cluster split, the same
// inputs also run through the split-KV schedule (cluster_split = 1), so both
// paths of every short case are checked.
void run_case(const Case& c) {
  int cluster_split = 0;
  run_case_with(c, c.options, &cluster_split);
  const PlanOptions& o = c.options;
  if (cluster_split > 1 && o.cluster_split == 0 && o.max_parts == 0 && o.min_parts == 0) {
    int unused = 0;
    run_case_with(c, PlanOptions{.cluster_split = 1}, &unused);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  uint64_t seed = 100;
  auto add = [&](std::string name, test::DenseDecodeConfig c, PlanOptions options = {}) {
    const test::DenseDecodeConfig& k = c;
    name += "_b" + std::to_string(k.batch) + "_sq" + std::to_string(k.s_q) + "_hq" + std::to_string(k.h_q) + "_hkv" +
            std::to_string(k.h_kv) + "_p" + std::to_string(k.page_size) + (k.causal ? "_causal" : "") + "_" +
            dtype_tag(k.dtype) + "_d" + std::to_string(k.d_qk);
    if (options.max_parts == 1) name += "_nosplit";
    if (options.min_parts > 0) name += "_split" + std::to_string(options.min_parts);
    if (options.cluster_split == 1) name += "_sched";
    if (options.cluster_split > 1) name += "_cluster" + std::to_string(options.cluster_split);
    cases.push_back(Case{name, c, options, seed++});
  };

  // Head counts (packing, padding rows, multi-tile), plain decode and MTP.
  for (int h_q : {1, 3, 9, 16, 63, 64, 126, 128}) {
    add("heads", config(4, 1, h_q, 1, 64, false));
    add("heads", config(3, 2, h_q, 1, 64, true));
  }
  // Longer query blocks (packed rows spanning several tokens and tiles), causal and not.
  add("sq", config(3, 4, 128, 1, 64, true, DType::kBF16, kHeadDimQK, 400));
  add("sq", config(3, 4, 16, 1, 32, false));
  add("sq", config(2, 67, 16, 1, 64, true, DType::kBF16, kHeadDimQK, 400));
  add("sq", config(2, 128, 8, 2, 16, true, DType::kBF16, kHeadDimQK, 400));
  add("sq", config(2, 300, 3, 1, 128, true, DType::kBF16, kHeadDimQK, 600));
  add("sq", config(2, 300, 2, 2, 64, false, DType::kFP16, 512, 200));
  // KV heads.
  add("hkv", config(3, 1, 16, 2, 64, false));
  add("hkv", config(3, 2, 64, 8, 32, true));
  add("hkv", config(2, 1, 128, 8, 16, false));
  add("hkv", config(3, 1, 126, 2, 128, false));
  add("hkv", config(3, 3, 8, 8, 64, true));
  // Page sizes (lengths random, so mostly not page multiples), causal and not.
  for (int page_size : {16, 32, 64, 128}) {
    add("page", config(5, 1, 16, 1, page_size, false, DType::kBF16, kHeadDimQK, 500));
    add("page", config(3, 2, 64, 1, page_size, true, DType::kFP16, kHeadDimQK, 500));
  }
  add("page", config(3, 1, 16, 1, 8, false));
  add("page", config(3, 1, 16, 1, 256, false, DType::kBF16, kHeadDimQK, 700));
  // dtype x d_qk.
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    for (int d_qk : {512, 576}) {
      add("dtype", config(4, 1, 32, 1, 64, false, dtype, d_qk));
      add("dtype", config(3, 2, 128, 1, 32, true, dtype, d_qk));
    }
  }
  // Forced split (items cut across many parts; some parts empty) and forced no-split.
  add("split", config(3, 1, 16, 1, 64, false, DType::kBF16, kHeadDimQK, 900), PlanOptions{.min_parts = 40});
  add("split", config(2, 2, 128, 1, 16, true, DType::kBF16, kHeadDimQK, 700), PlanOptions{.min_parts = 20});
  add("split", config(4, 1, 64, 2, 32, false, DType::kFP16, 512, 400), PlanOptions{.min_parts = 7});
  add("split", config(2, 1, 16, 1, 64, false), PlanOptions{.min_parts = 200});
  add("split", config(2, 67, 3, 1, 64, true, DType::kBF16, kHeadDimQK, 500), PlanOptions{.min_parts = 9});
  // Long query blocks: 134 q-groups on 132 SMs take parts of whole requests
  // (no partial slots, no combine); one request is empty (every row masked).
  // d_qk 512 runs the column-split kernel, 576 the alternate-blocks kernel.
  {
    test::DenseDecodeConfig lq = config(3, 67, 128, 1, 64, true, DType::kBF16, kHeadDimQK, 160);
    lq.seqlens = {150, 0, 90};
    add("long_query", lq);
    test::DenseDecodeConfig lq512 = config(3, 67, 128, 1, 64, true, DType::kBF16, 512, 160);
    lq512.seqlens = {0, 130, 77};
    add("long_query", lq512);
  }
  // A sharp softmax (softmax_scale 0.35, about 8x the default): a row's lazy reference max moves again after its first
  // blocks, so the pair's rescales and P up to 2^8 run (heads_on_m/block_pairs.cuh, lazy_reference).
  {
    test::DenseDecodeConfig c = config(3, 2, 128, 1, 64, true, DType::kBF16, kHeadDimQK, 2000);  // alternate blocks
    c.softmax_scale = 0.35f;
    add("sharp", c);
    add("sharp", c, PlanOptions{.min_parts = 12});
    test::DenseDecodeConfig f = config(3, 1, 64, 1, 64, false, DType::kFP16, kHeadDimQK, 2000);
    f.softmax_scale = 0.35f;
    add("sharp", f);
  }
  add("nosplit", config(6, 1, 16, 1, 64, false, DType::kBF16, kHeadDimQK, 900), PlanOptions{.max_parts = 1});
  add("nosplit", config(3, 2, 128, 2, 128, true, DType::kFP16, kHeadDimQK, 500), PlanOptions{.max_parts = 1});
  // Zero-length mixes and lengths around block and page edges.
  {
    test::DenseDecodeConfig c = config(10, 1, 16, 1, 32, false);
    c.seqlens = {0, 0, 1, 63, 64, 65, 0, 127, 128, 129};
    add("lengths", c);
    add("lengths", c, PlanOptions{.min_parts = 13});
    // The same edges at page 16 on a two-tile shape (four boxes a block; column-split kernel today,
    // the shape the alternate-blocks kernel would take if small pages move to it).
    test::DenseDecodeConfig p = config(10, 2, 64, 1, 16, true);
    p.seqlens = {0, 0, 1, 15, 16, 17, 0, 63, 64, 129};
    add("lengths", p);
    add("lengths", p, PlanOptions{.min_parts = 13});
    test::DenseDecodeConfig z = config(4, 2, 64, 1, 64, true);
    z.seqlens = {0, 0, 0, 0};
    add("allzero", z);
    add("allzero", z, PlanOptions{.min_parts = 5});
    // Causal with s_q > length: the first rows see nothing (LSE +inf, O = 0).
    test::DenseDecodeConfig s = config(4, 4, 16, 1, 16, true);
    s.seqlens = {2, 0, 3, 10};
    add("causal_short", s);
  }
  // Padded strides on every tensor.
  {
    test::DenseDecodeConfig c = config(3, 2, 16, 1, 64, true);
    c.stride_pad_bytes = 32;
    add("padded", c);                                     // a cluster split of 4 (300 tokens at most)
    add("padded", c, PlanOptions{.cluster_split = 1});    // the split-KV schedule (alternate blocks)
    test::DenseDecodeConfig c32 = config(3, 2, 16, 1, 32, true);  // pages of 32: the column split
    c32.stride_pad_bytes = 32;
    add("padded", c32, PlanOptions{.cluster_split = 1});
    test::DenseDecodeConfig d = config(3, 1, 64, 2, 16, false, DType::kFP16, 512);
    d.stride_pad_bytes = 64;
    add("padded", d, PlanOptions{.min_parts = 6});
    test::DenseDecodeConfig e = config(3, 2, 128, 1, 64, true, DType::kBF16, kHeadDimQK, 700);  // alternate blocks
    e.stride_pad_bytes = 32;
    add("padded", e, PlanOptions{.min_parts = 9});
    // One part: every item is whole, so its O goes out through shared memory (Epilogue::store_o_staged)
    // into the padded rows of out.
    add("padded", e, PlanOptions{.max_parts = 1});
  }
  // Forced cluster splits: pieces that are empty (short and zero lengths),
  // causal rows that see nothing, several query tiles and KV heads, padded
  // strides, both dtypes and head dims.
  {
    add("cluster", config(2, 1, 16, 1, 64, false, DType::kBF16, kHeadDimQK, 900), PlanOptions{.cluster_split = 8});
    test::DenseDecodeConfig c = config(10, 1, 16, 1, 32, false);
    c.seqlens = {0, 0, 1, 63, 64, 65, 0, 127, 128, 129};
    add("cluster_lengths", c, PlanOptions{.cluster_split = 8});
    test::DenseDecodeConfig z = config(4, 2, 64, 1, 64, true);
    z.seqlens = {0, 0, 0, 0};
    add("cluster_allzero", z, PlanOptions{.cluster_split = 4});
    test::DenseDecodeConfig s = config(4, 4, 16, 1, 16, true);
    s.seqlens = {2, 0, 3, 10};
    add("cluster_causal_short", s, PlanOptions{.cluster_split = 2});
    add("cluster", config(2, 300, 3, 1, 128, true, DType::kBF16, kHeadDimQK, 600), PlanOptions{.cluster_split = 2});
    add("cluster", config(2, 1, 128, 8, 16, false, DType::kFP16, kHeadDimQK, 700), PlanOptions{.cluster_split = 4});
    add("cluster", config(3, 2, 128, 1, 64, true, DType::kBF16, 512, 1500), PlanOptions{.cluster_split = 8});
    test::DenseDecodeConfig d = config(3, 1, 64, 2, 16, false, DType::kFP16, 512, 800);
    d.stride_pad_bytes = 64;
    add("cluster_padded", d, PlanOptions{.cluster_split = 8});
  }
  // FP8 (e4m3 Q/KV, per-tensor descales, bf16 out): the BF16 matrix's axes.
  {
    constexpr DType kFp8 = DType::kFP8E4M3;
    for (int h_q : {1, 16, 63, 64, 128}) {
      add("fp8_heads", config(4, 1, h_q, 1, 64, false, kFp8));
      add("fp8_heads", config(3, 2, h_q, 1, 64, true, kFp8));
    }
    add("fp8_hkv", config(3, 2, 64, 8, 32, true, kFp8));
    add("fp8_hkv", config(2, 1, 128, 2, 16, false, kFp8));
    for (int page_size : {8, 16, 32, 128}) add("fp8_page", config(4, 1, 16, 1, page_size, false, kFp8, kHeadDimQK, 500));
    add("fp8_d512", config(4, 1, 32, 1, 64, false, kFp8, 512));
    add("fp8_d512", config(3, 2, 128, 1, 32, true, kFp8, 512));
    add("fp8_split", config(3, 1, 16, 1, 64, false, kFp8, kHeadDimQK, 900), PlanOptions{.min_parts = 40});
    add("fp8_split", config(2, 2, 128, 1, 16, true, kFp8, kHeadDimQK, 700), PlanOptions{.min_parts = 20});
    add("fp8_nosplit", config(6, 1, 16, 1, 64, false, kFp8, kHeadDimQK, 900), PlanOptions{.max_parts = 1});
    add("fp8_nosplit", config(3, 2, 128, 2, 128, true, kFp8, 512, 500), PlanOptions{.max_parts = 1});
    test::DenseDecodeConfig c = config(10, 1, 16, 1, 32, false, kFp8);
    c.seqlens = {0, 0, 1, 63, 64, 65, 0, 127, 128, 129};
    add("fp8_lengths", c);
    add("fp8_lengths", c, PlanOptions{.min_parts = 13});
    // A sharp softmax: the column-split consumer's lazy reference max moves after a row's first blocks.
    test::DenseDecodeConfig sharp = config(3, 2, 128, 1, 64, true, kFp8, kHeadDimQK, 1500);
    sharp.softmax_scale = 0.35f;
    // Its logits reach about 28 nats, so S's FP8 accumulation error (about 1.5e-4 of the logit; #23)
    // exceeds the 2e-3 LSE bound tuned for logits within +-15. A wrong rescale would miss by far more.
    for (const PlanOptions options : {PlanOptions{}, PlanOptions{.min_parts = 10}}) {
      add("fp8_sharp", sharp, options);
      cases.back().lse_tolerance_fp8 = 6e-3;
    }
    test::DenseDecodeConfig z = config(4, 2, 64, 1, 64, true, kFp8);
    z.seqlens = {0, 0, 0, 0};
    add("fp8_allzero", z);
    test::DenseDecodeConfig t = config(4, 4, 16, 1, 16, true, kFp8);
    t.seqlens = {2, 0, 3, 10};
    add("fp8_causal_short", t);
    test::DenseDecodeConfig pad = config(3, 2, 16, 1, 64, true, kFp8);
    pad.stride_pad_bytes = 32;
    add("fp8_padded", pad, PlanOptions{.min_parts = 6});
    // The field case: h_q = 128 prompts of 66-1024 tokens (the vLLM fork's
    // metadata made zero SM parts from s_q = 67 on 132 SMs). Longer blocks
    // run non-causal over short lengths to keep the CPU reference quick.
    for (int s_q : {66, 67, 100, 128}) {
      test::DenseDecodeConfig f = config(1, s_q, 128, 1, 64, true, kFp8, kHeadDimQK, 0);
      f.seqlens = {s_q + 70};
      add("fp8_field", f);
    }
    for (int s_q : {512, 1024}) {
      test::DenseDecodeConfig f = config(1, s_q, 128, 1, 64, false, kFp8, kHeadDimQK, 0);
      f.seqlens = {90};
      add("fp8_field", f);
    }
    // Long query blocks as parts of whole requests (see the BF16 case).
    test::DenseDecodeConfig lq = config(3, 67, 128, 1, 64, true, kFp8, kHeadDimQK, 160);
    lq.seqlens = {150, 0, 90};
    add("fp8_long_query", lq);
    // Descales far from 1 (codes N(0, 2), so scores stay O(1) when they cancel).
    for (auto [q_scale, kv_scale] : {std::pair{0x1p-8f, 0x1p8f}, std::pair{0x1p8f, 0x1p-8f}, std::pair{0x1p-8f, 0x1p-8f}}) {
      test::DenseDecodeConfig d = config(3, 2, 64, 1, 64, true, kFp8);
      d.fp8_q_scale = q_scale;
      d.fp8_kv_scale = kv_scale;
      add(std::string("fp8_descale_q") + (q_scale < 1 ? "m8" : "p8") + "_kv" + (kv_scale < 1 ? "m8" : "p8"), d);
    }
  }
  return cases;
}

// The planner picks the kernel from the shape, so a change to its heuristic
// could silently move every case off a variant. Each group of cases below
// must still reach the kernels it was written for, in both dtypes.
TEST(DecodeDenseGpuCoverage, CasesReachEveryKernel) {
  std::set<std::tuple<std::string, DecodeKernel, DType>> reached;  // (case group, kernel, dtype)
  for (const Case& c : all_cases()) {
    const test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(c.config, c.seed);
    DecodePlan plan;
    ASSERT_TRUE(plan_dense_decode(inputs.shape, device_info(), &plan, c.options).is_ok()) << c.name;
    const std::string group = c.name.substr(0, c.name.find("_b"));
    reached.emplace(group, plan.kernel, inputs.shape.kv_dtype);
    reached.emplace("any", plan.kernel, inputs.shape.kv_dtype);
    if (group == "long_query" || group == "fp8_long_query") {  // must still run whole-request parts
      EXPECT_GT(plan.num_parts, 1) << c.name;
      EXPECT_EQ(plan.num_slots, 0) << c.name;
    }
  }
  for (DecodeKernel kernel : {DecodeKernel::kDenseColumnSplit, DecodeKernel::kDenseColumnSplitCluster,
                              DecodeKernel::kDenseAlternateBlocks}) {
    for (DType dtype : {DType::kBF16, DType::kFP16}) {
      EXPECT_TRUE(reached.count({"any", kernel, dtype})) << decode_kernel_name(kernel) << " " << dtype_name(dtype);
    }
  }
  const std::tuple<std::string, DecodeKernel, DType> required[] = {
      {"padded", DecodeKernel::kDenseAlternateBlocks, DType::kBF16},
      {"padded", DecodeKernel::kDenseColumnSplit, DType::kBF16},
      {"split", DecodeKernel::kDenseAlternateBlocks, DType::kBF16},
      {"long_query", DecodeKernel::kDenseAlternateBlocks, DType::kBF16},
      {"long_query", DecodeKernel::kDenseColumnSplit, DType::kBF16},
      {"split", DecodeKernel::kDenseColumnSplit, DType::kFP16},
      {"lengths", DecodeKernel::kDenseColumnSplit, DType::kBF16},
      {"cluster", DecodeKernel::kDenseColumnSplitCluster, DType::kFP16},
      {"nosplit", DecodeKernel::kDenseAlternateBlocks, DType::kFP16},
      {"fp8_split", DecodeKernel::kDenseColumnSplit, DType::kFP8E4M3},
  };
  for (const auto& want : required) {
    EXPECT_TRUE(reached.count(want)) << std::get<0>(want) << " cases no longer reach "
                                     << decode_kernel_name(std::get<1>(want)) << " in "
                                     << dtype_name(std::get<2>(want));
  }
}

class DecodeDenseGpu : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeDenseGpu, MatchesReference) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, DecodeDenseGpu, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Unsupported page sizes are refused with a message, not run.
TEST(DecodeDenseGpuLimits, RejectsUnsupportedPageSize) {
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config(1, 1, 16, 1, 24, false), 3);
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(inputs.shape, device_info(), &plan).is_ok());
  // The capability table refuses it before run touches the stream or the workspace.
  const Status status = dense_decode_run(inputs.params(), plan, nullptr, 0, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_NE(status.message().find("page_size"), std::string::npos) << status.message();
}

// ---------------------------------------------------------------------------
// Timing (disabled by default): b = 128, lengths ~ N(s_k, s_k / 2), page 64.
// ---------------------------------------------------------------------------
// Deterministic pseudo-random values in [-1, 1) written as bf16 or fp16 bits.
__global__ void fill_random_half(uint16_t* data, size_t count, uint32_t seed, bool bf16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    const float u = float(x & 0xffffffu) / float(0x1000000) * 2.0f - 1.0f;
    data[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16(u)) : __half_as_ushort(__float2half(u));
  }
}

struct TimingShape {
  int h_q;
  int s_q;
  bool causal;
  int page_size;
};

TEST(DecodeDenseGpuTiming, DISABLED_Batch128Seqlen16384) {
  constexpr int kBatch = 128;
  constexpr int kSeqlen = 16384;
  constexpr int kRuns = 20;
  constexpr int kPageAlign = 256;  // request bases aligned so every page size views the same bytes
  const DeviceInfo device = device_info();

  // ---- lengths ~ N(s_k, s_k / 2), clamped; one shared KV buffer ----
  std::mt19937_64 rng(2024);
  std::normal_distribution<double> normal(kSeqlen, kSeqlen / 2.0);
  std::vector<int32_t> seqlens(kBatch);
  std::vector<int64_t> base(kBatch);
  int64_t total_tokens = 0, sum_len = 0;
  int max_len = 0;
  for (int b = 0; b < kBatch; ++b) {
    seqlens[b] = int32_t(std::clamp(normal(rng), 64.0, 3.0 * kSeqlen));
    base[b] = total_tokens;
    total_tokens += (seqlens[b] + kPageAlign - 1) / kPageAlign * kPageAlign;
    sum_len += seqlens[b];
    max_len = std::max(max_len, int(seqlens[b]));
  }
  const double mean_len = double(sum_len) / kBatch;
  DeviceBuffer<uint16_t> d_kv(size_t(total_tokens) * kHeadDimQK);
  ASSERT_NE(d_kv.ptr, nullptr);
  fill_random_half<<<1024, 256>>>(d_kv.ptr, d_kv.count, 17, true);
  DeviceBuffer<int32_t> d_seqlens(kBatch);
  ASSERT_CUDA(cudaMemcpy(d_seqlens.ptr, seqlens.data(), kBatch * 4, cudaMemcpyHostToDevice));
  DeviceBuffer<uint8_t> flush(size_t(512) << 20);  // > 2x the 60 MB L2... by a wide margin
  cudaEvent_t start, stop;
  ASSERT_CUDA(cudaEventCreate(&start));
  ASSERT_CUDA(cudaEventCreate(&stop));

  std::printf("\n%-28s %8s %10s %9s %9s %10s %9s %9s\n", "case (b=128, s_k~16384)", "parts", "kernel_us",
              "TFLOP/s", "GB/s", "run_us", "TFLOP/s", "GB/s");
  const TimingShape shapes[] = {{16, 1, false, 64},  {16, 1, false, 16}, {16, 1, false, 32}, {16, 1, false, 128},
                                {32, 1, false, 64},  {64, 1, false, 64}, {64, 2, true, 64},  {128, 1, false, 64},
                                {128, 2, true, 64}};
  for (const TimingShape& ts : shapes) {
    DenseDecodeShape shape;
    shape.batch = kBatch;
    shape.s_q = ts.s_q;
    shape.h_q = ts.h_q;
    shape.h_kv = 1;
    shape.page_size = ts.page_size;
    shape.num_pages = int(total_tokens / ts.page_size);
    shape.max_pages_per_seq = (max_len + ts.page_size - 1) / ts.page_size;
    std::vector<int32_t> table(size_t(kBatch) * shape.max_pages_per_seq, test::kGarbagePage);
    for (int b = 0; b < kBatch; ++b) {
      for (int j = 0; j < (seqlens[b] + ts.page_size - 1) / ts.page_size; ++j) {
        table[size_t(b) * shape.max_pages_per_seq + j] = int32_t(base[b] / ts.page_size + j);
      }
    }
    DeviceBuffer<int32_t> d_table(table.size());
    ASSERT_CUDA(cudaMemcpy(d_table.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    const size_t q_elems = size_t(kBatch) * ts.s_q * ts.h_q * kHeadDimQK;
    const size_t o_elems = size_t(kBatch) * ts.s_q * ts.h_q * kHeadDimV;
    DeviceBuffer<uint16_t> d_q(q_elems), d_out(o_elems);
    DeviceBuffer<float> d_lse(size_t(kBatch) * ts.h_q * ts.s_q);
    fill_random_half<<<256, 256>>>(d_q.ptr, q_elems, 29, true);

    DenseDecodeParams params;
    params.shape = shape;
    params.q = d_q.ptr;
    params.q_stride_h = kHeadDimQK;
    params.q_stride_s = int64_t(ts.h_q) * kHeadDimQK;
    params.q_stride_b = int64_t(ts.s_q) * params.q_stride_s;
    params.kv_cache = d_kv.ptr;
    params.kv_stride_head = kHeadDimQK;
    params.kv_stride_token = kHeadDimQK;
    params.kv_stride_page = int64_t(ts.page_size) * kHeadDimQK;
    params.block_table = d_table.ptr;
    params.block_table_stride_b = shape.max_pages_per_seq;
    params.seqlens = d_seqlens.ptr;
    params.out = d_out.ptr;
    params.out_stride_h = kHeadDimV;
    params.out_stride_s = int64_t(ts.h_q) * kHeadDimV;
    params.out_stride_b = int64_t(ts.s_q) * params.out_stride_s;
    params.lse = d_lse.ptr;
    params.lse_stride_h = ts.s_q;
    params.lse_stride_b = int64_t(ts.h_q) * ts.s_q;
    params.softmax_scale = 1.0f / std::sqrt(float(kHeadDimQK));
    params.causal = ts.causal;

    DecodePlan plan;
    ASSERT_TRUE(plan_dense_decode(shape, device, &plan).is_ok());
    DeviceBuffer<uint8_t> workspace(std::max<size_t>(plan.workspace.total_bytes, 256));
    const kernels::DecodeWorkspace views = kernels::decode_workspace(plan, workspace.ptr);

    auto time_median = [&](auto&& body) {
      std::vector<float> times;
      for (int run = 0; run < kRuns + 3; ++run) {
        cudaMemsetAsync(flush.ptr, run & 0xff, flush.count);
        cudaEventRecord(start);
        body();
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, start, stop);
        if (run >= 3) times.push_back(ms * 1000.0f);
      }
      std::sort(times.begin(), times.end());
      return double(times[times.size() / 2]);
    };
    Status status;
    const double run_us = time_median([&] { status = dense_decode_run(params, plan, workspace.ptr, workspace.count, nullptr); });
    ASSERT_TRUE(status.is_ok()) << status.message();
    const double kernel_us = time_median([&] {
      status = kernels::decode_dense::launch(params, plan, kernels::read_parts(views.schedule.parts), views.partial_o,
                                            views.partial_lse, nullptr);
    });
    ASSERT_TRUE(status.is_ok()) << status.message();
    ASSERT_CUDA(cudaDeviceSynchronize());

    // Sanity: every LSE finite after a full run.
    ASSERT_TRUE(dense_decode_run(params, plan, workspace.ptr, workspace.count, nullptr).is_ok());
    std::vector<float> lse(d_lse.count);
    ASSERT_CUDA(cudaMemcpy(lse.data(), d_lse.ptr, lse.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](float v) { return std::isfinite(v); }));

    const double flops = double(kBatch) * ts.s_q * ts.h_q * (2.0 * kHeadDimQK + 2.0 * kHeadDimV) * mean_len;
    const double bytes = double(sum_len) * kHeadDimQK * 2 + double(q_elems) * 2 + double(o_elems) * 2;
    char name[64];
    std::snprintf(name, sizeof(name), "h_q=%d s_q=%d%s page=%d", ts.h_q, ts.s_q, ts.causal ? " causal" : "",
                  ts.page_size);
    std::printf("%-28s %8d %10.1f %9.1f %9.0f %10.1f %9.1f %9.0f\n", name, plan.num_parts, kernel_us,
                flops / kernel_us * 1e-6, bytes / kernel_us * 1e-3, run_us, flops / run_us * 1e-6,
                bytes / run_us * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace openmla

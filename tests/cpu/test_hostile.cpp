// Hostile input (issue 28): each test is one case that once crashed, returned
// garbage or was silently accepted, and now gets a clean Status naming the
// argument ("<entry>: argument '<name>' ...").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "validate/validate.h"
#include "openmla/openmla.h"
#include "openmla/reference.h"
#include "plan/partition.h"
#include "plan/plan_identity.h"
#include "reference/attention_core.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

void expect_names(const Status& status, StatusCode code, const std::string& prefix) {
  EXPECT_EQ(status.code(), code) << status.message();
  EXPECT_EQ(status.message().rfind(prefix, 0), 0u) << "want prefix \"" << prefix << "\" in: " << status.message();
}

void expect_contains(const Status& status, const std::string& text) {
  EXPECT_NE(status.message().find(text), std::string::npos) << "want \"" << text << "\" in: " << status.message();
}

// ---------------------------------------------------------------------------
// Crashes
// ---------------------------------------------------------------------------
TEST(HostileCombine, SlotRangeThatOverflowsIntIsRejected) {
  // first_slot + num_pieces wraps to a negative int; the check must not.
  test::HostVector<float> partial_o(2 * kHeadDimV, 0.0f), partial_lse(2, 0.0f), lse(1, 0.0f);
  test::HostVector<uint16_t> out(kHeadDimV, 0);
  test::HostVector<CombineEntry> entries{CombineEntry{0, 1, kInt32Max, 0}};
  CombineParams p;
  p.batch = 1, p.s_q = 1, p.h_q = 1, p.d_v = kHeadDimV, p.q_tokens_per_item = 1;
  p.num_entries = 1, p.num_slots = 2;
  p.entries = entries.data(), p.partial_o = partial_o.data(), p.partial_lse = partial_lse.data();
  p.out = out.data(), p.out_dtype = DType::kBF16, p.out_stride_h = kHeadDimV, p.out_stride_s = kHeadDimV,
  p.out_stride_b = kHeadDimV;
  p.lse = lse.data(), p.lse_stride_h = 1, p.lse_stride_b = 1;
  const Status status = reference_combine(p);
  expect_names(status, StatusCode::kInvalidArgument, "reference_combine: argument 'entries[0]' ");
  expect_contains(status, "num_pieces 2147483647");
}

TEST(HostileSchedule, ZeroMinPartCostIsRejectedNotDividedBy) {
  DenseDecodeShape shape;
  shape.batch = 4, shape.h_q = 16, shape.num_pages = 8, shape.max_pages_per_seq = 2;
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(shape, DeviceInfo{}, &plan).is_ok());
  plan.min_part_cost = 0;
  HostSchedule schedule;
  const Status status = build_schedule_host(plan, plan.lengths, &schedule);
  expect_names(status, StatusCode::kInvalidArgument, "build_schedule_host: argument 'plan' ");
  expect_contains(status, "min_part_cost = 0");
}

TEST(HostileSchedule, BatchInvariantPlanWithFewerPartsThanItemsIsRejected) {
  // Found in review: the batch-invariant schedule sorts the items in part_slots (num_parts + 1
  // entries), so a hand-made plan with fewer parts than items would write past it.
  DenseDecodeShape shape;
  shape.batch = 64, shape.h_q = 16, shape.num_pages = 128, shape.max_pages_per_seq = 2;
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(shape, DeviceInfo{}, &plan, PlanOptions{.batch_invariant = true}).is_ok());
  plan.num_parts = 1;
  HostSchedule schedule;
  const Status status = build_schedule_host(plan, plan.lengths, &schedule);
  expect_names(status, StatusCode::kInvalidArgument, "build_schedule_host: argument 'plan' ");
  expect_contains(status, "num_parts = 1 < num_items = 64");
}

TEST(HostileSchedule, PartitionCoreToleratesZeroMinPartCost) {
  // The device schedule kernel runs the same core: it must not trap either.
  EXPECT_EQ(plan_detail::active_parts(10, 4, 0), 4);
  EXPECT_EQ(plan_detail::active_parts(0, 4, 0), 1);
}

TEST(HostileSchedule, CheckPlanCountsBlocksOfLengthsNearInt32Max) {
  // Found by the fuzz: check_plan's own block count overflowed at length + 63.
  DenseDecodeShape shape;
  shape.batch = 1, shape.h_q = 16, shape.page_size = 1, shape.num_pages = 1, shape.max_pages_per_seq = kInt32Max;
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(shape, DeviceInfo{}, &plan).is_ok());
  const int32_t length = kInt32Max;
  ItemLengths lengths = plan.lengths;
  lengths.lengths = &length;
  HostSchedule schedule;
  ASSERT_TRUE(build_schedule_host(plan, lengths, &schedule).is_ok());
  const Status checked = check_plan(plan, lengths, schedule);
  EXPECT_TRUE(checked.is_ok()) << checked.message();
}

TEST(HostileSchedule, ReferenceBlockCountOfLengthsNearInt32Max) {
  EXPECT_EQ(reference_detail::num_kv_blocks(kInt32Max), 33554432);
  EXPECT_EQ(reference_detail::num_kv_blocks(kInt32Max - 62), 33554432);
}

// ---------------------------------------------------------------------------
// Silent garbage
// ---------------------------------------------------------------------------
DenseDecodeShape huge_table_shape() {
  // 32769 columns of 65536-token pages: request positions overflow int32,
  // though num_pages * page_size does not.
  DenseDecodeShape shape;
  shape.batch = 1, shape.h_q = 16, shape.d_qk = kHeadDimLatent, shape.page_size = 65536;
  shape.num_pages = 1, shape.max_pages_per_seq = 32769;
  return shape;
}

TEST(HostileDense, RequestCapacityBeyondInt32IsRejectedByThePlanner) {
  DecodePlan plan;
  const Status status = plan_dense_decode(huge_table_shape(), DeviceInfo{}, &plan);
  expect_names(status, StatusCode::kNotSupported, "plan_dense_decode: argument 'max_pages_per_seq' ");
  expect_contains(status, "max_pages_per_seq * page_size <= 2147483647");
}

TEST(HostileDense, RequestCapacityBeyondInt32IsRejectedByCanImplement) {
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(test::DenseDecodeConfig{}, 1);
  DenseDecodeParams p = in.params();
  p.shape.page_size = 65536, p.shape.max_pages_per_seq = 32769, p.shape.num_pages = 1;
  expect_names(dense_decode_can_implement(p), StatusCode::kNotSupported,
               "dense_decode_can_implement: argument 'max_pages_per_seq' ");
  expect_names(reference_dense_decode(p), StatusCode::kNotSupported,
               "reference_dense_decode: argument 'max_pages_per_seq' ");
}

TEST(HostileDense, ScalesWithBf16InputsAreRejectedNotIgnored) {
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(test::DenseDecodeConfig{}, 2);
  DenseDecodeParams p = in.params();
  p.q_scale = in.q_scale.data();
  expect_names(dense_decode_can_implement(p), StatusCode::kInvalidArgument,
               "dense_decode_can_implement: argument 'q_scale' ");
  p.q_scale = nullptr;
  p.kv_scale = in.kv_scale.data();
  expect_names(reference_dense_decode(p), StatusCode::kInvalidArgument,
               "reference_dense_decode: argument 'kv_scale' ");
}

TEST(HostileDense, Fp8ScalesMustBeFiniteAndPositive) {
  test::DenseDecodeConfig config;
  config.dtype = DType::kFP8E4M3;
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 3);
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), 0.0f, -1.0f}) {
    in.q_scale[0] = bad;
    expect_names(reference_dense_decode(in.params()), StatusCode::kInvalidArgument,
                 "reference_dense_decode: argument 'q_scale' ");
    in.q_scale[0] = 1.0f;
    in.kv_scale[0] = bad;
    expect_names(reference_dense_decode(in.params()), StatusCode::kInvalidArgument,
                 "reference_dense_decode: argument 'kv_scale' ");
    in.kv_scale[0] = 1.0f;
  }
  EXPECT_TRUE(reference_dense_decode(in.params()).is_ok());
}

// ---------------------------------------------------------------------------
// Layouts: any order of dimensions without overlap is valid (the kernels take
// a stride per dimension), e.g. q.transpose(1, 2).contiguous().transpose(1, 2).
// ---------------------------------------------------------------------------
TEST(HostileLayout, QueryWithHeadsOutsideTokensGivesTheSameResult) {
  test::DenseDecodeConfig config;
  config.s_q = 3;
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 6);
  const DenseDecodeShape& sh = in.shape;
  ASSERT_TRUE(reference_dense_decode(in.params()).is_ok());
  const test::HostVector<uint8_t> want_out = in.out;
  const test::HostVector<float> want_lse = in.lse;

  // The same q stored as [batch, h_q, s_q, d_qk].
  const int64_t stride_s = sh.d_qk, stride_h = int64_t(sh.s_q) * sh.d_qk, stride_b = int64_t(sh.h_q) * stride_h;
  test::HostVector<uint8_t> q(size_t(sh.batch) * stride_b * 2);
  for (int b = 0; b < sh.batch; ++b)
    for (int t = 0; t < sh.s_q; ++t)
      for (int h = 0; h < sh.h_q; ++h)
        std::memcpy(q.data() + 2 * (b * stride_b + t * stride_s + h * stride_h),
                    in.q.data() + 2 * (b * in.q_stride_b + t * in.q_stride_s + h * in.q_stride_h), 2 * sh.d_qk);
  DenseDecodeParams p = in.params();
  p.q = q.data(), p.q_stride_b = stride_b, p.q_stride_s = stride_s, p.q_stride_h = stride_h;
  std::fill(in.out.begin(), in.out.end(), 0), std::fill(in.lse.begin(), in.lse.end(), 0.0f);
  ASSERT_TRUE(dense_decode_can_implement(p).is_ok()) << dense_decode_can_implement(p).message();
  ASSERT_TRUE(reference_dense_decode(p).is_ok());
  EXPECT_TRUE(in.out == want_out);
  EXPECT_EQ(std::memcmp(in.lse.data(), want_lse.data(), want_lse.size() * sizeof(float)), 0);
}

TEST(HostileLayout, OverlapInEveryOrderIsStillRejectedWithTheRule) {
  test::DenseDecodeConfig config;
  config.s_q = 3;
  test::DenseDecodeInputs in = test::make_dense_decode_inputs(config, 7);
  DenseDecodeParams p = in.params();
  p.q_stride_s = p.q_stride_h;  // tokens and heads share rows
  const Status status = dense_decode_can_implement(p);
  expect_names(status, StatusCode::kInvalidArgument, "dense_decode_can_implement: argument 'q_stride_s' ");
  expect_contains(status, "or any order of q's dimensions in which no two elements overlap");
}

// ---------------------------------------------------------------------------
// Plans that cannot be mixed up
// ---------------------------------------------------------------------------
DenseDecodeShape dense_shape() {
  DenseDecodeShape shape;
  shape.batch = 3, shape.h_q = 16, shape.num_pages = 16, shape.max_pages_per_seq = 4;
  return shape;
}

SparseDecodeShape sparse_shape(int topk = 128) {
  SparseDecodeShape shape;
  shape.batch = 2, shape.h_q = 16, shape.topk = topk, shape.num_pages = 8;
  return shape;
}

DecodePlan dense_plan(const PlanOptions& options = {}) {
  DecodePlan plan;
  EXPECT_TRUE(plan_dense_decode(dense_shape(), DeviceInfo{}, &plan, options).is_ok());
  return plan;
}

TEST(HostilePlan, PlannerRecordsFamilyInputsAndFingerprint) {
  PlanOptions options;
  options.max_parts = 3;
  const DecodePlan plan = dense_plan(options);
  EXPECT_EQ(plan.family, PlanFamily::kDenseDecode);
  EXPECT_EQ(plan.options.max_parts, 3);
  EXPECT_EQ(plan.device.num_sms, DeviceInfo{}.num_sms);
  EXPECT_EQ(plan.fingerprint, decode_plan_fingerprint(plan));
  EXPECT_NE(plan.fingerprint, dense_plan().fingerprint);
  EXPECT_TRUE(check_dense_decode_plan("dense_decode_run", dense_shape(), plan).is_ok());
}

TEST(HostilePlan, TamperedFieldsAreNamed) {
  struct Tamper {
    const char* field;
    void (*apply)(DecodePlan&);
  };
  const Tamper tampers[] = {
      {"plan.num_parts = 100000", [](DecodePlan& p) { p.num_parts = 100000; }},
      {"plan.min_part_cost = 0", [](DecodePlan& p) { p.min_part_cost = 0; }},
      {"plan.workspace.parts.bytes = 0", [](DecodePlan& p) { p.workspace = WorkspaceLayout{}; }},
      {"plan.cluster_size = 8", [](DecodePlan& p) { p.cluster_size = 8; }},
      {"plan.kernel = 3", [](DecodePlan& p) { p.kernel = DecodeKernel::kDenseAlternateBlocks; }},
      {"plan.lengths.max_length = 1", [](DecodePlan& p) { p.lengths.max_length = 1; }},
      {"plan.fingerprint = 7", [](DecodePlan& p) { p.fingerprint = 7; }},
  };
  for (const Tamper& tamper : tampers) {
    DecodePlan plan = dense_plan();
    tamper.apply(plan);
    const Status status = check_dense_decode_plan("dense_decode_run", dense_shape(), plan);
    expect_names(status, StatusCode::kInvalidArgument, "dense_decode_run: argument 'plan' ");
    expect_contains(status, std::string("got ") + tamper.field);
  }
}

TEST(HostilePlan, PlanForOtherShapesNamesTheDifferingField) {
  DenseDecodeShape other = dense_shape();
  other.batch = 5;
  const Status status = check_dense_decode_plan("dense_decode_run", other, dense_plan());
  expect_names(status, StatusCode::kInvalidArgument, "dense_decode_run: argument 'plan' ");
  expect_contains(status, "got plan.num_items = 3, expected plan.num_items = 5");

  DecodePlan sparse;
  ASSERT_TRUE(plan_sparse_decode(sparse_shape(128), DeviceInfo{}, &sparse).is_ok());
  const Status topk = check_sparse_decode_plan("sparse_decode_run", sparse_shape(256), sparse);
  expect_names(topk, StatusCode::kInvalidArgument, "sparse_decode_run: argument 'plan' ");
  expect_contains(topk, "got plan.lengths.default_length = 128, expected plan.lengths.default_length = 256");
}

TEST(HostilePlan, OtherFamilyOrUnplannedIsRejected) {
  const Status dense_for_sparse = check_sparse_decode_plan("sparse_decode_run", sparse_shape(), dense_plan());
  expect_names(dense_for_sparse, StatusCode::kInvalidArgument,
               "sparse_decode_run: argument 'plan' was made for dense_decode");
  const Status unplanned = check_dense_decode_plan("dense_decode_run", dense_shape(), DecodePlan{});
  expect_names(unplanned, StatusCode::kInvalidArgument, "dense_decode_run: argument 'plan' was made for none");
}

TEST(HostilePlan, RecordedInputsThePlannerRejectsAreNamed) {
  DecodePlan plan = dense_plan();
  plan.device.num_sms = 0;
  const Status status = check_dense_decode_plan("dense_decode_run", dense_shape(), plan);
  expect_names(status, StatusCode::kInvalidArgument, "dense_decode_run: argument 'plan' ");
  expect_contains(status, "num_sms");
}

}  // namespace
}  // namespace openmla

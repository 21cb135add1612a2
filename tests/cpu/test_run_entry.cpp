// run() entries refuse what no GPU kernel implements before touching the GPU,
// so these checks run on machines without one (CI).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "api/run_checks.h"
#include "openmla/openmla.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {

// Host buffers stand in for device ones: the call must stop before any CUDA work.
Status run_on_host(const test::DenseDecodeConfig& config) {
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config, 3);
  DecodePlan plan;
  const Status planned = plan_dense_decode(inputs.shape, DeviceInfo{}, &plan);
  if (!planned) return planned;
  void* workspace = std::aligned_alloc(kWorkspaceAlignment, plan.workspace.total_bytes);
  const Status status = dense_decode_run(inputs.params(), plan, workspace, plan.workspace.total_bytes, nullptr);
  std::free(workspace);
  return status;
}

TEST(DenseDecodeRunEntry, UnsupportedPageSizeIsRefusedBeforeAnyLaunch) {
  test::DenseDecodeConfig config;
  config.page_size = 1;  // SGLang's layout: valid, but no GPU kernel yet
  const Status status = run_on_host(config);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
  EXPECT_NE(status.message().find("dense_decode_run: argument 'page_size' has no GPU kernel: got page_size = 1"),
            std::string::npos)
      << status.message();
}

// FP8 has one kernel (no cluster merge): asking for a cluster split is refused, not ignored,
// and the automatic plan never makes one.
TEST(DenseDecodeRunEntry, Fp8PlanRefusesAClusterSplit) {
  test::DenseDecodeConfig config;
  config.dtype = DType::kFP8E4M3;
  config.batch = 1;  // a short one-tile call: the BF16 plan would take an 8-CTA cluster split
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config, 3);
  DecodePlan plan;
  const Status refused = plan_dense_decode(inputs.shape, DeviceInfo{}, &plan, PlanOptions{.cluster_split = 2});
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.message();
  EXPECT_NE(refused.message().find("plan_dense_decode: argument 'options.cluster_split' = 2 has no fp8_e4m3 kernel"),
            std::string::npos)
      << refused.message();
  ASSERT_TRUE(plan_dense_decode(inputs.shape, DeviceInfo{}, &plan).is_ok());
  EXPECT_EQ(plan.kernel, DecodeKernel::kDenseColumnSplit);
  EXPECT_EQ(plan.cluster_size, 1);
}

// A plan is re-made from the params' shape and compared field by field, so a
// tampered or foreign plan never reaches a launch.
TEST(DenseDecodeRunEntry, TamperedPlanIsRefusedBeforeAnyLaunch) {
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(test::DenseDecodeConfig{}, 4);
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(inputs.shape, DeviceInfo{}, &plan).is_ok());
  plan.num_parts = 100000;
  void* workspace = std::aligned_alloc(kWorkspaceAlignment, plan.workspace.total_bytes);
  const Status status = dense_decode_run(inputs.params(), plan, workspace, plan.workspace.total_bytes, nullptr);
  std::free(workspace);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("dense_decode_run: argument 'plan' was not made by plan_dense_decode for these "
                                  "shapes: got plan.num_parts = 100000"),
            std::string::npos)
      << status.message();
}

TEST(SparseDecodeRunEntry, DensePlanIsRefusedBeforeAnyLaunch) {
  test::SparseDecodeInputs inputs = test::make_sparse_decode_inputs(test::SparseDecodeConfig{}, 5);
  test::DenseDecodeInputs dense = test::make_dense_decode_inputs(test::DenseDecodeConfig{}, 5);
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(dense.shape, DeviceInfo{}, &plan).is_ok());
  void* workspace = std::aligned_alloc(kWorkspaceAlignment, plan.workspace.total_bytes);
  const Status status = sparse_decode_run(inputs.params(), plan, workspace, plan.workspace.total_bytes, nullptr);
  std::free(workspace);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("sparse_decode_run: argument 'plan' was made for dense_decode"), std::string::npos)
      << status.message();
}

// ---- ScheduleUse::kReuse: no schedule kernel unless the record proves the workspace holds it ----
struct ReuseCase {
  test::SparseDecodeInputs inputs = test::make_sparse_decode_inputs(test::SparseDecodeConfig{}, 6);
  DecodePlan plan;
  void* workspace = nullptr;
  ScheduleRecord record;  // as a kBuild run on `workspace` leaves it
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t(0x1000));

  ReuseCase() {
    EXPECT_TRUE(plan_sparse_decode(inputs.shape, DeviceInfo{}, &plan).is_ok());
    workspace = std::aligned_alloc(kWorkspaceAlignment, plan.workspace.total_bytes);
    record.plan_fingerprint = plan.fingerprint;
    record.workspace = workspace;
    record.lengths = inputs.params().topk_length;
    record.stream = stream;
    record.filled = true;
  }
  ~ReuseCase() { std::free(workspace); }
  Status check() {
    return detail::check_schedule_reuse("sparse_decode_run", &record, plan, workspace, inputs.params().topk_length,
                                        "topk_length", stream);
  }
};

void expect_refused(const Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find(message), std::string::npos) << status.message();
}

TEST(SparseDecodeScheduleReuse, MatchingRecordIsAccepted) {
  ReuseCase c;
  const Status status = c.check();
  EXPECT_TRUE(status.is_ok()) << status.message();
}

TEST(SparseDecodeScheduleReuse, EachMismatchIsRefused) {
  {
    ReuseCase c;
    c.record.filled = false;
    expect_refused(c.check(), "sparse_decode_run: argument 'record' holds no schedule: got record.filled = false");
  }
  {
    ReuseCase c;
    c.record.plan_fingerprint ^= 1;
    expect_refused(c.check(), "argument 'record' holds the schedule of another plan: got record.plan_fingerprint");
  }
  {
    ReuseCase c;
    c.record.workspace = static_cast<uint8_t*>(c.workspace) + kWorkspaceAlignment;
    expect_refused(c.check(), "argument 'record' belongs to another workspace");
  }
  {
    ReuseCase c;
    static const int32_t other_lengths[2] = {1, 2};
    c.record.lengths = other_lengths;
    expect_refused(c.check(), "argument 'record' was built from other lengths: got record.lengths = ");
  }
  {
    ReuseCase c;
    c.record.stream = nullptr;
    expect_refused(c.check(), "argument 'record' was built on another stream: got record.stream = 0x0, expected "
                              "stream = 0x1000");
  }
}

// The capture rule: an eager run reuses an eager build of a record never captured; a
// captured run reuses only a build captured in the same capture sequence.
TEST(SparseDecodeScheduleReuse, CaptureRule) {
  constexpr unsigned long long kEager = 0, kCapture = 41, kOtherCapture = 42;
  ScheduleRecord eager_build;  // filled by an eager kBuild run
  eager_build.filled = true;
  EXPECT_TRUE(detail::check_reuse_capture("sparse_decode_run", eager_build, kEager).is_ok());
  expect_refused(detail::check_reuse_capture("sparse_decode_run", eager_build, kCapture),
                 "sparse_decode_run: argument 'use' cannot reuse a schedule while the stream is capturing a CUDA "
                 "graph unless this capture built it: got record.capture_id = 0, expected the stream's capture id 41");

  ScheduleRecord captured_build;  // a kBuild run captured in sequence 41
  captured_build.captured = true;
  captured_build.capture_id = kCapture;
  EXPECT_TRUE(detail::check_reuse_capture("sparse_decode_run", captured_build, kCapture).is_ok());
  expect_refused(detail::check_reuse_capture("sparse_decode_run", captured_build, kOtherCapture),
                 "got record.capture_id = 41, expected the stream's capture id 42");
  expect_refused(detail::check_reuse_capture("sparse_decode_run", captured_build, kEager),
                 "argument 'record' was used in a CUDA graph capture: got record.captured = true");

  ScheduleRecord rebuilt_after_capture = captured_build;  // an eager kBuild run after the capture
  rebuilt_after_capture.capture_id = 0;
  rebuilt_after_capture.filled = false;
  expect_refused(detail::check_reuse_capture("sparse_decode_run", rebuilt_after_capture, kEager),
                 "argument 'record' was used in a CUDA graph capture");
  ScheduleRecord never_built;
  expect_refused(detail::check_reuse_capture("sparse_decode_run", never_built, kEager),
                 "argument 'record' holds no schedule for eager runs: got record.filled = false");
  expect_refused(detail::check_reuse_capture("sparse_decode_run", never_built, kCapture),
                 "got record.capture_id = 0, expected the stream's capture id 41");
}

// A record filled only by a captured build passes the field checks (the capture rule decides).
TEST(SparseDecodeScheduleReuse, CapturedBuildPassesTheFieldChecks) {
  ReuseCase c;
  c.record.filled = false;
  c.record.captured = true;
  c.record.capture_id = 7;
  const Status status = c.check();
  EXPECT_TRUE(status.is_ok()) << status.message();
}

// Through the public entry: refused before the stream is touched (no device here).
TEST(SparseDecodeScheduleReuse, RunRefusesWithoutAFilledRecord) {
  ReuseCase c;
  const size_t bytes = c.plan.workspace.total_bytes;
  expect_refused(sparse_decode_run(c.inputs.params(), c.plan, c.workspace, bytes, c.stream, ScheduleUse::kReuse,
                                   nullptr),
                 "sparse_decode_run: argument 'record' is null: got record = nullptr");
  ScheduleRecord empty;
  expect_refused(sparse_decode_run(c.inputs.params(), c.plan, c.workspace, bytes, c.stream, ScheduleUse::kReuse,
                                   &empty),
                 "sparse_decode_run: argument 'record' holds no schedule");
  // A plan made for other shapes is refused first, whatever the record says.
  DecodePlan other = c.plan;
  other.num_parts += 1;
  expect_refused(sparse_decode_run(c.inputs.params(), other, c.workspace, bytes, c.stream, ScheduleUse::kReuse,
                                   &c.record),
                 "sparse_decode_run: argument 'plan' was not made by plan_sparse_decode for these shapes");
}

// Dense decode takes ScheduleUse as sparse decode does: a reuse the record cannot prove is
// refused before the stream is touched (no device here), with the lengths named seqlens.
TEST(DenseDecodeScheduleReuse, RunRefusesWithoutAMatchingRecord) {
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(test::DenseDecodeConfig{}, 8);
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(inputs.shape, DeviceInfo{}, &plan).is_ok());
  const size_t bytes = plan.workspace.total_bytes;
  void* workspace = std::aligned_alloc(kWorkspaceAlignment, bytes);
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t(0x2000));
  expect_refused(dense_decode_run(inputs.params(), plan, workspace, bytes, stream, ScheduleUse::kReuse, nullptr),
                 "dense_decode_run: argument 'record' is null: got record = nullptr");
  ScheduleRecord empty;
  expect_refused(dense_decode_run(inputs.params(), plan, workspace, bytes, stream, ScheduleUse::kReuse, &empty),
                 "dense_decode_run: argument 'record' holds no schedule");
  ScheduleRecord other_lengths;  // filled for this plan, workspace and stream, from other lengths
  static const int32_t lengths[1] = {7};
  other_lengths.plan_fingerprint = plan.fingerprint;
  other_lengths.workspace = workspace;
  other_lengths.lengths = lengths;
  other_lengths.stream = stream;
  other_lengths.filled = true;
  expect_refused(
      dense_decode_run(inputs.params(), plan, workspace, bytes, stream, ScheduleUse::kReuse, &other_lengths),
      "dense_decode_run: argument 'record' was built from other lengths: got record.lengths = ");
  std::free(workspace);
}

TEST(StreamCaptureId, NullOutputIsRefused) {
  expect_refused(stream_capture_id(nullptr, nullptr),
                 "stream_capture_id: argument 'capture_id' is null: expected an unsigned long long*");
}

}  // namespace
}  // namespace openmla

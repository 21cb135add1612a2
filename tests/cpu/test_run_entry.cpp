// run() entries refuse what no GPU kernel implements before touching the GPU,
// so these checks run on machines without one (CI).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace openmla

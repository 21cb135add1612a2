// SPDX-License-Identifier: Apache-2.0
// The OPENMLA_ENABLE_* options: can_implement and run agree on what this build
// holds, and a left-out family or dtype is refused with the option's name.
// The default build holds everything; tests/subproject builds one without the
// kernel families and runs the same checks from a consumer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "openmla/openmla.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {

bool mentions(const Status& status, const char* text) { return status.message().find(text) != std::string::npos; }

TEST(BuildOptions, DenseFp16CanImplementMatchesTheBuild) {
  test::DenseDecodeConfig config;
  config.dtype = DType::kFP16;
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config, 5);
  const Status status = dense_decode_can_implement(inputs.params());
  if (OPENMLA_ENABLE_DENSE_DECODE && OPENMLA_ENABLE_FP16) {
    EXPECT_TRUE(status.is_ok()) << status.message();
    return;
  }
  EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
  EXPECT_TRUE(mentions(status, OPENMLA_ENABLE_DENSE_DECODE ? "OPENMLA_ENABLE_FP16=OFF" : "OPENMLA_ENABLE_DENSE_DECODE=OFF"))
      << status.message();

  // run() refuses the same way, before touching the GPU (host buffers here).
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(inputs.shape, DeviceInfo{}, &plan));
  void* workspace = std::aligned_alloc(kWorkspaceAlignment, plan.workspace.total_bytes);
  const Status run = dense_decode_run(inputs.params(), plan, workspace, plan.workspace.total_bytes, nullptr);
  std::free(workspace);
  EXPECT_EQ(run.code(), StatusCode::kNotSupported) << run.message();
  EXPECT_EQ(run.message().substr(run.message().find(':')), status.message().substr(status.message().find(':')));
}

TEST(BuildOptions, SparseCanImplementMatchesTheBuild) {
  test::SparseDecodeConfig config;
  test::SparseDecodeInputs inputs = test::make_sparse_decode_inputs(config, 6);
  const Status status = sparse_decode_can_implement(inputs.params());
  if (OPENMLA_ENABLE_SPARSE_DECODE) {
    EXPECT_TRUE(status.is_ok()) << status.message();
    return;
  }
  EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
  EXPECT_TRUE(mentions(status, "sparse_decode_can_implement: the sparse FP8 decode kernels were not built"))
      << status.message();
}

TEST(BuildOptions, SparsePrefillCanImplementMatchesTheBuild) {
  test::SparsePrefillConfig config;
  test::SparsePrefillInputs inputs = test::make_sparse_prefill_inputs(config, 7);
  const Status status = sparse_prefill_can_implement(inputs.params());
  if (OPENMLA_ENABLE_SPARSE_PREFILL) {
    EXPECT_TRUE(status.is_ok()) << status.message();
    return;
  }
  EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
  EXPECT_TRUE(mentions(status, "sparse_prefill_can_implement: the sparse prefill kernels were not built"))
      << status.message();
}

}  // namespace
}  // namespace openmla

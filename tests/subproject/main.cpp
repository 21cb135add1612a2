// SPDX-License-Identifier: Apache-2.0
// A consumer of an OpenMLA built with -DOPENMLA_ENABLE_DENSE_DECODE=OFF
// -DOPENMLA_ENABLE_SPARSE_DECODE=OFF -DOPENMLA_ENABLE_SPARSE_PREFILL=OFF: the
// planner and the CPU reference work, and every family's can_implement and run
// say which option left them out.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "openmla/openmla.h"
#include "openmla/reference.h"
#include "test_util/mla_inputs.h"

namespace {

int failures = 0;

void expect_not_built(const char* what, const openmla::Status& status, const char* option) {
  const bool ok = status.code() == openmla::StatusCode::kNotSupported &&
                  status.message().find(std::string(option) + "=OFF") != std::string::npos;
  std::printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, status.message().c_str());
  failures += ok ? 0 : 1;
}

}  // namespace

int main() {
  using namespace openmla;
  static_assert(!OPENMLA_ENABLE_DENSE_DECODE && !OPENMLA_ENABLE_SPARSE_DECODE && !OPENMLA_ENABLE_SPARSE_PREFILL,
                "check_subproject.sh configures without the kernel families");

  test::DenseDecodeInputs dense = test::make_dense_decode_inputs(test::DenseDecodeConfig{}, 1);
  DecodePlan plan;
  if (!plan_dense_decode(dense.shape, DeviceInfo{}, &plan)) {
    std::printf("FAIL plan_dense_decode\n");
    return 1;
  }
  void* workspace = std::aligned_alloc(kWorkspaceAlignment, plan.workspace.total_bytes);
  expect_not_built("dense_decode_can_implement", dense_decode_can_implement(dense.params()),
                   "OPENMLA_ENABLE_DENSE_DECODE");
  expect_not_built("dense_decode_run", dense_decode_run(dense.params(), plan, workspace, plan.workspace.total_bytes, nullptr),
                   "OPENMLA_ENABLE_DENSE_DECODE");
  std::free(workspace);

  test::SparseDecodeInputs sparse = test::make_sparse_decode_inputs(test::SparseDecodeConfig{}, 2);
  expect_not_built("sparse_decode_can_implement", sparse_decode_can_implement(sparse.params()),
                   "OPENMLA_ENABLE_SPARSE_DECODE");

  test::SparsePrefillInputs prefill = test::make_sparse_prefill_inputs(test::SparsePrefillConfig{}, 3);
  expect_not_built("sparse_prefill_can_implement", sparse_prefill_can_implement(prefill.params()),
                   "OPENMLA_ENABLE_SPARSE_PREFILL");

  // The CPU reference is always built.
  const Status reference = reference_dense_decode(dense.params());
  std::printf("%s reference_dense_decode: %s\n", reference ? "ok  " : "FAIL", reference.message().c_str());
  failures += reference ? 0 : 1;
  return failures == 0 ? 0 : 1;
}

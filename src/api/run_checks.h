// Everything a run() entry checks before it touches the stream: the argument
// checks and the GPU capability table (the same ones *_can_implement answers
// from), then the plan against the params and the workspace. Split out of
// run.cpp so CPU tests can hold run's checks against can_implement.
#pragma once

#include <cstddef>

#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/status.h"

namespace openmla::detail {

Status check_dense_decode_run(const char* entry, const DenseDecodeParams& params, const DecodePlan& plan,
                              const void* workspace, size_t workspace_bytes);
Status check_sparse_decode_run(const char* entry, const SparseDecodeParams& params, const DecodePlan& plan,
                               const void* workspace, size_t workspace_bytes);
Status check_sparse_prefill_run(const char* entry, const SparsePrefillParams& params, const DecodePlan& plan,
                                const void* workspace, size_t workspace_bytes);

}  // namespace openmla::detail

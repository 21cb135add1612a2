// Everything a run() entry checks before it touches the stream: the argument
// checks and the GPU capability table (the same ones *_can_implement answers
// from), then the plan against the params and the workspace. Split out of
// run.cpp so CPU tests can hold run's checks against can_implement.
#pragma once

#include <cstddef>

#include "openmla/openmla.h"
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

// ScheduleUse::kReuse: `record` (null refused) must say that `workspace` holds
// the schedule of `plan`, built from `lengths` (named `lengths_name`, e.g.
// topk_length) on `stream`, eagerly or in a capture (check_reuse_capture decides which counts).
Status check_schedule_reuse(const char* entry, const ScheduleRecord* record, const DecodePlan& plan,
                            const void* workspace, const void* lengths, const char* lengths_name,
                            cudaStream_t stream);
// ScheduleUse::kReuse against the stream's capture state (`capture_id`, 0 when not
// capturing, queried by the caller): an eager run reuses only an eager build of a
// record never captured; a captured run only a build captured in the same sequence.
Status check_reuse_capture(const char* entry, const ScheduleRecord& record, unsigned long long capture_id);

}  // namespace openmla::detail

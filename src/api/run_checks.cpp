// Pre-launch checks of the run() entries (run_checks.h).
#include "api/run_checks.h"

#include <cstdio>
#include <string>

#include "validate/validate.h"

namespace openmla::detail {

Status check_dense_decode_run(const char* entry, const DenseDecodeParams& params, const DecodePlan& plan,
                              const void* workspace, size_t workspace_bytes) {
  OPENMLA_RETURN_IF_ERROR(validate_dense_decode(entry, params));
  OPENMLA_RETURN_IF_ERROR(check_dense_decode_gpu(entry, params.shape));
  // The plan sizes grids and indexes the workspace: it must be the planner's own for this shape.
  OPENMLA_RETURN_IF_ERROR(check_dense_decode_plan(entry, params.shape, plan));
  return validate_workspace(entry, plan, workspace, workspace_bytes);
}

Status check_sparse_decode_run(const char* entry, const SparseDecodeParams& params, const DecodePlan& plan,
                               const void* workspace, size_t workspace_bytes) {
  OPENMLA_RETURN_IF_ERROR(validate_sparse_decode(entry, params));
  OPENMLA_RETURN_IF_ERROR(check_sparse_decode_gpu(entry, params.shape));
  OPENMLA_RETURN_IF_ERROR(check_sparse_decode_plan(entry, params.shape, plan));
  return validate_workspace(entry, plan, workspace, workspace_bytes);
}

Status check_sparse_prefill_run(const char* entry, const SparsePrefillParams& params, const DecodePlan& plan,
                                const void* workspace, size_t workspace_bytes) {
  OPENMLA_RETURN_IF_ERROR(validate_sparse_prefill(entry, params));
  OPENMLA_RETURN_IF_ERROR(check_sparse_prefill_gpu(entry, params.shape));
  OPENMLA_RETURN_IF_ERROR(check_sparse_prefill_plan(entry, params.shape, plan));
  return validate_workspace(entry, plan, workspace, workspace_bytes);
}

namespace {

std::string hex(uint64_t value) {
  char text[2 + 16 + 1];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}
std::string hex(const void* pointer) { return hex(uint64_t(reinterpret_cast<uintptr_t>(pointer))); }

}  // namespace

Status check_schedule_reuse(const char* entry, const ScheduleRecord* record, const DecodePlan& plan,
                            const void* workspace, const void* lengths, const char* lengths_name,
                            cudaStream_t stream) {
  const std::string prefix = std::string(entry) + ": argument ";
  if (record == nullptr) {
    return Status::invalid_argument(prefix + "'record' is null: got record = nullptr, expected the ScheduleRecord "
                                    "a ScheduleUse::kBuild run filled for this workspace");
  }
  if (!record->filled && record->capture_id == 0) {
    return Status::invalid_argument(prefix + "'record' holds no schedule: got record.filled = false, expected a "
                                    "record filled by a ScheduleUse::kBuild run");
  }
  if (record->plan_fingerprint != plan.fingerprint) {
    return Status::invalid_argument(prefix + "'record' holds the schedule of another plan: got "
                                    "record.plan_fingerprint = " + hex(record->plan_fingerprint) +
                                    ", expected plan.fingerprint = " + hex(plan.fingerprint));
  }
  if (record->workspace != workspace) {
    return Status::invalid_argument(prefix + "'record' belongs to another workspace: got record.workspace = " +
                                    hex(record->workspace) + ", expected workspace = " + hex(workspace));
  }
  if (record->lengths != lengths) {
    return Status::invalid_argument(prefix + "'record' was built from other lengths: got record.lengths = " +
                                    hex(record->lengths) + ", expected " + lengths_name + " = " + hex(lengths));
  }
  if (record->stream != stream) {
    return Status::invalid_argument(prefix + "'record' was built on another stream: got record.stream = " +
                                    hex(static_cast<const void*>(record->stream)) + ", expected stream = " +
                                    hex(static_cast<const void*>(stream)));
  }
  return Status::ok();
}

Status check_reuse_capture(const char* entry, const ScheduleRecord& record, unsigned long long capture_id) {
  const std::string prefix = std::string(entry) + ": argument ";
  if (capture_id == 0) {
    if (record.captured) {
      return Status::invalid_argument(prefix + "'record' was used in a CUDA graph capture: got record.captured = "
                                      "true, expected a record never captured (replays rewrite its schedule)");
    }
    if (!record.filled) {
      return Status::invalid_argument(prefix + "'record' holds no schedule for eager runs: got record.filled = "
                                      "false, expected a record filled by an eager ScheduleUse::kBuild run");
    }
    return Status::ok();
  }
  if (record.capture_id != capture_id) {
    return Status::invalid_argument(prefix + "'use' cannot reuse a schedule while the stream is capturing a CUDA "
                                    "graph unless this capture built it: got record.capture_id = " +
                                    std::to_string(record.capture_id) + ", expected the stream's capture id " +
                                    std::to_string(capture_id) + " (a ScheduleUse::kBuild run captured first)");
  }
  return Status::ok();
}

}  // namespace openmla::detail

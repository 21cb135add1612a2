// Pre-launch checks of the run() entries (run_checks.h).
#include "api/run_checks.h"

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

}  // namespace openmla::detail

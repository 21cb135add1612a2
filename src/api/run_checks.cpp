// Pre-launch checks of the run() entries (run_checks.h).
#include "api/run_checks.h"

#include <string>

#include "validate/validate.h"

namespace openmla::detail {
namespace {

// A plan made for other shapes would index the workspace wrongly.
Status check_plan_matches(const char* entry, const DecodePlan& plan, int num_items, int rows_per_item,
                          int num_q_groups, int max_length) {
  if (plan.num_items != num_items || plan.rows_per_item != rows_per_item ||
      plan.num_q_groups != num_q_groups || plan.lengths.max_length != max_length || plan.num_parts < 1) {
    return Status::invalid_argument(
        std::string(entry) + ": argument 'plan' was made for other shapes: got num_items = " +
        std::to_string(plan.num_items) + ", rows_per_item = " + std::to_string(plan.rows_per_item) +
        ", num_q_groups = " + std::to_string(plan.num_q_groups) + ", expected " + std::to_string(num_items) +
        ", " + std::to_string(rows_per_item) + ", " + std::to_string(num_q_groups) +
        " (call the matching plan_* with the same shape)");
  }
  return Status::ok();
}

}  // namespace

Status check_dense_decode_run(const char* entry, const DenseDecodeParams& params, const DecodePlan& plan,
                              const void* workspace, size_t workspace_bytes) {
  OPENMLA_RETURN_IF_ERROR(validate_dense_decode(entry, params));
  OPENMLA_RETURN_IF_ERROR(check_dense_decode_gpu(entry, params.shape));
  const DenseDecodeShape& shape = params.shape;
  OPENMLA_RETURN_IF_ERROR(check_plan_matches(entry, plan, shape.batch, shape.s_q * shape.h_q, dense_q_groups(shape),
                                             shape.max_pages_per_seq * shape.page_size));
  return validate_workspace(entry, plan, workspace, workspace_bytes);
}

Status check_sparse_decode_run(const char* entry, const SparseDecodeParams& params, const DecodePlan& plan,
                               const void* workspace, size_t workspace_bytes) {
  OPENMLA_RETURN_IF_ERROR(validate_sparse_decode(entry, params));
  OPENMLA_RETURN_IF_ERROR(check_sparse_decode_gpu(entry, params.shape));
  const SparseDecodeShape& shape = params.shape;
  // Items are (request, query token) pairs; h_q >= 64 splits heads into 64-wide q-groups.
  OPENMLA_RETURN_IF_ERROR(check_plan_matches(entry, plan, shape.batch * shape.s_q, shape.h_q,
                                             sparse_q_groups(shape.h_q), shape.topk));
  return validate_workspace(entry, plan, workspace, workspace_bytes);
}

}  // namespace openmla::detail

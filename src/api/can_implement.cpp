// can_implement: the first step of each family's contract (as in CUTLASS).
// Each one is the family's full argument check plus the GPU capability table
// (openmla/capabilities.h) under its own entry name: the same two checks run()
// starts with, so a probe at start-up never promises what run() refuses.
#include "validate/validate.h"
#include "openmla/openmla.h"

namespace openmla {

Status dense_decode_can_implement(const DenseDecodeParams& params) {
  constexpr const char* kEntry = "dense_decode_can_implement";
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode(kEntry, params));
  return detail::check_dense_decode_gpu(kEntry, params.shape);
}

Status sparse_decode_can_implement(const SparseDecodeParams& params) {
  constexpr const char* kEntry = "sparse_decode_can_implement";
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_decode(kEntry, params));
  return detail::check_sparse_decode_gpu(kEntry, params.shape);
}

Status sparse_prefill_can_implement(const SparsePrefillParams& params) {
  constexpr const char* kEntry = "sparse_prefill_can_implement";
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_prefill(kEntry, params));
  return detail::check_sparse_prefill_gpu(kEntry, params.shape);
}

Status dense_decode_check_shape(const DenseDecodeShape& shape, const char* entry) {
  return detail::validate_dense_decode_shape(entry, shape);
}

Status sparse_decode_check_shape(const SparseDecodeShape& shape, const char* entry) {
  return detail::validate_sparse_decode_shape(entry, shape);
}

Status sparse_prefill_check_shape(const SparsePrefillShape& shape, const char* entry) {
  return detail::validate_sparse_prefill_shape(entry, shape);
}

Status combine_can_implement(const CombineParams& params) {
  return detail::validate_combine("combine_can_implement", params);
}

}  // namespace openmla

// can_implement: the first step of each family's contract (as in CUTLASS).
// Each one is the family's full argument check under its own entry name, so a
// caller can probe a configuration before planning or allocating anything.
#include "api/build_options.h"
#include "api/validate.h"
#include "openmla/openmla.h"

namespace openmla {

Status dense_decode_can_implement(const DenseDecodeParams& params) {
  constexpr const char* kEntry = "dense_decode_can_implement";
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode(kEntry, params));
  return detail::check_dense_decode_built(kEntry, params.shape);
}

Status sparse_decode_can_implement(const SparseDecodeParams& params) {
  constexpr const char* kEntry = "sparse_decode_can_implement";
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_decode(kEntry, params));
  return detail::check_sparse_decode_built(kEntry);
}

Status sparse_prefill_can_implement(const SparsePrefillParams& params) {
  return detail::validate_sparse_prefill("sparse_prefill_can_implement", params);
}

Status combine_can_implement(const CombineParams& params) {
  return detail::validate_combine("combine_can_implement", params);
}

}  // namespace openmla

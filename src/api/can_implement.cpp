// can_implement: the first step of each family's contract (as in CUTLASS).
// Each one is the family's full argument check under its own entry name, so a
// caller can probe a configuration before planning or allocating anything.
#include "api/validate.h"
#include "openmla/openmla.h"

namespace openmla {

Status dense_decode_can_implement(const DenseDecodeParams& params) {
  return detail::validate_dense_decode("dense_decode_can_implement", params);
}

Status sparse_decode_can_implement(const SparseDecodeParams& params) {
  return detail::validate_sparse_decode("sparse_decode_can_implement", params);
}

Status sparse_prefill_can_implement(const SparsePrefillParams& params) {
  return detail::validate_sparse_prefill("sparse_prefill_can_implement", params);
}

Status combine_can_implement(const CombineParams& params) {
  return detail::validate_combine("combine_can_implement", params);
}

}  // namespace openmla

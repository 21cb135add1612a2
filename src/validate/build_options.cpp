// SPDX-License-Identifier: Apache-2.0
// Refusals for families and dtypes that the build left out (OPENMLA_ENABLE_*).
#include "validate/build_options.h"

#include <string>

#include "openmla/types.h"

namespace openmla::detail {
namespace {

Status not_built(const char* entry, const std::string& what, const char* option) {
  return Status::not_supported(std::string(entry) + ": " + what + " not built into this library: got " + option +
                               "=OFF at configure time, expected ON (reconfigure with -D" + option + "=ON)");
}

}  // namespace

Status check_dense_decode_built(const char* entry, const DenseDecodeShape& shape) {
  if (!OPENMLA_ENABLE_DENSE_DECODE) return not_built(entry, "the dense decode kernels were", "OPENMLA_ENABLE_DENSE_DECODE");
  if (!OPENMLA_ENABLE_FP16 && shape.kv_dtype == DType::kFP16) {
    return not_built(entry, "argument 'kv_dtype' = fp16: the FP16 kernels were", "OPENMLA_ENABLE_FP16");
  }
  return Status::ok();
}

Status check_sparse_decode_built(const char* entry) {
  if (!OPENMLA_ENABLE_SPARSE_DECODE) {
    return not_built(entry, "the sparse FP8 decode kernels were", "OPENMLA_ENABLE_SPARSE_DECODE");
  }
  return Status::ok();
}

Status check_sparse_prefill_built(const char* entry) {
  if (!OPENMLA_ENABLE_SPARSE_PREFILL) {
    return not_built(entry, "the sparse prefill kernels were", "OPENMLA_ENABLE_SPARSE_PREFILL");
  }
  return Status::ok();
}

}  // namespace openmla::detail

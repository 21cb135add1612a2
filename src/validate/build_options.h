// SPDX-License-Identifier: Apache-2.0
// What this build of the library holds: the CMake options OPENMLA_ENABLE_*
// (families and dtypes; all ON by default) arrive as compile definitions.
// The capability checks (capabilities.cpp) ask here first, so can_implement and
// run agree on what was left out.
#pragma once

#include "openmla/params.h"
#include "openmla/status.h"

#ifndef OPENMLA_ENABLE_DENSE_DECODE
#define OPENMLA_ENABLE_DENSE_DECODE 1
#endif
#ifndef OPENMLA_ENABLE_SPARSE_DECODE
#define OPENMLA_ENABLE_SPARSE_DECODE 1
#endif
#ifndef OPENMLA_ENABLE_SPARSE_PREFILL
#define OPENMLA_ENABLE_SPARSE_PREFILL 1
#endif
#ifndef OPENMLA_ENABLE_FP16
#define OPENMLA_ENABLE_FP16 1
#endif

namespace openmla::detail {

// kNotSupported naming the option when the dense decode kernels, or their
// FP16 instantiations (shape.kv_dtype == fp16), were not built.
Status check_dense_decode_built(const char* entry, const DenseDecodeShape& shape);

// kNotSupported naming the option when the sparse FP8 decode kernels were not built.
Status check_sparse_decode_built(const char* entry);

// kNotSupported naming the option when the sparse prefill kernels were not built.
Status check_sparse_prefill_built(const char* entry);

}  // namespace openmla::detail

// Argument validation for every public entry. Each check returns a Status whose
// message names the entry, the argument, what it got and what was expected:
//   "dense_decode_run: argument 'h_q' must be a multiple of h_kv: got h_q = 100, h_kv = 3,
//    expected h_q % h_kv == 0"
// The planner calls the *_shape checks; can_implement, run and the CPU
// reference call the full checks. This layer depends on the public headers only.
#pragma once

#include <cstddef>

#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla::detail {

Status validate_device_info(const char* entry, const DeviceInfo& device);

Status validate_dense_decode_shape(const char* entry, const DenseDecodeShape& shape);
Status validate_dense_decode(const char* entry, const DenseDecodeParams& params);
// FP8 dequant scales finite and > 0. Reads *q_scale and *kv_scale, so only for
// host pointers (the CPU reference); call after validate_dense_decode.
Status validate_dense_decode_scale_values(const char* entry, const DenseDecodeParams& params);

Status validate_sparse_decode_shape(const char* entry, const SparseDecodeShape& shape);
Status validate_sparse_decode(const char* entry, const SparseDecodeParams& params);

Status validate_sparse_prefill_shape(const char* entry, const SparsePrefillShape& shape);
Status validate_sparse_prefill(const char* entry, const SparsePrefillParams& params);

Status validate_combine(const char* entry, const CombineParams& params);

// The GPU capability table (openmla/capabilities.h): what the sm90 kernels
// run of the calls the checks above accept. *_can_implement and *_run call
// these after the argument checks, so the two always agree.
Status check_dense_decode_gpu(const char* entry, const DenseDecodeShape& shape);
Status check_sparse_decode_gpu(const char* entry, const SparseDecodeShape& shape);
Status check_sparse_prefill_gpu(const char* entry, const SparsePrefillShape& shape);

// The workspace handed to run(): non-null when the plan needs bytes, aligned to
// kWorkspaceAlignment, at least plan.workspace.total_bytes.
Status validate_workspace(const char* entry, const DecodePlan& plan, const void* workspace,
                          size_t workspace_bytes);

}  // namespace openmla::detail

// OpenMLA public C++ API: Multi-head Latent Attention kernels for Hopper.
// Contract per family (as in CUTLASS): can_implement -> plan (workspace size)
// -> run. run() takes caller-provided workspace and a stream and never
// allocates, so a whole decode step can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "openmla/capabilities.h"
#include "openmla/errors.h"
#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla {

// Fill a DeviceInfo for `device` from the CUDA runtime (a convenience for callers;
// the planner itself never queries the device).
Status query_device_info(int device, DeviceInfo* info);

// ---- dense decode (BF16/FP16, FP8 per-tensor) ----
// Checks every argument of `params` (shapes, dtypes, strides, alignment, pointers)
// and the GPU capability table (openmla/capabilities.h), as run() does.
Status dense_decode_can_implement(const DenseDecodeParams& params);
// The shape checks alone (what plan_dense_decode makes), under the caller's entry
// name: a binding names a bad size with them before it allocates outputs.
Status dense_decode_check_shape(const DenseDecodeShape& shape, const char* entry);
// Schedules on the GPU from device-resident seqlens, runs the attention kernel and,
// when anything is split, the combine. `workspace` holds plan.workspace.total_bytes.
Status dense_decode_run(const DenseDecodeParams& params, const DecodePlan& plan, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

// ---- sparse decode (656-byte FP8 cache) ----
Status sparse_decode_can_implement(const SparseDecodeParams& params);
Status sparse_decode_check_shape(const SparseDecodeShape& shape, const char* entry);
Status sparse_decode_run(const SparseDecodeParams& params, const DecodePlan& plan, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream);

// ---- sparse prefill (BF16 KV rows by index) ----
Status sparse_prefill_can_implement(const SparsePrefillParams& params);
Status sparse_prefill_check_shape(const SparsePrefillShape& shape, const char* entry);
// Schedules the query tokens over the SMs on the GPU (from device-resident
// topk_length), runs the attention kernel and, when a token is split, the
// combine. `plan` from plan_sparse_prefill; `workspace` holds plan.workspace.total_bytes.
Status sparse_prefill_run(const SparsePrefillParams& params, const DecodePlan& plan, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream);

// ---- split-KV combine (normally launched by the decode runs) ----
Status combine_can_implement(const CombineParams& params);
Status combine_run(const CombineParams& params, cudaStream_t stream);

}  // namespace openmla

// OpenMLA public C++ API: Multi-head Latent Attention kernels for Hopper.
// Contract per family (as in CUTLASS): can_implement -> plan (workspace size)
// -> run. run() takes caller-provided workspace and a stream and never
// allocates, so a whole decode step can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

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

// ---- a split-KV schedule kept in the workspace between runs (eager calls) ----
// A run's first kernel rebuilds the schedule from the device-resident lengths
// into the workspace. An engine makes the same call on every layer of a step
// with the same lengths, so the layers after the first can run on the schedule
// the first one left there: one kernel launch less per call (host time).
//
// What a workspace's schedule regions hold, as the run that built them recorded
// it. Zero-initialise one per workspace; the runs fill it.
struct ScheduleRecord {
  uint64_t plan_fingerprint = 0;    // DecodePlan::fingerprint of the plan it was built for
  const void* workspace = nullptr;  // the workspace it lies in
  const void* lengths = nullptr;    // the device lengths it was built from (null: every item full length)
  cudaStream_t stream = nullptr;    // the stream its building run ran on
  bool filled = false;              // built by a run that was not being captured
  // A run with this record was captured in a CUDA graph: the graph's replays
  // rewrite the schedule whenever they run, so no eager run reuses it again.
  bool captured = false;
  // Nonzero: the building run (its schedule kernel, or its attention kernel when
  // the plan has schedule_in_kernel) was captured, in the capture sequence with
  // this id (cudaStreamGetCaptureInfo). Later runs captured in the same sequence
  // on the same stream may reuse it: every replay rebuilds the schedule before
  // them, from the lengths of that replay.
  unsigned long long capture_id = 0;
};

enum class ScheduleUse : int32_t {
  // Build the schedule (the schedule kernel, or the attention kernel itself when
  // plan.schedule_in_kernel), as the runs above do; with a record, note in it
  // what was built (or, under graph capture, mark it captured for good).
  kBuild,
  // Build nothing: attention (+ combine) read the schedule `record` says the
  // workspace holds. Refused (kInvalidArgument, nothing launched) unless
  // the record was built for this plan (same fingerprint), this workspace, this
  // lengths pointer and this stream, and either
  //   - the stream is not capturing, the record was filled by an eager run and
  //     was never captured, or
  //   - the stream is capturing and the building run was captured in this same
  //     capture sequence (record.capture_id): the graph then rebuilds the
  //     schedule on every replay before the runs that reuse it.
  // NOTE: the run cannot read the lengths' contents. The caller promises that
  // they are unchanged since the building run (FlashMLA's rule: one metadata
  // object per set of lengths); openmla.flash_mla keeps that promise per
  // FlashMLASchedMeta object (python/openmla/_eager.py, "Schedule reuse").
  kReuse,
};

// The id of the capture sequence `stream` is recording (cudaStreamGetCaptureInfo),
// 0 when it is not capturing: what ScheduleRecord::capture_id is compared with.
Status stream_capture_id(cudaStream_t stream, unsigned long long* capture_id);

// sparse_decode_run / dense_decode_run with the schedule built or reused as `use`
// says; `record` (required for kReuse, optional for kBuild) belongs to `workspace`.
// The lengths a record names: topk_length (sparse), seqlens (dense).
Status sparse_decode_run(const SparseDecodeParams& params, const DecodePlan& plan, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream, ScheduleUse use, ScheduleRecord* record);
Status dense_decode_run(const DenseDecodeParams& params, const DecodePlan& plan, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, ScheduleUse use, ScheduleRecord* record);

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

// Prepared decode calls: the binding's eager fast path.
//
// An engine calls the same decode with the same shapes, strides, dtypes and
// devices on every layer of every step; only addresses (and lengths, which live
// on the device) change. A prepared call does the full binding path once
// (tensor_args.cpp fills and checks the params, the planner makes the plan) and
// then runs with new addresses only. Python keys the prepared calls on
// everything the preparation read (openmla/_eager.py), so a call never runs
// with params made for other tensors. The api still validates the params on
// every run (cheap, and it covers the addresses' alignment).
// Plain C++: no Python or nanobind headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "openmla/openmla.h"
#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/status.h"
#include "tensor_args.h"

namespace openmla::python {

// Addresses of one dense decode call; 0 for an absent optional tensor.
struct DenseDecodeAddresses {
  uint64_t q = 0, kv_cache = 0, block_table = 0, seqlens = 0, out = 0, lse = 0, q_scale = 0, kv_scale = 0;
};

class DenseDecodeCall {
 public:
  // Checks the tensors (and the workspace, when given) as the plain run does.
  static Status prepare(const char* entry, const DenseDecodeTensors& tensors, float softmax_scale, bool causal,
                        const DeviceInfo& device_info, const PlanOptions& options, const TensorRef* workspace,
                        DenseDecodeCall* call);
  // CPU: the reference; GPU: the kernels on `stream` (a cudaStream_t value).
  Status run(const DenseDecodeAddresses& addresses, uint64_t workspace, size_t workspace_bytes,
             uint64_t stream) const;
  // GPU only: run() with the schedule built into `record`'s workspace or reused
  // from it (`reuse`; see ScheduleUse in openmla/openmla.h).
  Status run_with_schedule(const DenseDecodeAddresses& addresses, uint64_t workspace, size_t workspace_bytes,
                           uint64_t stream, bool reuse, ScheduleRecord* record) const;

  int device() const { return device_; }
  size_t workspace_bytes() const { return plan_.workspace.total_bytes; }

 private:
  DenseDecodeParams with_addresses(const DenseDecodeAddresses& addresses) const;

  DenseDecodeParams params_;
  DecodePlan plan_;
  int device_ = kCpuDevice;
};

// Addresses of one sparse decode call; 0 for an absent optional tensor.
struct SparseDecodeAddresses {
  uint64_t q = 0, kv_cache = 0, indices = 0, topk_length = 0, attn_sink = 0, out = 0, lse = 0;
};

class SparseDecodeCall {
 public:
  static Status prepare(const char* entry, const SparseDecodeTensors& tensors, float softmax_scale,
                        const DeviceInfo& device_info, const PlanOptions& options, const TensorRef* workspace,
                        SparseDecodeCall* call);
  Status run(const SparseDecodeAddresses& addresses, uint64_t workspace, size_t workspace_bytes,
             uint64_t stream) const;
  // GPU only: run() with the schedule built into `record`'s workspace or reused
  // from it (`reuse`; see ScheduleUse in openmla/openmla.h).
  Status run_with_schedule(const SparseDecodeAddresses& addresses, uint64_t workspace, size_t workspace_bytes,
                           uint64_t stream, bool reuse, ScheduleRecord* record) const;

  int device() const { return device_; }
  size_t workspace_bytes() const { return plan_.workspace.total_bytes; }

 private:
  SparseDecodeParams params_;
  DecodePlan plan_;
  int device_ = kCpuDevice;
};

}  // namespace openmla::python

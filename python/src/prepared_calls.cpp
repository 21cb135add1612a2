// Prepared decode calls (see prepared_calls.h).
#include "prepared_calls.h"

#include "openmla/openmla.h"
#include "openmla/reference.h"

namespace openmla::python {
namespace {

template <typename T>
T* address(uint64_t value) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(value));
}

cudaStream_t to_stream(uint64_t handle) { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(handle)); }

}  // namespace

// ---- dense decode ----------------------------------------------------------------------
Status DenseDecodeCall::prepare(const char* entry, const DenseDecodeTensors& tensors, float softmax_scale,
                                bool causal, const DeviceInfo& device_info, const PlanOptions& options,
                                const TensorRef* workspace, DenseDecodeCall* call) {
  OPENMLA_RETURN_IF_ERROR(dense_decode_params(entry, tensors, softmax_scale, causal, &call->params_));
  OPENMLA_RETURN_IF_ERROR(common_device(entry,
                                        {{"q", tensors.q},
                                         {"kv_cache", tensors.kv_cache},
                                         {"block_table", tensors.block_table},
                                         {"seqlens", tensors.seqlens},
                                         {"out", tensors.out},
                                         {"lse", tensors.lse},
                                         {"q_scale", tensors.q_scale},
                                         {"kv_scale", tensors.kv_scale}},
                                        &call->device_));
  if (call->device_ == kCpuDevice) return Status::ok();  // the reference needs no plan
  OPENMLA_RETURN_IF_ERROR(plan_dense_decode(call->params_.shape, device_info, &call->plan_, options));
  if (workspace != nullptr) {
    void* base = nullptr;
    size_t bytes = 0;
    OPENMLA_RETURN_IF_ERROR(python::workspace_bytes(entry, *workspace, call->device_, &base, &bytes));
  }
  return Status::ok();
}

DenseDecodeParams DenseDecodeCall::with_addresses(const DenseDecodeAddresses& a) const {
  DenseDecodeParams params = params_;
  params.q = address<const void>(a.q);
  params.kv_cache = address<const void>(a.kv_cache);
  params.block_table = address<const int32_t>(a.block_table);
  params.seqlens = address<const int32_t>(a.seqlens);
  params.out = address<void>(a.out);
  params.lse = address<float>(a.lse);
  params.q_scale = address<const float>(a.q_scale);
  params.kv_scale = address<const float>(a.kv_scale);
  return params;
}

Status DenseDecodeCall::run(const DenseDecodeAddresses& a, uint64_t workspace, size_t workspace_bytes,
                            uint64_t stream) const {
  const DenseDecodeParams params = with_addresses(a);
  if (device_ == kCpuDevice) return reference_dense_decode(params);
  return dense_decode_run(params, plan_, address<void>(workspace), workspace_bytes, to_stream(stream));
}

Status DenseDecodeCall::run_with_schedule(const DenseDecodeAddresses& a, uint64_t workspace,
                                          size_t workspace_bytes, uint64_t stream, bool reuse,
                                          ScheduleRecord* record) const {
  if (device_ == kCpuDevice) {
    return Status::invalid_argument("dense_decode: run_with_schedule has no schedule on the CPU: got a CPU call, "
                                    "expected a GPU call (the reference builds none; use run)");
  }
  return dense_decode_run(with_addresses(a), plan_, address<void>(workspace), workspace_bytes, to_stream(stream),
                          reuse ? ScheduleUse::kReuse : ScheduleUse::kBuild, record);
}

// ---- sparse decode ---------------------------------------------------------------------
Status SparseDecodeCall::prepare(const char* entry, const SparseDecodeTensors& tensors, float softmax_scale,
                                 const DeviceInfo& device_info, const PlanOptions& options,
                                 const TensorRef* workspace, SparseDecodeCall* call) {
  OPENMLA_RETURN_IF_ERROR(sparse_decode_params(entry, tensors, softmax_scale, &call->params_));
  OPENMLA_RETURN_IF_ERROR(common_device(entry,
                                        {{"q", tensors.q},
                                         {"kv_cache", tensors.kv_cache},
                                         {"indices", tensors.indices},
                                         {"topk_length", tensors.topk_length},
                                         {"attn_sink", tensors.attn_sink},
                                         {"out", tensors.out},
                                         {"lse", tensors.lse}},
                                        &call->device_));
  if (call->device_ == kCpuDevice) return Status::ok();
  OPENMLA_RETURN_IF_ERROR(plan_sparse_decode(call->params_.shape, device_info, &call->plan_, options));
  if (workspace != nullptr) {
    void* base = nullptr;
    size_t bytes = 0;
    OPENMLA_RETURN_IF_ERROR(python::workspace_bytes(entry, *workspace, call->device_, &base, &bytes));
  }
  return Status::ok();
}

Status SparseDecodeCall::run(const SparseDecodeAddresses& a, uint64_t workspace, size_t workspace_bytes,
                             uint64_t stream) const {
  return run_with_schedule(a, workspace, workspace_bytes, stream, /*reuse=*/false, nullptr);
}

Status SparseDecodeCall::run_with_schedule(const SparseDecodeAddresses& a, uint64_t workspace,
                                           size_t workspace_bytes, uint64_t stream, bool reuse,
                                           ScheduleRecord* record) const {
  SparseDecodeParams params = params_;
  params.q = address<const void>(a.q);
  params.kv_cache = address<const uint8_t>(a.kv_cache);
  params.indices = address<const int32_t>(a.indices);
  params.topk_length = address<const int32_t>(a.topk_length);
  params.attn_sink = address<const float>(a.attn_sink);
  params.out = address<void>(a.out);
  params.lse = address<float>(a.lse);
  if (device_ == kCpuDevice) {
    if (reuse) return Status::invalid_argument("sparse_decode: argument 'reuse' has no schedule to reuse on the CPU: got "
                                      "reuse = true, expected false (the reference builds none)");
    return reference_sparse_decode(params);
  }
  return sparse_decode_run(params, plan_, address<void>(workspace), workspace_bytes, to_stream(stream),
                           reuse ? ScheduleUse::kReuse : ScheduleUse::kBuild, record);
}

}  // namespace openmla::python

// openmla._C: the Python binding (nanobind), layer 5 of docs/architecture.md.
//
// Thin by design: Python hands over each tensor as a TensorRef (address,
// dtype name, sizes, strides, device), tensor_args.cpp turns them into the
// params structs, and the C++ API does the rest. No torch header is included,
// so one build serves every torch version. A failed Status becomes an
// exception carrying the same message:
//   kInvalidArgument -> ValueError, kNotSupported -> NotImplementedError,
//   kCudaError / kInternal -> RuntimeError.
// Runs and reference calls release the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "openmla/openmla.h"
#include "openmla/reference.h"
#include "prepared_calls.h"
#include "tensor_args.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace openmla::python {
namespace {

// ---- Status -> Python exception ---------------------------------------------------
void raise_if_error(const Status& status) {
  if (status.is_ok()) return;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      throw nb::value_error(status.message().c_str());
    case StatusCode::kNotSupported:
      PyErr_SetString(PyExc_NotImplementedError, status.message().c_str());
      throw nb::python_error();
    default:
      throw std::runtime_error(status.message());
  }
}

// Runs `call` without the GIL and raises its Status afterwards (with the GIL).
template <typename Call>
void run_released(Call&& call) {
  Status status;
  {
    nb::gil_scoped_release release;
    status = call();
  }
  raise_if_error(status);
}

cudaStream_t to_stream(uint64_t handle) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(handle));
}

// A workspace given to a CPU run: the size the GPU run would need (its
// 256-byte alignment matters to the kernels only; torch's CPU allocator gives 64).
Status check_workspace_size(const char* entry, const DecodePlan& plan, size_t bytes) {
  if (bytes >= plan.workspace.total_bytes) return Status::ok();
  return argument_error(StatusCode::kInvalidArgument, entry, "workspace_bytes",
                                "is smaller than the plan's workspace",
                                show("workspace_bytes", int64_t(bytes)),
                                "workspace_bytes >= plan.workspace.total_bytes = " +
                                    std::to_string(plan.workspace.total_bytes));
}

// ---- decode runs ----------------------------------------------------------------------
// On the CPU the reference runs (plan and workspace unused); on a GPU the
// plan is rebuilt from the tensors' shapes (pure and cheap), then run().
void dense_decode(const TensorRef& q, const TensorRef& kv_cache, const TensorRef& block_table,
                  const TensorRef& seqlens, const TensorRef& out, const TensorRef& lse,
                  const TensorRef* q_scale, const TensorRef* kv_scale, float softmax_scale, bool causal,
                  const DeviceInfo& device_info, const PlanOptions& options, const TensorRef* workspace,
                  uint64_t stream) {
  constexpr const char* kEntry = "dense_decode";
  DenseDecodeTensors tensors{&q, &kv_cache, &block_table, &seqlens, &out, &lse, q_scale, kv_scale};
  DenseDecodeParams params;
  raise_if_error(dense_decode_params(kEntry, tensors, softmax_scale, causal, &params));
  int device = kCpuDevice;
  raise_if_error(common_device(kEntry,
                               {{"q", &q},
                                {"kv_cache", &kv_cache},
                                {"block_table", &block_table},
                                {"seqlens", &seqlens},
                                {"out", &out},
                                {"lse", &lse},
                                {"q_scale", q_scale},
                                {"kv_scale", kv_scale}},
                               &device));
  const auto plan_and_workspace = [&](DecodePlan* plan, void** base, size_t* bytes) {
    raise_if_error(plan_dense_decode(params.shape, device_info, plan, options));
    if (workspace != nullptr) raise_if_error(workspace_bytes(kEntry, *workspace, device, base, bytes));
  };
  DecodePlan plan;
  void* base = nullptr;
  size_t bytes = 0;
  if (device == kCpuDevice) {
    // The reference needs no workspace, but one given must fit the GPU run's plan.
    if (workspace != nullptr) {
      plan_and_workspace(&plan, &base, &bytes);
      raise_if_error(check_workspace_size(kEntry, plan, bytes));
    }
    run_released([&] { return reference_dense_decode(params); });
    return;
  }
  plan_and_workspace(&plan, &base, &bytes);
  run_released([&] { return dense_decode_run(params, plan, base, bytes, to_stream(stream)); });
}

void sparse_decode(const TensorRef& q, const TensorRef& kv_cache, const TensorRef& indices,
                   const TensorRef* topk_length, const TensorRef* attn_sink, const TensorRef& out,
                   const TensorRef& lse, float softmax_scale, const DeviceInfo& device_info,
                   const PlanOptions& options, const TensorRef* workspace, uint64_t stream) {
  constexpr const char* kEntry = "sparse_decode";
  SparseDecodeTensors tensors{&q, &kv_cache, &indices, topk_length, attn_sink, &out, &lse};
  SparseDecodeParams params;
  raise_if_error(sparse_decode_params(kEntry, tensors, softmax_scale, &params));
  int device = kCpuDevice;
  raise_if_error(common_device(kEntry,
                               {{"q", &q},
                                {"kv_cache", &kv_cache},
                                {"indices", &indices},
                                {"topk_length", topk_length},
                                {"attn_sink", attn_sink},
                                {"out", &out},
                                {"lse", &lse}},
                               &device));
  const auto plan_and_workspace = [&](DecodePlan* plan, void** base, size_t* bytes) {
    raise_if_error(plan_sparse_decode(params.shape, device_info, plan, options));
    if (workspace != nullptr) raise_if_error(workspace_bytes(kEntry, *workspace, device, base, bytes));
  };
  DecodePlan plan;
  void* base = nullptr;
  size_t bytes = 0;
  if (device == kCpuDevice) {
    // The reference needs no workspace, but one given must fit the GPU run's plan.
    if (workspace != nullptr) {
      plan_and_workspace(&plan, &base, &bytes);
      raise_if_error(check_workspace_size(kEntry, plan, bytes));
    }
    run_released([&] { return reference_sparse_decode(params); });
    return;
  }
  plan_and_workspace(&plan, &base, &bytes);
  run_released([&] { return sparse_decode_run(params, plan, base, bytes, to_stream(stream)); });
}

// Sparse prefill's params from its tensors, and their common device.
struct PrefillCall {
  SparsePrefillParams params;
  int device = kCpuDevice;
};
PrefillCall prefill_call(const char* entry, const TensorRef& q, const TensorRef& kv, const TensorRef& indices,
                         const TensorRef* topk_length, const TensorRef* attn_sink, const TensorRef& out,
                         const TensorRef& max_logits, const TensorRef& lse, float softmax_scale) {
  SparsePrefillTensors tensors{&q, &kv, &indices, topk_length, attn_sink, &out, &max_logits, &lse};
  PrefillCall call;
  raise_if_error(sparse_prefill_params(entry, tensors, softmax_scale, &call.params));
  raise_if_error(common_device(entry,
                               {{"q", &q},
                                {"kv", &kv},
                                {"indices", &indices},
                                {"topk_length", topk_length},
                                {"attn_sink", attn_sink},
                                {"out", &out},
                                {"max_logits", &max_logits},
                                {"lse", &lse}},
                               &call.device));
  return call;
}

// Bytes of workspace the GPU run of these tensors needs (0 on the CPU).
size_t sparse_prefill_workspace_bytes(const TensorRef& q, const TensorRef& kv, const TensorRef& indices,
                                      const TensorRef* topk_length, const TensorRef* attn_sink, const TensorRef& out,
                                      const TensorRef& max_logits, const TensorRef& lse, float softmax_scale,
                                      const DeviceInfo& device_info, const PlanOptions& options) {
  const PrefillCall call =
      prefill_call("sparse_prefill", q, kv, indices, topk_length, attn_sink, out, max_logits, lse, softmax_scale);
  if (call.device == kCpuDevice) return 0;
  DecodePlan plan;
  raise_if_error(plan_sparse_prefill(call.params.shape, device_info, &plan, options));
  return plan.workspace.total_bytes;
}

void sparse_prefill(const TensorRef& q, const TensorRef& kv, const TensorRef& indices,
                    const TensorRef* topk_length, const TensorRef* attn_sink, const TensorRef& out,
                    const TensorRef& max_logits, const TensorRef& lse, float softmax_scale,
                    const DeviceInfo& device_info, const PlanOptions& options, const TensorRef* workspace,
                    uint64_t stream) {
  constexpr const char* kEntry = "sparse_prefill";
  const PrefillCall call =
      prefill_call(kEntry, q, kv, indices, topk_length, attn_sink, out, max_logits, lse, softmax_scale);
  if (call.device == kCpuDevice) {
    run_released([&] { return reference_sparse_prefill(call.params); });
    return;
  }
  DecodePlan plan;
  raise_if_error(plan_sparse_prefill(call.params.shape, device_info, &plan, options));
  void* base = nullptr;
  size_t bytes = 0;
  if (workspace != nullptr) raise_if_error(workspace_bytes(kEntry, *workspace, call.device, &base, &bytes));
  run_released([&] { return sparse_prefill_run(call.params, plan, base, bytes, to_stream(stream)); });
}

// ---- plans ----------------------------------------------------------------------------
DecodePlan plan_dense(const DenseDecodeShape& shape, const DeviceInfo& device, const PlanOptions& options) {
  DecodePlan plan;
  raise_if_error(plan_dense_decode(shape, device, &plan, options));
  return plan;
}

DecodePlan plan_sparse(const SparseDecodeShape& shape, const DeviceInfo& device, const PlanOptions& options) {
  DecodePlan plan;
  raise_if_error(plan_sparse_decode(shape, device, &plan, options));
  return plan;
}

DecodePlan plan_prefill(const SparsePrefillShape& shape, const DeviceInfo& device, const PlanOptions& options) {
  DecodePlan plan;
  raise_if_error(plan_sparse_prefill(shape, device, &plan, options));
  return plan;
}

// A plan object handed to a run must be the one its tensors call for; the
// message names the first field that differs.
void check_plan_matches(const std::string& entry, const DecodePlan& given, const DecodePlan& expected) {
  raise_if_error(compare_decode_plans(entry.c_str(), given, expected));
}

DeviceInfo device_info_of(int device) {
  DeviceInfo info;
  raise_if_error(query_device_info(device, &info));
  return info;
}

nb::dict workspace_regions(const DecodePlan& plan) {
  const WorkspaceLayout& w = plan.workspace;
  nb::dict regions;
  const std::pair<const char*, const WorkspaceRegion*> named[] = {{"parts", &w.parts},
                                                                  {"combine", &w.combine},
                                                                  {"item_prefix", &w.item_prefix},
                                                                  {"part_bounds", &w.part_bounds},
                                                                  {"part_slots", &w.part_slots},
                                                                  {"partial_lse", &w.partial_lse},
                                                                  {"partial_o", &w.partial_o}};
  for (const auto& [name, region] : named) regions[name] = nb::make_tuple(region->offset, region->bytes);
  return regions;
}

// ---- prepared calls (the eager fast path, see prepared_calls.h) -------------------------
DenseDecodeCall prepare_dense(const TensorRef& q, const TensorRef& kv_cache, const TensorRef& block_table,
                              const TensorRef& seqlens, const TensorRef& out, const TensorRef& lse,
                              const TensorRef* q_scale, const TensorRef* kv_scale, float softmax_scale, bool causal,
                              const DeviceInfo& device_info, const PlanOptions& options,
                              const TensorRef* workspace) {
  DenseDecodeTensors tensors{&q, &kv_cache, &block_table, &seqlens, &out, &lse, q_scale, kv_scale};
  DenseDecodeCall call;
  raise_if_error(DenseDecodeCall::prepare("dense_decode", tensors, softmax_scale, causal, device_info, options,
                                          workspace, &call));
  return call;
}

SparseDecodeCall prepare_sparse(const TensorRef& q, const TensorRef& kv_cache, const TensorRef& indices,
                                const TensorRef* topk_length, const TensorRef* attn_sink, const TensorRef& out,
                                const TensorRef& lse, float softmax_scale, const DeviceInfo& device_info,
                                const PlanOptions& options, const TensorRef* workspace) {
  SparseDecodeTensors tensors{&q, &kv_cache, &indices, topk_length, attn_sink, &out, &lse};
  SparseDecodeCall call;
  raise_if_error(SparseDecodeCall::prepare("sparse_decode", tensors, softmax_scale, device_info, options,
                                           workspace, &call));
  return call;
}

}  // namespace
}  // namespace openmla::python

NB_MODULE(_C, m) {
  using namespace openmla;
  using namespace openmla::python;
  m.doc() = "OpenMLA C++ API binding (tensors travel as TensorRef; see openmla/_tensors.py)";
  // NOTE: torch's op registry keeps Python objects alive past interpreter
  // teardown, which nanobind would report as leaks at exit.
  nb::set_leak_warnings(false);

  // ---- constants ----
  m.attr("HEAD_DIM_QK") = kHeadDimQK;
  m.attr("HEAD_DIM_V") = kHeadDimV;
  m.attr("SPARSE_FP8_TOKEN_BYTES") = kSparseFp8TokenBytes;
  m.attr("WORKSPACE_ALIGNMENT") = kWorkspaceAlignment;
  m.attr("CPU_DEVICE") = kCpuDevice;

  nb::enum_<DType>(m, "DType")
      .value("bf16", DType::kBF16)
      .value("fp16", DType::kFP16)
      .value("fp8_e4m3", DType::kFP8E4M3)
      .value("fp32", DType::kFP32)
      .value("int32", DType::kInt32);

  // ---- plain structs ----
  nb::class_<TensorRef>(m, "TensorRef")
      .def(
          "__init__",
          [](TensorRef* self, uint64_t data, std::string dtype, int64_t itemsize, std::vector<int64_t> sizes,
             std::vector<int64_t> strides, int device) {
            new (self)
                TensorRef{data, std::move(dtype), itemsize, std::move(sizes), std::move(strides), device};
          },
          "data"_a, "dtype"_a, "itemsize"_a, "sizes"_a, "strides"_a, "device"_a)
      .def_ro("data", &TensorRef::data)
      .def_ro("dtype", &TensorRef::dtype)
      .def_ro("itemsize", &TensorRef::itemsize)
      .def_ro("sizes", &TensorRef::sizes)
      .def_ro("strides", &TensorRef::strides)
      .def_ro("device", &TensorRef::device);

  nb::class_<DeviceInfo>(m, "DeviceInfo")
      .def(nb::init<>())
      .def_rw("num_sms", &DeviceInfo::num_sms)
      .def_rw("max_smem_per_block", &DeviceInfo::max_smem_per_block)
      .def_rw("cc_major", &DeviceInfo::cc_major)
      .def_rw("cc_minor", &DeviceInfo::cc_minor);

  nb::class_<PlanOptions>(m, "PlanOptions")
      .def(nb::init<>())
      .def_rw("max_parts", &PlanOptions::max_parts)
      .def_rw("min_parts", &PlanOptions::min_parts)
      .def_rw("min_part_cost", &PlanOptions::min_part_cost)
      .def_rw("cluster_split", &PlanOptions::cluster_split)
      .def_rw("batch_invariant", &PlanOptions::batch_invariant)
      .def_rw("chunk_blocks", &PlanOptions::chunk_blocks)
      .def_prop_rw(
          "schedule_placement", [](const PlanOptions& o) { return int(o.schedule_placement); },
          [](PlanOptions& o, int placement) { o.schedule_placement = static_cast<SchedulePlacement>(placement); },
          "0: automatic, 1: schedule kernel, 2: attention kernel (where its scratch fits)");

  nb::class_<DenseDecodeShape>(m, "DenseDecodeShape")
      .def(nb::init<>())
      .def_rw("batch", &DenseDecodeShape::batch)
      .def_rw("s_q", &DenseDecodeShape::s_q)
      .def_rw("h_q", &DenseDecodeShape::h_q)
      .def_rw("h_kv", &DenseDecodeShape::h_kv)
      .def_rw("d_qk", &DenseDecodeShape::d_qk)
      .def_rw("d_v", &DenseDecodeShape::d_v)
      .def_rw("page_size", &DenseDecodeShape::page_size)
      .def_rw("num_pages", &DenseDecodeShape::num_pages)
      .def_rw("max_pages_per_seq", &DenseDecodeShape::max_pages_per_seq)
      .def_rw("q_dtype", &DenseDecodeShape::q_dtype)
      .def_rw("kv_dtype", &DenseDecodeShape::kv_dtype)
      .def_rw("out_dtype", &DenseDecodeShape::out_dtype);

  nb::class_<SparseDecodeShape>(m, "SparseDecodeShape")
      .def(nb::init<>())
      .def_rw("batch", &SparseDecodeShape::batch)
      .def_rw("s_q", &SparseDecodeShape::s_q)
      .def_rw("h_q", &SparseDecodeShape::h_q)
      .def_rw("d_qk", &SparseDecodeShape::d_qk)
      .def_rw("d_v", &SparseDecodeShape::d_v)
      .def_rw("topk", &SparseDecodeShape::topk)
      .def_rw("page_size", &SparseDecodeShape::page_size)
      .def_rw("num_pages", &SparseDecodeShape::num_pages);

  nb::class_<SparsePrefillShape>(m, "SparsePrefillShape")
      .def(nb::init<>())
      .def_rw("s_q", &SparsePrefillShape::s_q)
      .def_rw("h_q", &SparsePrefillShape::h_q)
      .def_rw("s_kv", &SparsePrefillShape::s_kv)
      .def_rw("d_qk", &SparsePrefillShape::d_qk)
      .def_rw("d_v", &SparsePrefillShape::d_v)
      .def_rw("topk", &SparsePrefillShape::topk)
      .def_rw("fp8_kv_cache", &SparsePrefillShape::fp8_kv_cache)
      .def_rw("page_size", &SparsePrefillShape::page_size)
      .def_rw("num_pages", &SparsePrefillShape::num_pages);

  nb::class_<DecodePlan>(m, "DecodePlan")
      .def_ro("num_items", &DecodePlan::num_items)
      .def_ro("q_tokens_per_item", &DecodePlan::q_tokens_per_item)
      .def_ro("rows_per_item", &DecodePlan::rows_per_item)
      .def_ro("num_q_groups", &DecodePlan::num_q_groups)
      .def_ro("num_parts", &DecodePlan::num_parts)
      .def_ro("num_slots", &DecodePlan::num_slots)
      .def_prop_ro("kernel", [](const DecodePlan& p) { return std::string(decode_kernel_name(p.kernel)); })
      .def_ro("cluster_size", &DecodePlan::cluster_size)
      .def_ro("chunk_blocks", &DecodePlan::chunk_blocks)
      .def_ro("schedule_in_kernel", &DecodePlan::schedule_in_kernel)
      .def_ro("d_v", &DecodePlan::d_v)
      .def_prop_ro("max_length", [](const DecodePlan& p) { return p.lengths.max_length; })
      .def_prop_ro("workspace_bytes", [](const DecodePlan& p) { return p.workspace.total_bytes; })
      .def_prop_ro("workspace_regions", &workspace_regions, "name -> (offset, bytes)");

  // ---- planning ----
  m.def("query_device_info", &device_info_of, "device"_a);
  m.def("plan_dense_decode", &plan_dense, "shape"_a, "device"_a, "options"_a);
  m.def("plan_sparse_decode", &plan_sparse, "shape"_a, "device"_a, "options"_a);
  m.def("plan_sparse_prefill", &plan_prefill, "shape"_a, "device"_a, "options"_a);
  m.def("check_plan_matches", &check_plan_matches, "entry"_a, "given"_a, "expected"_a);
  m.def(
      "dense_decode_shape",
      [](const TensorRef& q, const TensorRef& kv_cache, const TensorRef& block_table, int d_v) {
        DenseDecodeShape shape;
        raise_if_error(
            openmla::python::dense_decode_shape("dense_decode", q, kv_cache, block_table, d_v, &shape));
        // Checked here, before the op allocates outputs from these sizes.
        raise_if_error(dense_decode_check_shape(shape, "dense_decode"));
        return shape;
      },
      "q"_a, "kv_cache"_a, "block_table"_a, "d_v"_a);
  m.def(
      "sparse_decode_shape",
      [](const TensorRef& q, const TensorRef& kv_cache, const TensorRef& indices, int d_v) {
        SparseDecodeShape shape;
        raise_if_error(
            openmla::python::sparse_decode_shape("sparse_decode", q, kv_cache, indices, d_v, &shape));
        // Checked here, before the op allocates outputs from these sizes.
        raise_if_error(sparse_decode_check_shape(shape, "sparse_decode"));
        return shape;
      },
      "q"_a, "kv_cache"_a, "indices"_a, "d_v"_a);

  // ---- runs (CPU tensors: the reference) ----
  m.def("dense_decode", &dense_decode, "q"_a, "kv_cache"_a, "block_table"_a, "seqlens"_a, "out"_a, "lse"_a,
        "q_scale"_a.none(), "kv_scale"_a.none(), "softmax_scale"_a, "causal"_a, "device_info"_a, "options"_a,
        "workspace"_a.none(), "stream"_a);
  m.def("sparse_decode", &sparse_decode, "q"_a, "kv_cache"_a, "indices"_a, "topk_length"_a.none(),
        "attn_sink"_a.none(), "out"_a, "lse"_a, "softmax_scale"_a, "device_info"_a, "options"_a,
        "workspace"_a.none(), "stream"_a);
  // ---- prepared calls: checked once, then run with new addresses ----
  nb::class_<DenseDecodeCall>(m, "DenseDecodeCall")
      .def_prop_ro("device", &DenseDecodeCall::device)
      .def_prop_ro("workspace_bytes", &DenseDecodeCall::workspace_bytes)
      .def(
          "run",
          [](const DenseDecodeCall& call, uint64_t q, uint64_t kv_cache, uint64_t block_table, uint64_t seqlens,
             uint64_t out, uint64_t lse, uint64_t q_scale, uint64_t kv_scale, uint64_t workspace,
             uint64_t workspace_bytes, uint64_t stream) {
            const DenseDecodeAddresses addresses{q, kv_cache, block_table, seqlens, out, lse, q_scale, kv_scale};
            run_released([&] { return call.run(addresses, workspace, workspace_bytes, stream); });
          },
          "q"_a, "kv_cache"_a, "block_table"_a, "seqlens"_a, "out"_a, "lse"_a, "q_scale"_a, "kv_scale"_a,
          "workspace"_a, "workspace_bytes"_a, "stream"_a)
      .def(
          "run_with_schedule",
          [](const DenseDecodeCall& call, uint64_t q, uint64_t kv_cache, uint64_t block_table, uint64_t seqlens,
             uint64_t out, uint64_t lse, uint64_t q_scale, uint64_t kv_scale, uint64_t workspace,
             uint64_t workspace_bytes, uint64_t stream, bool reuse, ScheduleRecord& record) {
            const DenseDecodeAddresses addresses{q, kv_cache, block_table, seqlens, out, lse, q_scale, kv_scale};
            run_released(
                [&] { return call.run_with_schedule(addresses, workspace, workspace_bytes, stream, reuse, &record); });
          },
          "q"_a, "kv_cache"_a, "block_table"_a, "seqlens"_a, "out"_a, "lse"_a, "q_scale"_a, "kv_scale"_a,
          "workspace"_a, "workspace_bytes"_a, "stream"_a, "reuse"_a, "record"_a);
  nb::class_<SparseDecodeCall>(m, "SparseDecodeCall")
      .def_prop_ro("device", &SparseDecodeCall::device)
      .def_prop_ro("workspace_bytes", &SparseDecodeCall::workspace_bytes)
      .def(
          "run",
          [](const SparseDecodeCall& call, uint64_t q, uint64_t kv_cache, uint64_t indices, uint64_t topk_length,
             uint64_t attn_sink, uint64_t out, uint64_t lse, uint64_t workspace, uint64_t workspace_bytes,
             uint64_t stream) {
            const SparseDecodeAddresses addresses{q, kv_cache, indices, topk_length, attn_sink, out, lse};
            run_released([&] { return call.run(addresses, workspace, workspace_bytes, stream); });
          },
          "q"_a, "kv_cache"_a, "indices"_a, "topk_length"_a, "attn_sink"_a, "out"_a, "lse"_a, "workspace"_a,
          "workspace_bytes"_a, "stream"_a)
      .def(
          "run_with_schedule",
          [](const SparseDecodeCall& call, uint64_t q, uint64_t kv_cache, uint64_t indices, uint64_t topk_length,
             uint64_t attn_sink, uint64_t out, uint64_t lse, uint64_t workspace, uint64_t workspace_bytes,
             uint64_t stream, bool reuse, ScheduleRecord& record) {
            const SparseDecodeAddresses addresses{q, kv_cache, indices, topk_length, attn_sink, out, lse};
            run_released(
                [&] { return call.run_with_schedule(addresses, workspace, workspace_bytes, stream, reuse, &record); });
          },
          "q"_a, "kv_cache"_a, "indices"_a, "topk_length"_a, "attn_sink"_a, "out"_a, "lse"_a, "workspace"_a,
          "workspace_bytes"_a, "stream"_a, "reuse"_a, "record"_a);
  // ---- schedule reuse (ScheduleUse in openmla/openmla.h): one record per workspace ----
  nb::class_<ScheduleRecord>(m, "ScheduleRecord")
      .def(nb::init<>())
      .def_ro("filled", &ScheduleRecord::filled)
      .def_ro("captured", &ScheduleRecord::captured)
      .def_ro("capture_id", &ScheduleRecord::capture_id);
  m.def(
      "stream_capture_id",
      [](uint64_t stream) {
        unsigned long long id = 0;
        raise_if_error(stream_capture_id(to_stream(stream), &id));
        return uint64_t(id);
      },
      "stream"_a, "The id of the CUDA graph capture `stream` is recording; 0 when it is not capturing.");
  m.def("prepare_dense_decode", &prepare_dense, "q"_a, "kv_cache"_a, "block_table"_a, "seqlens"_a, "out"_a,
        "lse"_a, "q_scale"_a.none(), "kv_scale"_a.none(), "softmax_scale"_a, "causal"_a, "device_info"_a,
        "options"_a, "workspace"_a.none());
  m.def("prepare_sparse_decode", &prepare_sparse, "q"_a, "kv_cache"_a, "indices"_a, "topk_length"_a.none(),
        "attn_sink"_a.none(), "out"_a, "lse"_a, "softmax_scale"_a, "device_info"_a, "options"_a,
        "workspace"_a.none());
  m.def("sparse_prefill_workspace_bytes", &sparse_prefill_workspace_bytes, "q"_a, "kv"_a, "indices"_a,
        "topk_length"_a.none(), "attn_sink"_a.none(), "out"_a, "max_logits"_a, "lse"_a, "softmax_scale"_a,
        "device_info"_a, "options"_a);
  m.def("sparse_prefill", &sparse_prefill, "q"_a, "kv"_a, "indices"_a, "topk_length"_a.none(),
        "attn_sink"_a.none(), "out"_a, "max_logits"_a, "lse"_a, "softmax_scale"_a, "device_info"_a, "options"_a,
        "workspace"_a.none(), "stream"_a);
}

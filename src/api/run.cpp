// run() entries: validate, rebuild the schedule on the GPU, launch the family's
// kernel, then the combine when anything can be split. Never allocates.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "api/run_checks.h"
#include "validate/build_options.h"
#include "validate/validate.h"
#include "kernels/common/combine/launch.h"
#include "kernels/common/schedule/launch.h"
#include "kernels/common/schedule/part_schedule.h"
#include "kernels/common/workspace.h"
#include "kernels/sm90/decode_dense/launch.h"
#include "kernels/sm90/decode_sparse_fp8/launch.h"
#include "kernels/sm90/prefill_sparse/launch.h"
#include "openmla/openmla.h"
#include "plan/plan_identity.h"

namespace openmla {
namespace {

// Where a decode family's combine writes: its outputs, seen as [batch, s_q, h_q, d_v].
template <class DecodeParams>
CombineParams decode_combine_outputs(const DecodeParams& params, DType out_dtype, const float* attn_sink) {
  CombineParams combine;
  combine.batch = params.shape.batch;
  combine.s_q = params.shape.s_q;
  combine.h_q = params.shape.h_q;
  combine.attn_sink = attn_sink;  // applied by the combine to split items only
  combine.out = params.out;
  combine.out_dtype = out_dtype;
  combine.out_stride_b = params.out_stride_b;
  combine.out_stride_s = params.out_stride_s;
  combine.out_stride_h = params.out_stride_h;
  combine.lse = params.lse;
  combine.lse_stride_b = params.lse_stride_b;
  combine.lse_stride_h = params.lse_stride_h;
  return combine;
}

// The steps every split-KV family shares: rebuild the schedule from the
// device-resident lengths (in its own kernel, or inside the attention kernel
// when plan.schedule_in_kernel), run the family's attention kernel, then the
// combine when the plan can split (a plan without partial slots launches no combine).
// `combine`: the family's outputs (decode_combine_outputs); the rest is filled here.
// `launch_attention(views, schedule)`: where the attention grid finds its parts.
// `build_schedule` false: the workspace already holds this plan's schedule for
// these lengths (ScheduleUse::kReuse, checked by the caller).
// NOTE: the attention kernel is then the call's first grid, launched as a
// programmatic dependent of whatever the stream ran before; that is safe
// because every attention kernel reads nothing before griddepcontrol.wait.
template <class LaunchAttention>
Status run_split_kv(const DecodePlan& plan, void* workspace, const int32_t* device_lengths, CombineParams combine,
                    const LaunchAttention& launch_attention, cudaStream_t stream, bool build_schedule = true) {
  const kernels::DecodeWorkspace views = kernels::decode_workspace(plan, workspace);
  if (build_schedule && !plan.schedule_in_kernel) {
    ItemLengths lengths = plan.lengths;
    lengths.lengths = device_lengths;
    OPENMLA_RETURN_IF_ERROR(kernels::schedule::launch(plan, lengths, views, stream));
  }
  OPENMLA_RETURN_IF_ERROR(
      launch_attention(views, kernels::part_schedule(plan, views.schedule, device_lengths, build_schedule)));
  if (plan.num_slots == 0) return Status::ok();

  combine.d_v = plan.d_v;
  combine.q_tokens_per_item = plan.q_tokens_per_item;
  // The schedule numbers its entries densely and every split item has its
  // own entry, so at most min(parts, items) are real: the combine grid needs
  // no more CTAs than that (b = 1: one entry, not one per part).
  combine.num_entries = std::min(plan.num_parts, plan.num_items);
  combine.num_slots = plan.num_slots;
  combine.entries = views.schedule.combine;
  combine.partial_o = views.partial_o;
  combine.partial_lse = views.partial_lse;
  combine.partial_max = views.partial_max;
  return kernels::combine::launch(combine, plan.rows_per_item, stream);
}

// The capture sequence `stream` is recording, 0 when none (a failed query leaves no error behind).
Status stream_capture(const char* entry, cudaStream_t stream, unsigned long long* capture_id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaError_t error = cudaStreamGetCaptureInfo(stream, &status, &id);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // the error is reported here, not by the next launch check
    return Status::cuda_error(std::string(entry) + ": cudaStreamGetCaptureInfo failed: " + cudaGetErrorString(error));
  }
  // An invalidated capture is still a capture: nothing launched now runs eagerly.
  *capture_id = status == cudaStreamCaptureStatusNone ? 0 : (id != 0 ? id : ~0ull);
  return Status::ok();
}

// After a run that launched the schedule kernel: what the workspace now holds.
// Under capture the kernel was recorded, not run: replays rebuild the schedule, so
// runs captured later in the same sequence may reuse it and eager runs never again.
void record_schedule(ScheduleRecord* record, const DecodePlan& plan, const void* workspace, const void* lengths,
                     cudaStream_t stream, unsigned long long capture_id) {
  if (capture_id != 0) record->captured = true;
  record->plan_fingerprint = plan.fingerprint;
  record->workspace = workspace;
  record->lengths = lengths;
  record->stream = stream;
  record->filled = !record->captured;
  record->capture_id = capture_id;
}

// Before a run with a ScheduleRecord: a reuse is checked (the record before the
// stream: a CPU test reaches these checks without a device), the stream's capture
// sequence is read into `capture_id`, and a build clears the record until it has
// launched (record_schedule then fills it).
Status begin_schedule_use(const char* entry, ScheduleUse use, ScheduleRecord* record, const DecodePlan& plan,
                          const void* workspace, const void* lengths, const char* lengths_name, cudaStream_t stream,
                          unsigned long long* capture_id) {
  *capture_id = 0;
  const bool reuse = use == ScheduleUse::kReuse;
  if (reuse) {
    OPENMLA_RETURN_IF_ERROR(
        detail::check_schedule_reuse(entry, record, plan, workspace, lengths, lengths_name, stream));
  }
  if (record == nullptr) return Status::ok();
  OPENMLA_RETURN_IF_ERROR(stream_capture(entry, stream, capture_id));
  if (reuse) return detail::check_reuse_capture(entry, *record, *capture_id);
  record->filled = false;
  record->capture_id = 0;
  return Status::ok();
}

// A decode run with a ScheduleUse: begin_schedule_use, then `run(build_schedule)`
// (the family's launches), then, after a build, what the workspace now holds.
template <class Run>
Status run_scheduled(const char* entry, ScheduleUse use, ScheduleRecord* record, const DecodePlan& plan,
                     const void* workspace, const int32_t* lengths, const char* lengths_name, cudaStream_t stream,
                     const Run& run) {
  unsigned long long capture_id = 0;
  OPENMLA_RETURN_IF_ERROR(
      begin_schedule_use(entry, use, record, plan, workspace, lengths, lengths_name, stream, &capture_id));
  const bool build_schedule = use != ScheduleUse::kReuse;
  OPENMLA_RETURN_IF_ERROR(run(build_schedule));
  if (build_schedule && record != nullptr) record_schedule(record, plan, workspace, lengths, stream, capture_id);
  return Status::ok();
}

// Sparse prefill in FP8-cache mode as the sparse decode call the FP8 kernels run:
// one request per query token (batch = s_q, s_q = 1), the same index rows, lengths,
// sink and outputs ([s_q, h_q, 512] out, [s_q, h_q] LSE).
SparseDecodeParams decode_view(const SparsePrefillParams& params) {
  const SparsePrefillShape& s = params.shape;
  SparseDecodeParams d;
  d.shape.batch = s.s_q;
  d.shape.s_q = 1;
  d.shape.h_q = s.h_q;
  d.shape.d_qk = s.d_qk;
  d.shape.d_v = s.d_v;
  d.shape.topk = s.topk;
  d.shape.page_size = s.page_size;
  d.shape.num_pages = s.num_pages;
  d.q = params.q;
  d.q_stride_b = params.q_stride_s, d.q_stride_s = params.q_stride_s, d.q_stride_h = params.q_stride_h;
  d.kv_cache = params.kv_cache;
  d.kv_stride_page_bytes = params.kv_stride_page_bytes;
  d.indices = params.indices;
  d.indices_stride_b = params.indices_stride_s, d.indices_stride_s = params.indices_stride_s;
  d.topk_length = params.topk_length;
  d.attn_sink = params.attn_sink;
  d.out = params.out;
  d.out_stride_b = params.out_stride_s, d.out_stride_s = params.out_stride_s, d.out_stride_h = params.out_stride_h;
  d.lse = params.lse;
  d.lse_stride_b = s.h_q, d.lse_stride_h = 1;
  d.softmax_scale = params.softmax_scale;
  return d;
}

}  // namespace

Status query_device_info(int device, DeviceInfo* info) {
  if (info == nullptr) return Status::invalid_argument("query_device_info: argument 'info' is null: expected a DeviceInfo*");
  cudaDeviceProp prop{};
  const cudaError_t error = cudaGetDeviceProperties(&prop, device);
  if (error != cudaSuccess) {
    return Status::cuda_error("query_device_info: cudaGetDeviceProperties(" + std::to_string(device) +
                              ") failed: " + cudaGetErrorString(error));
  }
  info->num_sms = prop.multiProcessorCount;
  info->max_smem_per_block = int(prop.sharedMemPerBlockOptin);
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  return Status::ok();
}

Status stream_capture_id(cudaStream_t stream, unsigned long long* capture_id) {
  if (capture_id == nullptr) {
    return Status::invalid_argument("stream_capture_id: argument 'capture_id' is null: expected an unsigned long long*");
  }
  return stream_capture("stream_capture_id", stream, capture_id);
}

Status dense_decode_run(const DenseDecodeParams& params, const DecodePlan& plan, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  return dense_decode_run(params, plan, workspace, workspace_bytes, stream, ScheduleUse::kBuild, nullptr);
}

Status dense_decode_run(const DenseDecodeParams& params, const DecodePlan& plan, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, ScheduleUse use, ScheduleRecord* record) {
  constexpr const char* kEntry = "dense_decode_run";
  OPENMLA_RETURN_IF_ERROR(detail::check_dense_decode_run(kEntry, params, plan, workspace, workspace_bytes));
#if OPENMLA_ENABLE_DENSE_DECODE  // else the check above refused (validate/build_options.h)
  return run_scheduled(kEntry, use, record, plan, workspace, params.seqlens, "seqlens", stream, [&](bool build) {
    if (plan.kernel == DecodeKernel::kDenseColumnSplitCluster) {
      // One kernel: each request's clusters split its blocks and merge in shared memory (no schedule).
      return kernels::decode_dense::launch(params, plan, kernels::read_parts(nullptr), nullptr, nullptr, stream);
    }
    return run_split_kv(
        plan, workspace, params.seqlens,
        decode_combine_outputs(params, params.shape.out_dtype, /*attn_sink=*/nullptr),
        [&](const kernels::DecodeWorkspace& views, const kernels::PartSchedule& schedule) {
          return kernels::decode_dense::launch(params, plan, schedule, views.partial_o, views.partial_lse, stream);
        },
        stream, build);
  });
#else
  (void)plan, (void)workspace, (void)workspace_bytes, (void)stream, (void)use, (void)record;
  return Status::internal("dense_decode_run: unreachable (dense decode not built)");
#endif
}

Status combine_run(const CombineParams& params, cudaStream_t stream) {
  OPENMLA_RETURN_IF_ERROR(detail::validate_combine("combine_run", params));
  return kernels::combine::launch(params, params.q_tokens_per_item * params.h_q, stream);
}

Status sparse_decode_run(const SparseDecodeParams& params, const DecodePlan& plan, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  return sparse_decode_run(params, plan, workspace, workspace_bytes, stream, ScheduleUse::kBuild, nullptr);
}

Status sparse_decode_run(const SparseDecodeParams& params, const DecodePlan& plan, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream, ScheduleUse use, ScheduleRecord* record) {
  constexpr const char* kEntry = "sparse_decode_run";
  OPENMLA_RETURN_IF_ERROR(detail::check_sparse_decode_run(kEntry, params, plan, workspace, workspace_bytes));
#if OPENMLA_ENABLE_SPARSE_DECODE  // else the check above refused (validate/build_options.h)
  // topk_length is per request (null: every item has topk positions); split
  // items get the attention sink from the combine.
  return run_scheduled(kEntry, use, record, plan, workspace, params.topk_length, "topk_length", stream,
                       [&](bool build) {
                         return run_split_kv(
                             plan, workspace, params.topk_length,
                             decode_combine_outputs(params, DType::kBF16, params.attn_sink),
                             [&](const kernels::DecodeWorkspace& views, const kernels::PartSchedule& schedule) {
                               return kernels::decode_sparse_fp8::launch(params, plan, schedule, views.partial_o,
                                                                         views.partial_lse, stream);
                             },
                             stream, build);
                       });
#else
  (void)plan, (void)workspace, (void)workspace_bytes, (void)stream, (void)use, (void)record;
  return Status::internal("sparse_decode_run: unreachable (sparse decode not built)");
#endif
}

Status sparse_prefill_run(const SparsePrefillParams& params, const DecodePlan& plan, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream) {
  OPENMLA_RETURN_IF_ERROR(
      detail::check_sparse_prefill_run("sparse_prefill_run", params, plan, workspace, workspace_bytes));
#if OPENMLA_ENABLE_SPARSE_PREFILL  // else the check above refused (validate/build_options.h)
  // The combine sees the outputs as [batch = s_q, s_q = 1, h_q, d_v]: out [s_q, h_q, d_v],
  // lse and max_logits [s_q, h_q].
  const SparsePrefillShape& shape = params.shape;
  CombineParams combine;
  combine.batch = shape.s_q;
  combine.s_q = 1;
  combine.h_q = shape.h_q;
  combine.attn_sink = params.attn_sink;  // split tokens get the sink in the combine
  combine.out = params.out;
  combine.out_dtype = DType::kBF16;
  combine.out_stride_b = params.out_stride_s;
  combine.out_stride_s = 0;
  combine.out_stride_h = params.out_stride_h;
  combine.lse = params.lse;
  combine.lse_stride_b = shape.h_q;
  combine.lse_stride_h = 1;
  combine.max_logits = params.max_logits;
  combine.max_logits_stride_b = shape.h_q;
  combine.max_logits_stride_h = 1;
  return run_split_kv(
      plan, workspace, params.topk_length, combine,
      [&](const kernels::DecodeWorkspace& views, const kernels::PartSchedule& schedule) {
        if (shape.fp8_kv_cache) {
#if OPENMLA_ENABLE_SPARSE_DECODE  // else check_sparse_prefill_gpu refused FP8-cache mode
          return kernels::decode_sparse_fp8::launch(decode_view(params), plan, schedule, views.partial_o,
                                                    views.partial_lse, stream, params.max_logits, views.partial_max);
#endif
        }
        return kernels::prefill_sparse::launch(params, plan, schedule.parts, views.partial_o, views.partial_lse,
                                               views.partial_max, stream);
      },
      stream);
#else
  (void)plan, (void)workspace, (void)workspace_bytes, (void)stream;
  return Status::internal("sparse_prefill_run: unreachable (sparse prefill not built)");
#endif
}

}  // namespace openmla

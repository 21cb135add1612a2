// Host side of the sm90 sparse FP8 decode kernels: params -> KernelParams, and
// the one switch over the plan's kernel (and, for heads-on-N, the one place
// the head count becomes a template parameter).
#include "kernels/sm90/decode_sparse_fp8/launch.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/sm90/decode_sparse_fp8/config.h"

namespace openmla::kernels::decode_sparse_fp8 {

namespace {
constexpr float kLog2e = 1.4426950408889634f;
}  // namespace

Status launch(const SparseDecodeParams& params, const DecodePlan& plan, const PartSchedule& schedule,
              float* partial_o, float* partial_lse, cudaStream_t stream, float* max_logits, float* partial_max) {
  const SparseDecodeShape& shape = params.shape;
  const bool heads_on_m = shape.h_q == 64 || shape.h_q == 128;
  const bool heads_on_n = shape.h_q == 8 || shape.h_q == 16 || shape.h_q == 32;
  if (!(heads_on_m || heads_on_n) || plan.num_q_groups != sparse_q_groups(shape.h_q)) {
    return Status::not_supported("decode_sparse_fp8: h_q = " + std::to_string(shape.h_q) +
                                 " has no kernel; supported: 8, 16, 32, 64, 128");
  }

  KernelParams kp{};
  kp.q = static_cast<const uint16_t*>(params.q);
  kp.q_stride_b = params.q_stride_b;
  kp.q_stride_s = params.q_stride_s;
  kp.q_stride_h = params.q_stride_h;
  kp.kv_cache = params.kv_cache;
  kp.kv_stride_page = params.kv_stride_page_bytes;
  kp.page_size = shape.page_size;
  kp.num_tokens = int(int64_t(shape.num_pages) * shape.page_size);  // validated to fit int32
  kp.indices = params.indices;
  kp.indices_stride_b = params.indices_stride_b;
  kp.indices_stride_s = params.indices_stride_s;
  kp.topk_length = params.topk_length;
  kp.topk = shape.topk;
  kp.attn_sink = params.attn_sink;
  kp.out = static_cast<uint16_t*>(params.out);
  kp.out_stride_b = params.out_stride_b;
  kp.out_stride_s = params.out_stride_s;
  kp.out_stride_h = params.out_stride_h;
  kp.lse = params.lse;
  kp.lse_stride_b = params.lse_stride_b;
  kp.lse_stride_h = params.lse_stride_h;
  kp.partial_o = partial_o;
  kp.partial_lse = partial_lse;
  kp.schedule = schedule;
  kp.max_logits = max_logits;
  kp.partial_max = partial_max;
  kp.scale_log2 = params.softmax_scale * kLog2e;
  kp.s_q = shape.s_q;
  kp.h_q = shape.h_q;

  // One CTA per (q-group, part).
  const dim3 grid(unsigned(plan.num_q_groups), unsigned(plan.num_parts));
  switch (plan.kernel) {
    case DecodeKernel::kSparseHeadsOnN:
      switch (shape.h_q) {
        case 8: return launch_heads_on_n_kernel<8>(kp, grid, stream);
        case 16: return launch_heads_on_n_kernel<16>(kp, grid, stream);
        case 32: return launch_heads_on_n_kernel<32>(kp, grid, stream);
        default: break;
      }
      break;
    case DecodeKernel::kSparseHeadsOnM:
      if (shape.h_q != kHeadsOnMHeadsPerCta) break;
      return launch_heads_on_m_kernel(kp, grid, stream);
    case DecodeKernel::kSparseHeadsOnMCtaPair:
      if (shape.h_q != 2 * kHeadsOnMHeadsPerCta) break;  // one CTA pair per part
      return launch_heads_on_m_cta_pair_kernel(kp, grid, stream);
    default: break;
  }
  return Status::invalid_argument(std::string(max_logits != nullptr ? "sparse_prefill_run" : "sparse_decode_run") +
                                  ": argument 'plan' names kernel " +
                                  std::string(decode_kernel_name(plan.kernel)) + ", which does not run h_q = " +
                                  std::to_string(shape.h_q) + ": expected a plan from plan_sparse_decode");
}

}  // namespace openmla::kernels::decode_sparse_fp8

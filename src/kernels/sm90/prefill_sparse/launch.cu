// Host side of the sm90 sparse prefill kernel: params -> KernelParams and the
// one switch over the plan's kernel (and d_qk, the one template parameter).
#include "kernels/sm90/prefill_sparse/launch.h"

#include <string>

#include "kernels/sm90/prefill_sparse/config.h"

namespace openmla::kernels::prefill_sparse {

namespace {
constexpr float kLog2e = 1.4426950408889634f;
}  // namespace

Status launch(const SparsePrefillParams& params, const DecodePlan& plan, const PartWork* parts, float* partial_o,
              float* partial_lse, float* partial_max, cudaStream_t stream) {
  const SparsePrefillShape& shape = params.shape;
  if (plan.kernel != DecodeKernel::kSparsePrefillAlternateBlocks ||
      plan.num_q_groups != sparse_prefill_q_groups(shape.h_q)) {
    return Status::invalid_argument("sparse_prefill_run: argument 'plan' names kernel " +
                                    std::string(decode_kernel_name(plan.kernel)) + " with " +
                                    std::to_string(plan.num_q_groups) +
                                    " q-groups: expected a plan from plan_sparse_prefill for h_q = " +
                                    std::to_string(shape.h_q));
  }
  KernelParams kp{};
  kp.q = static_cast<const uint16_t*>(params.q);
  kp.q_stride_s = params.q_stride_s;
  kp.q_stride_h = params.q_stride_h;
  kp.kv = static_cast<const uint16_t*>(params.kv);
  kp.kv_stride_s = params.kv_stride_s;
  kp.s_kv = shape.s_kv;
  kp.indices = params.indices;
  kp.indices_stride_s = params.indices_stride_s;
  kp.topk_length = params.topk_length;
  kp.topk = shape.topk;
  kp.attn_sink = params.attn_sink;
  kp.out = static_cast<uint16_t*>(params.out);
  kp.out_stride_s = params.out_stride_s;
  kp.out_stride_h = params.out_stride_h;
  kp.max_logits = params.max_logits;
  kp.lse = params.lse;
  kp.partial_o = partial_o;
  kp.partial_lse = partial_lse;
  kp.partial_max = partial_max;
  kp.parts = parts;
  kp.scale_log2 = params.softmax_scale * kLog2e;
  kp.h_q = shape.h_q;

  const dim3 grid(unsigned(plan.num_q_groups), unsigned(plan.num_parts));
  return shape.d_qk == kHeadDimQK ? launch_alternate_blocks_d576(kp, grid, stream)
                                  : launch_alternate_blocks_d512(kp, grid, stream);
}

}  // namespace openmla::kernels::prefill_sparse

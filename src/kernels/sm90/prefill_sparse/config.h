// Constants, warp roles and the kernel's parameter block of the sm90 sparse
// prefill kernel (DecodeKernel::kSparsePrefillAlternateBlocks). Host-and-device; no
// CuTe here so launch.cu stays light. Design: docs/kernels/prefill_sparse.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/sm90/heads_on_m/config.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla::kernels::prefill_sparse {

// ---- tiles ------------------------------------------------------------------------------
// The shared heads-on-M tile (heads_on_m/): 64 heads of one query token on M,
// 64 gathered KV rows a block, two block buffers.
inline constexpr int kHeadsPerCta = heads_on_m::BLOCK_M;  // 64
inline constexpr int BLOCK_N = heads_on_m::BLOCK_N;       // KV rows (index positions) per block
static_assert(kHeadsPerCta == kSparseHeadsOnMHeadsPerCta, "the planner's q-groups are the kernel's CTAs");

// ---- warp roles ---------------------------------------------------------------------------
// warpgroups 0, 1: the consumers, taking alternate blocks of a token.
// warpgroup 2: the gather. Warp w owns rows [16 w, 16 w + 16) of every block
//              (indices -> 16-byte cp.async of the BF16 rows) and copies a
//              quarter of Q per token.
inline constexpr int kWarpSize = 32;
inline constexpr int kWarpgroupThreads = heads_on_m::kWarpgroupThreads;
inline constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / kWarpSize;
inline constexpr int kRowsPerProducerWarp = BLOCK_N / kWarpsPerWarpgroup;  // 16
// Registers per thread at launch (384 threads, one CTA per SM); setmaxnreg
// after the role split stays within 3 x this.
inline constexpr int kEntryRegs = 168;

// ---- kernel parameters -------------------------------------------------------------------
struct KernelParams {
  const uint16_t* q;  // [s_q, h_q, d_qk] bf16 bits
  int64_t q_stride_s, q_stride_h;

  const uint16_t* kv;  // [s_kv, d_qk] bf16 bits; V = columns [0, 512)
  int64_t kv_stride_s;
  int s_kv;

  const int32_t* indices;  // [s_q, topk]; -1 or >= s_kv: skipped, never read
  int64_t indices_stride_s;
  const int32_t* topk_length;  // [s_q] or null
  int topk;

  const float* attn_sink;  // [h_q] or null; applied here to tokens that are not split

  uint16_t* out;  // [s_q, h_q, 512] bf16 bits
  int64_t out_stride_s, out_stride_h;
  float* max_logits;  // [s_q, h_q]
  float* lse;         // [s_q, h_q]

  float* partial_o;       // [num_slots, h_q, 512]; null when nothing splits
  float* partial_lse;     // [num_slots, h_q]
  float* partial_max;     // [num_slots, h_q]
  const PartWork* parts;  // [num_parts]

  float scale_log2;  // softmax_scale * log2(e)
  int h_q;
};

// Grid (q-groups, parts); one instantiation per d_qk (instantiations/).
Status launch_alternate_blocks_d576(const KernelParams& params, dim3 grid, cudaStream_t stream);
Status launch_alternate_blocks_d512(const KernelParams& params, dim3 grid, cudaStream_t stream);

}  // namespace openmla::kernels::prefill_sparse

// Tile constants, warp roles and the kernel's parameter block for the sm90
// sparse FP8 decode kernel (DeepSeek Sparse Attention over the 656-byte
// cache). Host-and-device; no CuTe here so launch.cu stays light.
// Design: docs/kernels/decode_sparse_fp8.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/schedule/part_schedule.h"
#include "kernels/sm90/heads_on_m/config.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla::kernels::decode_sparse_fp8 {

// ---- tiles ------------------------------------------------------------------------------
// Tokens on M, heads on N: S^T = K.Q^T is (64 tokens) x (N heads) and
// O^T = V^T.P^T is (512 dims) x (N heads), N = heads per CTA.
inline constexpr int BLOCK_N = kKvBlockTokens;  // KV tokens (index positions) per stage
inline constexpr int HEAD_DIM_QK = kHeadDimQK;  // 576
inline constexpr int HEAD_DIM_V = kHeadDimV;    // 512
inline constexpr int kChunkCols = 64;           // one 128-byte swizzle row of bf16
inline constexpr int kNumStages = 2;            // bf16 K/V ring depth (72 KB a stage)
inline constexpr int kIndexRingBlocks = 8;      // heads-on-N producers: blocks of indices in the ring
static_assert(BLOCK_N == 64, "the schedule's KV block is 64 index positions");

// The heads-on-N kernel (this file's tiles; heads_on_n_kernel.cuh) runs
// h_q = 8, 16, 32 in one CTA per part; h_q = 64 and 128 run in the heads-on-M
// kernels (heads_on_m_kernel.cuh, 64 heads per CTA on M).
constexpr bool kernel_supported(int heads) { return heads == 8 || heads == 16 || heads == 32; }
static_assert(kernel_supported(kSparseHeadsOnNMaxHeads) && !kernel_supported(2 * kSparseHeadsOnNMaxHeads),
              "the planner's heads-on-N limit is this kernel's largest head count");

// ---- warp roles ---------------------------------------------------------------------------
// warpgroup 0:    consumer. S^T = K.Q^T, masked online softmax over tokens,
//                 P^T -> smem, O^T += V^T.P^T (the whole 512 x N).
// warpgroups 1-2: producers (8 warps). Warp w owns token rows [8 w, 8 w + 8)
//                 of every stage: their indices, validity, codes and RoPE.
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kNumWarpgroups = 3;
inline constexpr int kNumThreads = kNumWarpgroups * kWarpgroupThreads;
inline constexpr int kWarpSize = 32;
inline constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / kWarpSize;
inline constexpr int kProducerThreads = 2 * kWarpgroupThreads;
inline constexpr int kNumProducerWarps = kProducerThreads / kWarpSize;  // 8
inline constexpr int kRowsPerProducerWarp = BLOCK_N / kNumProducerWarps;  // 8
// setmaxnreg after the role split (per thread). NOTE: setmaxnreg.inc only
// takes registers that a setmaxnreg.dec of the same CTA released, so the sum
// must stay within the entry allocation (168 x 3, ptxas's cap for 384
// threads at one CTA per SM).
inline constexpr int kEntryRegs = 168;
inline constexpr int kConsumerRegs = 232;  // O^T 512 x 32 fp32 is 128 per thread
inline constexpr int kProducerRegs = 136;
static_assert(kConsumerRegs + 2 * kProducerRegs <= kNumWarpgroups * kEntryRegs,
              "register reconfiguration must be balanced");

// Named barriers: kernels/common/named_barriers.h.

// ---- heads-on-M kernels (h_q = 64, 128) ----------------------------------------------------
// The shared heads-on-M tile (heads_on_m/): 64 heads of one query token on M.
inline constexpr int kHeadsOnMHeadsPerCta = heads_on_m::BLOCK_M;  // 64
static_assert(kHeadsOnMHeadsPerCta == kSparseHeadsOnMHeadsPerCta, "the planner's q-groups are the kernel's CTAs");

// ---- kernel parameters -------------------------------------------------------------------
struct KernelParams {
  const uint16_t* q;  // [batch, s_q, h_q, 576] bf16 bits
  int64_t q_stride_b, q_stride_s, q_stride_h;

  const uint8_t* kv_cache;  // [num_pages, page_size, 1, 656] bytes
  int64_t kv_stride_page;   // bytes
  int page_size;
  int num_tokens;           // num_pages * page_size (validated to fit int32)

  const int32_t* indices;  // [batch, s_q, topk]
  int64_t indices_stride_b, indices_stride_s;
  const int32_t* topk_length;  // [batch] or null
  int topk;

  const float* attn_sink;  // [h_q] or null; applied here to items that are not split

  uint16_t* out;  // [batch, s_q, h_q, 512] bf16 bits
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;  // [batch, h_q, s_q]
  int64_t lse_stride_b, lse_stride_h;

  float* partial_o;       // [num_slots, h_q, 512]; null when nothing splits
  float* partial_lse;     // [num_slots, h_q]
  PartSchedule schedule;  // where each CTA finds its part (read, or built in the kernel)
  // Sparse prefill over the FP8 cache (these kernels with batch = query tokens, s_q = 1):
  // the row max of the scaled logits. Null for sparse decode.
  float* max_logits;   // [batch * s_q, h_q]
  float* partial_max;  // [num_slots, h_q]

  float scale_log2;  // softmax_scale * log2(e)
  int s_q;
  int h_q;
};

// DecodeKernel::kSparseHeadsOnN: one instantiation per heads per CTA,
// instantiations/heads_on_n_<heads>.cu.
template <int kHeadsPerCta>
Status launch_heads_on_n_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream);
// DecodeKernel::kSparseHeadsOnM (h_q = 64), grid (1, parts): instantiations/heads_on_m.cu.
Status launch_heads_on_m_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream);
// DecodeKernel::kSparseHeadsOnMCtaPair (h_q = 128), grid (2, parts) in clusters of 2:
// instantiations/heads_on_m_cta_pair.cu.
Status launch_heads_on_m_cta_pair_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream);

}  // namespace openmla::kernels::decode_sparse_fp8

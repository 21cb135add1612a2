// Tile constants, warp roles and the kernel's parameter block for the sm90
// sparse FP8 decode kernel (DeepSeek Sparse Attention over the 656-byte
// cache). Host-and-device; no CuTe here so launch.cu stays light.
// Design: docs/kernels/decode_sparse_fp8.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

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
inline constexpr int HEAD_DIM_V_HALF = HEAD_DIM_V / 2;  // O^T rows per consumer warpgroup
inline constexpr int kMaxHeadsPerCta = 64;      // one q-group of the plan
inline constexpr int kChunkCols = 64;           // one 128-byte swizzle row of bf16
inline constexpr int kNumStages = 2;            // bf16 K/V ring depth (72 KB a stage)
static_assert(BLOCK_N == 64, "the schedule's KV block is 64 index positions");

constexpr bool heads_per_cta_supported(int heads) {
  return heads == 8 || heads == 16 || heads == 32 || heads == 64;
}

// ---- warp roles ---------------------------------------------------------------------------
// warpgroup 0: producer. Each warp owns 16 token rows of every stage: it loads
//              the indices, prefetches the 656-byte tokens into L2, dequantises
//              the FP8 latent part into the bf16 stage and cp.asyncs the RoPE
//              part; all 128 threads gather Q once per item.
// warpgroup 1: S^T = K.Q^T, masked online softmax over tokens, P^T -> smem,
//              O^T[0:256) += V^T.P^T
// warpgroup 2: O^T[256:512) += V^T.P^T with P^T and the column scales from smem
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kNumWarpgroups = 3;
inline constexpr int kNumThreads = kNumWarpgroups * kWarpgroupThreads;
inline constexpr int kWarpSize = 32;
inline constexpr int kWarpsPerWarpgroup = kWarpgroupThreads / kWarpSize;
inline constexpr int kTokensPerProducerWarp = BLOCK_N / kWarpsPerWarpgroup;  // 16
inline constexpr int kTokensInFlight = 8;  // per-warp register lookahead of token loads
static_assert(kTokensPerProducerWarp % kTokensInFlight == 0, "buffer slots must be static");
// setmaxnreg after the role split (per thread), by heads per CTA. NOTE:
// setmaxnreg.inc only takes registers that a setmaxnreg.dec of the same CTA
// released, so the three must sum to at most the entry allocation (168 x 3,
// ptxas's cap for 384 threads at one CTA per SM), not 65536 / 128: more
// blocks the increasing warpgroup forever.
inline constexpr int kEntryRegs = 168;
struct RegisterSplit {
  int producer;
  int softmax;  // WG1: S^T (N / 2) + O^T half (2 N) + softmax state
  int pv;       // WG2: O^T half (2 N)
};
constexpr RegisterSplit register_split(int heads) {
  return heads == kMaxHeadsPerCta ? RegisterSplit{96, 248, 160} : RegisterSplit{152, 200, 152};
}
static_assert(register_split(64).producer + register_split(64).softmax + register_split(64).pv <=
                  kNumWarpgroups * kEntryRegs &&
              register_split(32).producer + register_split(32).softmax + register_split(32).pv <=
                  kNumWarpgroups * kEntryRegs,
              "register reconfiguration must be balanced");

// Named barriers (0 is __syncthreads).
inline constexpr int kBarrierPFull = 1;     // P^T + column scales published (WG1 + WG2 sync)
inline constexpr int kBarrierPEmpty = 2;    // WG2 done reading P^T (WG2 arrive, WG1 sync)
inline constexpr int kBarrierSoftmaxWg = 3; // cross-warp reductions inside WG1
inline constexpr int kBarrierPThreads = 2 * kWarpgroupThreads;

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
  const PartWork* parts;  // [num_parts]

  float scale_log2;  // softmax_scale * log2(e)
  int s_q;
  int h_q;
};

// One instantiation per heads-per-CTA: instantiations/heads_<N>.cu.
template <int kHeadsPerCta>
Status launch_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream);

}  // namespace openmla::kernels::decode_sparse_fp8

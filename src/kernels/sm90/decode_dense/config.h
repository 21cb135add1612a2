// Tile constants, warp roles and the kernels' parameter block for the sm90
// dense decode kernels (BF16/FP16 paged KV). Host-and-device; no CuTe here so
// launch.cu stays light. Design: docs/kernels/decode_dense.md.
#pragma once

#include <cuda.h>  // CUtensorMap (header only; the driver entry is fetched at run time)
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/schedule/part_schedule.h"
#include "kernels/sm90/heads_on_m/config.h"
#include "openmla/capabilities.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla::kernels::decode_dense {

// ---- tiles --------------------------------------------------------------------------
// The heads-on-M tile's (heads_on_m/config.h): 64 packed query rows per CTA,
// 64-token K/V stages, two consumer warpgroups of 256 O columns each.
using heads_on_m::BLOCK_M;
using heads_on_m::BLOCK_N;
using heads_on_m::HEAD_DIM_V;
using heads_on_m::HEAD_DIM_V_HALF;
using heads_on_m::kChunkCols;
inline constexpr int kNumStages = 2;  // K/V ring depth (72 KB a stage at d_qk 576)

// ---- warp roles --------------------------------------------------------------------
// warpgroup 0: producer. warp 0 issues the K/V TMA loads (all lanes); warps
//              1-3 gather Q rows with cp.async (one tile per item).
// warpgroup 1: S = Q.K^T, online softmax, O[:, 0:256) += P.V (P in registers), P -> smem (for WG2)
// warpgroup 2: O[:, 256:512) += P.V with P from smem
// Named barriers: kernels/common/named_barriers.h.
using heads_on_m::kNumThreads;
using heads_on_m::kNumWarpgroups;
using heads_on_m::kWarpgroupThreads;
inline constexpr int kQLoadWarps = 3;
inline constexpr int kQLoadThreads = kQLoadWarps * 32;
inline constexpr int kProducerRegs = 40;   // setmaxnreg after the role split
inline constexpr int kConsumerRegs = 232;  // 128 * 40 + 256 * 232 <= 65536
static_assert(kWarpgroupThreads * kProducerRegs + 2 * kWarpgroupThreads * kConsumerRegs <= 65536);

// ---- paged KV ------------------------------------------------------------------------
// A 64-token block is loaded as 64 / box_tokens TMA boxes per 64-column chunk,
// box_tokens = min(page_size, 64); box starts stay on 1024-byte swizzle atoms.
inline constexpr int kMinBoxTokens = 8;
inline constexpr int kMaxBoxesPerBlock = BLOCK_N / kMinBoxTokens;

// The page sizes this box scheme loads are the capability table's
// (openmla/capabilities.h): 8, 16, 32 or a multiple of 64.
static_assert(dense_decode_gpu_page_size(kMinBoxTokens) && !dense_decode_gpu_page_size(kMinBoxTokens / 2) &&
              dense_decode_gpu_page_size(BLOCK_N) && !dense_decode_gpu_page_size(BLOCK_N + kMinBoxTokens),
              "box tokens = min(page_size, 64) must tile a block on swizzle atoms");
static_assert(BLOCK_M == kQueryRowsPerTile, "the planner's query tiles are the kernel's M tiles");

// ---- kernel parameters -----------------------------------------------------------------
// Everything the kernel reads, passed by value as a __grid_constant__ so the
// TMA descriptor lives in parameter space.
struct KernelParams {
  CUtensorMap tma_kv;  // 4-D (d_qk, h_kv, page_size, num_pages), box (64, 1, box_tokens, 1), 128B swizzle

  const void* q;  // [batch, s_q, h_q, d_qk]
  int64_t q_stride_b, q_stride_s, q_stride_h;

  const int32_t* block_table;  // [batch, max_pages_per_seq]
  int64_t block_table_stride_b;
  const int32_t* seqlens;  // [batch]

  void* out;  // [batch, s_q, h_q, 512]
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;  // [batch, h_q, s_q]
  int64_t lse_stride_b, lse_stride_h;

  float* partial_o;    // [num_slots, rows_per_item, 512]; null when nothing splits
  float* partial_lse;  // [num_slots, rows_per_item]
  PartSchedule schedule;  // where each CTA finds its part (read, or built in the kernel)
  const float* q_scale;   // [1]; FP8 only (null otherwise): dequantised q = e4m3 * q_scale
  const float* kv_scale;  // [1]; FP8 only (null otherwise)

  float scale_log2;  // softmax_scale * log2(e)
  int s_q;
  int h_q;
  int heads_per_kv;     // h_q / h_kv
  int rows_per_kv;      // s_q * heads_per_kv packed query rows per KV head
  int num_m_tiles;      // ceil(rows_per_kv / 64)
  int page_size;
  int box_tokens;       // min(page_size, 64)
  int max_length;       // max_pages_per_seq * page_size (lengths are clamped to it)
  int causal;
  int cluster_split;    // C > 1: blockIdx.x = request * C + rank, blockIdx.y = q-group (DecodePlan)
};

// The column-split kernel (column_split_kernel.cuh; DecodeKernel::kDenseColumnSplit
// and kDenseColumnSplitCluster, cluster > 1): one instantiation per (dtype, d_qk),
// instantiations/<dtype>_d<d_qk>_column_split.cu.
template <DType kDType, int kHeadDimQK>
Status launch_column_split_kernel(const KernelParams& params, dim3 grid, int cluster, cudaStream_t stream);
// The alternate-blocks kernel (alternate_blocks_kernel.cuh; DecodeKernel::kDenseAlternateBlocks),
// d_qk = 576 only: instantiations/<dtype>_d576_alternate_blocks.cu.
template <DType kDType>
Status launch_alternate_blocks_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream);
// The FP8 column-split kernel (fp8_column_split_kernel.cuh; e4m3 Q/KV, bf16 out,
// q_scale / kv_scale set): instantiations/fp8_d<d_qk>_column_split.cu.
template <int kHeadDimQK>
Status launch_fp8_column_split_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream);

}  // namespace openmla::kernels::decode_dense

// What the sm90 GPU kernels run: the one capability table that
// *_can_implement and *_run both answer from (src/validate/capabilities.cpp
// turns it into messages). The CPU reference runs every call the argument
// checks accept; the GPU kernels run the subset below.
#pragma once

#include "openmla/types.h"

namespace openmla {

// ---- dense decode ------------------------------------------------------------------
// Q, KV and out share one dtype, bf16 or fp16; or e4m3 Q and KV (per-tensor
// scales) with bf16 out.
constexpr bool dense_decode_gpu_dtype(DType q, DType kv, DType out) {
  if (kv == DType::kFP8E4M3) return q == kv && out == DType::kBF16;
  return (kv == DType::kBF16 || kv == DType::kFP16) && q == kv && out == kv;
}
// d_qk 576 (latent + RoPE) or 512 (latent only), d_v 512.
constexpr bool dense_decode_gpu_head_dims(int d_qk, int d_v) {
  return (d_qk == kHeadDimQK || d_qk == kHeadDimLatent) && d_v == kHeadDimV;
}
// A 64-token block is 64 / min(page_size, 64) TMA boxes, each starting on a
// 1024-byte swizzle atom (8 rows): page sizes 8, 16, 32 or a multiple of 64.
constexpr bool dense_decode_gpu_page_size(int page_size) {
  return page_size == 8 || page_size == 16 || page_size == 32 || (page_size >= 64 && page_size % 64 == 0);
}

// ---- sparse decode (656-byte FP8 cache) ---------------------------------------------
// Every call the argument checks accept (h_q 8, 16, 32, 64, 128; topk a multiple of 64).
inline constexpr bool kSparseDecodeGpu = true;

// ---- sparse prefill --------------------------------------------------------------------
// BF16 kv: every call the argument checks accept (h_q 1-128: the tile pads to
// 64 heads; any topk; d_qk 576 or 512).
inline constexpr bool kSparsePrefillGpu = true;
// FP8-cache mode runs on the sparse FP8 decode kernels (one query token per
// request): their head counts, and topk in whole 64-position blocks.
constexpr bool sparse_prefill_gpu_fp8_cache(int h_q, int topk) {
  return (h_q == 8 || h_q == 16 || h_q == 32 || h_q == 64 || h_q == 128) && topk % kKvBlockTokens == 0;
}

}  // namespace openmla

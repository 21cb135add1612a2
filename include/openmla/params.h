// One params struct per kernel family. Strides are in elements of the tensor's
// own dtype (bytes for the 656-byte sparse cache); the innermost dimension is
// always contiguous. Pointers are device pointers for run() and host pointers
// for the CPU reference; the struct itself does not care which.
#pragma once

#include <cstdint>

#include "openmla/types.h"

namespace openmla {

// ---------------------------------------------------------------------------
// Dense decode: BF16/FP16 KV, or FP8 e4m3 Q/KV with per-tensor scales.
// ---------------------------------------------------------------------------
struct DenseDecodeShape {
  int batch = 0;
  int s_q = 1;         // query tokens per request (MTP / short prompts)
  int h_q = 0;         // query heads
  int h_kv = 1;        // latent KV heads; h_q % h_kv == 0
  int d_qk = kHeadDimQK;  // 576 (latent + RoPE) or 512 (latent only)
  int d_v = kHeadDimV;    // 512
  int page_size = 64;
  int num_pages = 0;
  int max_pages_per_seq = 0;  // block_table columns
  DType q_dtype = DType::kBF16;   // bf16 | fp16 | fp8 (fp8 iff kv is fp8)
  DType kv_dtype = DType::kBF16;  // same as q
  DType out_dtype = DType::kBF16; // == q dtype for bf16/fp16; bf16 for fp8
};

struct DenseDecodeParams {
  DenseDecodeShape shape;

  const void* q = nullptr;  // [batch, s_q, h_q, d_qk]
  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;

  const void* kv_cache = nullptr;  // [num_pages, page_size, h_kv, d_qk]; V = [..., :d_v]
  int64_t kv_stride_page = 0, kv_stride_token = 0, kv_stride_head = 0;

  const int32_t* block_table = nullptr;  // [batch, max_pages_per_seq]
  int64_t block_table_stride_b = 0;

  const int32_t* seqlens = nullptr;  // [batch]; entries in [0, max_pages_per_seq * page_size]

  void* out = nullptr;  // [batch, s_q, h_q, d_v]
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;

  float* lse = nullptr;  // [batch, h_q, s_q], natural log; +inf for an empty row
  int64_t lse_stride_b = 0, lse_stride_h = 0;

  const float* q_scale = nullptr;   // [1]; fp8 only (dequant: value = e4m3 * scale)
  const float* kv_scale = nullptr;  // [1]; fp8 only

  float softmax_scale = 0.0f;  // > 0 and finite
  // Query row i (of s_q) sees keys [0, seqlen - s_q + i]; the query block is
  // aligned to the end of the sequence.
  bool causal = false;
};

// ---------------------------------------------------------------------------
// Sparse decode (DeepSeek Sparse Attention) over the 656-byte FP8 cache.
// ---------------------------------------------------------------------------
struct SparseDecodeShape {
  int batch = 0;
  int s_q = 1;
  int h_q = 0;
  int d_qk = kHeadDimQK;  // 576
  int d_v = kHeadDimV;    // 512
  int topk = 0;           // multiple of 64
  int page_size = 64;
  int num_pages = 0;
};

struct SparseDecodeParams {
  SparseDecodeShape shape;

  const void* q = nullptr;  // [batch, s_q, h_q, 576] bf16
  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;

  const uint8_t* kv_cache = nullptr;  // [num_pages, page_size, 1, 656] bytes
  int64_t kv_stride_page_bytes = 0;   // >= page_size * 656, multiple of 16

  // indices[b][s][k] = page * page_size + offset; -1 (or anything out of
  // [0, num_pages * page_size)) means "skip".
  const int32_t* indices = nullptr;  // [batch, s_q, topk]
  int64_t indices_stride_b = 0, indices_stride_s = 0;

  const int32_t* topk_length = nullptr;  // [batch] or null; only the first topk_length[b] count
  const float* attn_sink = nullptr;      // [h_q] or null

  void* out = nullptr;  // [batch, s_q, h_q, 512] bf16
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;

  float* lse = nullptr;  // [batch, h_q, s_q]
  int64_t lse_stride_b = 0, lse_stride_h = 0;

  float softmax_scale = 0.0f;
};

// ---------------------------------------------------------------------------
// Sparse prefill: one index list per query token, over a BF16 KV tensor or
// (fp8_kv_cache) straight over sparse decode's 656-byte paged FP8 cache.
// ---------------------------------------------------------------------------
struct SparsePrefillShape {
  int s_q = 0;
  int h_q = 0;
  int s_kv = 0;           // rows an index may name; fp8_kv_cache: num_pages * page_size
  int d_qk = kHeadDimQK;  // 576 or 512 (fp8_kv_cache: 576)
  int d_v = kHeadDimV;    // 512
  int topk = 0;
  // FP8-cache mode: K/V come from kv_cache (indices = page * page_size + offset),
  // dequantised on the fly; kv is unused and must be null. 0 pages otherwise.
  bool fp8_kv_cache = false;
  int page_size = 0;
  int num_pages = 0;
};

struct SparsePrefillParams {
  SparsePrefillShape shape;

  const void* q = nullptr;  // [s_q, h_q, d_qk] bf16
  int64_t q_stride_s = 0, q_stride_h = 0;

  const void* kv = nullptr;  // [s_kv, 1, d_qk] bf16 (null in fp8_kv_cache mode)
  int64_t kv_stride_s = 0;

  const uint8_t* kv_cache = nullptr;  // fp8_kv_cache: [num_pages, page_size, 1, 656] bytes
  int64_t kv_stride_page_bytes = 0;   // >= page_size * 656, multiple of 16

  const int32_t* indices = nullptr;  // [s_q, 1, topk]; invalid: -1 or >= s_kv
  int64_t indices_stride_s = 0;

  const int32_t* topk_length = nullptr;  // [s_q] or null
  const float* attn_sink = nullptr;      // [h_q] or null

  void* out = nullptr;  // [s_q, h_q, d_v] bf16
  int64_t out_stride_s = 0, out_stride_h = 0;

  float* max_logits = nullptr;  // [s_q, h_q]; max of softmax_scale * q.k; -inf for an empty row
  float* lse = nullptr;         // [s_q, h_q]; +inf for an empty row

  float softmax_scale = 0.0f;
};

// ---------------------------------------------------------------------------
// Split-KV combine. See openmla/schedule.h for the schedule records.
// An "item" is the unit the scheduler splits: a request for dense decode,
// a (request, query token) pair for sparse decode.
// ---------------------------------------------------------------------------
struct CombineEntry;

struct CombineParams {
  int batch = 0;
  int s_q = 1;
  int h_q = 0;
  int d_v = kHeadDimV;
  int q_tokens_per_item = 1;  // s_q (dense) or 1 (sparse)
  int num_entries = 0;        // entries to read: up to plan.num_parts; the schedule puts the real
                              // ones first, so min(plan.num_parts, plan.num_items) suffice
  int num_slots = 0;          // partial slots available

  const CombineEntry* entries = nullptr;  // [num_entries]; entries with num_pieces < 2 are skipped
  const float* partial_o = nullptr;       // [num_slots, q_tokens_per_item * h_q, d_v]
  const float* partial_lse = nullptr;     // [num_slots, q_tokens_per_item * h_q], natural log; -inf = empty
  const float* attn_sink = nullptr;       // [h_q] or null

  void* out = nullptr;  // [batch, s_q, h_q, d_v]
  DType out_dtype = DType::kBF16;
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;

  float* lse = nullptr;  // [batch, h_q, s_q]
  int64_t lse_stride_b = 0, lse_stride_h = 0;

  // Sparse prefill: the row max of the scaled logits, the max over the pieces.
  const float* partial_max = nullptr;  // [num_slots, q_tokens_per_item * h_q]; -inf = empty piece
  float* max_logits = nullptr;         // [batch, h_q, s_q] or null (then partial_max is not read)
  int64_t max_logits_stride_b = 0, max_logits_stride_h = 0;
};

}  // namespace openmla

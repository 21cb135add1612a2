// Argument validation for every public entry; see validate/validate.h for the
// contract and validate/checks.h for the message shape and status codes.
// Order inside each family: shape (sizes, dtypes, index-space limits), then
// pointers, then strides and alignment, then scalars, so the first message is
// about the most basic mistake.
#include "validate/validate.h"

#include <cstdint>
#include <string>
#include <limits>
#include <utility>

#include "validate/checks.h"

namespace openmla::detail {

namespace {

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kUnsupported = StatusCode::kNotSupported;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// ---- limits --------------------------------------------------------------------
constexpr int64_t kMaxNumSms = 1024;
constexpr int64_t kMaxBatch = int64_t(1) << 24;
constexpr int64_t kMaxDenseQueryTokens = 1024;  // s_q; engines route short prompts through decode
constexpr int64_t kMaxQueryHeads = 128;
constexpr int64_t kMaxKvHeads = 8;
constexpr int64_t kMaxPageSize = int64_t(1) << 20;
constexpr int64_t kMaxSparseDecodeQueryTokens = 4;  // s_q: plain decode plus MTP drafts
constexpr int64_t kSparseDecodeTopkGranule = kKvBlockTokens;
constexpr int64_t kMaxTopk = 16384;

// ---- alignment -----------------------------------------------------------------
constexpr size_t kTileAlignment = 16;   // 16-byte vector and TMA loads
constexpr size_t kScalarAlignment = 4;  // int32 / fp32 arrays

// `count` pages of `page_size` tokens must fit int32 token positions: the
// kernels index tokens as int32 (page * page_size + offset for the whole cache,
// and for sparse decode the indices themselves; block_table column * page_size
// + offset within a dense request).
Status check_int32_tokens(const char* entry, const char* name, int64_t count, int64_t page_size, const char* what) {
  if (count * page_size <= kInt32Max) return Status::ok();  // both <= INT32_MAX: no overflow
  return argument_error(kUnsupported, entry, name, what, show(name, count) + ", " + show("page_size", page_size),
                        std::string(name) + " * page_size <= 2147483647");
}

Status check_token_space(const char* entry, int64_t num_pages, int64_t page_size) {
  return check_int32_tokens(entry, "num_pages", num_pages, page_size,
                            "addresses more tokens than int32 indexing allows");
}

Status check_request_capacity(const char* entry, int64_t max_pages_per_seq, int64_t page_size) {
  return check_int32_tokens(entry, "max_pages_per_seq", max_pages_per_seq, page_size,
                            "addresses more tokens per request than int32 indexing allows");
}

Status check_head_dims(const char* entry, int d_qk, int d_v) {
  OPENMLA_RETURN_IF_ERROR(check_one_of(entry, "d_qk", d_qk, {kHeadDimQK, kHeadDimLatent}));
  return check_one_of(entry, "d_v", d_v, {kHeadDimV});
}

}  // namespace

// ---------------------------------------------------------------------------
// Device description
// ---------------------------------------------------------------------------
Status validate_device_info(const char* entry, const DeviceInfo& device) {
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "num_sms", device.num_sms, 1, kMaxNumSms, kInvalid, kInvalid));
  OPENMLA_RETURN_IF_ERROR(
      check_at_least(entry, "max_smem_per_block", device.max_smem_per_block, 1));
  return check_at_least(entry, "cc_major", device.cc_major, 1);
}

// ---------------------------------------------------------------------------
// Dense decode
// ---------------------------------------------------------------------------
Status validate_dense_decode_shape(const char* entry, const DenseDecodeShape& s) {
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "batch", s.batch, 1, kMaxBatch, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "s_q", s.s_q, 1, kMaxDenseQueryTokens, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "h_q", s.h_q, 1, kMaxQueryHeads, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "h_kv", s.h_kv, 1, kMaxKvHeads, kInvalid, kUnsupported));
  if (s.h_q % s.h_kv != 0) {
    return argument_error(kInvalid, entry, "h_q", "must be a multiple of h_kv",
                          show("h_q", s.h_q) + ", " + show("h_kv", s.h_kv), "h_q % h_kv == 0");
  }
  OPENMLA_RETURN_IF_ERROR(check_head_dims(entry, s.d_qk, s.d_v));
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "page_size", s.page_size, 1, kMaxPageSize, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "num_pages", s.num_pages, 1));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "max_pages_per_seq", s.max_pages_per_seq, 1));
  OPENMLA_RETURN_IF_ERROR(check_token_space(entry, s.num_pages, s.page_size));
  OPENMLA_RETURN_IF_ERROR(check_request_capacity(entry, s.max_pages_per_seq, s.page_size));

  // ---- dtypes: bf16/fp16 end to end, or fp8 in with bf16 out ----
  if (s.q_dtype != DType::kBF16 && s.q_dtype != DType::kFP16 && s.q_dtype != DType::kFP8E4M3) {
    return argument_error(kUnsupported, entry, "q_dtype", "is not supported",
                          show("q_dtype", dtype_name(s.q_dtype)), "one of {bf16, fp16, fp8_e4m3}");
  }
  if (s.kv_dtype != s.q_dtype) {
    // NOTE: Hopper has no mixed-precision MMA, so KV must match Q.
    return argument_error(
        kUnsupported, entry, "kv_dtype", "must match q_dtype",
        show("kv_dtype", dtype_name(s.kv_dtype)) + ", " + show("q_dtype", dtype_name(s.q_dtype)),
        "kv_dtype == q_dtype");
  }
  const bool fp8 = s.q_dtype == DType::kFP8E4M3;
  const DType want_out = fp8 ? DType::kBF16 : s.q_dtype;
  if (s.out_dtype != want_out) {
    return argument_error(
        kUnsupported, entry, "out_dtype",
        fp8 ? "must be bf16 for fp8 inputs" : "must match q_dtype",
        show("out_dtype", dtype_name(s.out_dtype)) + ", " + show("q_dtype", dtype_name(s.q_dtype)),
        fp8 ? "out_dtype == bf16" : "out_dtype == q_dtype");
  }
  return Status::ok();
}

namespace {

// Decode families share the query and output layouts:
//   q [batch, s_q, h_q, d_qk], out [batch, s_q, h_q, d_v], lse [batch, h_q, s_q].
template <class DecodeParams>
Status check_decode_q(const char* entry, const DecodeParams& p, size_t q_bytes) {
  const auto& s = p.shape;
  return check_layout(entry, {"q", q_bytes, "d_qk", s.d_qk, true},
                      {{"h_q", s.h_q, "q_stride_h", p.q_stride_h},
                       {"s_q", s.s_q, "q_stride_s", p.q_stride_s},
                       {"batch", s.batch, "q_stride_b", p.q_stride_b}});
}

// out [batch, s_q, h_q, d_v] and lse [batch, h_q, s_q]: the layout every
// entry that writes final outputs shares (decode runs and the combine).
template <class Params>
Status check_outputs(const char* entry, const Params& p, size_t out_bytes, int batch, int s_q, int h_q, int d_v) {
  OPENMLA_RETURN_IF_ERROR(check_layout(entry, {"out", out_bytes, "d_v", d_v, true},
                                       {{"h_q", h_q, "out_stride_h", p.out_stride_h},
                                        {"s_q", s_q, "out_stride_s", p.out_stride_s},
                                        {"batch", batch, "out_stride_b", p.out_stride_b}}));
  return check_layout(entry, {"lse", sizeof(float), "s_q", s_q, false},
                      {{"h_q", h_q, "lse_stride_h", p.lse_stride_h},
                       {"batch", batch, "lse_stride_b", p.lse_stride_b}});
}

template <class DecodeParams>
Status check_decode_outputs(const char* entry, const DecodeParams& p, size_t out_bytes) {
  const auto& s = p.shape;
  return check_outputs(entry, p, out_bytes, s.batch, s.s_q, s.h_q, s.d_v);
}

}  // namespace

Status validate_dense_decode(const char* entry, const DenseDecodeParams& p) {
  const DenseDecodeShape& s = p.shape;
  OPENMLA_RETURN_IF_ERROR(validate_dense_decode_shape(entry, s));
  const bool fp8 = s.q_dtype == DType::kFP8E4M3;

  // ---- pointers ----
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "q", p.q, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "kv_cache", p.kv_cache, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "block_table", p.block_table, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "seqlens", p.seqlens, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "out", p.out, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "lse", p.lse, kScalarAlignment));
  if (fp8) {
    OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "q_scale", p.q_scale, kScalarAlignment));
    OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "kv_scale", p.kv_scale, kScalarAlignment));
  } else {
    // A scale with bf16/fp16 inputs would be ignored: refuse it instead.
    for (const auto& [name, scale] : {std::pair<const char*, const float*>{"q_scale", p.q_scale},
                                      std::pair<const char*, const float*>{"kv_scale", p.kv_scale}}) {
      if (scale == nullptr) continue;
      return argument_error(kInvalid, entry, name, "is given for non-fp8 inputs, which take no scale",
                            show_pointer(name, scale) + ", " + show("q_dtype", dtype_name(s.q_dtype)),
                            std::string(name) + " = null (scales apply to fp8_e4m3 inputs only)");
    }
  }

  // ---- strides ----
  const size_t in_bytes = dtype_size(s.q_dtype);
  OPENMLA_RETURN_IF_ERROR(check_decode_q(entry, p, in_bytes));
  OPENMLA_RETURN_IF_ERROR(
      check_layout(entry, {"kv_cache", in_bytes, "d_qk", s.d_qk, true},
                   {{"h_kv", s.h_kv, "kv_stride_head", p.kv_stride_head},
                    {"page_size", s.page_size, "kv_stride_token", p.kv_stride_token},
                    {"num_pages", s.num_pages, "kv_stride_page", p.kv_stride_page}}));
  OPENMLA_RETURN_IF_ERROR(check_layout(
      entry, {"block_table", sizeof(int32_t), "max_pages_per_seq", s.max_pages_per_seq, false},
      {{"batch", s.batch, "block_table_stride_b", p.block_table_stride_b}}));
  OPENMLA_RETURN_IF_ERROR(check_decode_outputs(entry, p, dtype_size(s.out_dtype)));

  return check_softmax_scale(entry, p.softmax_scale);
}

Status validate_dense_decode_scale_values(const char* entry, const DenseDecodeParams& p) {
  if (p.shape.q_dtype != DType::kFP8E4M3) return Status::ok();
  OPENMLA_RETURN_IF_ERROR(check_dequant_scale(entry, "q_scale", *p.q_scale));
  return check_dequant_scale(entry, "kv_scale", *p.kv_scale);
}

// ---------------------------------------------------------------------------
// Sparse decode (656-byte FP8 cache)
// ---------------------------------------------------------------------------
Status validate_sparse_decode_shape(const char* entry, const SparseDecodeShape& s) {
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "batch", s.batch, 1, kMaxBatch, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "s_q", s.s_q, 1, kMaxSparseDecodeQueryTokens, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "h_q", s.h_q, 1));
  OPENMLA_RETURN_IF_ERROR(check_one_of(entry, "h_q", s.h_q, {8, 16, 32, 64, 128}));
  OPENMLA_RETURN_IF_ERROR(check_one_of(entry, "d_qk", s.d_qk, {kHeadDimQK}));
  OPENMLA_RETURN_IF_ERROR(check_one_of(entry, "d_v", s.d_v, {kHeadDimV}));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "topk", s.topk, 1));
  OPENMLA_RETURN_IF_ERROR(check_range(entry, "topk", s.topk, kSparseDecodeTopkGranule, kMaxTopk,
                                      kUnsupported, kUnsupported));
  if (s.topk % kSparseDecodeTopkGranule != 0) {
    // The kernel consumes indices one 64-token block at a time; callers pad with -1.
    return argument_error(kUnsupported, entry, "topk", "must be a multiple of 64",
                          show("topk", s.topk), "topk % 64 == 0");
  }
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "page_size", s.page_size, 1));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "num_pages", s.num_pages, 1));
  return check_token_space(entry, s.num_pages, s.page_size);
}

Status validate_sparse_decode(const char* entry, const SparseDecodeParams& p) {
  const SparseDecodeShape& s = p.shape;
  OPENMLA_RETURN_IF_ERROR(validate_sparse_decode_shape(entry, s));

  // ---- pointers (topk_length and attn_sink are optional) ----
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "q", p.q, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "kv_cache", p.kv_cache, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "indices", p.indices, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "out", p.out, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "lse", p.lse, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "topk_length", p.topk_length, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "attn_sink", p.attn_sink, kScalarAlignment));

  // ---- cache: byte strides; 656 = 41 * 16, so tokens inside a page stay aligned ----
  const int64_t page_bytes = int64_t(s.page_size) * kSparseFp8TokenBytes;
  OPENMLA_RETURN_IF_ERROR(
      check_layout(entry, {"kv_cache", 1, "page_size * 656", page_bytes, true},
                   {{"num_pages", s.num_pages, "kv_stride_page_bytes", p.kv_stride_page_bytes}}));

  // ---- strides ----
  const size_t bf16_bytes = dtype_size(DType::kBF16);
  OPENMLA_RETURN_IF_ERROR(check_decode_q(entry, p, bf16_bytes));
  OPENMLA_RETURN_IF_ERROR(
      check_layout(entry, {"indices", sizeof(int32_t), "topk", s.topk, true},
                   {{"s_q", s.s_q, "indices_stride_s", p.indices_stride_s},
                    {"batch", s.batch, "indices_stride_b", p.indices_stride_b}}));
  OPENMLA_RETURN_IF_ERROR(check_decode_outputs(entry, p, bf16_bytes));

  return check_softmax_scale(entry, p.softmax_scale);
}

// ---------------------------------------------------------------------------
// Sparse prefill
// ---------------------------------------------------------------------------
Status validate_sparse_prefill_shape(const char* entry, const SparsePrefillShape& s) {
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "s_q", s.s_q, 1));
  OPENMLA_RETURN_IF_ERROR(
      check_range(entry, "h_q", s.h_q, 1, kMaxQueryHeads, kInvalid, kUnsupported));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "s_kv", s.s_kv, 1));
  OPENMLA_RETURN_IF_ERROR(check_head_dims(entry, s.d_qk, s.d_v));
  OPENMLA_RETURN_IF_ERROR(check_range(entry, "topk", s.topk, 1, kMaxTopk, kInvalid, kUnsupported));
  if (!s.fp8_kv_cache) {
    // The page fields describe the FP8 cache only: set without it, they would be ignored.
    if (s.page_size != 0 || s.num_pages != 0) {
      return argument_error(kInvalid, entry, "page_size", "is set without fp8_kv_cache",
                            show("page_size", s.page_size) + ", " + show("num_pages", s.num_pages),
                            "0 and 0 (BF16 kv), or fp8_kv_cache = true");
    }
    return Status::ok();
  }
  // The 656-byte token holds 512 FP8 latent values, 4 scales and 64 BF16 RoPE values.
  OPENMLA_RETURN_IF_ERROR(check_one_of(entry, "d_qk", s.d_qk, {kHeadDimQK}));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "page_size", s.page_size, 1));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "num_pages", s.num_pages, 1));
  OPENMLA_RETURN_IF_ERROR(check_token_space(entry, s.num_pages, s.page_size));
  if (int64_t(s.s_kv) != int64_t(s.num_pages) * s.page_size) {
    return argument_error(kInvalid, entry, "s_kv", "is not the cache's token count",
                          show("s_kv", s.s_kv) + ", " + show("num_pages", s.num_pages) + ", " +
                              show("page_size", s.page_size),
                          "s_kv == num_pages * page_size = " + std::to_string(int64_t(s.num_pages) * s.page_size));
  }
  return Status::ok();
}

Status validate_sparse_prefill(const char* entry, const SparsePrefillParams& p) {
  const SparsePrefillShape& s = p.shape;
  OPENMLA_RETURN_IF_ERROR(validate_sparse_prefill_shape(entry, s));

  // ---- pointers (topk_length and attn_sink are optional) ----
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "q", p.q, kTileAlignment));
  // One K/V source: kv (BF16 rows) or, in fp8_kv_cache mode, kv_cache; the other must be null.
  const char* unused_source = s.fp8_kv_cache ? "kv" : "kv_cache";
  if ((s.fp8_kv_cache ? p.kv : static_cast<const void*>(p.kv_cache)) != nullptr) {
    return argument_error(kInvalid, entry, unused_source, "is set but not read",
                          std::string(unused_source) + " is not null, fp8_kv_cache = " +
                              (s.fp8_kv_cache ? "true" : "false"),
                          std::string("null (") + (s.fp8_kv_cache ? "the FP8 cache is kv_cache)" : "BF16 rows come from kv)"));
  }
  if (s.fp8_kv_cache) {
    OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "kv_cache", p.kv_cache, kTileAlignment));
    const int64_t page_bytes = int64_t(s.page_size) * kSparseFp8TokenBytes;
    OPENMLA_RETURN_IF_ERROR(
        check_layout(entry, {"kv_cache", 1, "page_size * 656", page_bytes, true},
                     {{"num_pages", s.num_pages, "kv_stride_page_bytes", p.kv_stride_page_bytes}}));
  } else {
    OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "kv", p.kv, kTileAlignment));
  }
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "indices", p.indices, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "out", p.out, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "max_logits", p.max_logits, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "lse", p.lse, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "topk_length", p.topk_length, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "attn_sink", p.attn_sink, kScalarAlignment));

  // ---- strides (max_logits and lse are contiguous [s_q, h_q]) ----
  const size_t bf16_bytes = dtype_size(DType::kBF16);
  OPENMLA_RETURN_IF_ERROR(check_layout(
      entry, {"q", bf16_bytes, "d_qk", s.d_qk, true},
      {{"h_q", s.h_q, "q_stride_h", p.q_stride_h}, {"s_q", s.s_q, "q_stride_s", p.q_stride_s}}));
  if (!s.fp8_kv_cache) {
    OPENMLA_RETURN_IF_ERROR(check_layout(entry, {"kv", bf16_bytes, "d_qk", s.d_qk, true},
                                         {{"s_kv", s.s_kv, "kv_stride_s", p.kv_stride_s}}));
  }
  // NOTE: topk need not be a multiple of 64 here, so index rows are only 4-byte aligned.
  OPENMLA_RETURN_IF_ERROR(check_layout(entry, {"indices", sizeof(int32_t), "topk", s.topk, false},
                                       {{"s_q", s.s_q, "indices_stride_s", p.indices_stride_s}}));
  OPENMLA_RETURN_IF_ERROR(check_layout(entry, {"out", bf16_bytes, "d_v", s.d_v, true},
                                       {{"h_q", s.h_q, "out_stride_h", p.out_stride_h},
                                        {"s_q", s.s_q, "out_stride_s", p.out_stride_s}}));

  return check_softmax_scale(entry, p.softmax_scale);
}

// ---------------------------------------------------------------------------
// Split-KV combine
// ---------------------------------------------------------------------------
Status validate_combine(const char* entry, const CombineParams& p) {
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "batch", p.batch, 1));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "s_q", p.s_q, 1));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "h_q", p.h_q, 1));
  OPENMLA_RETURN_IF_ERROR(check_one_of(entry, "d_v", p.d_v, {kHeadDimV}));
  if (p.q_tokens_per_item != 1 && p.q_tokens_per_item != p.s_q) {
    return argument_error(
        kInvalid, entry, "q_tokens_per_item", "must be 1 or s_q",
        show("q_tokens_per_item", p.q_tokens_per_item) + ", " + show("s_q", p.s_q),
        "q_tokens_per_item == 1 or q_tokens_per_item == s_q");
  }
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "num_entries", p.num_entries, 1));
  OPENMLA_RETURN_IF_ERROR(check_at_least(entry, "num_slots", p.num_slots, 0));
  if (p.out_dtype != DType::kBF16 && p.out_dtype != DType::kFP16) {
    return argument_error(kUnsupported, entry, "out_dtype", "is not supported",
                          show("out_dtype", dtype_name(p.out_dtype)), "one of {bf16, fp16}");
  }

  // ---- pointers (partials only when there are slots; attn_sink optional) ----
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "entries", p.entries, alignof(CombineEntry)));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "out", p.out, kTileAlignment));
  OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "lse", p.lse, kScalarAlignment));
  if (p.num_slots > 0) {
    OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "partial_o", p.partial_o, kTileAlignment));
    OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "partial_lse", p.partial_lse, kScalarAlignment));
    if (p.max_logits != nullptr) {
      OPENMLA_RETURN_IF_ERROR(check_pointer(entry, "partial_max", p.partial_max, kScalarAlignment));
    }
  }
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "max_logits", p.max_logits, kScalarAlignment));
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "attn_sink", p.attn_sink, kScalarAlignment));

  // ---- sizes and strides; the partials are contiguous [num_slots, rows_per_item, d_v] ----
  int64_t rows_per_item = 0, slot_elems = 0, partial_elems = 0, partial_bytes = 0;
  if (!mul_fits_int64(p.q_tokens_per_item, p.h_q, &rows_per_item) ||
      !mul_fits_int64(rows_per_item, p.d_v, &slot_elems) ||
      !mul_fits_int64(slot_elems, p.num_slots, &partial_elems) ||
      !mul_fits_int64(partial_elems, sizeof(float), &partial_bytes)) {
    return argument_error(kInvalid, entry, "partial_o", "is too large to address",
                          show("num_slots", p.num_slots) + ", " +
                              show("q_tokens_per_item", p.q_tokens_per_item) + ", " +
                              show("h_q", p.h_q),
                          "num_slots * q_tokens_per_item * h_q * d_v * 4 <= INT64_MAX bytes");
  }
  return check_outputs(entry, p, dtype_size(p.out_dtype), p.batch, p.s_q, p.h_q, p.d_v);
}

// ---------------------------------------------------------------------------
// Workspace
// ---------------------------------------------------------------------------
Status validate_workspace(const char* entry, const DecodePlan& plan, const void* workspace,
                          size_t workspace_bytes) {
  const size_t need = plan.workspace.total_bytes;
  if (need == 0) return Status::ok();  // nothing to schedule into: null is fine
  if (workspace == nullptr) {
    return argument_error(
        kInvalid, entry, "workspace", "must not be null when the plan needs bytes",
        show_pointer("workspace", workspace),
        "a non-null pointer to plan.workspace.total_bytes = " + std::to_string(need) + " bytes");
  }
  OPENMLA_RETURN_IF_ERROR(check_aligned(entry, "workspace", workspace, kWorkspaceAlignment));
  if (workspace_bytes < need) {
    return argument_error(
        kInvalid, entry, "workspace_bytes", "is smaller than the plan's workspace",
        show("workspace_bytes", std::to_string(workspace_bytes)),
        "workspace_bytes >= plan.workspace.total_bytes = " + std::to_string(need));
  }
  return Status::ok();
}

}  // namespace openmla::detail

// Tensors to params; see tensor_args.h. Order inside each family: ranks, then
// dtypes, then sizes that must agree, then the innermost stride, so the first
// message is about the most basic mistake. Limits, alignment, dtype
// combinations and strides are the api validators' job.
#include "tensor_args.h"

#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "openmla/errors.h"

namespace openmla::python {

namespace {


constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kUnsupported = StatusCode::kNotSupported;

// ---- names for messages ------------------------------------------------------------
std::string show_list(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::string device_name(int device) {
  return device == kCpuDevice ? std::string("cpu") : "cuda:" + std::to_string(device);
}

std::string attr(std::string_view name, std::string_view field) {
  return std::string(name) + "." + std::string(field);
}

const void* address(const TensorRef& t) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(t.data));
}

// ---- single-tensor checks ------------------------------------------------------------
Status check_rank(const char* entry, const char* name, const TensorRef& t, size_t rank, const char* dims) {
  if (t.sizes.size() == rank && t.strides.size() == rank) return Status::ok();
  return argument_error(kInvalid, entry, name, "has the wrong number of dimensions",
                        attr(name, "shape") + " = " + show_list(t.sizes),
                        std::to_string(rank) + " dimensions " + dims);
}

// `expected` entries < 0 are free.
Status check_sizes(const char* entry, const char* name, const TensorRef& t,
                   const std::vector<int64_t>& expected, const char* dims) {
  bool same = t.sizes.size() == expected.size();
  for (size_t i = 0; same && i < expected.size(); ++i) same = expected[i] < 0 || t.sizes[i] == expected[i];
  if (same) return Status::ok();
  std::string want = "[";
  for (size_t i = 0; i < expected.size(); ++i) {
    want += (i ? ", " : "") + (expected[i] < 0 ? std::string("*") : std::to_string(expected[i]));
  }
  want += "] ";
  want += dims;
  return argument_error(kInvalid, entry, name, "has the wrong shape",
                        attr(name, "shape") + " = " + show_list(t.sizes), want);
}

Status check_dtype_name(const char* entry, const char* name, const TensorRef& t, const char* dtype) {
  if (t.dtype == dtype) return Status::ok();
  return argument_error(kUnsupported, entry, name, "has an unsupported dtype",
                        attr(name, "dtype") + " = " + t.dtype, dtype);
}

// Maps torch's dtype name to DType; `expected` lists what this argument takes.
Status to_dtype(const char* entry, const char* name, const TensorRef& t, const char* expected, DType* dtype) {
  static const std::pair<const char*, DType> kNames[] = {{"bfloat16", DType::kBF16},
                                                         {"float16", DType::kFP16},
                                                         {"float8_e4m3fn", DType::kFP8E4M3},
                                                         {"float32", DType::kFP32},
                                                         {"int32", DType::kInt32}};
  for (const auto& [torch_name, value] : kNames) {
    if (t.dtype == torch_name) {
      *dtype = value;
      return Status::ok();
    }
  }
  return argument_error(kUnsupported, entry, name, "has an unsupported dtype",
                        attr(name, "dtype") + " = " + t.dtype, expected);
}

// The params structs have no innermost stride: it must be 1.
Status check_inner_contiguous(const char* entry, const char* name, const TensorRef& t) {
  if (t.sizes.empty() || t.sizes.back() <= 1 || t.strides.back() == 1) return Status::ok();
  return argument_error(kInvalid, entry, name, "has a non-contiguous last dimension",
                        attr(name, "stride(-1)") + " = " + std::to_string(t.strides.back()), "1");
}

// Row-major contiguous, ignoring dimensions of size 1.
Status check_contiguous(const char* entry, const char* name, const TensorRef& t) {
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] > 1 && t.strides[i] != expected) {
      return argument_error(kInvalid, entry, name, "is not contiguous",
                            attr(name, "stride()") + " = " + show_list(t.strides), "a contiguous tensor");
    }
    expected *= t.sizes[i];
  }
  return Status::ok();
}

// Sizes land in int fields of the shape structs.
Status to_int(const char* entry, const char* name, int64_t value, int* out) {
  if (value > std::numeric_limits<int>::max()) {
    return argument_error(kUnsupported, entry, name, "is too large", show(name, value),
                          std::string(name) + " <= 2147483647");
  }
  *out = static_cast<int>(value);
  return Status::ok();
}

Status check_optional_vector(const char* entry, const char* name, const TensorRef* t, int64_t length,
                             const char* dims, const char* dtype) {
  if (t == nullptr) return Status::ok();
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, name, *t, 1, dims));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, name, *t, dtype));
  OPENMLA_RETURN_IF_ERROR(check_sizes(entry, name, *t, {length}, dims));
  return check_inner_contiguous(entry, name, *t);
}

// A per-tensor scale: fp32 with at least one element (element 0 is read).
Status check_scale(const char* entry, const char* name, const TensorRef* t) {
  if (t == nullptr) return Status::ok();
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, name, *t, "float32"));
  if (t->numel() >= 1) return Status::ok();
  return argument_error(kInvalid, entry, name, "is empty", attr(name, "shape") + " = " + show_list(t->sizes),
                        "one element");
}

constexpr const char* kQueryDtypes = "one of {bfloat16, float16, float8_e4m3fn}";

}  // namespace

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t size : sizes) n *= size;
  return n;
}

// ---------------------------------------------------------------------------
// Dense decode
// ---------------------------------------------------------------------------
Status dense_decode_shape(const char* entry, const TensorRef& q, const TensorRef& kv_cache,
                          const TensorRef& block_table, int d_v, DenseDecodeShape* shape) {
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "q", q, 4, "[batch, s_q, h_q, d_qk]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "kv_cache", kv_cache, 4, "[num_pages, page_size, h_kv, d_qk]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "block_table", block_table, 2, "[batch, max_pages_per_seq]"));

  DenseDecodeShape s;
  OPENMLA_RETURN_IF_ERROR(to_dtype(entry, "q", q, kQueryDtypes, &s.q_dtype));
  OPENMLA_RETURN_IF_ERROR(to_dtype(entry, "kv_cache", kv_cache, kQueryDtypes, &s.kv_dtype));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "block_table", block_table, "int32"));
  OPENMLA_RETURN_IF_ERROR(check_sizes(entry, "kv_cache", kv_cache, {-1, -1, -1, q.sizes[3]},
                                      "([num_pages, page_size, h_kv, d_qk of q])"));
  OPENMLA_RETURN_IF_ERROR(
      check_sizes(entry, "block_table", block_table, {q.sizes[0], -1}, "([batch of q, max_pages_per_seq])"));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "q", q));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "kv_cache", kv_cache));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "block_table", block_table));

  OPENMLA_RETURN_IF_ERROR(to_int(entry, "batch", q.sizes[0], &s.batch));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "s_q", q.sizes[1], &s.s_q));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "h_q", q.sizes[2], &s.h_q));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "d_qk", q.sizes[3], &s.d_qk));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "num_pages", kv_cache.sizes[0], &s.num_pages));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "page_size", kv_cache.sizes[1], &s.page_size));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "h_kv", kv_cache.sizes[2], &s.h_kv));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "max_pages_per_seq", block_table.sizes[1], &s.max_pages_per_seq));
  s.d_v = d_v;
  s.out_dtype = s.q_dtype == DType::kFP8E4M3 ? DType::kBF16 : s.q_dtype;
  *shape = s;
  return Status::ok();
}

// out [batch, s_q, h_q, d_v] and lse [batch, h_q, s_q] of a decode call (the
// shape already in p->shape): sizes and layout checked, pointers and strides
// copied. The out dtype is each family's own check.
template <class Params>
Status bind_decode_outputs(const char* entry, const TensorRef& out, const TensorRef& lse, Params* p) {
  const auto& s = p->shape;
  OPENMLA_RETURN_IF_ERROR(
      check_sizes(entry, "out", out, {s.batch, s.s_q, s.h_q, -1}, "([batch, s_q, h_q, d_v])"));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "out", out));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "lse", lse, 3, "[batch, h_q, s_q]"));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "lse", lse, "float32"));
  OPENMLA_RETURN_IF_ERROR(check_sizes(entry, "lse", lse, {s.batch, s.h_q, s.s_q}, "([batch, h_q, s_q])"));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "lse", lse));
  p->out = const_cast<void*>(address(out));
  p->out_stride_b = out.strides[0], p->out_stride_s = out.strides[1], p->out_stride_h = out.strides[2];
  p->lse = static_cast<float*>(const_cast<void*>(address(lse)));
  p->lse_stride_b = lse.strides[0], p->lse_stride_h = lse.strides[1];
  return Status::ok();
}

Status dense_decode_params(const char* entry, const DenseDecodeTensors& t, float softmax_scale, bool causal,
                           DenseDecodeParams* params) {
  const TensorRef& q = *t.q;
  const TensorRef& out = *t.out;
  const TensorRef& lse = *t.lse;
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "q", q, 4, "[batch, s_q, h_q, d_qk]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "out", out, 4, "[batch, s_q, h_q, d_v]"));
  int d_v = 0;
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "d_v", out.sizes[3], &d_v));

  DenseDecodeParams p;
  DenseDecodeShape& s = p.shape;
  OPENMLA_RETURN_IF_ERROR(dense_decode_shape(entry, q, *t.kv_cache, *t.block_table, d_v, &s));
  OPENMLA_RETURN_IF_ERROR(to_dtype(entry, "out", out, "one of {bfloat16, float16}", &s.out_dtype));
  OPENMLA_RETURN_IF_ERROR(bind_decode_outputs(entry, out, lse, &p));
  OPENMLA_RETURN_IF_ERROR(check_optional_vector(entry, "seqlens", t.seqlens, s.batch, "([batch])", "int32"));
  OPENMLA_RETURN_IF_ERROR(check_scale(entry, "q_scale", t.q_scale));
  OPENMLA_RETURN_IF_ERROR(check_scale(entry, "kv_scale", t.kv_scale));

  // ---- pointers and strides (checked by the api validators) ----
  const TensorRef& kv = *t.kv_cache;
  const TensorRef& table = *t.block_table;
  p.q = address(q);
  p.q_stride_b = q.strides[0], p.q_stride_s = q.strides[1], p.q_stride_h = q.strides[2];
  p.kv_cache = address(kv);
  p.kv_stride_page = kv.strides[0], p.kv_stride_token = kv.strides[1], p.kv_stride_head = kv.strides[2];
  p.block_table = static_cast<const int32_t*>(address(table));
  p.block_table_stride_b = table.strides[0];
  p.seqlens = t.seqlens ? static_cast<const int32_t*>(address(*t.seqlens)) : nullptr;
  p.q_scale = t.q_scale ? static_cast<const float*>(address(*t.q_scale)) : nullptr;
  p.kv_scale = t.kv_scale ? static_cast<const float*>(address(*t.kv_scale)) : nullptr;
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  *params = p;
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Sparse decode
// ---------------------------------------------------------------------------
Status sparse_decode_shape(const char* entry, const TensorRef& q, const TensorRef& kv_cache,
                           const TensorRef& indices, int d_v, SparseDecodeShape* shape) {
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "q", q, 4, "[batch, s_q, h_q, d_qk]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "kv_cache", kv_cache, 4, "[num_pages, page_size, 1, 656]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "indices", indices, 3, "[batch, s_q, topk]"));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "q", q, "bfloat16"));
  if (kv_cache.itemsize != 1) {
    return argument_error(kUnsupported, entry, "kv_cache", "is not a byte tensor",
                          attr("kv_cache", "dtype") + " = " + kv_cache.dtype,
                          "a 1-byte dtype (uint8 or float8_e4m3fn) holding 656-byte tokens");
  }
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "indices", indices, "int32"));
  OPENMLA_RETURN_IF_ERROR(check_sizes(entry, "kv_cache", kv_cache, {-1, -1, 1, kSparseFp8TokenBytes},
                                      "([num_pages, page_size, 1, 656])"));
  OPENMLA_RETURN_IF_ERROR(
      check_sizes(entry, "indices", indices, {q.sizes[0], q.sizes[1], -1}, "([batch, s_q, topk])"));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "q", q));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "kv_cache", kv_cache));
  OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, "indices", indices));
  if (kv_cache.sizes[1] > 1 && kv_cache.strides[1] != kSparseFp8TokenBytes) {
    // NOTE: the params carry a page stride only; tokens inside a page are packed.
    return argument_error(kInvalid, entry, "kv_cache", "has tokens that are not packed inside a page",
                          attr("kv_cache", "stride(1)") + " = " + std::to_string(kv_cache.strides[1]), "656");
  }

  SparseDecodeShape s;
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "batch", q.sizes[0], &s.batch));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "s_q", q.sizes[1], &s.s_q));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "h_q", q.sizes[2], &s.h_q));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "d_qk", q.sizes[3], &s.d_qk));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "num_pages", kv_cache.sizes[0], &s.num_pages));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "page_size", kv_cache.sizes[1], &s.page_size));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "topk", indices.sizes[2], &s.topk));
  s.d_v = d_v;
  *shape = s;
  return Status::ok();
}

Status sparse_decode_params(const char* entry, const SparseDecodeTensors& t, float softmax_scale,
                            SparseDecodeParams* params) {
  const TensorRef& out = *t.out;
  const TensorRef& lse = *t.lse;
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "q", *t.q, 4, "[batch, s_q, h_q, d_qk]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "out", out, 4, "[batch, s_q, h_q, d_v]"));
  int d_v = 0;
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "d_v", out.sizes[3], &d_v));

  SparseDecodeParams p;
  SparseDecodeShape& s = p.shape;
  OPENMLA_RETURN_IF_ERROR(sparse_decode_shape(entry, *t.q, *t.kv_cache, *t.indices, d_v, &s));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "out", out, "bfloat16"));
  OPENMLA_RETURN_IF_ERROR(bind_decode_outputs(entry, out, lse, &p));
  OPENMLA_RETURN_IF_ERROR(
      check_optional_vector(entry, "topk_length", t.topk_length, s.batch, "([batch])", "int32"));
  OPENMLA_RETURN_IF_ERROR(
      check_optional_vector(entry, "attn_sink", t.attn_sink, s.h_q, "([h_q])", "float32"));

  // ---- pointers and strides (checked by the api validators) ----
  const TensorRef& q = *t.q;
  const TensorRef& kv = *t.kv_cache;
  const TensorRef& indices = *t.indices;
  p.q = address(q);
  p.q_stride_b = q.strides[0], p.q_stride_s = q.strides[1], p.q_stride_h = q.strides[2];
  p.kv_cache = static_cast<const uint8_t*>(address(kv));
  p.kv_stride_page_bytes = kv.strides[0];  // 1-byte elements
  p.indices = static_cast<const int32_t*>(address(indices));
  p.indices_stride_b = indices.strides[0], p.indices_stride_s = indices.strides[1];
  p.topk_length = t.topk_length ? static_cast<const int32_t*>(address(*t.topk_length)) : nullptr;
  p.attn_sink = t.attn_sink ? static_cast<const float*>(address(*t.attn_sink)) : nullptr;
  p.softmax_scale = softmax_scale;
  *params = p;
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Sparse prefill
// ---------------------------------------------------------------------------
Status sparse_prefill_params(const char* entry, const SparsePrefillTensors& t, float softmax_scale,
                             SparsePrefillParams* params) {
  const TensorRef& q = *t.q;
  const TensorRef& kv = *t.kv;
  const TensorRef& indices = *t.indices;
  const TensorRef& out = *t.out;
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "q", q, 3, "[s_q, h_q, d_qk]"));
  // A 4-D byte tensor is sparse decode's 656-byte paged FP8 cache (FP8-cache mode).
  const bool fp8_cache = kv.sizes.size() == 4 && kv.itemsize == 1;
  if (!fp8_cache) {
    OPENMLA_RETURN_IF_ERROR(check_rank(entry, "kv", kv, 3,
                                       "[s_kv, h_kv, d_qk] bf16, or the FP8 cache [num_pages, page_size, 1, 656]"));
  }
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "indices", indices, 3, "[s_q, h_kv, topk]"));
  OPENMLA_RETURN_IF_ERROR(check_rank(entry, "out", out, 3, "[s_q, h_q, d_v]"));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "q", q, "bfloat16"));
  if (!fp8_cache) OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "kv", kv, "bfloat16"));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "indices", indices, "int32"));
  OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, "out", out, "bfloat16"));
  if (fp8_cache) {
    OPENMLA_RETURN_IF_ERROR(
        check_sizes(entry, "kv", kv, {-1, -1, 1, kSparseFp8TokenBytes}, "([num_pages, page_size, 1, 656])"));
    if (kv.sizes[1] > 1 && kv.strides[1] != kSparseFp8TokenBytes) {
      // NOTE: the params carry a page stride only; tokens inside a page are packed.
      return argument_error(kInvalid, entry, "kv", "has tokens that are not packed inside a page",
                            attr("kv", "stride(1)") + " = " + std::to_string(kv.strides[1]), "656");
    }
  } else {
    if (kv.sizes[1] != 1) {
      return argument_error(kUnsupported, entry, "kv", "has more than one KV head",
                            attr("kv", "shape") + " = " + show_list(kv.sizes), "h_kv = 1 ([s_kv, 1, d_qk])");
    }
    OPENMLA_RETURN_IF_ERROR(check_sizes(entry, "kv", kv, {-1, 1, q.sizes[2]}, "([s_kv, 1, d_qk of q])"));
  }
  OPENMLA_RETURN_IF_ERROR(check_sizes(entry, "indices", indices, {q.sizes[0], 1, -1}, "([s_q, 1, topk])"));
  OPENMLA_RETURN_IF_ERROR(check_sizes(entry, "out", out, {q.sizes[0], q.sizes[1], -1}, "([s_q, h_q, d_v])"));
  // Empty sizes first: the outputs made from them would be blamed otherwise.
  for (const auto& [name, size] : {std::pair<const char*, int64_t>{"s_q", q.sizes[0]},
                                   std::pair<const char*, int64_t>{"h_q", q.sizes[1]}}) {
    if (size < 1) {
      return argument_error(kInvalid, entry, name, "is too small", show(name, size), std::string(name) + " >= 1");
    }
  }
  for (const auto& [name, ref] : {std::pair<const char*, const TensorRef*>{"max_logits", t.max_logits},
                                  std::pair<const char*, const TensorRef*>{"lse", t.lse}}) {
    OPENMLA_RETURN_IF_ERROR(check_rank(entry, name, *ref, 2, "[s_q, h_q]"));
    OPENMLA_RETURN_IF_ERROR(check_dtype_name(entry, name, *ref, "float32"));
    OPENMLA_RETURN_IF_ERROR(check_sizes(entry, name, *ref, {q.sizes[0], q.sizes[1]}, "([s_q, h_q])"));
    OPENMLA_RETURN_IF_ERROR(check_contiguous(entry, name, *ref));
  }
  OPENMLA_RETURN_IF_ERROR(
      check_optional_vector(entry, "topk_length", t.topk_length, q.sizes[0], "([s_q])", "int32"));
  OPENMLA_RETURN_IF_ERROR(
      check_optional_vector(entry, "attn_sink", t.attn_sink, q.sizes[1], "([h_q])", "float32"));
  for (const auto& [name, ref] : {std::pair<const char*, const TensorRef*>{"q", &q},
                                  {"kv", &kv},
                                  {"indices", &indices},
                                  {"out", &out}}) {
    OPENMLA_RETURN_IF_ERROR(check_inner_contiguous(entry, name, *ref));
  }

  SparsePrefillParams p;
  SparsePrefillShape& s = p.shape;
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "s_q", q.sizes[0], &s.s_q));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "h_q", q.sizes[1], &s.h_q));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "d_qk", q.sizes[2], &s.d_qk));
  if (fp8_cache) {
    s.fp8_kv_cache = true;
    OPENMLA_RETURN_IF_ERROR(to_int(entry, "num_pages", kv.sizes[0], &s.num_pages));
    OPENMLA_RETURN_IF_ERROR(to_int(entry, "page_size", kv.sizes[1], &s.page_size));
    OPENMLA_RETURN_IF_ERROR(to_int(entry, "s_kv", kv.sizes[0] * kv.sizes[1], &s.s_kv));
  } else {
    OPENMLA_RETURN_IF_ERROR(to_int(entry, "s_kv", kv.sizes[0], &s.s_kv));
  }
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "topk", indices.sizes[2], &s.topk));
  OPENMLA_RETURN_IF_ERROR(to_int(entry, "d_v", out.sizes[2], &s.d_v));

  // ---- pointers and strides (checked by the api validators) ----
  p.q = address(q);
  p.q_stride_s = q.strides[0], p.q_stride_h = q.strides[1];
  if (fp8_cache) {
    p.kv_cache = static_cast<const uint8_t*>(address(kv));
    p.kv_stride_page_bytes = kv.strides[0];  // 1-byte elements
  } else {
    p.kv = address(kv);
    p.kv_stride_s = kv.strides[0];
  }
  p.indices = static_cast<const int32_t*>(address(indices));
  p.indices_stride_s = indices.strides[0];
  p.topk_length = t.topk_length ? static_cast<const int32_t*>(address(*t.topk_length)) : nullptr;
  p.attn_sink = t.attn_sink ? static_cast<const float*>(address(*t.attn_sink)) : nullptr;
  p.out = const_cast<void*>(address(out));
  p.out_stride_s = out.strides[0], p.out_stride_h = out.strides[1];
  p.max_logits = static_cast<float*>(const_cast<void*>(address(*t.max_logits)));
  p.lse = static_cast<float*>(const_cast<void*>(address(*t.lse)));
  p.softmax_scale = softmax_scale;
  *params = p;
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Workspace and devices
// ---------------------------------------------------------------------------
Status workspace_bytes(const char* entry, const TensorRef& workspace, int device, void** base,
                       size_t* bytes) {
  if (workspace.dtype != "uint8" && workspace.dtype != "int32") {
    return argument_error(kUnsupported, entry, "workspace", "has an unsupported dtype",
                          attr("workspace", "dtype") + " = " + workspace.dtype,
                          "uint8 (plan.alloc_workspace()) or int32 (flash_mla.get_mla_metadata())");
  }
  if (workspace.device != device) {
    return argument_error(kInvalid, entry, "workspace", "is on another device",
                          attr("workspace", "device") + " = " + device_name(workspace.device),
                          device_name(device) + " (the device of q)");
  }
  OPENMLA_RETURN_IF_ERROR(check_contiguous(entry, "workspace", workspace));
  *base = const_cast<void*>(address(workspace));
  *bytes = static_cast<size_t>(workspace.numel() * workspace.itemsize);
  return Status::ok();
}

Status common_device(const char* entry, const std::vector<std::pair<const char*, const TensorRef*>>& tensors,
                     int* device) {
  const TensorRef* first = tensors.front().second;
  for (const auto& [name, ref] : tensors) {
    if (ref == nullptr || ref->device == first->device) continue;
    return argument_error(kInvalid, entry, name, "is on another device",
                          attr(name, "device") + " = " + device_name(ref->device),
                          device_name(first->device) + " (the device of " + tensors.front().first + ")");
  }
  *device = first->device;
  return Status::ok();
}

}  // namespace openmla::python

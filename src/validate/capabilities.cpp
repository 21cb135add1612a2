// The GPU capability table (openmla/capabilities.h) as argument checks: the
// same function answers *_can_implement and guards *_run.
#include <string>

#include "openmla/capabilities.h"
#include "validate/build_options.h"
#include "validate/checks.h"
#include "validate/validate.h"

namespace openmla::detail {

Status check_dense_decode_gpu(const char* entry, const DenseDecodeShape& s) {
  OPENMLA_RETURN_IF_ERROR(check_dense_decode_built(entry, s));  // OPENMLA_ENABLE_DENSE_DECODE, _FP16
  if (!dense_decode_gpu_dtype(s.q_dtype, s.kv_dtype, s.out_dtype)) {
    return argument_error(StatusCode::kNotSupported, entry, "kv_dtype", "has no GPU kernel",
                          std::string("(q, kv, out) = (") + dtype_name(s.q_dtype) + ", " + dtype_name(s.kv_dtype) +
                              ", " + dtype_name(s.out_dtype) + ")",
                          "(bf16, bf16, bf16), (fp16, fp16, fp16) or (fp8_e4m3, fp8_e4m3, bf16)");
  }
  if (!dense_decode_gpu_head_dims(s.d_qk, s.d_v)) {
    return argument_error(StatusCode::kNotSupported, entry, "d_qk", "has no GPU kernel",
                          show("d_qk", s.d_qk) + ", " + show("d_v", s.d_v), "(d_qk, d_v) = (576, 512) or (512, 512)");
  }
  if (!dense_decode_gpu_page_size(s.page_size)) {
    return argument_error(StatusCode::kNotSupported, entry, "page_size", "has no GPU kernel",
                          show("page_size", s.page_size), "8, 16, 32 or a multiple of 64 (e.g. 64, 128, 256)");
  }
  return Status::ok();
}

Status check_sparse_decode_gpu(const char* entry, const SparseDecodeShape&) {
  static_assert(kSparseDecodeGpu, "the sparse decode kernels take every validated shape");
  return check_sparse_decode_built(entry);  // OPENMLA_ENABLE_SPARSE_DECODE
}

Status check_sparse_prefill_gpu(const char* entry, const SparsePrefillShape& s) {
  static_assert(kSparsePrefillGpu, "the sparse prefill kernel takes every validated BF16 shape");
  OPENMLA_RETURN_IF_ERROR(check_sparse_prefill_built(entry));  // OPENMLA_ENABLE_SPARSE_PREFILL
  if (!s.fp8_kv_cache) return Status::ok();
  OPENMLA_RETURN_IF_ERROR(check_sparse_decode_built(entry));  // FP8-cache mode runs the decode kernels
  if (!sparse_prefill_gpu_fp8_cache(s.h_q, s.topk)) {
    const bool heads = sparse_prefill_gpu_fp8_cache(s.h_q, kKvBlockTokens);
    return argument_error(StatusCode::kNotSupported, entry, heads ? "topk" : "h_q",
                          "has no GPU kernel in fp8_kv_cache mode", show("h_q", s.h_q) + ", " + show("topk", s.topk),
                          "h_q in {8, 16, 32, 64, 128} and topk a multiple of 64 (pad indices with -1; the BF16 "
                          "kv mode takes any h_q and topk)");
  }
  return Status::ok();
}

}  // namespace openmla::detail

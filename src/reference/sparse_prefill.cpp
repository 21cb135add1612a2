// CPU reference for sparse prefill: one index list per query token over a
// BF16 KV tensor, with max_logits, LSE and the optional attention sink.
#include <algorithm>
#include <cmath>
#include <vector>

#include "validate/validate.h"
#include "openmla/fp8.h"
#include "openmla/reference.h"
#include "reference/attention_core.h"

namespace openmla {

Status reference_sparse_prefill(const SparsePrefillParams& params) {
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_prefill("reference_sparse_prefill", params));
  const SparsePrefillShape& shape = params.shape;

  std::vector<float> rows;           // [n_valid, d_qk] keys of one query token
  std::vector<const float*> keys;    // [n_valid]
  std::vector<float> q(shape.d_qk);  // [d_qk]
  std::vector<float> o(shape.d_v);   // [d_v]
  std::vector<float> scratch;
  for (int s = 0; s < shape.s_q; ++s) {
    // Key rows: the valid indices among the first topk_length[s] positions.
    const int32_t length =
        params.topk_length != nullptr ? std::clamp(params.topk_length[s], 0, shape.topk) : shape.topk;
    const int32_t* index_row = params.indices + s * params.indices_stride_s;  // [topk]
    rows.clear();
    for (int32_t k = 0; k < length; ++k) {
      const int32_t index = index_row[k];
      if (index < 0 || index >= shape.s_kv) continue;
      if (shape.fp8_kv_cache) {  // the 656-byte token, dequantised (d_qk = 576)
        const int64_t page = index / shape.page_size, slot = index % shape.page_size;
        rows.resize(rows.size() + kHeadDimQK);
        dequantize_sparse_fp8_token(params.kv_cache + page * params.kv_stride_page_bytes + slot * kSparseFp8TokenBytes,
                                    rows.data() + rows.size() - kHeadDimQK);
        continue;
      }
      const int64_t kv_base = static_cast<int64_t>(index) * params.kv_stride_s;
      for (int d = 0; d < shape.d_qk; ++d) {
        rows.push_back(reference_detail::load_element(DType::kBF16, params.kv, kv_base + d, 1.0f));
      }
    }
    keys.clear();
    for (size_t offset = 0; offset < rows.size(); offset += shape.d_qk) keys.push_back(rows.data() + offset);

    for (int h = 0; h < shape.h_q; ++h) {
      const int64_t q_base = s * params.q_stride_s + h * params.q_stride_h;
      for (int d = 0; d < shape.d_qk; ++d) {
        q[d] = reference_detail::load_element(DType::kBF16, params.q, q_base + d, 1.0f);
      }
      const reference_detail::RowStats stats = reference_detail::attend_row(
          q.data(), keys, shape.d_qk, shape.d_v, params.softmax_scale, o.data(), scratch);
      const float* sink = params.attn_sink != nullptr ? params.attn_sink + h : nullptr;
      const float lse = reference_detail::finish_row(stats.lse, o.data(), shape.d_v, sink);
      reference_detail::store_row(
          DType::kBF16,
          static_cast<uint16_t*>(params.out) + s * params.out_stride_s + h * params.out_stride_h, o.data(),
          shape.d_v);
      params.max_logits[static_cast<int64_t>(s) * shape.h_q + h] = stats.max_logit;
      params.lse[static_cast<int64_t>(s) * shape.h_q + h] = lse;
    }
  }
  return Status::ok();
}

}  // namespace openmla

// CPU reference for sparse decode over the 656-byte FP8 cache, direct and split
// forms. Key rows are the tokens named by the index list of each (request,
// query token); invalid indices and positions past topk_length are skipped
// without reading the cache.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "validate/validate.h"
#include "openmla/fp8.h"
#include "openmla/reference.h"
#include "reference/attention_core.h"

namespace openmla {
namespace {

using reference_detail::attend_row;
using reference_detail::RowStats;

// Called once per head h with the row's O [d_v] and stats.
using SparseRowEmit = std::function<void(int h, float* o, const RowStats& stats)>;

// Index positions of request b that count: topk_length[b] clamped to [0, topk].
int32_t sparse_length(const SparseDecodeParams& params, int b) {
  const int32_t topk = params.shape.topk;
  return params.topk_length != nullptr ? std::clamp(params.topk_length[b], 0, topk) : topk;
}

// Attention of every head of query token (b, s) over index positions
// [pos_begin, pos_end).
void attend_sparse_query(const SparseDecodeParams& params, int b, int s, int32_t pos_begin, int32_t pos_end,
                         const SparseRowEmit& emit) {
  const SparseDecodeShape& shape = params.shape;
  pos_end = std::min(pos_end, sparse_length(params, b));
  const int64_t num_tokens = static_cast<int64_t>(shape.num_pages) * shape.page_size;
  const int32_t* index_row =
      params.indices + b * params.indices_stride_b + s * params.indices_stride_s;  // [topk]

  // Dequantised rows of the valid indices in the range: [n_valid, 576].
  std::vector<float> rows;
  for (int32_t k = pos_begin; k < pos_end; ++k) {
    const int32_t index = index_row[k];
    if (index < 0 || index >= num_tokens) continue;
    const uint8_t* token = params.kv_cache +
                           static_cast<int64_t>(index / shape.page_size) * params.kv_stride_page_bytes +
                           static_cast<int64_t>(index % shape.page_size) * kSparseFp8TokenBytes;  // [656]
    rows.resize(rows.size() + kHeadDimQK);
    dequantize_sparse_fp8_token(token, rows.data() + rows.size() - kHeadDimQK);
  }
  std::vector<const float*> keys;
  for (size_t offset = 0; offset < rows.size(); offset += kHeadDimQK) keys.push_back(rows.data() + offset);

  std::vector<float> q(shape.d_qk);  // [d_qk]
  std::vector<float> o(shape.d_v);   // [d_v]
  std::vector<float> scratch;
  for (int h = 0; h < shape.h_q; ++h) {
    const int64_t q_base = b * params.q_stride_b + s * params.q_stride_s + h * params.q_stride_h;
    for (int d = 0; d < shape.d_qk; ++d) {
      q[d] = reference_detail::load_element(DType::kBF16, params.q, q_base + d, 1.0f);
    }
    const RowStats stats =
        attend_row(q.data(), keys, shape.d_qk, shape.d_v, params.softmax_scale, o.data(), scratch);
    emit(h, o.data(), stats);
  }
}

// Writes final rows of query token (b, s), with the attention sink.
SparseRowEmit sparse_final_emit(const SparseDecodeParams& params, int b, int s) {
  return [&params, b, s](int h, float* o, const RowStats& stats) {
    const SparseDecodeShape& shape = params.shape;
    const float* sink = params.attn_sink != nullptr ? params.attn_sink + h : nullptr;
    const float lse = reference_detail::finish_row(stats.lse, o, shape.d_v, sink);
    const int64_t out_offset = b * params.out_stride_b + s * params.out_stride_s + h * params.out_stride_h;
    reference_detail::store_row(DType::kBF16, static_cast<uint16_t*>(params.out) + out_offset, o, shape.d_v);
    params.lse[b * params.lse_stride_b + h * params.lse_stride_h + s] = lse;
  };
}

}  // namespace

Status reference_sparse_decode(const SparseDecodeParams& params) {
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_decode("reference_sparse_decode", params));
  for (int b = 0; b < params.shape.batch; ++b) {
    for (int s = 0; s < params.shape.s_q; ++s) {
      attend_sparse_query(params, b, s, 0, sparse_length(params, b), sparse_final_emit(params, b, s));
    }
  }
  return Status::ok();
}

Status reference_sparse_decode_split(const SparseDecodeParams& params, const DecodePlan& plan,
                                     const HostSchedule& schedule, float* partial_o, float* partial_lse) {
  constexpr const char* kEntry = "reference_sparse_decode_split";
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_decode(kEntry, params));
  const SparseDecodeShape& shape = params.shape;
  // Sparse items are (request, query token) pairs; rows inside an item are heads.
  OPENMLA_RETURN_IF_ERROR(reference_detail::check_split_plan(kEntry, plan, shape.batch * shape.s_q, 1,
                                                             shape.h_q, shape.d_v, partial_o, partial_lse));

  const auto num_blocks = [&params](int32_t item) {
    return reference_detail::num_kv_blocks(sparse_length(params, item / params.shape.s_q));
  };
  const auto visit = [&](const reference_detail::PieceVisit& piece) {
    const int b = piece.item / shape.s_q;
    const int s = piece.item % shape.s_q;
    const int32_t pos_begin = piece.begin_block * kKvBlockTokens;
    const int32_t pos_end = piece.end_block * kKvBlockTokens;
    if (!piece.partial) {
      attend_sparse_query(params, b, s, pos_begin, pos_end, sparse_final_emit(params, b, s));
      return;
    }
    float* slot_o = partial_o + static_cast<size_t>(piece.slot) * shape.h_q * shape.d_v;  // [h_q, d_v]
    float* slot_lse = partial_lse + static_cast<size_t>(piece.slot) * shape.h_q;          // [h_q]
    attend_sparse_query(params, b, s, pos_begin, pos_end, [&](int h, float* o, const RowStats& stats) {
      std::copy(o, o + shape.d_v, slot_o + static_cast<size_t>(h) * shape.d_v);
      slot_lse[h] = stats.lse;
    });
  };
  return reference_detail::walk_schedule(kEntry, plan, schedule, num_blocks, visit);
}

}  // namespace openmla

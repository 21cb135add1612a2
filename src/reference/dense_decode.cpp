// CPU reference for dense decode (BF16/FP16, FP8 per-tensor) over a paged KV
// cache, direct and split forms. Key rows come from the block table; only
// tokens below the request's length are read, so block-table entries past the
// last page and slots past the length are never touched.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "validate/validate.h"
#include "openmla/reference.h"
#include "reference/attention_core.h"

namespace openmla {
namespace {

using reference_detail::attend_row;
using reference_detail::RowStats;

// Called once per (query token s, head h) with the row's O [d_v] and stats.
using DenseRowEmit = std::function<void(int s, int h, float* o, const RowStats& stats)>;

// Tokens request b may read: its seqlen, clamped to what its block table can hold.
int32_t dense_length(const DenseDecodeParams& params, int b) {
  const DenseDecodeShape& shape = params.shape;
  const int32_t capacity = shape.max_pages_per_seq * shape.page_size;
  return std::clamp(params.seqlens[b], 0, capacity);
}

// Attention of every query row of request b over tokens [token_begin, token_end),
// each row further limited by its causal window.
void attend_dense_request(const DenseDecodeParams& params, int b, int32_t token_begin, int32_t token_end,
                          const DenseRowEmit& emit) {
  const DenseDecodeShape& shape = params.shape;
  const int32_t length = dense_length(params, b);
  token_end = std::min(token_end, length);
  token_begin = std::min(token_begin, token_end);
  const bool fp8 = shape.kv_dtype == DType::kFP8E4M3;
  const float q_scale = fp8 ? *params.q_scale : 1.0f;
  const float kv_scale = fp8 ? *params.kv_scale : 1.0f;

  // Dequantised keys of the range: [token_end - token_begin, h_kv, d_qk].
  const int32_t num_tokens = token_end - token_begin;
  std::vector<float> kv(static_cast<size_t>(num_tokens) * shape.h_kv * shape.d_qk);
  const int32_t* table_row = params.block_table + b * params.block_table_stride_b;  // [max_pages_per_seq]
  for (int32_t t = token_begin; t < token_end; ++t) {
    const int64_t page = table_row[t / shape.page_size];
    const int64_t token_base = page * params.kv_stride_page + (t % shape.page_size) * params.kv_stride_token;
    for (int g = 0; g < shape.h_kv; ++g) {
      float* row = kv.data() + (static_cast<size_t>(t - token_begin) * shape.h_kv + g) * shape.d_qk;
      for (int d = 0; d < shape.d_qk; ++d) {
        row[d] = reference_detail::load_element(shape.kv_dtype, params.kv_cache,
                                                token_base + g * params.kv_stride_head + d, kv_scale);
      }
    }
  }

  const int heads_per_kv = shape.h_q / shape.h_kv;
  std::vector<float> q(shape.d_qk);  // [d_qk]
  std::vector<float> o(shape.d_v);   // [d_v]
  std::vector<float> scratch;
  std::vector<const float*> keys;
  for (int s = 0; s < shape.s_q; ++s) {
    // Causal: the query block is aligned to the end, row s sees [0, length - s_q + s].
    const int32_t visible = params.causal ? std::clamp(length - shape.s_q + s + 1, 0, length) : length;
    const int32_t row_end = std::min(token_end, visible);
    for (int h = 0; h < shape.h_q; ++h) {
      const int64_t q_base = b * params.q_stride_b + s * params.q_stride_s + h * params.q_stride_h;
      for (int d = 0; d < shape.d_qk; ++d) {
        q[d] = reference_detail::load_element(shape.q_dtype, params.q, q_base + d, q_scale);
      }
      const int g = h / heads_per_kv;
      keys.clear();
      for (int32_t t = token_begin; t < row_end; ++t) {
        keys.push_back(kv.data() + (static_cast<size_t>(t - token_begin) * shape.h_kv + g) * shape.d_qk);
      }
      const RowStats stats =
          attend_row(q.data(), keys, shape.d_qk, shape.d_v, params.softmax_scale, o.data(), scratch);
      emit(s, h, o.data(), stats);
    }
  }
}

// Writes final rows of request b to params.out / params.lse.
DenseRowEmit dense_final_emit(const DenseDecodeParams& params, int b) {
  return [&params, b](int s, int h, float* o, const RowStats& stats) {
    const DenseDecodeShape& shape = params.shape;
    const float lse = reference_detail::finish_row(stats.lse, o, shape.d_v, nullptr);
    const int64_t out_offset = b * params.out_stride_b + s * params.out_stride_s + h * params.out_stride_h;
    reference_detail::store_row(shape.out_dtype,
                                static_cast<char*>(params.out) + out_offset * dtype_size(shape.out_dtype), o,
                                shape.d_v);
    params.lse[b * params.lse_stride_b + h * params.lse_stride_h + s] = lse;
  };
}

// The reference reads host memory, so it can afford to check every page a
// request uses; a bad page id is an error, never an out-of-bounds read.
Status check_block_table(const char* entry, const DenseDecodeParams& params) {
  const DenseDecodeShape& shape = params.shape;
  for (int b = 0; b < shape.batch; ++b) {
    // NOTE: 64-bit: length + page_size - 1 may exceed INT32_MAX.
    const int32_t pages_used =
        int32_t((int64_t(dense_length(params, b)) + shape.page_size - 1) / shape.page_size);
    const int32_t* table_row = params.block_table + b * params.block_table_stride_b;  // [max_pages_per_seq]
    for (int32_t j = 0; j < pages_used; ++j) {
      if (table_row[j] < 0 || table_row[j] >= shape.num_pages) {
        return Status::invalid_argument(std::string(entry) + ": argument 'block_table' holds an invalid page: got " +
                                        std::to_string(table_row[j]) + " at [" + std::to_string(b) + "][" +
                                        std::to_string(j) + "], expected 0 <= page < num_pages = " +
                                        std::to_string(shape.num_pages) + " for every page within seqlens[b]");
      }
    }
  }
  return Status::ok();
}

}  // namespace


Status reference_dense_decode(const DenseDecodeParams& params) {
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode("reference_dense_decode", params));
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode_scale_values("reference_dense_decode", params));
  OPENMLA_RETURN_IF_ERROR(check_block_table("reference_dense_decode", params));
  for (int b = 0; b < params.shape.batch; ++b) {
    attend_dense_request(params, b, 0, dense_length(params, b), dense_final_emit(params, b));
  }
  return Status::ok();
}

Status reference_dense_decode_split(const DenseDecodeParams& params, const DecodePlan& plan,
                                    const HostSchedule& schedule, float* partial_o, float* partial_lse) {
  constexpr const char* kEntry = "reference_dense_decode_split";
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode(kEntry, params));
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode_scale_values(kEntry, params));
  OPENMLA_RETURN_IF_ERROR(check_block_table(kEntry, params));
  const DenseDecodeShape& shape = params.shape;
  // Dense items are requests; rows inside an item are (s, h), head fastest.
  const int rows_per_item = shape.s_q * shape.h_q;
  OPENMLA_RETURN_IF_ERROR(reference_detail::check_split_plan(
      kEntry, plan, shape.batch, shape.s_q, rows_per_item, shape.d_v, partial_o, partial_lse));

  const auto num_blocks = [&params](int32_t item) {
    return reference_detail::num_kv_blocks(dense_length(params, item));
  };
  const auto visit = [&](const reference_detail::PieceVisit& piece) {
    const int b = piece.item;
    const int32_t token_begin = piece.begin_block * kKvBlockTokens;
    const int32_t token_end = piece.end_block * kKvBlockTokens;
    if (!piece.partial) {
      attend_dense_request(params, b, token_begin, token_end, dense_final_emit(params, b));
      return;
    }
    float* slot_o = partial_o + static_cast<size_t>(piece.slot) * rows_per_item * shape.d_v;  // [rows, d_v]
    float* slot_lse = partial_lse + static_cast<size_t>(piece.slot) * rows_per_item;          // [rows]
    attend_dense_request(params, b, token_begin, token_end,
                         [&](int s, int h, float* o, const RowStats& stats) {
                           const int row = s * shape.h_q + h;
                           std::copy(o, o + shape.d_v, slot_o + static_cast<size_t>(row) * shape.d_v);
                           slot_lse[row] = stats.lse;
                         });
  };
  return reference_detail::walk_schedule(kEntry, plan, schedule, num_blocks, visit);
}

}  // namespace openmla

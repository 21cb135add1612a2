// Shared maths of the CPU reference. Every family reduces to "attend one query
// row over a list of key rows" plus the LSE merge of split pieces; the
// families differ only in how they fetch (and dequantise) key rows.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla::reference_detail {

// Result of one query row over one set of keys (a whole row or one piece).
struct RowStats {
  float lse = 0.0f;        // natural log of sum exp(score); -inf when there are no keys
  float max_logit = 0.0f;  // max score (softmax_scale * q.k); -inf when there are no keys
};

// Two-pass softmax attention in float32.
//   q:    [d_qk] float
//   keys: [n] pointers to float rows of at least d_qk values; V = the first d_v of each
//   o:    [d_v], normalised within these keys; 0 when n == 0
// scratch is reused between calls to hold the scores.
RowStats attend_row(const float* q, std::span<const float* const> keys, int d_qk, int d_v,
                    float softmax_scale, float* o, std::vector<float>& scratch);

// A row's final form: an empty row (lse == -inf from attend_row) gets O = 0 and
// LSE = +inf; otherwise, with a sink, O *= 1 / (1 + exp(sink - lse)).
// Returns the final LSE.
float finish_row(float piece_lse, float* o /*[d_v]*/, int d_v, const float* sink /*[1] or null*/);

// LSE merge of pieces of one row: O = sum w_i O_i with w_i = exp(lse_i - LSE),
// LSE = log(sum exp(lse_i)). All pieces empty (-inf): O = 0, LSE = -inf.
// Returns the merged LSE (still in "piece" convention; pass it to finish_row).
//   pieces_o:   [n] pointers to [d_v] floats
//   pieces_lse: [n]
float merge_pieces(std::span<const float* const> pieces_o, std::span<const float> pieces_lse, int d_v,
                   float* o /*[d_v]*/);

// Element access for the activation dtypes (bf16, fp16, fp8 e4m3 x scale, fp32).
float load_element(DType dtype, const void* base, int64_t index, float fp8_scale);
void store_row(DType dtype, void* base /*[d]*/, const float* values /*[d]*/, int d);

// One piece of a split walk: item `item` over its KV blocks [begin_block, end_block).
struct PieceVisit {
  int32_t item = 0;
  int32_t begin_block = 0;
  int32_t end_block = 0;
  bool partial = false;  // write partial slot `slot` instead of the final output
  int32_t slot = -1;
};

// Walk the schedule exactly as the kernels do and call `visit` for every
// (part, item) piece. num_blocks(item) = max(1, ceil(length / 64)).
// Checks the schedule against the plan (item, block and slot ranges) first.
Status walk_schedule(const char* entry, const DecodePlan& plan, const HostSchedule& schedule,
                     const std::function<int32_t(int32_t item)>& num_blocks,
                     const std::function<void(const PieceVisit&)>& visit);

// The plan must describe this call: item count, rows per item and d_v match,
// and partial buffers exist when the plan has slots.
Status check_split_plan(const char* entry, const DecodePlan& plan, int num_items, int q_tokens_per_item,
                        int rows_per_item, int d_v, const float* partial_o, const float* partial_lse);

// max(1, ceil(length / kKvBlockTokens)).
inline int32_t num_kv_blocks(int32_t length) {
  return length <= 0 ? 1 : int32_t((int64_t(length) + kKvBlockTokens - 1) / kKvBlockTokens);  // no int overflow
}

}  // namespace openmla::reference_detail

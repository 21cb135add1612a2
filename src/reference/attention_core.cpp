// Shared maths of the CPU reference: one query row's softmax attention, the
// final-row fix-ups (empty rows, attention sink), the LSE merge of split
// pieces, dtype access and the schedule walk.
#include "reference/attention_core.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "openmla/fp8.h"

namespace openmla::reference_detail {

// ---------------------------------------------------------------------------
// One query row
// ---------------------------------------------------------------------------
namespace {

// Eight independent float32 partial sums: a fixed order (deterministic), a
// shorter error chain than one running sum, and the compiler can vectorise it.
constexpr int kDotLanes = 8;

float dot_product(const float* a /*[n]*/, const float* b /*[n]*/, int n) {
  float partial[kDotLanes] = {};
  int d = 0;
  for (; d + kDotLanes <= n; d += kDotLanes) {
    for (int lane = 0; lane < kDotLanes; ++lane) partial[lane] += a[d + lane] * b[d + lane];
  }
  float sum = 0.0f;
  for (int lane = 0; lane < kDotLanes; ++lane) sum += partial[lane];
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

}  // namespace

RowStats attend_row(const float* q /*[d_qk]*/, std::span<const float* const> keys, int d_qk, int d_v,
                    float softmax_scale, float* o /*[d_v]*/, std::vector<float>& scratch) {
  std::fill(o, o + d_v, 0.0f);
  if (keys.empty()) return {-INFINITY, -INFINITY};

  // Pass 1: scores and their max.
  scratch.resize(keys.size());
  float max_score = -INFINITY;
  for (size_t j = 0; j < keys.size(); ++j) {
    scratch[j] = softmax_scale * dot_product(q, keys[j], d_qk);
    max_score = std::max(max_score, scratch[j]);
  }
  // Pass 2: exp-weights relative to the max, weighted V sum.
  float sum = 0.0f;
  for (size_t j = 0; j < keys.size(); ++j) {
    const float p = std::exp(scratch[j] - max_score);
    sum += p;
    const float* v = keys[j];  // [d_v]: V is the leading part of the key row
    for (int d = 0; d < d_v; ++d) o[d] += p * v[d];
  }
  const float inv_sum = 1.0f / sum;  // sum >= 1: the max term contributes exp(0)
  for (int d = 0; d < d_v; ++d) o[d] *= inv_sum;
  return {max_score + std::log(sum), max_score};
}

float finish_row(float piece_lse, float* o /*[d_v]*/, int d_v, const float* sink) {
  if (piece_lse == -INFINITY) {
    std::fill(o, o + d_v, 0.0f);
    return INFINITY;
  }
  if (sink != nullptr) {
    // 1 / (1 + exp(sink - lse)): sink = +inf gives 0, sink = -inf gives 1.
    const float factor = 1.0f / (1.0f + std::exp(*sink - piece_lse));
    for (int d = 0; d < d_v; ++d) o[d] *= factor;
  }
  return piece_lse;
}

// ---------------------------------------------------------------------------
// Split pieces
// ---------------------------------------------------------------------------
float merge_pieces(std::span<const float* const> pieces_o, std::span<const float> pieces_lse, int d_v,
                   float* o /*[d_v]*/) {
  std::fill(o, o + d_v, 0.0f);
  float max_lse = -INFINITY;
  for (float lse : pieces_lse) max_lse = std::max(max_lse, lse);
  if (max_lse == -INFINITY) return -INFINITY;  // every piece empty

  float sum = 0.0f;
  for (float lse : pieces_lse) sum += std::exp(lse - max_lse);  // empty pieces add exp(-inf) = 0
  const float merged_lse = max_lse + std::log(sum);
  for (size_t i = 0; i < pieces_o.size(); ++i) {
    if (pieces_lse[i] == -INFINITY) continue;  // never read an empty piece's O
    const float weight = std::exp(pieces_lse[i] - merged_lse);
    for (int d = 0; d < d_v; ++d) o[d] += weight * pieces_o[i][d];
  }
  return merged_lse;
}

// ---------------------------------------------------------------------------
// dtype access
// ---------------------------------------------------------------------------
float load_element(DType dtype, const void* base, int64_t index, float fp8_scale) {
  switch (dtype) {
    case DType::kBF16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP16: return fp16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP8E4M3: return e4m3_bits_to_float(static_cast<const uint8_t*>(base)[index]) * fp8_scale;
    case DType::kFP32: return static_cast<const float*>(base)[index];
    case DType::kInt32: return static_cast<float>(static_cast<const int32_t*>(base)[index]);
  }
  return NAN;
}

void store_row(DType dtype, void* base /*[d]*/, const float* values /*[d]*/, int d) {
  for (int i = 0; i < d; ++i) {
    switch (dtype) {
      case DType::kBF16: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(values[i]); break;
      case DType::kFP16: static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(values[i]); break;
      case DType::kFP32: static_cast<float*>(base)[i] = values[i]; break;
      case DType::kFP8E4M3: static_cast<uint8_t*>(base)[i] = float_to_e4m3_bits(values[i]); break;
      case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(values[i]); break;
    }
  }
}

// ---------------------------------------------------------------------------
// Schedule walk
// ---------------------------------------------------------------------------
namespace {

Status schedule_error(const char* entry, int part, const std::string& what) {
  return Status::invalid_argument(std::string(entry) + ": argument 'schedule' part " + std::to_string(part) +
                                  ": " + what);
}

Status plan_mismatch(const char* entry, const char* field, int got, int expected) {
  return Status::invalid_argument(std::string(entry) + ": argument 'plan." + field +
                                  "' = " + std::to_string(got) + " does not match the params (expected " +
                                  std::to_string(expected) + ")");
}

}  // namespace

Status check_split_plan(const char* entry, const DecodePlan& plan, int num_items, int q_tokens_per_item,
                        int rows_per_item, int d_v, const float* partial_o, const float* partial_lse) {
  if (plan.num_items != num_items) return plan_mismatch(entry, "num_items", plan.num_items, num_items);
  if (plan.q_tokens_per_item != q_tokens_per_item) {
    return plan_mismatch(entry, "q_tokens_per_item", plan.q_tokens_per_item, q_tokens_per_item);
  }
  if (plan.rows_per_item != rows_per_item) {
    return plan_mismatch(entry, "rows_per_item", plan.rows_per_item, rows_per_item);
  }
  if (plan.d_v != d_v) return plan_mismatch(entry, "d_v", plan.d_v, d_v);
  if (plan.num_parts < 1) return plan_mismatch(entry, "num_parts", plan.num_parts, 1);
  if (plan.num_slots < 0) return plan_mismatch(entry, "num_slots", plan.num_slots, 0);
  if (plan.num_slots > 0 && (partial_o == nullptr || partial_lse == nullptr)) {
    return Status::invalid_argument(
        std::string(entry) + ": argument 'partial_o'/'partial_lse' is null, " +
        "expected host buffers for plan.num_slots = " + std::to_string(plan.num_slots) + " slots");
  }
  return Status::ok();
}

Status walk_schedule(const char* entry, const DecodePlan& plan, const HostSchedule& schedule,
                     const std::function<int32_t(int32_t item)>& num_blocks,
                     const std::function<void(const PieceVisit&)>& visit) {
  if (static_cast<int>(schedule.parts.size()) < plan.num_parts) {
    return Status::invalid_argument(std::string(entry) + ": argument 'schedule' has " +
                                    std::to_string(schedule.parts.size()) +
                                    " parts, expected plan.num_parts = " + std::to_string(plan.num_parts));
  }
  // Collect and check every piece before writing anything.
  std::vector<PieceVisit> pieces;
  for (int p = 0; p < plan.num_parts; ++p) {
    const PartWork& part = schedule.parts[p];
    if (part.flags & kPartEmpty) continue;
    if (part.begin_item < 0 || part.end_item < part.begin_item || part.end_item >= plan.num_items) {
      return schedule_error(entry, p,
                            "items [" + std::to_string(part.begin_item) + ", " +
                                std::to_string(part.end_item) + "] outside [0, " +
                                std::to_string(plan.num_items) + ")");
    }
    for (int32_t item = part.begin_item; item <= part.end_item; ++item) {
      PieceVisit piece;
      piece.item = item;
      piece.begin_block = part_item_begin_block(part, item);
      piece.end_block = item == part.end_item ? part.end_block : num_blocks(item);
      if (piece.begin_block < 0 || piece.end_block > num_blocks(item) ||
          piece.begin_block >= piece.end_block) {
        return schedule_error(entry, p,
                              "item " + std::to_string(item) + " blocks [" +
                                  std::to_string(piece.begin_block) + ", " + std::to_string(piece.end_block) +
                                  ") outside [0, " + std::to_string(num_blocks(item)) + ") or empty");
      }
      piece.partial = part_item_is_partial(part, item);
      if (piece.partial) {
        piece.slot = part_item_slot(part, item);
        if (piece.slot < 0 || piece.slot >= plan.num_slots) {
          return schedule_error(entry, p,
                                "item " + std::to_string(item) + " slot " + std::to_string(piece.slot) +
                                    " outside [0, " + std::to_string(plan.num_slots) + ")");
        }
      }
      pieces.push_back(piece);
    }
  }
  for (const PieceVisit& piece : pieces) visit(piece);
  return Status::ok();
}

}  // namespace openmla::reference_detail

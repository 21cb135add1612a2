// CPU reference for the split-KV combine: merges the partial pieces of every
// split item (one CombineEntry each) into the final O and LSE.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "validate/validate.h"
#include "openmla/reference.h"
#include "openmla/schedule.h"
#include "reference/attention_core.h"

namespace openmla {

Status reference_combine(const CombineParams& params) {
  constexpr const char* kEntry = "reference_combine";
  OPENMLA_RETURN_IF_ERROR(detail::validate_combine(kEntry, params));
  const int items_per_request = params.s_q / params.q_tokens_per_item;
  const int num_items = params.batch * items_per_request;
  const int rows = params.q_tokens_per_item * params.h_q;  // rows per item: (token, head), head fastest

  // Entries are schedule data, not shapes: check them before writing anything.
  for (int e = 0; e < params.num_entries; ++e) {
    const CombineEntry& entry = params.entries[e];
    if (entry.num_pieces < 2) continue;
    // NOTE: 64-bit sum: first_slot + num_pieces may overflow int.
    if (entry.item < 0 || entry.item >= num_items || entry.first_slot < 0 ||
        int64_t(entry.first_slot) + int64_t(entry.num_pieces) > int64_t(params.num_slots)) {
      return Status::invalid_argument(
          std::string(kEntry) + ": argument 'entries[" + std::to_string(e) + "]' names an item or slots out of " +
          "range: got {item " + std::to_string(entry.item) + ", first_slot " + std::to_string(entry.first_slot) +
          ", num_pieces " + std::to_string(entry.num_pieces) + "}, expected 0 <= item < " +
          std::to_string(num_items) + " and 0 <= first_slot, first_slot + num_pieces <= num_slots = " +
          std::to_string(params.num_slots));
    }
  }

  std::vector<const float*> pieces_o;  // [num_pieces] -> [d_v]
  std::vector<float> pieces_lse;       // [num_pieces]
  std::vector<float> o(params.d_v);    // [d_v]
  const size_t elem_bytes = dtype_size(params.out_dtype);
  for (int e = 0; e < params.num_entries; ++e) {
    const CombineEntry& entry = params.entries[e];
    if (entry.num_pieces < 2) continue;
    const int b = entry.item / items_per_request;
    const int s0 = (entry.item % items_per_request) * params.q_tokens_per_item;
    for (int row = 0; row < rows; ++row) {
      pieces_o.clear();
      pieces_lse.clear();
      for (int i = 0; i < entry.num_pieces; ++i) {
        const size_t slot_row = static_cast<size_t>(entry.first_slot + i) * rows + row;
        pieces_o.push_back(params.partial_o + slot_row * params.d_v);
        pieces_lse.push_back(params.partial_lse[slot_row]);
      }
      const int s = s0 + row / params.h_q;
      const int h = row % params.h_q;
      const float merged = reference_detail::merge_pieces(pieces_o, pieces_lse, params.d_v, o.data());
      const float* sink = params.attn_sink != nullptr ? params.attn_sink + h : nullptr;
      const float lse = reference_detail::finish_row(merged, o.data(), params.d_v, sink);
      const int64_t out_offset = b * params.out_stride_b + s * params.out_stride_s + h * params.out_stride_h;
      reference_detail::store_row(params.out_dtype, static_cast<char*>(params.out) + out_offset * elem_bytes,
                                  o.data(), params.d_v);
      params.lse[b * params.lse_stride_b + h * params.lse_stride_h + s] = lse;
      if (params.max_logits != nullptr) {  // sparse prefill: the max over the pieces
        float max_logit = -INFINITY;
        for (int i = 0; i < entry.num_pieces; ++i) {
          max_logit = std::fmax(max_logit, params.partial_max[static_cast<size_t>(entry.first_slot + i) * rows + row]);
        }
        params.max_logits[b * params.max_logits_stride_b + h * params.max_logits_stride_h + s] = max_logit;
      }
    }
  }
  return Status::ok();
}

}  // namespace openmla

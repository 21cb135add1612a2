// check_plan: every invariant a kernel relies on, checked from scratch (it
// does not reuse the partition code it is checking).
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "openmla/plan.h"

namespace openmla {
namespace {

int32_t length_of(const ItemLengths& lengths, int32_t item) {
  int64_t length = lengths.lengths ? lengths.lengths[item / lengths.items_per_length] : lengths.default_length;
  if (length < 0) length = 0;
  if (length > lengths.max_length) length = lengths.max_length;
  return int32_t(length);
}

// NOTE: 64-bit: length + 63 overflows int32 for lengths near INT32_MAX.
int32_t blocks_of(int32_t length) {
  return length == 0 ? 1 : int32_t((int64_t(length) + kKvBlockTokens - 1) / kKvBlockTokens);
}

Status fail(const std::string& what) { return Status::internal("check_plan: " + what); }

std::string at_part(size_t p) { return "part " + std::to_string(p) + ": "; }

}  // namespace

Status check_plan(const DecodePlan& plan, const ItemLengths& lengths, const HostSchedule& schedule) {
  if (plan.num_parts < 1) return fail("num_parts = " + std::to_string(plan.num_parts) + " < 1");
  const bool invariant = plan.chunk_blocks > 0;  // batch-invariant plan (plan/chunk_partition.h)
  if (plan.chunk_blocks < 0) return fail("chunk_blocks = " + std::to_string(plan.chunk_blocks) + " < 0");
  // Default plans: a slot pair per extra part, or none (parts of whole items only).
  if (!invariant && plan.num_slots != 0 && plan.num_slots != 2 * (plan.num_parts - 1)) {
    return fail("num_slots = " + std::to_string(plan.num_slots) + " is neither 0 nor 2 * (num_parts - 1)");
  }
  if (invariant && plan.num_slots != (plan.num_parts > plan.num_items ? plan.num_parts : 0)) {
    return fail("num_slots = " + std::to_string(plan.num_slots) +
                " is not num_parts (a slot per part) in a batch-invariant plan that can split");
  }
  if (invariant && plan.kernel == DecodeKernel::kDenseColumnSplitCluster) {
    return fail("a batch-invariant plan names the cluster kernel (another reduction order)");
  }
  if (plan.min_part_cost < 1) return fail("min_part_cost = " + std::to_string(plan.min_part_cost) + " < 1");
  const bool clustered = plan.kernel == DecodeKernel::kDenseColumnSplitCluster;
  if (plan.kernel == DecodeKernel::kNone || (clustered && plan.cluster_size != 2 && plan.cluster_size != 4 &&
                                             plan.cluster_size != 8) ||
      (!clustered && plan.cluster_size != 1)) {
    return fail(std::string("kernel = ") + decode_kernel_name(plan.kernel) + " with cluster_size = " +
                std::to_string(plan.cluster_size) + " (a cluster of 2, 4 or 8 for the cluster kernel, 1 otherwise)");
  }
  if (plan.num_q_groups < 1 || plan.rows_per_item < 1 || plan.num_items < 1) {
    return fail("num_q_groups, rows_per_item and num_items must be >= 1");
  }
  if (schedule.parts.size() != size_t(plan.num_parts) || schedule.combine.size() != size_t(plan.num_parts)) {
    return fail("schedule has " + std::to_string(schedule.parts.size()) + " parts and " +
                std::to_string(schedule.combine.size()) + " combine entries, plan has " +
                std::to_string(plan.num_parts));
  }
  const size_t expected_partial =
      invariant ? size_t(plan.num_slots) * size_t(plan.rows_per_item) * size_t(plan.d_v + 1) * sizeof(float)
                : plan.num_slots == 0 ? 0 : partial_accumulator_bytes(plan.num_parts, plan.rows_per_item, plan.d_v);
  if (plan.workspace.partial_o.bytes + plan.workspace.partial_lse.bytes != expected_partial) {
    return fail("partial accumulators take " +
                std::to_string(plan.workspace.partial_o.bytes + plan.workspace.partial_lse.bytes) +
                " bytes, the bound formula says " + std::to_string(expected_partial));
  }

  // Default plans: walk the parts in order; each must start where the previous
  // one stopped, so every (item, block) is covered exactly once and splits are
  // contiguous. Batch-invariant plans: each part is one fixed chunk of one item,
  // in any order (longest first), and every chunk of every item has one part.
  const int32_t num_items = plan.num_items;
  std::vector<int32_t> pieces(static_cast<size_t>(num_items), 0);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> item_slots(static_cast<size_t>(num_items));  // (block, slot)
  std::set<int32_t> used_slots;
  std::set<std::pair<int32_t, int32_t>> chunks_seen;  // batch-invariant plans: (item, first block)
  int32_t cursor_item = 0, cursor_block = 0;
  for (size_t p = 0; p < schedule.parts.size(); ++p) {
    const PartWork& part = schedule.parts[p];
    if (part.flags & kPartEmpty) {
      if (part.flags != kPartEmpty) return fail(at_part(p) + "empty part carries other flags");
      continue;
    }
    if (invariant ? (part.begin_item < 0 || part.begin_item >= num_items)
                  : (part.begin_item != cursor_item || part.begin_block != cursor_block)) {
      return fail(at_part(p) + "starts at (" + std::to_string(part.begin_item) + ", " +
                  std::to_string(part.begin_block) + "), expected (" +
                  (invariant ? std::string("an item") : std::to_string(cursor_item) + ", " +
                                                           std::to_string(cursor_block)) + ")");
    }
    if (part.end_item < part.begin_item || part.end_item >= num_items) {
      return fail(at_part(p) + "end_item " + std::to_string(part.end_item) + " out of range");
    }
    const int32_t end_blocks = blocks_of(length_of(lengths, part.end_item));
    if (part.end_block < 1 || part.end_block > end_blocks ||
        (part.end_item == part.begin_item && part.end_block <= part.begin_block)) {
      return fail(at_part(p) + "end_block " + std::to_string(part.end_block) + " invalid");
    }
    if (invariant) {
      // One fixed chunk per part: [k K, min((k + 1) K, blocks)) of one item.
      const int32_t chunk_blocks = plan.chunk_blocks;
      if (part.end_item != part.begin_item || part.begin_block % chunk_blocks != 0 ||
          part.end_block != std::min(part.begin_block + chunk_blocks, end_blocks)) {
        return fail(at_part(p) + "(" + std::to_string(part.begin_item) + ", " + std::to_string(part.begin_block) +
                    ") .. (" + std::to_string(part.end_item) + ", " + std::to_string(part.end_block) +
                    ") is not one fixed chunk of " + std::to_string(chunk_blocks) + " blocks");
      }
      if (!chunks_seen.emplace(part.begin_item, part.begin_block).second) {
        return fail(at_part(p) + "chunk (" + std::to_string(part.begin_item) + ", " +
                    std::to_string(part.begin_block) + ") has another part too");
      }
    }
    for (int32_t item = part.begin_item; item <= part.end_item; ++item) ++pieces[size_t(item)];
    if (part.end_block == end_blocks) {
      cursor_item = part.end_item + 1;
      cursor_block = 0;
    } else {
      cursor_item = part.end_item;
      cursor_block = part.end_block;
    }
  }
  if (invariant) {
    for (int32_t item = 0; item < num_items; ++item) {
      const int32_t chunks = (blocks_of(length_of(lengths, item)) - 1) / plan.chunk_blocks + 1;
      if (pieces[size_t(item)] != chunks) {  // with distinct fixed chunks: each chunk exactly once
        return fail("item " + std::to_string(item) + " has " + std::to_string(pieces[size_t(item)]) +
                    " parts for " + std::to_string(chunks) + " chunks");
      }
    }
  } else if (cursor_item != num_items || cursor_block != 0) {
    return fail("parts stop at (" + std::to_string(cursor_item) + ", " + std::to_string(cursor_block) +
                "), expected every item covered (" + std::to_string(num_items) + ", 0)");
  }

  // Split flags and slots: a piece is partial iff its item has several pieces;
  // only a part's first or last item may be split.
  for (size_t p = 0; p < schedule.parts.size(); ++p) {
    const PartWork& part = schedule.parts[p];
    if (part.flags & kPartEmpty) continue;
    int32_t partial_pieces = 0;
    for (int32_t item = part.begin_item; item <= part.end_item; ++item) {
      const bool split = pieces[size_t(item)] > 1;
      if (part_item_is_partial(part, item) != split) {
        return fail(at_part(p) + "item " + std::to_string(item) + " split flag is wrong");
      }
      if (!split) continue;
      if (item != part.begin_item && item != part.end_item) {
        return fail(at_part(p) + "split item " + std::to_string(item) + " is not at the part's edge");
      }
      ++partial_pieces;
      const int32_t slot = part_item_slot(part, item);
      if (slot < 0 || slot >= plan.num_slots) {
        return fail(at_part(p) + "slot " + std::to_string(slot) + " outside [0, " +
                    std::to_string(plan.num_slots) + ")");
      }
      if (!used_slots.insert(slot).second) return fail(at_part(p) + "slot " + std::to_string(slot) + " reused");
      item_slots[size_t(item)].emplace_back(part_item_begin_block(part, item), slot);
    }
    if ((partial_pieces == 0) != (part.first_slot == -1)) {
      return fail(at_part(p) + "first_slot " + std::to_string(part.first_slot) + " disagrees with its pieces");
    }
  }

  // Combine entries: exactly one per split item, pointing at its consecutive slots.
  std::vector<int32_t> entries_for(static_cast<size_t>(num_items), 0);
  for (size_t p = 0; p < schedule.combine.size(); ++p) {
    const CombineEntry& entry = schedule.combine[p];
    if (entry.num_pieces == 0) {
      if (entry.item != -1) return fail("combine " + std::to_string(p) + ": unused entry names an item");
      continue;
    }
    if (entry.item < 0 || entry.item >= num_items || pieces[size_t(entry.item)] < 2) {
      return fail("combine " + std::to_string(p) + ": item " + std::to_string(entry.item) + " is not split");
    }
    std::vector<std::pair<int32_t, int32_t>> slots = item_slots[size_t(entry.item)];
    std::sort(slots.begin(), slots.end());  // KV order (parts may run an item's pieces in any order)
    if (entry.num_pieces != pieces[size_t(entry.item)] || slots.empty() || entry.first_slot != slots.front().second) {
      return fail("combine " + std::to_string(p) + ": entry does not match item " + std::to_string(entry.item));
    }
    for (size_t k = 0; k < slots.size(); ++k) {
      if (slots[k].second != entry.first_slot + int32_t(k)) {
        return fail("item " + std::to_string(entry.item) + ": slots are not consecutive in KV order");
      }
    }
    ++entries_for[size_t(entry.item)];
  }
  for (int32_t item = 0; item < num_items; ++item) {
    if ((pieces[size_t(item)] > 1) != (entries_for[size_t(item)] == 1) || entries_for[size_t(item)] > 1) {
      return fail("item " + std::to_string(item) + " has " + std::to_string(entries_for[size_t(item)]) +
                  " combine entries for " + std::to_string(pieces[size_t(item)]) + " pieces");
    }
  }
  return Status::ok();
}

}  // namespace openmla

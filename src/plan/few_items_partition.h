// partition_parts (plan/partition.h) in closed form, for calls of at most 32
// items: one part's records from sums over the items, with no array over the
// parts. An attention kernel that builds its own part (kernels/common/
// schedule/own_part.cuh) keeps the items in one warp's lanes (item i in lane
// i) and reads these sums by shuffles and ballots: no shared memory, no block
// barrier. The host form (ItemArrays) keeps them in arrays; the tests compare
// both with build_schedule.
//
// Even cuts: part p starts at cost position total * p / active (total for
// p >= active). A cut lands inside an item when its position passes the
// item's overhead and first block; an item with k cuts inside is split into
// k + 1 pieces, each held by one part, in KV order. So the partial slots held
// by the parts before p are the pieces that start before p's bound, and the
// combine entries before a split item are the split items before it.
// Whole items (where partition_parts tries them and they fit): each cut moves
// to its position's nearest item start; no item is split.
#pragma once

#include <cstdint>

#include "plan/partition.h"

namespace openmla::plan_detail {

// Most items the closed form takes: one per lane of a warp.
inline constexpr int32_t kFewItemsMax = 32;

// Where partition_parts cuts a call's parts when it does not try whole items.
struct EvenCuts {
  int64_t total;   // cost of all items
  int32_t active;  // parts that get work
};

// The closed form's products stay under 2^32 (builds_in_lanes admits only such
// calls), so it divides in 32 bits: no 64-bit division subroutine on the device.
OPENMLA_HOST_DEVICE int64_t divide_32(int64_t a, int64_t b) { return int64_t(uint32_t(a) / uint32_t(b)); }

// Cost position where part p starts (partition_parts' phase 2).
OPENMLA_HOST_DEVICE int64_t cut_position(const EvenCuts& cuts, int32_t p) {
  return p >= cuts.active ? cuts.total : divide_32(cuts.total * p, cuts.active);
}

// The first part whose cut position is at or past `position` (0 <= position <= total):
// total * p / active >= position exactly when p >= ceil(position * active / total).
OPENMLA_HOST_DEVICE int32_t first_cut_from(const EvenCuts& cuts, int64_t position) {
  return int32_t(divide_32(position * cuts.active + cuts.total - 1, cuts.total));
}

// The cuts that land inside an item spanning costs [prefix, next_prefix):
// parts [first, first + count) start at one of its blocks past the first.
struct CutsInside {
  int32_t first;
  int32_t count;
};

OPENMLA_HOST_DEVICE CutsInside cuts_inside(const EvenCuts& cuts, int64_t prefix, int64_t next_prefix) {
  const int32_t first = first_cut_from(cuts, prefix + kItemOverheadBlocks + 1);
  const int32_t end = first_cut_from(cuts, next_prefix);
  return CutsInside{first, end > first ? end - first : 0};
}

// An item's partial pieces (low kSlotBits) and whether it is split (high
// bits), packed as part_slots packs them, so one scan gives both prefixes.
OPENMLA_HOST_DEVICE int32_t packed_pieces(const CutsInside& inside) {
  return inside.count > 0 ? (inside.count + 1) | (1 << kSlotBits) : 0;
}

// Whether a plan's parts are built in closed form, whatever its lengths: at
// most kFewItemsMax items, and products under 2^32 (total * (num_parts + 1),
// the total bounded by every item at max_length; only calls of some 2^31
// tokens or tens of thousands of forced parts fail this).
OPENMLA_HOST_DEVICE bool builds_in_lanes(int32_t num_items, int32_t num_parts, int32_t max_length) {
  if (num_items < 1 || num_items > kFewItemsMax || num_parts < 1) return false;
  const int64_t most_total = int64_t(num_items) * item_cost(max_length);
  return most_total * (int64_t(num_parts) + 1) <= int64_t(UINT32_MAX);
}

// Cost positions nearest to an item's start: from past the middle of the item
// before it to the middle of its own (ties go to the earlier start, as
// cut_at_item_start). Whether some even cut lies there: the item's start is then
// a whole-item cut.
OPENMLA_HOST_DEVICE bool item_start_is_cut(const EvenCuts& cuts, int64_t previous_prefix, int64_t prefix,
                                           int64_t next_prefix, bool first_item) {
  const int64_t nearest_from = first_item ? 0 : (previous_prefix + prefix) / 2 + 1;
  const int64_t nearest_to = (prefix + next_prefix) / 2;
  return first_cut_from(cuts, nearest_to + 1) > first_cut_from(cuts, nearest_from);
}

// Whole items fit when no part would cost more than an even cut: the gap from
// each cut start to the next (the end for the last) is at most even_part_cost.
OPENMLA_HOST_DEVICE bool whole_item_gap_fits(const EvenCuts& cuts, int64_t cut_prefix, int64_t next_cut_prefix) {
  return next_cut_prefix - cut_prefix <= even_part_cost(cuts.total, cuts.active);
}

// An `Items` type gives, for items i in [0, num_items) and j in [0, num_items]:
//   cuts                      the call's EvenCuts
//   whole_items               whether the parts take whole items (else even cuts)
//   num_items                 the item count (<= kFewItemsMax)
//   item_length(items, i)     the clamped length (the partition's lengths view)
//   prefix(j)                 cost of items [0, j)
//   item_at(position)         the last item whose prefix is <= position (< total)
//   first_cut(i), cuts_inside_count(i)   cuts_inside of item i (none with whole items)
//   packed_pieces_before(j)   packed_pieces summed over items [0, j)
// On the device every lane of the warp calls each with the same arguments.

// Bound of part p, as partition_parts places it: bound_at the even cut, or
// its nearest item start.
template <class Items>
OPENMLA_HOST_DEVICE Bound closed_form_bound(const Items& items, int32_t p) {
  const int64_t position = cut_position(items.cuts, p);
  if (position >= items.cuts.total) return Bound{items.num_items, 0};
  const int32_t item = items.item_at(position);
  const int64_t start = items.prefix(item);
  if (items.whole_items) {
    return Bound{cut_at_item_start(position, start, items.prefix(item + 1)) ? item : item + 1, 0};
  }
  return Bound{item, block_at(position, start)};
}

// Partial slots held by the parts before p: the pieces that start before its bound.
template <class Items>
OPENMLA_HOST_DEVICE int32_t slots_before_part(const Items& items, int32_t p, Bound bound) {
  const int32_t before = items.packed_pieces_before(bound.item) & kSlotMask;
  // A bound inside an item (block > 0) follows the item's first piece and the cuts inside it before p.
  return bound.block > 0 ? before + 1 + p - items.first_cut(bound.item) : before;
}

// Part p's records, equal to part_record's after partition_parts; also how
// many combine entries the call has (the parts at or past it write empty ones).
struct ClosedFormRecord {
  PartRecord record;
  int32_t combine_entries;
};

template <class Items>
OPENMLA_HOST_DEVICE ClosedFormRecord closed_form_part_record(const Items& items, int32_t p) {
  const Bound bounds[2] = {closed_form_bound(items, p), closed_form_bound(items, p + 1)};
  const PartRange range = describe_part(bounds, items, 0);
  const int32_t slot_prefix = range.pieces > 0 ? slots_before_part(items, p, bounds[0]) : 0;
  ClosedFormRecord out{PartRecord{part_work(range, slot_prefix), empty_combine_entry(), -1},
                       items.packed_pieces_before(items.num_items) >> kSlotBits};
  const int32_t item = first_piece_item(range);
  if (item >= 0) {  // its pieces take the slots after those of the split items before it
    const int32_t before = items.packed_pieces_before(item);
    out.record.entry = CombineEntry{item, before & kSlotMask, items.cuts_inside_count(item) + 1, 0};
    out.record.entry_index = before >> kSlotBits;
  }
  return out;
}

// One item (dense b = 1, sparse b = 1 with s_q = 1): closed_form_part_record
// worked out for an item spanning costs [0, cost), so that an attention kernel
// builds its part in a few hundred bytes of code (the build's code is fetched
// cold on the call's critical path: docs/performance.md, sessions 33 and 34).
// Even cuts: part p takes the item's blocks from its cut position less the
// item's overhead; whole items: the last part whose cut lies at or before the
// item's middle takes all of it (cut_at_item_start), every other part nothing.
OPENMLA_HOST_DEVICE ClosedFormRecord one_item_part_record(int32_t length, int32_t num_parts, int32_t min_part_cost,
                                                          ItemCuts item_cuts, int32_t p) {
  const int32_t blocks = item_num_blocks(length);
  const int64_t cost = int64_t(blocks) + kItemOverheadBlocks;
  const int64_t wanted = divide_32(cost, min_part_cost < 1 ? 1 : min_part_cost);  // active_parts in 32 bits
  const EvenCuts cuts{cost, wanted < 1 ? 1 : (wanted < num_parts ? int32_t(wanted) : num_parts)};
  const bool whole_items = item_cuts == ItemCuts::kWholeItemsOnly ||
                           (item_cuts == ItemCuts::kWholeItemsIfNoCostlier &&
                            cost <= divide_32(cost + cuts.active - 1, cuts.active) + kItemOverheadBlocks);
  const int64_t begin = cut_position(cuts, p), end = cut_position(cuts, p + 1);
  ClosedFormRecord out{PartRecord{PartWork{-1, 0, -1, 0, -1, kPartEmpty, {0, 0}}, empty_combine_entry(), -1}, 0};
  if (whole_items) {
    if (cut_at_item_start(begin, 0, cost) && !cut_at_item_start(end, 0, cost)) {
      out.record.work = PartWork{0, 0, 0, blocks, -1, 0, {0, 0}};
    }
    return out;
  }
  const int32_t first_cut = first_cut_from(cuts, kItemOverheadBlocks + 1);  // cuts_inside(cuts, 0, cost)
  const int32_t pieces = cuts.active > first_cut ? cuts.active - first_cut + 1 : 0;
  out.combine_entries = pieces > 0 ? 1 : 0;
  // bound_at: a position at the end is past the item (block 0 of the next).
  const int32_t begin_block = block_at(begin, 0);
  const int32_t end_block = end < cost ? block_at(end, 0) : 0;
  if (begin >= cost || (end < cost && begin_block == end_block)) return out;  // empty: its bounds are equal
  // describe_part of a single item's range.
  const int32_t last_block = end_block == 0 ? blocks : end_block;
  const bool begin_partial = begin_block > 0 || last_block < blocks;
  const bool end_partial = end_block > 0 || begin_block > 0;
  out.record.work = PartWork{0,
                             begin_block,
                             0,
                             last_block,
                             begin_partial ? (begin_block > 0 ? 1 + p - first_cut : 0) : -1,
                             (begin_partial ? kPartBeginPartial : 0) | (end_partial ? kPartEndPartial : 0),
                             {0, 0}};
  if (begin_partial && begin_block == 0) {  // the part holding the item's first piece records it
    out.record.entry = CombineEntry{0, 0, pieces, 0};
    out.record.entry_index = 0;
  }
  return out;
}

// The host's Items: arrays over the items (tests; the device keeps them in lanes).
struct ItemArrays {
  EvenCuts cuts;
  bool whole_items;
  int32_t num_items;
  int32_t lengths[kFewItemsMax];
  int64_t prefixes[kFewItemsMax + 1];
  CutsInside inside[kFewItemsMax];
  int32_t pieces_prefix[kFewItemsMax + 1];

  int64_t prefix(int32_t j) const { return prefixes[j]; }
  int32_t item_at(int64_t position) const {
    int32_t item = 0;
    while (item + 1 < num_items && prefixes[item + 1] <= position) ++item;
    return item;
  }
  int32_t first_cut(int32_t i) const { return inside[i].first; }
  int32_t cuts_inside_count(int32_t i) const { return inside[i].count; }
  int32_t packed_pieces_before(int32_t j) const { return pieces_prefix[j]; }
};

inline int32_t item_length(const ItemArrays& items, int32_t i) { return items.lengths[i]; }

// ItemArrays for a call of 1 <= num_items <= kFewItemsMax items (builds_in_lanes).
template <class Lengths>
ItemArrays item_arrays(int32_t num_items, int32_t num_parts, int32_t min_part_cost, ItemCuts item_cuts,
                       const Lengths& lengths) {
  ItemArrays items{};
  items.num_items = num_items;
  items.prefixes[0] = 0;
  for (int32_t i = 0; i < num_items; ++i) {
    items.lengths[i] = item_length(lengths, i);
    items.prefixes[i + 1] = items.prefixes[i] + item_cost(items.lengths[i]);
  }
  const int64_t total = items.prefixes[num_items];
  items.cuts = EvenCuts{total, active_parts(total, num_parts, min_part_cost)};
  if (whole_items_tried(item_cuts, total, num_items, items.cuts.active)) {
    bool fits = true;
    int32_t next_cut = num_items;  // the end is always a cut
    for (int32_t i = num_items - 1; i >= 0; --i) {
      const int64_t previous = i > 0 ? items.prefixes[i - 1] : 0;
      if (!item_start_is_cut(items.cuts, previous, items.prefixes[i], items.prefixes[i + 1], i == 0)) continue;
      fits = fits && whole_item_gap_fits(items.cuts, items.prefixes[i], items.prefixes[next_cut]);
      next_cut = i;
    }
    items.whole_items = item_cuts == ItemCuts::kWholeItemsOnly || fits;
  }
  items.pieces_prefix[0] = 0;
  for (int32_t i = 0; i < num_items; ++i) {
    items.inside[i] = items.whole_items ? CutsInside{0, 0}
                                        : cuts_inside(items.cuts, items.prefixes[i], items.prefixes[i + 1]);
    items.pieces_prefix[i + 1] = items.pieces_prefix[i] + packed_pieces(items.inside[i]);
  }
  return items;
}

}  // namespace openmla::plan_detail

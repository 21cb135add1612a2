// The closed-form partition's items (plan/few_items_partition.h) as one warp
// holds them: item i in lane i. Every warp of an attention CTA that builds its
// own part for at most 32 items builds them and reads its part's records from
// them by shuffles and ballots; no shared memory, no block barrier.
#pragma once

#include <cstdint>

#include "kernels/common/schedule/part_schedule.h"
#include "plan/few_items_partition.h"
#include "plan/partition.h"

namespace openmla::kernels::common {

struct LaneItems {
  plan_detail::EvenCuts cuts;
  bool whole_items;
  int32_t num_items;
  int32_t lane_length;                // this lane's item's clamped length; 0 past the items
  uint32_t lane_prefix;               // cost of the items before this lane's; the total past the items
                                      // (at most 32 items of under 2^26 blocks: 32 bits hold any sum)
  plan_detail::CutsInside lane_cuts;  // cuts inside this lane's item
  int32_t lane_pieces_before;         // packed_pieces of the items before this lane's
  int32_t pieces_total;               // packed_pieces of all items

  // Lane j's value, or `past` for j >= num_items (a shuffle reads lanes 0-31 only);
  // every lane calls, each with its own j or all with the same.
  template <class T>
  __device__ __forceinline__ T from_lane(T value, int32_t j, T past) const {
    const T read = __shfl_sync(0xffffffffu, value, j & 31);
    return j >= num_items ? past : read;
  }
  __device__ __forceinline__ int64_t prefix(int32_t j) const {
    return from_lane(lane_prefix, j, uint32_t(cuts.total));
  }
  __device__ __forceinline__ int32_t item_at(int64_t position) const {  // position < total
    return __popc(__ballot_sync(0xffffffffu, lane_prefix <= uint32_t(position))) - 1;
  }
  __device__ __forceinline__ int32_t first_cut(int32_t i) const {
    return __shfl_sync(0xffffffffu, lane_cuts.first, i);
  }
  __device__ __forceinline__ int32_t cuts_inside_count(int32_t i) const {
    return __shfl_sync(0xffffffffu, lane_cuts.count, i);
  }
  __device__ __forceinline__ int32_t packed_pieces_before(int32_t j) const {
    return from_lane(lane_pieces_before, j, pieces_total);
  }
};

__device__ __forceinline__ int32_t item_length(const LaneItems& items, int32_t i) {
  return __shfl_sync(0xffffffffu, items.lane_length, i);
}

// The items of a schedule that builds in lanes (plan_detail::builds_in_lanes),
// every lane of the warp calling; the same values as plan_detail::item_arrays.
__device__ __forceinline__ LaneItems lane_items(const PartSchedule& schedule, int32_t lane) {
  constexpr uint32_t kAllLanes = 0xffffffffu;
  LaneItems items{};
  items.num_items = schedule.num_items;
  const bool holds_item = lane < schedule.num_items;
  items.lane_length = holds_item ? plan_detail::item_length(schedule.lengths, lane) : 0;
  const uint32_t cost = holds_item ? uint32_t(plan_detail::item_cost(items.lane_length)) : 0;
  items.lane_prefix = plan_detail::lanes_exclusive_sum(cost, lane);
  const uint32_t next_prefix = items.lane_prefix + cost;
  const int64_t total = __shfl_sync(kAllLanes, next_prefix, 31);
  items.cuts = plan_detail::EvenCuts{total, plan_detail::active_parts(total, schedule.num_parts, schedule.min_part_cost)};
  if (plan_detail::whole_items_tried(schedule.cuts, total, schedule.num_items, items.cuts.active)) {
    // Each cut start's gap to the next (the end past the last) against an even cut's cost.
    const uint32_t previous_prefix = __shfl_up_sync(kAllLanes, items.lane_prefix, 1);
    const bool is_cut = holds_item && plan_detail::item_start_is_cut(items.cuts, previous_prefix, items.lane_prefix,
                                                                     next_prefix, lane == 0);
    const uint32_t cuts_mask = __ballot_sync(kAllLanes, is_cut);
    const uint32_t later_cuts = lane < 31 ? cuts_mask >> (lane + 1) : 0u;
    const int32_t next_cut = later_cuts != 0 ? lane + __ffs(int(later_cuts)) : schedule.num_items;
    const int64_t next_cut_prefix = items.prefix(next_cut);  // a lane of its own each
    const bool fits = !is_cut || plan_detail::whole_item_gap_fits(items.cuts, items.lane_prefix, next_cut_prefix);
    items.whole_items = schedule.cuts == plan_detail::ItemCuts::kWholeItemsOnly || __all_sync(kAllLanes, fits);
  }
  items.lane_cuts = holds_item && !items.whole_items
                        ? plan_detail::cuts_inside(items.cuts, items.lane_prefix, next_prefix)
                        : plan_detail::CutsInside{0, 0};
  const int32_t pieces = plan_detail::packed_pieces(items.lane_cuts);
  items.lane_pieces_before = plan_detail::lanes_exclusive_sum(pieces, lane);
  items.pieces_total = __shfl_sync(kAllLanes, items.lane_pieces_before + pieces, 31);
  return items;
}

// Thread 0 writes this CTA's part record to the workspace and q-group 0's CTA
// the combine entries, as build_part_records does.
__device__ __forceinline__ void write_closed_form_records(const PartSchedule& schedule,
                                                          const plan_detail::ClosedFormRecord& out) {
  const int32_t part = int32_t(blockIdx.y);
  if (threadIdx.x == 0) {
    schedule.parts[part] = out.record.work;
    if (blockIdx.x == 0) {
      if (out.record.entry_index >= 0) schedule.combine[out.record.entry_index] = out.record.entry;
      if (part >= out.combine_entries) schedule.combine[part] = plan_detail::empty_combine_entry();
    }
  }
}

// The closed form's builds of this CTA's part (parts[blockIdx.y]), computed by
// every warp (no barrier). NOTE: out of line, as build_own_part: kernels that
// read their part run no further from the start of their code.
static __device__ __noinline__ void build_part_in_lanes(const PartSchedule& schedule) {
  const LaneItems items = lane_items(schedule, int32_t(threadIdx.x % 32));
  write_closed_form_records(schedule, plan_detail::closed_form_part_record(items, int32_t(blockIdx.y)));
}

// One item (ScheduleBuild::kBuildOneItem): the closed form worked out for one item.
static __device__ __noinline__ void build_part_one_item(const PartSchedule& schedule) {
  write_closed_form_records(schedule, plan_detail::one_item_part_record(
                                          plan_detail::item_length(schedule.lengths, 0), schedule.num_parts,
                                          schedule.min_part_cost, schedule.cuts, int32_t(blockIdx.y)));
}

}  // namespace openmla::kernels::common

// The split-KV partition core, shared by the host planner (one thread) and the
// one-block device schedule kernel. Everything here is
// __host__ __device__ and deterministic integer arithmetic, so the host and
// device produce bit-identical schedules from the same lengths.
//
// Algorithm (all O(items / lanes + parts * log items)):
//   1. cost prefix:  prefix[i] = sum_{j<i} (blocks(j) + kItemOverheadBlocks)
//   2. part bounds:  bound[p] = position total * p / active_parts mapped to
//                    (item, block); positions inside an item's overhead map to
//                    block 0, so cuts prefer item starts; then every cut at
//                    its nearest item start instead, when no part then costs
//                    more than an even cut plus one item overhead (always,
//                    for a plan without partial slots: ItemCuts)
//   3. part pieces:  which of a part's first/last items are split, and how many
//                    partial slots the part needs (0, 1 or 2)
//   4. slot prefix:  slots[p] = sum_{q<p} pieces(q)
//   5. records:      PartWork[p] and CombineEntry[p]
#pragma once

#include <cstdint>

#include "openmla/plan.h"
#include "openmla/schedule.h"

namespace openmla::plan_detail {

// The device runs this code once per call from a cold instruction cache, so
// its loops stay rolled (unrolled copies cost more to fetch than they save).
#if defined(__CUDA_ARCH__)
#define OPENMLA_ROLLED_LOOP _Pragma("unroll 1")
#else
#define OPENMLA_ROLLED_LOOP
#endif

struct Bound {
  int32_t item;
  int32_t block;
};
static_assert(sizeof(Bound) == 8, "Bound is stored in the workspace");

OPENMLA_HOST_DEVICE bool operator==(Bound a, Bound b) { return a.item == b.item && a.block == b.block; }
OPENMLA_HOST_DEVICE bool bound_less_equal(Bound a, Bound b) {
  return a.item < b.item || (a.item == b.item && a.block <= b.block);
}

OPENMLA_HOST_DEVICE int32_t item_length(const ItemLengths& lengths, int32_t item) {
  int32_t length = lengths.lengths ? lengths.lengths[item / lengths.items_per_length]
                                   : lengths.default_length;
  length = length < 0 ? 0 : length;
  return length > lengths.max_length ? lengths.max_length : length;
}

// The partition reads lengths through a view, by the item_length overloads:
// ItemLengths as a plan gives them (the host; a schedule kernel whose scratch
// does not fit shared memory), or StagedLengths, a device block's copy: one
// clamped length per item in shared memory, or one length for every item when
// the call has none. Both give item_length(ItemLengths)'s values; StagedLengths
// costs a load where ItemLengths' lookup costs a division at each of the
// partition's uses (more code, and longer dependent chains).
struct StagedLengths {
  const int32_t* per_item;  // [num_items], clamped as item_length(ItemLengths) clamps; null: `uniform` for all
  int32_t uniform;
};
OPENMLA_HOST_DEVICE int32_t item_length(const StagedLengths& lengths, int32_t item) {
  return lengths.per_item != nullptr ? lengths.per_item[item] : lengths.uniform;
}

// The view of lengths without an array (lengths.lengths null): every item's length.
OPENMLA_HOST_DEVICE StagedLengths uniform_lengths(const ItemLengths& lengths) {
  return StagedLengths{nullptr, item_length(lengths, 0)};
}

// a / b for a >= 0, b > 0, in 32 bits when both fit: the device's 64-bit
// division is a subroutine of some 70 instructions, its 32-bit one a few.
OPENMLA_HOST_DEVICE int64_t divide_nonnegative(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return int64_t(uint32_t(a) / uint32_t(b));
  return a / b;
}

// An empty item still owns one (empty) block: some part must finalise it.
OPENMLA_HOST_DEVICE int32_t item_num_blocks(int32_t length) {
  return length <= 0 ? 1 : int32_t(uint32_t(length - 1) / kKvBlockTokens) + 1;  // unsigned: a shift
}

OPENMLA_HOST_DEVICE int64_t item_cost(int32_t length) {
  return int64_t(item_num_blocks(length)) + kItemOverheadBlocks;
}

// Barrier between the phases of build_schedule: every thread of the block
// (one host thread: nothing to do).
OPENMLA_HOST_DEVICE void threads_sync() {
#if defined(__CUDA_ARCH__)
  __syncthreads();  // also orders the threads' shared/global-memory writes
#endif
}

// True when `predicate` holds on every thread of the block (one host thread: its own).
OPENMLA_HOST_DEVICE bool threads_all(bool predicate) {
#if defined(__CUDA_ARCH__)
  return __syncthreads_and(predicate) != 0;
#else
  return predicate;
#endif
}

// Exclusive sum of `value` over lanes [0, lane). On the host there is one lane.
template <class T>
OPENMLA_HOST_DEVICE T lanes_exclusive_sum(T value, int lane) {
#if defined(__CUDA_ARCH__)
  T inclusive = value;
  OPENMLA_ROLLED_LOOP
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  return inclusive - value;
#else
  (void)lane;
  (void)value;
  return T(0);
#endif
}

// Lanes of the partition's scans: a warp on the device (every block that
// builds a schedule has one, and a constant 32 makes the scans' chunk division a
// shift), the calling thread on the host.
OPENMLA_HOST_DEVICE int scan_lanes(int num_threads) {
#if defined(__CUDA_ARCH__)
  (void)num_threads;
  return 32;
#else
  return num_threads < 32 ? num_threads : 32;
#endif
}

// Chunked exclusive scan of value_at(0..n) into out[0..n]; out[n] = total.
// Each lane scans a contiguous chunk, then the lanes' chunk sums are scanned.
template <class T, class ValueAt>
OPENMLA_HOST_DEVICE void lanes_exclusive_scan(int n, const ValueAt& value_at, T* out, int lane,
                                              int num_lanes) {
  const int chunk = (n + num_lanes - 1) / num_lanes;
  const int begin = lane * chunk < n ? lane * chunk : n;
  const int end = begin + chunk < n ? begin + chunk : n;
  T local = 0;
  OPENMLA_ROLLED_LOOP
  for (int i = begin; i < end; ++i) local += value_at(i);
  T running = lanes_exclusive_sum(local, lane);
  OPENMLA_ROLLED_LOOP
  for (int i = begin; i < end; ++i) {
    const T value = value_at(i);  // read first: the scan may run in place
    out[i] = running;
    running += value;
  }
  if (lane == num_lanes - 1) out[n] = running;
}

template <class Lengths>
struct ItemCostAt {
  Lengths lengths;
  OPENMLA_HOST_DEVICE int64_t operator()(int i) const { return item_cost(item_length(lengths, i)); }
};

// The block where a part cut at cost `position` starts inside an item whose costs
// start at `start`: positions inside the item's overhead start at block 0.
OPENMLA_HOST_DEVICE int32_t block_at(int64_t position, int64_t start) {
  const int64_t block = position - start - kItemOverheadBlocks;
  return block <= 0 ? 0 : int32_t(block);
}

// Map a cost position to the (item, block) where a part starts.
OPENMLA_HOST_DEVICE Bound bound_at(const int64_t* prefix, int32_t num_items, int64_t position) {
  if (position >= prefix[num_items]) return {num_items, 0};
  int32_t lo = 0, hi = num_items - 1;  // largest item with prefix[item] <= position
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= position) lo = mid; else hi = mid - 1;
  }
  return {lo, block_at(position, prefix[lo])};
}

// The item start nearest to a cost position inside `item` (ties go to the
// earlier start); num_items for positions at or past the end.
// Whether a cut at cost `position`, inside an item spanning costs [start, end),
// goes to that item's start (ties too) rather than to the next item's.
OPENMLA_HOST_DEVICE bool cut_at_item_start(int64_t position, int64_t start, int64_t end) {
  return position - start <= end - position;
}

OPENMLA_HOST_DEVICE int32_t nearest_item_start(const int64_t* prefix, int32_t num_items, int32_t item,
                                               int64_t position) {
  if (item >= num_items) return num_items;
  return cut_at_item_start(position, prefix[item], prefix[item + 1]) ? item : item + 1;
}

// Parts that get work: small calls use fewer (see kMinPartCostBlocks).
OPENMLA_HOST_DEVICE int32_t active_parts(int64_t total_cost, int32_t num_parts, int32_t min_part_cost) {
  // A plan's min_part_cost is >= 1 (build_schedule_host and run check it); a
  // hand-made 0 must not divide by zero here.
  const int64_t wanted = divide_nonnegative(total_cost, min_part_cost < 1 ? 1 : min_part_cost);
  return wanted < 1 ? 1 : (wanted < num_parts ? int32_t(wanted) : num_parts);
}

// One part's range and split flags, derived from its two bounds.
struct PartRange {
  Bound begin;
  int32_t end_item;   // inclusive
  int32_t end_block;  // exclusive
  bool empty;
  bool begin_partial;
  bool end_partial;
  int32_t pieces;  // partial slots this part writes
};

template <class Lengths>
OPENMLA_HOST_DEVICE PartRange describe_part(const Bound* bounds, const Lengths& lengths, int32_t p) {
  PartRange range{};
  const Bound begin = bounds[p], end = bounds[p + 1];
  range.begin = begin;
  range.empty = begin == end;
  if (range.empty) return range;
  if (end.block == 0) {  // ends at an item boundary
    range.end_item = end.item - 1;
    range.end_block = item_num_blocks(item_length(lengths, range.end_item));
  } else {
    range.end_item = end.item;
    range.end_block = end.block;
  }
  const bool single_item = range.end_item == begin.item;
  const int32_t begin_blocks = item_num_blocks(item_length(lengths, begin.item));
  range.begin_partial = begin.block > 0 || (single_item && range.end_block < begin_blocks);
  range.end_partial = end.block > 0 || (single_item && begin.block > 0);
  range.pieces = int32_t(range.begin_partial) + int32_t(range.end_partial && !single_item);
  return range;
}

// The split item whose first piece this part holds (its combine entry), or
// -1: the begin item when the part starts it at block 0 and it is split, else
// the end item when that is split.
OPENMLA_HOST_DEVICE int32_t first_piece_item(const PartRange& range) {
  if (range.empty) return -1;
  if (range.begin_partial && range.begin.block == 0) return range.begin.item;
  if (range.end_partial && range.end_item != range.begin.item) return range.end_item;
  return -1;
}

// part_slots packs two per-part counts so one scan gives both prefixes: the
// partial pieces (low 16 bits; at most 2 * kMaxParts) and whether the part
// holds a combine entry (high bits). Entries are thereby numbered densely, so
// the combine grid needs only as many CTAs as there can be split items.
inline constexpr int32_t kSlotBits = 16;
inline constexpr int32_t kSlotMask = (1 << kSlotBits) - 1;

struct ReadAt {
  const int32_t* values;
  OPENMLA_HOST_DEVICE int32_t operator()(int i) const { return values[i]; }
};

// Where the schedule lives (device or host memory).
struct ScheduleBuffers {
  PartWork* parts;         // [num_parts]
  CombineEntry* combine;   // [num_parts]; split items first (dense), then empty entries
  int64_t* item_prefix;    // [num_items + 1]
  Bound* part_bounds;      // [num_parts + 1]
  int32_t* part_slots;     // [num_parts + 1]; packed, see kSlotBits
};

// Last part whose range starts at or before `at` (bounds are non-decreasing).
OPENMLA_HOST_DEVICE int32_t part_containing(const Bound* bounds, int32_t num_parts, Bound at) {
  int32_t lo = 0, hi = num_parts - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (bound_less_equal(bounds[mid], at)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Where the schedule may cut the items' KV blocks into parts.
enum class ItemCuts : int32_t {
  kEvenCuts,          // even cuts, splitting the items they fall in (plans with forced parts)
  kWholeItemsIfNoCostlier,  // whole items when no part then costs more than an even cut plus one item overhead
  kWholeItemsOnly,    // every cut at an item start: the plan has no partial slots
};

// A plan without partial slots can only run whole items per part (the long
// query plans of choose_whole_item_parts, and every one-part plan).
inline ItemCuts item_cuts(const DecodePlan& plan) {
  if (plan.num_slots == 0) return ItemCuts::kWholeItemsOnly;
  return plan.whole_item_parts ? ItemCuts::kWholeItemsIfNoCostlier : ItemCuts::kEvenCuts;
}

// The most an even cut's part costs: a cut inside an item makes its second
// piece pay the item's overhead again (Q, partial O, the combine).
OPENMLA_HOST_DEVICE int64_t even_part_cost(int64_t total, int32_t active) {
  return divide_nonnegative(total + active - 1, active) + kItemOverheadBlocks;
}

// Whether partition_parts tries whole items per part (phase 2): always for a
// plan without partial slots, else when the mean item fits an even cut's cost.
OPENMLA_HOST_DEVICE bool whole_items_tried(ItemCuts cuts, int64_t total, int32_t num_items, int32_t active) {
  return cuts == ItemCuts::kWholeItemsOnly ||
         (cuts == ItemCuts::kWholeItemsIfNoCostlier && total <= int64_t(num_items) * even_part_cost(total, active));
}

// Phases 1-4: the scratch arrays (item_prefix, part_bounds, part_slots) from
// which part_record derives any part's records. Threads [0, num_threads) of one
// block (or one host thread with num_threads = 1) call this together; the two
// scans run on the first warp, the per-part phases on every thread (one part
// each when num_threads > num_parts, which keeps the dependent chain short).
// Writes neither out.parts nor out.combine.
template <class Lengths>
OPENMLA_HOST_DEVICE void partition_parts(int32_t num_items, int32_t num_parts, int32_t min_part_cost, ItemCuts cuts,
                                         const Lengths& lengths, const ScheduleBuffers& out, int thread,
                                         int num_threads) {
  const int lanes = scan_lanes(num_threads);
  const bool scans = thread < lanes;

  // 1. cost prefix over items
  if (scans) lanes_exclusive_scan<int64_t>(num_items, ItemCostAt<Lengths>{lengths}, out.item_prefix, thread, lanes);
  threads_sync();

  // 2. part bounds; parts past the active count start (and end) at the end.
  //
  // Whole items per part (when allowed) if that is no longer than the even
  // cuts: a cut inside an item makes its second piece pay the item's overhead
  // again (Q, partial O, the combine), so even cuts cost up to
  // ceil(total / active) + kItemOverheadBlocks. Batches of similar items
  // (b = 128 at s_k = 1024 on 132 SMs) then run unsplit. Whole items can only
  // fit when the mean item does (uniform over the block, so calls with long
  // items skip the check and its barriers); each cut's nearest item start goes
  // to part_slots, scratch until phase 3. A plan without slots takes the item
  // starts whatever they cost.
  const int64_t total = out.item_prefix[num_items];
  const int32_t active = active_parts(total, num_parts, min_part_cost);
  const int64_t even_cost = even_part_cost(total, active);
  const bool whole_items_only = cuts == ItemCuts::kWholeItemsOnly;
  const bool try_whole_items = whole_items_tried(cuts, total, num_items, active);
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p <= num_parts; p += num_threads) {
    const int64_t position = p >= active ? total : total * p / active;
    const Bound bound = bound_at(out.item_prefix, num_items, position);
    out.part_bounds[p] = bound;
    if (try_whole_items) out.part_slots[p] = nearest_item_start(out.item_prefix, num_items, bound.item, position);
  }
  threads_sync();
  if (try_whole_items) {
    bool whole_items_fit = true;
    if (!whole_items_only) {
      OPENMLA_ROLLED_LOOP
      for (int32_t p = thread; p < num_parts; p += num_threads) {
        const int64_t cost = out.item_prefix[out.part_slots[p + 1]] - out.item_prefix[out.part_slots[p]];
        whole_items_fit = whole_items_fit && cost <= even_cost;
      }
    }
    if (whole_items_only || threads_all(whole_items_fit)) {  // the flag is uniform over the block
      OPENMLA_ROLLED_LOOP
      for (int32_t p = thread; p <= num_parts; p += num_threads) out.part_bounds[p] = Bound{out.part_slots[p], 0};
    }
    threads_sync();
  }

  // 3. partial pieces and combine entries per part, then 4. their exclusive
  // prefix (in place)
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p < num_parts; p += num_threads) {
    const PartRange range = describe_part(out.part_bounds, lengths, p);
    out.part_slots[p] = range.pieces | (first_piece_item(range) >= 0 ? 1 << kSlotBits : 0);
  }
  threads_sync();
  if (scans) lanes_exclusive_scan<int32_t>(num_parts, ReadAt{out.part_slots}, out.part_slots, thread, lanes);
  threads_sync();
}

// Split items recorded in the combine entries (they take indices [0, count)).
OPENMLA_HOST_DEVICE int32_t combine_entry_count(const ScheduleBuffers& out, int32_t num_parts) {
  return out.part_slots[num_parts] >> kSlotBits;
}

OPENMLA_HOST_DEVICE CombineEntry empty_combine_entry() { return CombineEntry{-1, -1, 0, 0}; }

// Phase 5 for part p, from partition_parts' arrays: its PartWork and, when it
// holds the first piece of a split item, that item's CombineEntry and the
// entry's index (else entry_index = -1).
struct PartRecord {
  PartWork work;
  CombineEntry entry;
  int32_t entry_index;
};

// A part's PartWork from its range and the partial slots held before it.
OPENMLA_HOST_DEVICE PartWork part_work(const PartRange& range, int32_t slot_prefix) {
  if (range.empty) return PartWork{-1, 0, -1, 0, -1, kPartEmpty, {0, 0}};
  return PartWork{range.begin.item,
                  range.begin.block,
                  range.end_item,
                  range.end_block,
                  range.pieces > 0 ? slot_prefix : -1,
                  (range.begin_partial ? kPartBeginPartial : 0) | (range.end_partial ? kPartEndPartial : 0),
                  {0, 0}};
}

template <class Lengths>
OPENMLA_HOST_DEVICE PartRecord part_record(const ScheduleBuffers& out, const Lengths& lengths, int32_t num_parts,
                                           int32_t p) {
  const PartRange range = describe_part(out.part_bounds, lengths, p);
  PartRecord record{part_work(range, out.part_slots[p] & kSlotMask), empty_combine_entry(), -1};
  const PartWork& work = record.work;
  const int32_t item = first_piece_item(range);  // -1 for an empty part
  if (item >= 0) {
    const int32_t last_block = item_num_blocks(item_length(lengths, item)) - 1;
    const int32_t last_part = part_containing(out.part_bounds, num_parts, Bound{item, last_block});
    const int32_t first_slot = item == range.begin.item ? work.first_slot : work.first_slot + range.pieces - 1;
    const int32_t last_slot = out.part_slots[last_part] & kSlotMask;
    record.entry = CombineEntry{item, first_slot, last_slot - first_slot + 1, 0};
    record.entry_index = out.part_slots[p] >> kSlotBits;
  }
  return record;
}

// Shared-memory carve-up of partition_parts' arrays and the lengths when a
// block builds the schedule (the schedule kernel, or an attention kernel for
// plan.schedule_in_kernel), all 16-byte aligned.
struct ScheduleScratch {
  size_t prefix, bounds, slots, lengths, total;
};

OPENMLA_HOST_DEVICE size_t scratch_align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

OPENMLA_HOST_DEVICE ScheduleScratch schedule_scratch_layout(int32_t num_items, int32_t num_parts,
                                                             int32_t staged_lengths) {
  ScheduleScratch layout{};
  layout.prefix = 0;
  layout.bounds = layout.prefix + scratch_align16(sizeof(int64_t) * (size_t(num_items) + 1));
  layout.slots = layout.bounds + scratch_align16(sizeof(Bound) * (size_t(num_parts) + 1));
  layout.lengths = layout.slots + scratch_align16(sizeof(int32_t) * (size_t(num_parts) + 1));
  layout.total = layout.lengths + scratch_align16(sizeof(int32_t) * size_t(staged_lengths));
  return layout;
}

// The most shared memory an attention kernel lends the schedule it builds
// (DecodePlan::schedule_in_kernel); each such kernel static_asserts its region.
inline constexpr size_t kInKernelScheduleScratchBytes = 32 * 1024;
// Fewer items keep the schedule kernel by default (SchedulePlacement::kAutomatic):
// its launch then overlaps the attention kernel's own launch and prologue, while
// the in-kernel build puts the lengths' load, the build and its cold code before
// the first K/V load. Measured on the H200 (2026-12-03, docs/performance.md,
// session 33; graph replays, s_k = 1024 / topk 2048, in-kernel against the
// schedule kernel) with one item built by one_item_part_record and up to 32 in the lanes:
// dense b = 1 +3.6 to +8.1 % (BF16), FP8 +7.4 % at h_q = 16 and -3.0 % at
// h_q = 128; b = 2 -3.6 to +11 %, b = 3-8 +0.4 to +13 %; sparse one item -0.9 %
// at h_q = 64 (two: -2.3 %), +21 % at h_q = 128, +18 to +22 % at h_q 16 / 32.
inline constexpr int32_t kInKernelScheduleMinDenseItems = 1;
inline constexpr int32_t kInKernelScheduleMinSparseItems = 1;
inline constexpr int32_t kInKernelScheduleMinSparseHeadsOnMItems = 3;  // h_q = 64 (one CTA per part)

// Lengths a device schedule stages in its scratch: one per item (StagedLengths),
// none when every item has the default length.
OPENMLA_HOST_DEVICE int32_t schedule_staged_lengths(const ItemLengths& lengths, int32_t num_items) {
  return lengths.lengths == nullptr ? 0 : num_items;
}

// Build the whole schedule (partition_parts, then every part's records); the
// combine entries past the split items are empty. Same threads as partition_parts.
template <class Lengths>
OPENMLA_HOST_DEVICE void build_schedule(int32_t num_items, int32_t num_parts, int32_t min_part_cost, ItemCuts cuts,
                                        const Lengths& lengths, const ScheduleBuffers& out, int thread,
                                        int num_threads) {
  partition_parts(num_items, num_parts, min_part_cost, cuts, lengths, out, thread, num_threads);
  const int32_t entries = combine_entry_count(out, num_parts);
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p < num_parts; p += num_threads) {
    const PartRecord record = part_record(out, lengths, num_parts, p);
    out.parts[p] = record.work;
    if (record.entry_index >= 0) out.combine[record.entry_index] = record.entry;
    if (p >= entries) out.combine[p] = empty_combine_entry();
  }
}

}  // namespace openmla::plan_detail

// The batch-invariant schedule (PlanOptions::batch_invariant,
// docs/batch_invariance.md), shared like partition.h by the host planner (one
// thread) and the one-block device schedule kernel: __host__ __device__
// integer arithmetic, so host and device produce the same bytes.
//
// Item i is cut into chunks_i = ceil(blocks_i / chunk_blocks) fixed chunks of
// chunk_blocks KV blocks from its first block, positions that depend only on
// the item's own length. Every chunk is one part (one CTA per q-group); parts
// past the last chunk are empty. So:
//   - a chunk is always computed alone, from a fresh online softmax, whatever
//     the batch or the item's position in it;
//   - an item of one chunk is written straight to out / lse (never a partial);
//   - an item of several chunks writes chunk k to partial slot
//     (chunks of the items before it) + k, consecutive in chunk order whatever
//     part runs it, and the combine merges them in that order.
//
// Parts run longest chunk first. The hardware hands a grid's CTAs to SMs in
// order as SMs free up, so this is list scheduling longest-first, which keeps
// the last wave short when lengths vary (one chunk per CTA cannot be balanced
// any other way). Full chunks come first (every chunk but an item's last, in
// (item, chunk) order), then the items' last chunks by size, largest first, in
// kLastChunkClasses size classes of ceil(chunk_blocks / 8) blocks (items in order
// within a class).
//
// Algorithm:
//   1. one packed scan over items: chunks (low 32 bits) and items of several
//      chunks (high 32 bits), so it gives every item's first chunk index (and
//      slot) and the dense index of its combine entry;
//   2. a stable counting sort of the items by the size class of their last
//      chunk, into `last_chunk_order` (scratch);
//   3. per part: its chunk (a full chunk by binary search over the scan, or an
//      item's last chunk from the sorted order), block range, flags, slot, and
//      (first chunk of a split item) the combine entry.
#pragma once

#include <cstdint>

#include "plan/partition.h"

namespace openmla::plan_detail {

inline constexpr int64_t kChunkCountMask = 0xffffffffll;
inline constexpr int kSplitItemShift = 32;

// Size classes of an item's last chunk: class 0 holds full chunks, class
// kLastChunkClasses - 1 the shortest. Counts per class are kept as 16-bit fields
// of two 64-bit words (classes 0-3, 4-7), so a warp scans all eight with two
// scans: every count and position is below num_items <= kMaxBatchInvariantParts
// < 2^16, so no field carries into the next.
inline constexpr int kLastChunkClasses = 8;
static_assert(kMaxBatchInvariantParts < (1 << 16), "class counts and positions fit 16-bit fields");

OPENMLA_HOST_DEVICE int32_t item_num_chunks(int32_t length, int32_t chunk_blocks) {
  return (item_num_blocks(length) - 1) / chunk_blocks + 1;
}

// An item's packed scan value: its chunk count, and 1 << 32 when it is split.
template <class Lengths>
struct ItemChunksAt {
  Lengths lengths;
  int32_t chunk_blocks;
  OPENMLA_HOST_DEVICE int64_t operator()(int i) const {
    const int32_t chunks = item_num_chunks(item_length(lengths, i), chunk_blocks);
    return int64_t(chunks) | (chunks > 1 ? int64_t(1) << kSplitItemShift : 0);
  }
};

// Size class of item i's last chunk (0: a full chunk; larger: shorter).
template <class Lengths>
OPENMLA_HOST_DEVICE int last_chunk_class(const Lengths& lengths, int32_t item, int32_t chunk_blocks) {
  const int32_t blocks = item_num_blocks(item_length(lengths, item));
  const int32_t last = blocks - (blocks - 1) / chunk_blocks * chunk_blocks;  // in [1, chunk_blocks]
  return (chunk_blocks - last) / ((chunk_blocks + kLastChunkClasses - 1) / kLastChunkClasses);  // < 8
}

// 1 in class c's field of word `word` (0: classes 0-3, 1: classes 4-7).
OPENMLA_HOST_DEVICE uint64_t class_one(int c, int word) {
  return (c >> 2) == word ? uint64_t(1) << (16 * (c & 3)) : 0;
}
OPENMLA_HOST_DEVICE int32_t class_field(uint64_t word, int c) { return int32_t((word >> (16 * (c & 3))) & 0xffff); }
// Field c = the sum of fields below c.
OPENMLA_HOST_DEVICE uint64_t fields_exclusive(uint64_t word) { return (word << 16) + (word << 32) + (word << 48); }
// Every field = the sum of all four.
OPENMLA_HOST_DEVICE uint64_t fields_total(uint64_t word) {
  return ((word * 0x0001000100010001ull) >> 48) * 0x0001000100010001ull;
}

// Sum of `value` over the 32 lanes of the warp, on every lane (one host lane: its own).
OPENMLA_HOST_DEVICE uint64_t lanes_total(uint64_t exclusive, uint64_t value) {
#if defined(__CUDA_ARCH__)
  return __shfl_sync(0xffffffffu, exclusive + value, 31);
#else
  (void)exclusive;
  return value;
#endif
}

// Stable counting sort of items [0, num_items) by last_chunk_class into
// order[0, num_items): the 32 lanes of one warp (or one host lane), each
// sorting a contiguous range of items.
template <class Lengths>
OPENMLA_HOST_DEVICE void sort_items_by_last_chunk(int32_t num_items, int32_t chunk_blocks, const Lengths& lengths,
                                                  int32_t* order, int lane, int num_lanes) {
  const int32_t range = (num_items + num_lanes - 1) / num_lanes;
  const int32_t begin = lane * range < num_items ? lane * range : num_items;
  const int32_t end = begin + range < num_items ? begin + range : num_items;
  uint64_t count_low = 0, count_high = 0;  // this lane's items per class
  OPENMLA_ROLLED_LOOP
  for (int32_t i = begin; i < end; ++i) {
    const int c = last_chunk_class(lengths, i, chunk_blocks);
    count_low += class_one(c, 0);
    count_high += class_one(c, 1);
  }
  const uint64_t before_low = lanes_exclusive_sum(count_low, lane);
  const uint64_t before_high = lanes_exclusive_sum(count_high, lane);
  const uint64_t total_low = lanes_total(before_low, count_low);
  const uint64_t total_high = lanes_total(before_high, count_high);
  // this lane's first position in each class: the classes before it, then the lanes before it
  uint64_t next_low = fields_exclusive(total_low) + before_low;
  uint64_t next_high = fields_total(total_low) + fields_exclusive(total_high) + before_high;
  OPENMLA_ROLLED_LOOP
  for (int32_t i = begin; i < end; ++i) {
    const int c = last_chunk_class(lengths, i, chunk_blocks);
    order[class_field(c < 4 ? next_low : next_high, c)] = i;
    next_low += class_one(c, 0);
    next_high += class_one(c, 1);
  }
}

// Threads [0, num_threads) of one block (or one host thread) call this
// together. num_parts >= the chunks of every item at its longest (the planner
// sizes it so), so every chunk gets a part. Uses out.item_prefix and
// out.part_slots (num_parts + 1 >= num_items entries) as scratch;
// out.part_bounds is not touched.
template <class Lengths>
OPENMLA_HOST_DEVICE void build_chunk_schedule(int32_t num_items, int32_t num_parts, int32_t chunk_blocks,
                                              const Lengths& lengths, const ScheduleBuffers& out, int thread,
                                              int num_threads) {
  const int lanes = scan_lanes(num_threads);
  int32_t* const last_chunk_order = out.part_slots;  // [num_items]

  // 1. packed prefix over items (warp 0); 2. the last chunks' order (warp 1,
  // or the same lanes when there is one warp); every combine entry starts empty
  if (thread < lanes) {
    lanes_exclusive_scan<int64_t>(num_items, ItemChunksAt<Lengths>{lengths, chunk_blocks}, out.item_prefix, thread, lanes);
  }
  const int sort_first = num_threads >= 2 * lanes ? lanes : 0;
  if (thread >= sort_first && thread < sort_first + lanes) {
    sort_items_by_last_chunk(num_items, chunk_blocks, lengths, last_chunk_order, thread - sort_first, lanes);
  }
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p < num_parts; p += num_threads) out.combine[p] = CombineEntry{-1, -1, 0, 0};
  threads_sync();

  // 3. one chunk per part, full chunks first, then the last chunks by size
  const int64_t total_chunks = out.item_prefix[num_items] & kChunkCountMask;
  const int64_t full_chunks = total_chunks - num_items;  // every chunk but each item's last
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p < num_parts; p += num_threads) {
    if (p >= total_chunks) {
      out.parts[p] = PartWork{-1, 0, -1, 0, -1, kPartEmpty, {0, 0}};
      continue;
    }
    int32_t item, chunk;
    if (p < full_chunks) {
      // the item holding full chunk p: last with (chunks before it) - (items before it) <= p
      int32_t lo = 0, hi = num_items - 1;
      while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if ((out.item_prefix[mid] & kChunkCountMask) - mid <= p) lo = mid; else hi = mid - 1;
      }
      item = lo;
      chunk = p - int32_t((out.item_prefix[lo] & kChunkCountMask) - lo);
    } else {
      item = last_chunk_order[p - full_chunks];
      chunk = item_num_chunks(item_length(lengths, item), chunk_blocks) - 1;
    }
    const int64_t before = out.item_prefix[item];
    const int32_t first_chunk = int32_t(before & kChunkCountMask);
    const int32_t blocks = item_num_blocks(item_length(lengths, item));
    const int32_t chunks = (blocks - 1) / chunk_blocks + 1;
    PartWork work{};
    work.begin_item = item;
    work.end_item = item;
    work.begin_block = chunk * chunk_blocks;
    work.end_block = work.begin_block + chunk_blocks < blocks ? work.begin_block + chunk_blocks : blocks;
    if (chunks > 1) {
      work.first_slot = first_chunk + chunk;
      work.flags = kPartBeginPartial | kPartEndPartial;  // one piece of a split item, as partition.h marks it
      if (chunk == 0) out.combine[int32_t(before >> kSplitItemShift)] = CombineEntry{item, first_chunk, chunks, 0};
    } else {
      work.first_slot = -1;
      work.flags = 0;
    }
    out.parts[p] = work;
  }
}

}  // namespace openmla::plan_detail

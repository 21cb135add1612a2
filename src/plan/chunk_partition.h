// The batch-invariant schedule (PlanOptions::batch_invariant,
// docs/batch_invariance.md), shared like partition.h by the host planner (one
// thread) and the one-block device schedule kernel: __host__ __device__
// integer arithmetic, so host and device produce the same bytes.
//
// Item i is cut into chunks_i = ceil(blocks_i / chunk_blocks) fixed chunks of
// chunk_blocks KV blocks from its first block, positions that depend only on
// the item's own length. Every chunk is one part (one CTA per q-group), in
// (item, chunk) order; parts past the last chunk are empty. So:
//   - a chunk is always computed alone, from a fresh online softmax, whatever
//     the batch or the item's position in it;
//   - an item of one chunk is written straight to out / lse (never a partial);
//   - an item of several chunks writes each chunk to partial slot = part index
//     (consecutive in chunk order) and the combine merges them in that order.
//
// Algorithm:
//   1. one packed scan over items: chunks (low 32 bits) and items of several
//      chunks (high 32 bits), so it gives the first part of every item and the
//      dense index of its combine entry;
//   2. per part: its item by binary search over the scan, the chunk's block
//      range, flags, slot, and (first chunk of a split item) the combine entry.
#pragma once

#include <cstdint>

#include "plan/partition.h"

namespace openmla::plan_detail {

inline constexpr int64_t kChunkCountMask = 0xffffffffll;
inline constexpr int kSplitItemShift = 32;

OPENMLA_HOST_DEVICE int32_t item_num_chunks(int32_t length, int32_t chunk_blocks) {
  return (item_num_blocks(length) - 1) / chunk_blocks + 1;
}

// An item's packed scan value: its chunk count, and 1 << 32 when it is split.
struct ItemChunksAt {
  ItemLengths lengths;
  int32_t chunk_blocks;
  OPENMLA_HOST_DEVICE int64_t operator()(int i) const {
    const int32_t chunks = item_num_chunks(item_length(lengths, i), chunk_blocks);
    return int64_t(chunks) | (chunks > 1 ? int64_t(1) << kSplitItemShift : 0);
  }
};

// Threads [0, num_threads) of one block (or one host thread) call this
// together. num_parts >= the chunks of every item at its longest (the planner
// sizes it so), so every chunk gets a part. Uses out.item_prefix as scratch;
// out.part_bounds and out.part_slots are not touched.
OPENMLA_HOST_DEVICE void build_chunk_schedule(int32_t num_items, int32_t num_parts, int32_t chunk_blocks,
                                              const ItemLengths& lengths, const ScheduleBuffers& out, int thread,
                                              int num_threads) {
  const int scan_lanes = num_threads < 32 ? num_threads : 32;

  // 1. packed prefix over items; every combine entry starts empty
  if (thread < scan_lanes) {
    lanes_exclusive_scan<int64_t>(num_items, ItemChunksAt{lengths, chunk_blocks}, out.item_prefix, thread, scan_lanes);
  }
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p < num_parts; p += num_threads) out.combine[p] = CombineEntry{-1, -1, 0, 0};
  threads_sync();

  // 2. one chunk per part
  const int64_t total_chunks = out.item_prefix[num_items] & kChunkCountMask;
  OPENMLA_ROLLED_LOOP
  for (int32_t p = thread; p < num_parts; p += num_threads) {
    if (p >= total_chunks) {
      out.parts[p] = PartWork{-1, 0, -1, 0, -1, kPartEmpty, {0, 0}};
      continue;
    }
    int32_t lo = 0, hi = num_items - 1;  // the item holding chunk p: last with chunks before it <= p
    while (lo < hi) {
      const int32_t mid = (lo + hi + 1) / 2;
      if ((out.item_prefix[mid] & kChunkCountMask) <= p) lo = mid; else hi = mid - 1;
    }
    const int64_t before = out.item_prefix[lo];
    const int32_t chunk = p - int32_t(before & kChunkCountMask);
    const int32_t blocks = item_num_blocks(item_length(lengths, lo));
    const int32_t chunks = (blocks - 1) / chunk_blocks + 1;
    PartWork work{};
    work.begin_item = lo;
    work.end_item = lo;
    work.begin_block = chunk * chunk_blocks;
    work.end_block = work.begin_block + chunk_blocks < blocks ? work.begin_block + chunk_blocks : blocks;
    if (chunks > 1) {
      work.first_slot = p;
      work.flags = kPartBeginPartial | kPartEndPartial;  // one piece of a split item, as partition.h marks it
      if (chunk == 0) out.combine[int32_t(before >> kSplitItemShift)] = CombineEntry{lo, p, chunks, 0};
    } else {
      work.first_slot = -1;
      work.flags = 0;
    }
    out.parts[p] = work;
  }
}

}  // namespace openmla::plan_detail

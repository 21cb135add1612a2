// Split-KV schedule records, shared by the planner, the kernels and the
// combine. Plain fixed-size data so the same bytes live on host and device.
//
// The work of a decode call is a list of "items" (requests for dense decode,
// (request, query token) pairs for sparse decode). Item i has
// e_i = max(1, ceil(len_i / 64)) KV blocks; an empty item still has one
// (empty) block so that exactly one part owns it and writes O = 0, LSE = +inf.
// The flattened (item, block) list is cut into num_parts contiguous ranges,
// one per SM part. Every q-group CTA (query tile x KV head) of a part walks
// the same range, so tiles sharing KV read it at the same time (L2 reuse).
//
// A part touches at most two split items (its first and its last), so at
// most 2 * (num_parts - 1) partial results exist: the partial buffers are
// sized by the part count, never by the batch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define OPENMLA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define OPENMLA_HOST_DEVICE inline
#endif

namespace openmla {

enum PartFlags : int32_t {
  kPartEmpty = 1 << 0,         // nothing to do; the kernel returns at once
  kPartBeginPartial = 1 << 1,  // begin_item is split: write a partial, not the output
  kPartEndPartial = 1 << 2,    // end_item is split (may equal begin_item)
};

// One SM part's contiguous range of (item, block) work.
struct alignas(16) PartWork {
  int32_t begin_item;   // first item
  int32_t begin_block;  // first block of begin_item
  int32_t end_item;     // last item (inclusive)
  int32_t end_block;    // one past the last block of end_item
  int32_t first_slot;   // partial slot of this part's first partial piece; -1 if none
  int32_t flags;        // PartFlags
  int32_t reserved[2];
};
static_assert(sizeof(PartWork) == 32, "PartWork is shared with device code");

// One split item, recorded by the part that holds its first piece.
// Its pieces live in slots [first_slot, first_slot + num_pieces), in KV order.
struct alignas(16) CombineEntry {
  int32_t item;        // -1 when this part starts no split item
  int32_t first_slot;
  int32_t num_pieces;  // >= 2 for a real entry, 0 otherwise
  int32_t reserved;
};
static_assert(sizeof(CombineEntry) == 16, "CombineEntry is shared with device code");

// Block range of `item` inside `part` (begin inclusive, end exclusive).
OPENMLA_HOST_DEVICE int32_t part_item_begin_block(const PartWork& part, int32_t item) {
  return item == part.begin_item ? part.begin_block : 0;
}

// Is this part's piece of `item` a partial result (item split across parts)?
OPENMLA_HOST_DEVICE bool part_item_is_partial(const PartWork& part, int32_t item) {
  return (item == part.begin_item && (part.flags & kPartBeginPartial)) ||
         (item == part.end_item && (part.flags & kPartEndPartial));
}

// Partial slot written for `item` by this part; only meaningful when partial.
// Only the first and last items of a part can be split, so this part's
// pieces take first_slot and first_slot + 1 in that order.
OPENMLA_HOST_DEVICE int32_t part_item_slot(const PartWork& part, int32_t item) {
  const bool begin_has_slot = (part.flags & kPartBeginPartial) != 0;
  return part.first_slot + ((item != part.begin_item && begin_has_slot) ? 1 : 0);
}

}  // namespace openmla

// The lengths a block's partition reads, staged in shared memory first: the
// partition (plan/partition.h) walks them in dependent chains, each link ~1 us
// from global memory after an L2 flush. Used by the schedule kernel and by an
// attention kernel that builds its own part (own_part.cuh).
#pragma once

#include <cstdint>

#include "plan/partition.h"

namespace openmla::kernels::common {

// The lengths a block's partition reads (plan_detail::StagedLengths): one
// clamped length per item copied into `shared` ([num_items]), so its lookups are
// plain loads, or the one length of every item when `lengths` has no array.
// Every thread of the block calls it.
__device__ __forceinline__ plan_detail::StagedLengths stage_item_lengths(const ItemLengths& lengths, int32_t num_items,
                                                                         int32_t* shared) {
  if (lengths.lengths == nullptr) return plan_detail::uniform_lengths(lengths);
  OPENMLA_ROLLED_LOOP
  for (int32_t i = int32_t(threadIdx.x); i < num_items; i += int32_t(blockDim.x)) {
    shared[i] = plan_detail::item_length(lengths, i);
  }
  __syncthreads();
  return plan_detail::StagedLengths{shared, 0};
}

}  // namespace openmla::kernels::common

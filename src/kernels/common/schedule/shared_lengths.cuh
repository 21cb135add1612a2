// The lengths a block's partition reads, staged in shared memory first: the
// partition (plan/partition.h) walks them in dependent chains, each link ~1 us
// from global memory after an L2 flush. Used by the schedule kernel and by an
// attention kernel that builds its own part (own_part.cuh).
#pragma once

#include <cstdint>

#include "plan/partition.h"

namespace openmla::kernels::common {

// One clamped length per item into `shared` ([num_items]), so the partition's
// lookups are plain loads (plan_detail::PerItemLengths). Every thread of the
// block calls it; `lengths.lengths` is not null.
__device__ __forceinline__ plan_detail::PerItemLengths stage_item_lengths(const ItemLengths& lengths, int32_t num_items,
                                                                          int32_t* shared) {
  OPENMLA_ROLLED_LOOP
  for (int32_t i = int32_t(threadIdx.x); i < num_items; i += int32_t(blockDim.x)) {
    shared[i] = plan_detail::item_length(lengths, i);
  }
  __syncthreads();
  return plan_detail::PerItemLengths{shared};
}

}  // namespace openmla::kernels::common

// The lengths a block's partition reads, copied into shared memory first: the
// partition (plan/partition.h) walks them in dependent chains, each link ~1 us
// from global memory after an L2 flush. Used by the schedule kernel and by an
// attention kernel that builds its own part (own_part.cuh).
#pragma once

#include <cstdint>

namespace openmla::kernels::common {

// Every thread of the block calls it; returns `shared` ([num_lengths]) once filled.
__device__ __forceinline__ const int32_t* stage_lengths(const int32_t* lengths, int32_t num_lengths, int32_t* shared) {
  for (int32_t i = int32_t(threadIdx.x); i < num_lengths; i += int32_t(blockDim.x)) shared[i] = lengths[i];
  __syncthreads();
  return shared;
}

}  // namespace openmla::kernels::common

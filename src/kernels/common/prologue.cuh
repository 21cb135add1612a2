// What every warp-specialised sm90 kernel of the library does first: find its
// SharedStorage in dynamic shared memory, its role index and its SM part.
#pragma once

#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "openmla/schedule.h"

namespace openmla::kernels::common {

// The kernel's SharedStorage at the dynamic shared-memory base rounded up to
// kAlign bytes (TMA and the 128-byte swizzles want 1024); the launch asks for
// sizeof(SharedStorage) + kAlign bytes, so the rounding always fits.
template <class SharedStorage, int kAlign>
__device__ __forceinline__ SharedStorage& aligned_shared_storage(uint8_t* smem_raw) {
  static_assert(kAlign > 0 && (kAlign & (kAlign - 1)) == 0, "a power of two");
  const uintptr_t base = (reinterpret_cast<uintptr_t>(smem_raw) + kAlign - 1) & ~uintptr_t(kAlign - 1);
  return *reinterpret_cast<SharedStorage*>(base);
}

// This thread's warpgroup, read from lane 0 so that the compiler knows it is
// warp-uniform and keeps the role branches free of divergence.
__device__ __forceinline__ int warp_uniform_warpgroup(int warpgroup_threads) {
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / warpgroup_threads, 0);
}

// This CTA's SM part (parts[blockIdx.y]), written by the schedule kernel that
// this grid is launched as a dependent of: waits for that grid, then lets the
// next grid start its prologue.
__device__ __forceinline__ PartWork scheduled_part(const PartWork* parts) {
  wait_for_previous_grid();
  allow_next_grid();
  return parts[blockIdx.y];
}

}  // namespace openmla::kernels::common

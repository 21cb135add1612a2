// Programmatic dependent launch (sm90): a decode call is three grids in a row
// (schedule, attention, combine). Launching the second and third as
// programmatic dependents lets their launch and prologue overlap the previous
// grid; each waits for the previous grid's writes before reading them.
//   PTX: griddepcontrol.{wait, launch_dependents}
//   runtime: cudaLaunchKernelEx + cudaLaunchAttributeProgrammaticStreamSerialization
// Without the launch attribute both instructions are no-ops, so a kernel is
// correct either way.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kernels/common/shared_memory_limit.h"
#include "openmla/status.h"

namespace openmla::kernels::common {

// Blocks until the grids this one depends on have finished and their memory
// is visible. Nothing written by the previous grid may be read before this.
// NOTE: read such data with plain loads, or through addresses that depend on
// a plain load made after the wait: ptxas may move an `__ldg` (ld.global.nc)
// with a ready address above the wait (ACQBULK in SASS).
__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next grid in the stream start launching (it still waits for this
// grid to finish before it reads anything).
__device__ __forceinline__ void allow_next_grid() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Launch attribute for thread-block clusters of `cluster_x` CTAs along x.
inline cudaLaunchAttribute cluster_attribute(int cluster_x) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = unsigned(cluster_x);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

// Launches `kernel` as a programmatic dependent of the previous work in
// `stream` (raising its dynamic shared-memory limit once when needed), in
// thread-block clusters of `cluster_x` CTAs along x when it is above 1.
template <class... KernelArgs, class... Args>
Status launch_dependent(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, int smem_bytes,
                        cudaStream_t stream, int cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1] = cluster_attribute(cluster_x);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = size_t(smem_bytes);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster_x > 1 ? 2 : 1;
  return launch_with_shared_memory_limit(name, reinterpret_cast<const void*>(kernel), smem_bytes,
                                         [&] { return cudaLaunchKernelEx(&config, kernel, args...); });
}

}  // namespace openmla::kernels::common

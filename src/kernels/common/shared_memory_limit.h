// A kernel's dynamic shared-memory limit, raised once per kernel and device.
// Launching with more than 48 KiB of dynamic shared memory needs
// cudaFuncSetAttribute(kMaxDynamicSharedMemorySize) first. Made on every launch,
// that runtime call cost host time on every eager decode call (and it waits for
// pending copies), so the limits already raised are remembered here.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "openmla/status.h"

namespace openmla::kernels::common {

// Dynamic shared memory a kernel may use without raising its limit.
inline constexpr int kDefaultSharedMemoryLimit = 48 * 1024;

// Raises `kernel`'s limit on the current device to at least `smem_bytes`
// (nothing to do at 48 KiB or below, or when an earlier call raised it as far).
// `name` prefixes the error. Thread-safe.
Status raise_shared_memory_limit(const char* name, const void* kernel, int smem_bytes);

// Forgets what was raised for `kernel` on the current device, so that the next
// raise_shared_memory_limit sets it again: for a launch that failed although
// the limit was recorded (a device reset drops every function attribute).
void forget_shared_memory_limit(const void* kernel);

// Raises `kernel`'s limit to `smem_bytes`, then runs `launch` (returns the
// launch's cudaError_t). A launch refused with cudaErrorInvalidValue above
// 48 KiB, the limit being recorded, may meet a stale record: the limit is
// raised again and the launch made once more. `name` prefixes the errors.
template <class Launch>
Status launch_with_shared_memory_limit(const char* name, const void* kernel, int smem_bytes, const Launch& launch) {
  OPENMLA_RETURN_IF_ERROR(raise_shared_memory_limit(name, kernel, smem_bytes));
  cudaError_t error = launch();
  if (error == cudaErrorInvalidValue && smem_bytes > kDefaultSharedMemoryLimit) {
    (void)cudaGetLastError();  // reported by the second launch, not by the next check
    forget_shared_memory_limit(kernel);
    OPENMLA_RETURN_IF_ERROR(raise_shared_memory_limit(name, kernel, smem_bytes));
    error = launch();
  }
  if (error != cudaSuccess) {
    return Status::cuda_error(std::string(name) + ": kernel launch failed: " + cudaGetErrorString(error));
  }
  return Status::ok();
}

}  // namespace openmla::kernels::common

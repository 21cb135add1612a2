// A kernel's dynamic shared-memory limit, raised once per kernel and device.
// Launching with more than 48 KiB of dynamic shared memory needs
// cudaFuncSetAttribute(kMaxDynamicSharedMemorySize) first. Made on every launch,
// that runtime call cost host time on every eager decode call (and it waits for
// pending copies), so the limits already raised are remembered here.
#pragma once

#include "openmla/status.h"

namespace openmla::kernels::common {

// Raises `kernel`'s limit on the current device to at least `smem_bytes`
// (nothing to do at 48 KiB or below, or when an earlier call raised it as far).
// `name` prefixes the error. Thread-safe.
Status raise_shared_memory_limit(const char* name, const void* kernel, int smem_bytes);

// Forgets what was raised for `kernel` on the current device, so that the next
// raise_shared_memory_limit sets it again: for a launch that failed although
// the limit was recorded (a device reset drops every function attribute).
void forget_shared_memory_limit(const void* kernel);

}  // namespace openmla::kernels::common

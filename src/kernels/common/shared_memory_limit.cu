// A kernel's dynamic shared-memory limit, raised once per kernel and device (shared_memory_limit.h).
#include "kernels/common/shared_memory_limit.h"

#include <cuda_runtime.h>

#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

namespace openmla::kernels::common {
namespace {

// The limits raised so far: a few dozen kernels at most, per device.
struct RaisedLimit {
  const void* kernel;
  int device;
  int smem_bytes;
};

// Launches only read the table (shared lock); the first raise of a kernel on a device writes it.
std::shared_mutex raised_mutex;
std::vector<RaisedLimit> raised_limits;  // guarded by raised_mutex

// The record of `kernel` on `device`, or null. Call with raised_mutex held.
RaisedLimit* find_record(const void* kernel, int device) {
  for (RaisedLimit& raised : raised_limits) {
    if (raised.kernel == kernel && raised.device == device) return &raised;
  }
  return nullptr;
}

}  // namespace

Status raise_shared_memory_limit(const char* name, const void* kernel, int smem_bytes) {
  if (smem_bytes <= kDefaultSharedMemoryLimit) return Status::ok();
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // reported here, not by the next launch check
    return Status::cuda_error(std::string(name) + ": cudaGetDevice failed: " + cudaGetErrorString(error));
  }
  {
    const std::shared_lock<std::shared_mutex> lock(raised_mutex);
    const RaisedLimit* record = find_record(kernel, device);
    if (record != nullptr && record->smem_bytes >= smem_bytes) return Status::ok();
  }
  // Held across the runtime call: two threads raising one kernel to different sizes
  // must not leave a record above the limit actually set.
  const std::unique_lock<std::shared_mutex> lock(raised_mutex);
  RaisedLimit* record = find_record(kernel, device);
  if (record != nullptr && record->smem_bytes >= smem_bytes) return Status::ok();
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::cuda_error(std::string(name) + ": cudaFuncSetAttribute(max dynamic smem = " +
                              std::to_string(smem_bytes) + ") failed: " + cudaGetErrorString(error));
  }
  if (record != nullptr) {
    record->smem_bytes = smem_bytes;
  } else {
    raised_limits.push_back({kernel, device, smem_bytes});
  }
  return Status::ok();
}

void forget_shared_memory_limit(const void* kernel) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // nothing recorded can be for a device that cannot be read
    return;
  }
  const std::unique_lock<std::shared_mutex> lock(raised_mutex);
  RaisedLimit* record = find_record(kernel, device);
  if (record != nullptr) record->smem_bytes = 0;
}

}  // namespace openmla::kernels::common

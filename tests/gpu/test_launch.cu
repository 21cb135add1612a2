// GPU checks of the launch helpers: a kernel's dynamic shared-memory limit is
// raised once per kernel and device, never lowered, and a launch recovers when
// the recorded limit was dropped behind the library's back (as a device reset does).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/shared_memory_limit.h"
#include "test_util/device_buffer.h"

namespace openmla {
namespace {

constexpr int kLargeSmem = 100 * 1024;

// out[0] = the value written to the last int of the dynamic shared memory: proof that the
// block ran with all `smem_ints` of it.
__global__ void last_shared_int_kernel(int* out, int smem_ints, int value) {  // out: [1]
  extern __shared__ int shared[];
  if (threadIdx.x == 0) shared[smem_ints - 1] = value;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = shared[smem_ints - 1];
}

int dynamic_smem_limit(const void* kernel) {
  cudaFuncAttributes attributes{};
  EXPECT_EQ(cudaFuncGetAttributes(&attributes, kernel), cudaSuccess);
  return attributes.maxDynamicSharedSizeBytes;
}

// Launches last_shared_int_kernel with `smem_bytes` through launch_dependent and returns out[0].
int launch_and_read(int smem_bytes, int value) {
  test::DeviceBuffer<int> out;
  EXPECT_NO_FATAL_FAILURE(test::upload(out, std::vector<int>{-1}));
  const Status status = kernels::common::launch_dependent("last_shared_int", &last_shared_int_kernel, dim3(1),
                                                          dim3(32), smem_bytes, cudaStream_t{}, 1, out.ptr,
                                                          smem_bytes / int(sizeof(int)), value);
  EXPECT_TRUE(status.ok()) << status.message();
  std::vector<int> host(1, -1);
  EXPECT_NO_FATAL_FAILURE(test::download(host, out));
  return host[0];
}

TEST(SharedMemoryLimitGpu, RaisedOnceAndNeverLowered) {
  const void* kernel = reinterpret_cast<const void*>(&last_shared_int_kernel);
  kernels::common::forget_shared_memory_limit(kernel);
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0), cudaSuccess);
  ASSERT_TRUE(kernels::common::raise_shared_memory_limit("test", kernel, 40 * 1024).ok());
  EXPECT_EQ(dynamic_smem_limit(kernel), 0) << "48 KiB or less needs no raise";
  ASSERT_TRUE(kernels::common::raise_shared_memory_limit("test", kernel, kLargeSmem).ok());
  EXPECT_EQ(dynamic_smem_limit(kernel), kLargeSmem);
  ASSERT_TRUE(kernels::common::raise_shared_memory_limit("test", kernel, 64 * 1024).ok());
  EXPECT_EQ(dynamic_smem_limit(kernel), kLargeSmem) << "a smaller request keeps the larger limit";
  ASSERT_TRUE(kernels::common::raise_shared_memory_limit("test", kernel, 2 * kLargeSmem).ok());
  EXPECT_EQ(dynamic_smem_limit(kernel), 2 * kLargeSmem);
  // Recorded: a limit lowered behind the cache's back stays lowered until a launch fails.
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0), cudaSuccess);
  ASSERT_TRUE(kernels::common::raise_shared_memory_limit("test", kernel, kLargeSmem).ok());
  EXPECT_EQ(dynamic_smem_limit(kernel), 0) << "the second raise must not call the runtime again";
}

// After the limit is dropped, the next launch fails once on purpose (an API error compute-sanitizer
// reports) before the retry: the sanitizer runs leave out *ProvokesApiError* (tests/CMakeLists.txt,
// scripts/device.sh).
TEST(SharedMemoryLimitGpu, LaunchRecoversWhenTheLimitWasDroppedProvokesApiError) {
  const void* kernel = reinterpret_cast<const void*>(&last_shared_int_kernel);
  EXPECT_EQ(launch_and_read(kLargeSmem, 7), 7);
  EXPECT_GE(dynamic_smem_limit(kernel), kLargeSmem);
  // As after a device reset: the attribute is gone, the record says it is set.
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0), cudaSuccess);
  EXPECT_EQ(launch_and_read(kLargeSmem, 11), 11);
  EXPECT_GE(dynamic_smem_limit(kernel), kLargeSmem);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed first launch must leave no error behind";
}

}  // namespace
}  // namespace openmla

// Device-memory helpers shared by the GPU tests: an owning buffer, host <->
// device copies that fail the current test on error, and the DeviceInfo of
// the current device.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "openmla/openmla.h"

// A CUDA runtime call that must succeed (the message names the call and the error).
#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())
// An openmla::Status that must be ok (the message is the library's).
#define ASSERT_OK(call)                                                 \
  do {                                                                  \
    const ::openmla::Status status_ = (call);                           \
    ASSERT_TRUE(status_.is_ok()) << #call << ": " << status_.message(); \
  } while (0)

namespace openmla::test {

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { allocate(n); }
  void allocate(size_t n) {
    cudaFree(ptr);
    ptr = nullptr;
    count = n;
    if (n > 0 && cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <class T, class Alloc>
void upload(DeviceBuffer<T>& dst, const std::vector<T, Alloc>& src) {
  dst.allocate(src.size());
  ASSERT_TRUE(src.empty() || dst.ptr != nullptr) << "cudaMalloc of " << src.size() * sizeof(T) << " bytes failed";
  if (!src.empty()) {
    ASSERT_EQ(cudaMemcpy(dst.ptr, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
}

template <class T, class Alloc>
void download(std::vector<T, Alloc>& dst, const DeviceBuffer<T>& src) {
  ASSERT_EQ(dst.size(), src.count);
  ASSERT_EQ(cudaMemcpy(dst.data(), src.ptr, dst.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
}

// A device buffer's bytes (empty for an unallocated buffer); for bitwise comparisons.
template <class T>
std::vector<uint8_t> download_bytes(const DeviceBuffer<T>& src) {
  std::vector<uint8_t> bytes(src.ptr == nullptr ? 0 : src.count * sizeof(T));
  if (!bytes.empty()) EXPECT_EQ(cudaMemcpy(bytes.data(), src.ptr, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return bytes;
}

// Copies `src` over an allocated buffer of the same size (its pointer, which params hold, stays).
template <class T, class Alloc>
void overwrite(DeviceBuffer<T>& dst, const std::vector<T, Alloc>& src) {
  ASSERT_EQ(dst.count, src.size());
  if (!src.empty()) {
    ASSERT_EQ(cudaMemcpy(dst.ptr, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
}

// Every byte of a device buffer set to 0xff (NaN in fp32, bf16 and fp16; -1 in int32).
template <class T>
void poison(DeviceBuffer<T>& buffer) {
  if (buffer.ptr != nullptr) ASSERT_EQ(cudaMemset(buffer.ptr, 0xff, buffer.count * sizeof(T)), cudaSuccess);
}

inline DeviceInfo device_info() {
  DeviceInfo info;
  int device = 0;
  cudaGetDevice(&device);
  (void)query_device_info(device, &info);
  return info;
}

}  // namespace openmla::test

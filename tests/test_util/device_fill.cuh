// Device-side fills for the GPU tests' large inputs (too big to make on the
// host in reasonable time): bf16 values from a hash of the index, grid-stride
// loops. Each test file gets its own copy (internal linkage).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace openmla::test {
namespace {

inline constexpr int kFillBlocks = 1024, kFillThreads = 256;

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

// bf16 values roughly N(0, 1) (sum of four uniforms), from a hash of the index.
__global__ void fill_bf16_kernel(uint16_t* data, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(i * 0x9e3779b97f4a7c15ull + seed);
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) v += float((h >> (8 * k)) & 0xff) * (1.f / 255.f);
    v = (v - 2.f) * 1.7320508f;
    data[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

}  // namespace
}  // namespace openmla::test

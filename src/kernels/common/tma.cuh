// Global -> shared copies for sm90 kernels: the bulk tensor copy (TMA) that
// completes on an mbarrier, and 16-byte cp.async with zero fill for gathers
// whose rows do not form a regular tensor.
//
// PTX ISA references:
//   cp.async.bulk.tensor: https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cp-async-bulk-tensor
//   cp.async:             https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cp-async
#pragma once

#include <cstdint>

#include "kernels/common/barriers.cuh"

namespace openmla::kernels::common {

// 4-D tiled TMA load of one box at coordinates (c0 innermost .. c3) into smem;
// completes `box bytes` transactions on `bar`. `tensor_map` must live in
// param/const/global memory (a __grid_constant__ kernel parameter).
__device__ __forceinline__ void tma_load_4d(const void* tensor_map, uint64_t* bar, void* smem_dst,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_u32(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3)
      : "memory");
}

// Pull the descriptor into the TMA unit's cache ahead of the first load.
__device__ __forceinline__ void tma_prefetch_descriptor(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tensor_map)) : "memory");
}

// 16-byte cp.async (L2 only); when !valid the destination is zero-filled and
// `src` is not read (it must still be a valid address expression).
__device__ __forceinline__ void cp_async_16_zfill(void* smem_dst, const void* src, bool valid) {
  const uint32_t src_bytes = valid ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(smem_dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// Bulk copy of `bytes` (multiple of 16) from this CTA's smem into the smem of
// another CTA of the cluster; completes `bytes` transactions on that CTA's
// mbarrier. remote_dst / remote_bar come from map_to_cluster_rank.
//   https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cp-async-bulk
__device__ __forceinline__ void bulk_copy_to_cluster_rank(uint32_t remote_dst, const void* smem_src, uint32_t bytes,
                                                          uint32_t remote_bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          remote_dst),
      "r"(smem_u32(smem_src)), "r"(bytes), "r"(remote_bar)
      : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

}  // namespace openmla::kernels::common

// Synchronisation primitives for sm90 kernels: mbarriers (transaction-count
// barriers that TMA completes), named barriers between warpgroups, and the
// proxy fence that orders generic-proxy smem writes before async-proxy reads
// (WGMMA operands, TMA stores).
//
// PTX ISA references:
//   mbarrier:        https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-mbarrier
//   bar.sync/arrive: https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-bar
//   fence.proxy:     https://docs.nvidia.com/cuda/parallel-thread-execution/#parallel-synchronization-and-communication-instructions-membar
#pragma once

#include <cstdint>

namespace openmla::kernels::common {

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// ---- mbarrier -------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrive_count)
               : "memory");
}

// Makes mbarrier.init visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile(
      "{\n\t.reg .b64 state;\n\t"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n\t}" ::"r"(smem_u32(bar))
      : "memory");
}

// One arrival that also raises the phase's expected transaction bytes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{\n\t.reg .b64 state;\n\t"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(smem_u32(bar)),
      "r"(bytes)
      : "memory");
}

// Blocks until the phase with parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n\t.reg .pred done;\n\t"
      "wait_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra wait_%=;\n\t}" ::"r"(smem_u32(bar)),
      "r"(phase)
      : "memory");
}

// ---- cluster (distributed shared memory) ------------------------------------------
// Address of the same smem object in CTA `rank` of the cluster.
//   https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-mapa
__device__ __forceinline__ uint32_t map_to_cluster_rank(const void* ptr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(ptr)), "r"(rank));
  return remote;
}

// Loads from another CTA's shared memory (an address from map_to_cluster_rank).
// The writer's data is visible after a cluster barrier (arrive.release /
// wait.acquire) between its stores and these loads.
__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t remote) {
  float value;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
  return value;
}

__device__ __forceinline__ uint2 ld_shared_cluster_b32x2(uint32_t remote) {
  uint2 v;
  asm volatile("ld.shared::cluster.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(remote) : "memory");
  return v;
}

// One arrival on the mbarrier at `remote` (an address from
// map_to_cluster_rank; may be this CTA's own). Release at CTA scope, as
// CUTLASS's cluster pipelines use: the arriving warp's shared-memory reads
// (WGMMA operands) have completed before it arrives.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t remote) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// 16-byte store into another CTA's shared memory that completes 16
// transaction bytes on that CTA's mbarrier `remote_bar` (both addresses from
// map_to_cluster_rank). The reader waits on the barrier; no proxy fence is
// needed before WGMMA reads the data.
//   https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-st-async
__device__ __forceinline__ void st_async_v4(uint32_t remote, const uint4& v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
               : "memory");
}

// ---- named barriers (ids 1..15; 0 is __syncthreads) ---------------------------------
__device__ __forceinline__ void named_barrier_sync(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// A named barrier that also votes: true when `predicate` holds in every one of
// its num_threads threads (bar.red.and), the same answer in all of them.
__device__ __forceinline__ bool named_barrier_all(int id, int num_threads, bool predicate) {
  uint32_t all;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.u32 p, %1, 0;\n"
      "  bar.red.and.pred p, %2, %3, p;\n"
      "  selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(all)
      : "r"(uint32_t(predicate)), "r"(id), "r"(num_threads)
      : "memory");
  return all != 0;
}

// ---- proxy fence ------------------------------------------------------------------
// Each thread that wrote smem with ordinary stores that WGMMA or TMA reads next
// runs this before the barrier that publishes the data.
__device__ __forceinline__ void fence_view_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace openmla::kernels::common

// One block runs the same partition code as the host planner (plan/partition.h),
// writing PartWork / CombineEntry records into the workspace. The block has a
// thread per part (up to 1024), so each per-part phase is one step deep.
//
// NOTE: the partition walks its scratch arrays with chains of dependent reads
// (scans, binary searches). From global memory, after an L2 flush, each link
// costs ~1 us and the kernel took tens of microseconds; so the lengths and
// the scratch arrays live in shared memory whenever they fit (up to ~16k
// items), and in the workspace otherwise.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/common/schedule/launch.h"
#include "kernels/common/schedule/shared_lengths.cuh"
#include "kernels/common/shared_memory_limit.h"
#include "plan/chunk_partition.h"
#include "plan/partition.h"

namespace openmla::kernels::schedule {
namespace {

constexpr int kMaxThreads = 1024;
constexpr size_t kMaxSharedBytes = 200 * 1024;

__global__ void __launch_bounds__(kMaxThreads, 1)
    build_schedule_kernel(int32_t num_items, int32_t num_parts, int32_t min_part_cost, plan_detail::ItemCuts cuts,
                          int32_t chunk_blocks, ItemLengths lengths, plan_detail::ScheduleBuffers buffers,
                          int32_t staged_lengths, bool in_shared) {
  extern __shared__ __align__(16) uint8_t shared[];
  const int thread = int(threadIdx.x);
  const int num_threads = int(blockDim.x);
  // The attention kernel is launched as this grid's programmatic dependent:
  // let it start its prologue now (it waits for this grid's writes).
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const auto build = [&](const auto& item_lengths) {
    if (chunk_blocks > 0) {  // batch-invariant plans (plan/chunk_partition.h)
      plan_detail::build_chunk_schedule(num_items, num_parts, chunk_blocks, item_lengths, buffers, thread, num_threads);
    } else {
      plan_detail::build_schedule(num_items, num_parts, min_part_cost, cuts, item_lengths, buffers, thread,
                                  num_threads);
    }
  };
  if (!in_shared) return build(lengths);  // scratch in the workspace, the lengths read in place
  const plan_detail::ScheduleScratch layout = plan_detail::schedule_scratch_layout(num_items, num_parts, staged_lengths);
  buffers.item_prefix = reinterpret_cast<int64_t*>(shared + layout.prefix);
  buffers.part_bounds = reinterpret_cast<plan_detail::Bound*>(shared + layout.bounds);
  buffers.part_slots = reinterpret_cast<int32_t*>(shared + layout.slots);
  // one coalesced pass over the lengths
  build(common::stage_item_lengths(lengths, num_items, reinterpret_cast<int32_t*>(shared + layout.lengths)));
}

}  // namespace

Status launch(const DecodePlan& plan, const ItemLengths& lengths, const DecodeWorkspace& workspace,
              cudaStream_t stream) {
  const int32_t staged_lengths = plan_detail::schedule_staged_lengths(lengths, plan.num_items);
  const plan_detail::ScheduleScratch layout =
      plan_detail::schedule_scratch_layout(plan.num_items, plan.num_parts, staged_lengths);
  const bool in_shared = layout.total <= kMaxSharedBytes;
  // Batch-invariant plans sort on a second warp while the first scans (plan/chunk_partition.h).
  const int min_threads = plan.chunk_blocks > 0 ? 64 : 32;
  const int threads = std::min(kMaxThreads, std::max(min_threads, (plan.num_parts + 1 + 31) / 32 * 32));
  // One limit for every call (the kernel's most): raised once, whatever this call's layout needs.
  const int limit = in_shared && layout.total > common::kDefaultSharedMemoryLimit ? int(kMaxSharedBytes) : 0;
  return common::launch_with_shared_memory_limit(
      "schedule kernel", reinterpret_cast<const void*>(&build_schedule_kernel), limit, [&] {
        build_schedule_kernel<<<1, threads, in_shared ? layout.total : 0, stream>>>(
            plan.num_items, plan.num_parts, plan.min_part_cost, plan_detail::item_cuts(plan), plan.chunk_blocks, lengths,
            workspace.schedule, staged_lengths, in_shared);
        return cudaGetLastError();
      });
}

}  // namespace openmla::kernels::schedule

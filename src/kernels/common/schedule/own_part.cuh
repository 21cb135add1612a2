// An attention CTA's SM part (kernels/common/schedule/part_schedule.h): read
// from the workspace, or built here from the lengths when the grid builds the
// schedule itself. Every thread of the CTA calls own_part, before any role
// split; `scratch` is shared memory the kernel does not use before it knows its
// part (never its barriers), of at least kInKernelScheduleScratchBytes.
#pragma once

#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/schedule/lane_items.cuh"
#include "kernels/common/schedule/part_schedule.h"
#include "kernels/common/schedule/shared_lengths.cuh"
#include "plan/partition.h"

namespace openmla::kernels::common {

// A kernel's shared-memory buffer lent to the schedule (own_part's `scratch`).
template <class Buffer>
__device__ __forceinline__ uint8_t* schedule_scratch(Buffer& buffer) {
  static_assert(sizeof(Buffer) >= plan_detail::kInKernelScheduleScratchBytes,
                "the buffer lent to an in-kernel schedule is smaller than the planner assumes");
  return reinterpret_cast<uint8_t*>(&buffer);
}

// partition_parts in `scratch` (all threads of the CTA), then this CTA's part
// record to the workspace, where own_part reads it (every q-group's CTA of a
// part writes the same bytes). q-group 0's CTA also writes the entries the
// combine reads: its split item's, and an empty one past the split items.
__device__ __forceinline__ void build_part_records(const PartSchedule& schedule, const plan_detail::StagedLengths& lengths,
                                                   const plan_detail::ScheduleBuffers& buffers) {
  const int32_t part = int32_t(blockIdx.y);
  plan_detail::partition_parts(schedule.num_items, schedule.num_parts, schedule.min_part_cost, schedule.cuts, lengths,
                               buffers, int(threadIdx.x), int(blockDim.x));  // ends with a barrier
  if (threadIdx.x == 0) {
    const plan_detail::PartRecord record = plan_detail::part_record(buffers, lengths, schedule.num_parts, part);
    schedule.parts[part] = record.work;
    if (blockIdx.x == 0) {
      if (record.entry_index >= 0) schedule.combine[record.entry_index] = record.entry;
      if (part >= plan_detail::combine_entry_count(buffers, schedule.num_parts)) {
        schedule.combine[part] = plan_detail::empty_combine_entry();
      }
    }
  }
}

// Builds the schedule from the lengths, staged one per item, or from the one
// length every item has (no lengths: sparse decode without topk_length).
// NOTE: out of line, so that a kernel reading its part (a schedule kernel ran, or the
// call reuses a schedule) runs no further from the start of its code: inlined, the
// partition's ~18 KB of SASS sat between the prologue and the main loop, and those
// calls ran 1-3 us slower at b = 1 (cold instruction cache). static: one copy per
// translation unit (no host-side symbol clashes between the instantiation files).
// One instantiation for both kinds of lengths: two (one per view) made ptxas
// spill in the callers' main loops (dense d576 column split, 32 B).
static __device__ __noinline__ void build_own_part(const PartSchedule& schedule, uint8_t* scratch) {
  // The host admitted the plan only if this layout fits (DecodePlan::schedule_in_kernel).
  const int32_t staged = plan_detail::schedule_staged_lengths(schedule.lengths, schedule.num_items);
  const plan_detail::ScheduleScratch layout =
      plan_detail::schedule_scratch_layout(schedule.num_items, schedule.num_parts, staged);
  const plan_detail::ScheduleBuffers buffers{nullptr, nullptr, reinterpret_cast<int64_t*>(scratch + layout.prefix),
                                             reinterpret_cast<plan_detail::Bound*>(scratch + layout.bounds),
                                             reinterpret_cast<int32_t*>(scratch + layout.slots)};
  const plan_detail::StagedLengths lengths = stage_item_lengths(
      schedule.lengths, schedule.num_items, reinterpret_cast<int32_t*>(scratch + layout.lengths));
  build_part_records(schedule, lengths, buffers);
  __syncthreads();  // the record is visible to the CTA; the scratch is free again
}

// This CTA's part, parts[blockIdx.y], built first when the grid builds the
// schedule: in the warps' lanes (lane_items.cuh) or by the block partition,
// as the host chose (ScheduleBuild). The lengths and the workspace may come
// from the previous grid (launched as its dependent): waits for it, then lets
// the next grid start its prologue.
// NOTE: a record built here is read back from global memory: returned from
// shared memory, it stayed in local memory in four kernels (ptxas spills of
// 32-72 bytes), and returned in registers from the lanes' build, the dense
// pair kernel spilled 136 bytes and ptxas serialised its WGMMA; a global load
// it keeps in registers.
__device__ __forceinline__ PartWork own_part(const PartSchedule& schedule, uint8_t* scratch) {
  wait_for_previous_grid();
  allow_next_grid();
  // NOTE: the choice is a kernel parameter, uniform to ptxas: chosen inside the
  // out-of-line build (after the lengths' load), the dense kernels spilled their
  // part record (20-124 bytes).
  if (schedule.build == kBuildInLanes || schedule.build == kBuildOneItem) {
    if (schedule.build == kBuildOneItem) {
      build_part_one_item(schedule);
    } else {
      build_part_in_lanes(schedule);
    }
    __syncthreads();  // thread 0's record is visible to the CTA
  } else if (schedule.build == kBuildInBlock) {
    build_own_part(schedule, scratch);
  }
  return schedule.parts[blockIdx.y];
}

}  // namespace openmla::kernels::common

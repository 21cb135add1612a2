// Where an attention kernel finds its SM part: in the workspace, written by the
// schedule kernel (or an earlier call of the same plan and lengths), or built
// by the attention kernel itself (DecodePlan::schedule_in_kernel): each CTA then
// runs plan/partition.h's partition in its shared memory and keeps its part's
// records, so the call launches no schedule grid and waits for none.
#pragma once

#include <cstdint>

#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "plan/few_items_partition.h"
#include "plan/partition.h"

namespace openmla::kernels {

struct PartSchedule {
  PartWork* parts;        // [num_parts] workspace records: read, or written when `build` (q-group 0's CTAs)
  CombineEntry* combine;  // [num_parts] workspace: written when `build`
  ItemLengths lengths;    // device lengths (build only)
  int32_t num_items;
  int32_t num_parts;
  int32_t min_part_cost;
  plan_detail::ItemCuts cuts;
  int32_t build;  // ScheduleBuild
};

// How an attention grid comes by its parts.
enum ScheduleBuild : int32_t {
  kReadParts = 0,     // in the workspace (a schedule kernel ran, or the call reuses a schedule)
  kBuildInBlock = 1,  // plan/partition.h in each CTA's shared memory
  kBuildInLanes = 2,  // plan/few_items_partition.h in each warp's lanes (at most 32 items)
  kBuildOneItem = 3,  // plan/few_items_partition.h's one_item_part_record (one item), every thread
};

// Reads a schedule already in the workspace.
inline PartSchedule read_parts(PartWork* parts) {
  PartSchedule schedule{};
  schedule.parts = parts;
  return schedule;
}

// The plan's schedule for one run: built by the attention grid when the plan
// builds in kernel and this run builds at all (not ScheduleUse::kReuse), else read.
inline PartSchedule part_schedule(const DecodePlan& plan, const plan_detail::ScheduleBuffers& buffers,
                                  const int32_t* device_lengths, bool build_schedule) {
  PartSchedule schedule = read_parts(buffers.parts);
  if (!(build_schedule && plan.schedule_in_kernel)) return schedule;
  schedule.combine = buffers.combine;
  schedule.lengths = plan.lengths;
  schedule.lengths.lengths = device_lengths;
  schedule.num_items = plan.num_items;
  schedule.num_parts = plan.num_parts;
  schedule.min_part_cost = plan.min_part_cost;
  schedule.cuts = plan_detail::item_cuts(plan);
  schedule.build = !plan_detail::builds_in_lanes(plan.num_items, plan.num_parts, plan.lengths.max_length)
                       ? kBuildInBlock
                   : plan.num_items == 1 ? kBuildOneItem
                                         : kBuildInLanes;
  return schedule;
}

}  // namespace openmla::kernels

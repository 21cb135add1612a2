// Typed views of a decode workspace, placed by the plan's named regions.
#pragma once

#include <cstdint>

#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "plan/partition.h"

namespace openmla::kernels {

struct DecodeWorkspace {
  plan_detail::ScheduleBuffers schedule;
  float* partial_lse;  // [num_slots, rows_per_item]; null when num_slots == 0
  float* partial_o;    // [num_slots, rows_per_item, d_v]; null when num_slots == 0
  float* partial_max;  // [num_slots, rows_per_item]; sparse prefill only, else null
};

inline DecodeWorkspace decode_workspace(const DecodePlan& plan, void* base) {
  auto* bytes = static_cast<uint8_t*>(base);
  auto at = [bytes](const WorkspaceRegion& region) -> void* {
    return region.bytes == 0 ? nullptr : bytes + region.offset;
  };
  const WorkspaceLayout& layout = plan.workspace;
  return DecodeWorkspace{
      plan_detail::ScheduleBuffers{static_cast<PartWork*>(at(layout.parts)),
                                   static_cast<CombineEntry*>(at(layout.combine)),
                                   static_cast<int64_t*>(at(layout.item_prefix)),
                                   static_cast<plan_detail::Bound*>(at(layout.part_bounds)),
                                   static_cast<int32_t*>(at(layout.part_slots))},
      static_cast<float*>(at(layout.partial_lse)), static_cast<float*>(at(layout.partial_o)),
      static_cast<float*>(at(layout.partial_max))};
}

}  // namespace openmla::kernels

// One warp runs the same partition code as the host planner (plan/partition.h),
// writing PartWork / CombineEntry records into the workspace.
#include <cuda_runtime.h>

#include <string>

#include "kernels/common/schedule/launch.h"
#include "plan/partition.h"

namespace openmla::kernels::schedule {
namespace {

constexpr int kLanes = 32;

__global__ void __launch_bounds__(kLanes, 1)
    build_schedule_kernel(int32_t num_items, int32_t num_parts, int32_t min_part_cost, ItemLengths lengths,
                          plan_detail::ScheduleBuffers buffers) {
  plan_detail::build_schedule(num_items, num_parts, min_part_cost, lengths, buffers, int(threadIdx.x), kLanes);
}

}  // namespace

Status launch(const DecodePlan& plan, const ItemLengths& lengths, const DecodeWorkspace& workspace,
              cudaStream_t stream) {
  build_schedule_kernel<<<1, kLanes, 0, stream>>>(plan.num_items, plan.num_parts, plan.min_part_cost, lengths,
                                                  workspace.schedule);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return Status::cuda_error(std::string("schedule kernel launch failed: ") + cudaGetErrorString(error));
  }
  return Status::ok();
}

}  // namespace openmla::kernels::schedule

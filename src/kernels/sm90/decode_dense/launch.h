// Host entry of the sm90 dense decode attention kernel (BF16/FP16 paged KV).
// The api layer has validated params and placed the schedule in the workspace.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/schedule/part_schedule.h"
#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"

namespace openmla::kernels::decode_dense {

// What it runs (dtypes, head dims, page sizes) is openmla/capabilities.h,
// checked by the api before any launch.

// Launch the attention kernel: grid (plan.num_q_groups, plan.num_parts).
//   schedule:    where the grid finds its parts: [plan.num_parts] records already
//                filled on `stream`, or built by the grid (kernels/common/schedule/part_schedule.h)
//   partial_o:   [plan.num_slots, plan.rows_per_item, 512] fp32 (null when num_slots == 0)
//   partial_lse: [plan.num_slots, plan.rows_per_item]      fp32 (null when num_slots == 0)
// With plan.cluster_split = C > 1 the kernel is the whole call: grid
// (batch * C, plan.num_q_groups) in clusters of C along x; parts and the
// partial buffers are not used (read_parts(nullptr), null).
Status launch(const DenseDecodeParams& params, const DecodePlan& plan, const PartSchedule& schedule,
              float* partial_o, float* partial_lse, cudaStream_t stream);

}  // namespace openmla::kernels::decode_dense

// Host entry of the sm90 sparse prefill kernel.
// The api layer has validated params and placed the schedule in the workspace.
#pragma once

#include <cuda_runtime_api.h>

#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"

namespace openmla::kernels::prefill_sparse {

// Launch the attention kernel: grid (plan.num_q_groups, plan.num_parts).
//   parts:       [plan.num_parts] device schedule, already filled on `stream`
//   partial_o:   [plan.num_slots, h_q, 512] fp32 (null when num_slots == 0)
//   partial_lse: [plan.num_slots, h_q]      fp32 (null when num_slots == 0)
//   partial_max: [plan.num_slots, h_q]      fp32 (null when num_slots == 0)
// Tokens that are not split get the attention sink here; split tokens get it
// in the combine.
Status launch(const SparsePrefillParams& params, const DecodePlan& plan, const PartWork* parts, float* partial_o,
              float* partial_lse, float* partial_max, cudaStream_t stream);

}  // namespace openmla::kernels::prefill_sparse

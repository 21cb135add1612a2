// Host entry of the sm90 sparse FP8 decode attention kernel.
// The api layer has validated params and placed the schedule in the workspace.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/schedule/part_schedule.h"
#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "openmla/status.h"

namespace openmla::kernels::decode_sparse_fp8 {

// Launch the attention kernel: grid (plan.num_q_groups, plan.num_parts).
//   schedule:    where the grid finds its parts: [plan.num_parts] records already
//                filled on `stream`, or built by the grid (kernels/common/schedule/part_schedule.h)
//   partial_o:   [plan.num_slots, h_q, 512] fp32 (null when num_slots == 0)
//   partial_lse: [plan.num_slots, h_q]      fp32 (null when num_slots == 0)
// Items that are not split get the attention sink here; split items get it
// in the combine.
// max_logits [batch * s_q, h_q] and partial_max [plan.num_slots, h_q]: sparse prefill over the
// FP8 cache runs these kernels with batch = query tokens and asks for the row max of the scaled
// logits; null for sparse decode.
Status launch(const SparseDecodeParams& params, const DecodePlan& plan, const PartSchedule& schedule,
              float* partial_o, float* partial_lse, cudaStream_t stream, float* max_logits = nullptr,
              float* partial_max = nullptr);

}  // namespace openmla::kernels::decode_sparse_fp8

// The one-block schedule kernel: rebuilds the split-KV schedule on the GPU from
// device-resident lengths, so a captured CUDA graph replays with new lengths.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/workspace.h"
#include "openmla/plan.h"
#include "openmla/status.h"

namespace openmla::kernels::schedule {

// `lengths.lengths` is a device pointer (or null: every item has default_length).
Status launch(const DecodePlan& plan, const ItemLengths& lengths, const DecodeWorkspace& workspace,
              cudaStream_t stream);

}  // namespace openmla::kernels::schedule

// Split-KV combine: merges the partial results of split items into out / lse.
#pragma once

#include <cuda_runtime_api.h>

#include "openmla/params.h"
#include "openmla/status.h"

namespace openmla::kernels::combine {

// params.entries / partial_o / partial_lse are device pointers (see CombineParams).
Status launch(const CombineParams& params, int rows_per_item, cudaStream_t stream);

}  // namespace openmla::kernels::combine

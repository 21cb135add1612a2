// CPU reference for every MLA family: float32 accumulation, host pointers,
// the same params structs and the same validation as the GPU entries.
#pragma once

#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/status.h"

namespace openmla {

Status reference_dense_decode(const DenseDecodeParams& params);
Status reference_sparse_decode(const SparseDecodeParams& params);
Status reference_sparse_prefill(const SparsePrefillParams& params);

// Split form: walk `schedule` as the kernels do. Items that are not split
// write params.out / params.lse directly; each piece of a split item writes
// its slot of partial_o / partial_lse (natural-log LSE; an empty piece gives
// O = 0, LSE = -inf). reference_combine() then finishes the split items, so
// the combine can be checked on its own.
//   partial_o:   [plan.num_slots, plan.rows_per_item, d_v]
//   partial_lse: [plan.num_slots, plan.rows_per_item]
// Row order inside an item: (query token, head), head fastest.
Status reference_dense_decode_split(const DenseDecodeParams& params, const DecodePlan& plan,
                                    const HostSchedule& schedule, float* partial_o,
                                    float* partial_lse);
Status reference_sparse_decode_split(const SparseDecodeParams& params, const DecodePlan& plan,
                                     const HostSchedule& schedule, float* partial_o,
                                     float* partial_lse);

// Merge split pieces: for each row, LSE = log(sum exp(lse_i)), O = sum w_i O_i
// with w_i = exp(lse_i - LSE); all pieces empty -> O = 0, LSE = +inf.
// With attn_sink, O is then multiplied by 1 / (1 + exp(sink - LSE)).
Status reference_combine(const CombineParams& params);

}  // namespace openmla

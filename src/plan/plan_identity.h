// A plan's identity: which planner made it, for which shape and inputs
// (the functions are declared in openmla/plan.h; the field list lives here).
//
// run() must never trust a plan's numbers: they size the grid, index the
// workspace and bound the partial slots. So every run re-plans from its params'
// shape and the planner inputs the plan records (plan.device, plan.options)
// and compares the two field by field; planning is cheap host arithmetic and
// allocates nothing. The fingerprint (a 64-bit hash of every other field, set
// by the planner) is the last field compared: it catches a plan edited after
// planning in a way that happens to match another shape's plan.
#pragma once

#include <cstdint>

#include "openmla/params.h"
#include "openmla/plan.h"
#include "openmla/status.h"

namespace openmla::detail {

// Every field of DecodePlan, except the fingerprint, in declaration order.
// NOTE: adding a field to DecodePlan is one line here; the static_assert in
// plan_identity.cpp fails until it is added.
#define OPENMLA_DECODE_PLAN_FIELDS(FIELD)                                                  \
  FIELD(family)                                                                            \
  FIELD(num_items)                                                                         \
  FIELD(q_tokens_per_item)                                                                 \
  FIELD(rows_per_item)                                                                     \
  FIELD(num_q_groups)                                                                      \
  FIELD(num_parts)                                                                         \
  FIELD(num_slots)                                                                         \
  FIELD(d_v)                                                                               \
  FIELD(min_part_cost)                                                                     \
  FIELD(whole_item_parts)                                                                  \
  FIELD(kernel)                                                                            \
  FIELD(cluster_size)                                                                      \
  FIELD(chunk_blocks)                                                                      \
  FIELD(schedule_in_kernel)                                                                \
  FIELD(lengths.lengths)                                                                   \
  FIELD(lengths.items_per_length)                                                          \
  FIELD(lengths.default_length)                                                            \
  FIELD(lengths.max_length)                                                                \
  FIELD(workspace.parts.offset)                                                            \
  FIELD(workspace.parts.bytes)                                                             \
  FIELD(workspace.combine.offset)                                                          \
  FIELD(workspace.combine.bytes)                                                           \
  FIELD(workspace.item_prefix.offset)                                                      \
  FIELD(workspace.item_prefix.bytes)                                                       \
  FIELD(workspace.part_bounds.offset)                                                      \
  FIELD(workspace.part_bounds.bytes)                                                       \
  FIELD(workspace.part_slots.offset)                                                       \
  FIELD(workspace.part_slots.bytes)                                                        \
  FIELD(workspace.partial_lse.offset)                                                      \
  FIELD(workspace.partial_lse.bytes)                                                       \
  FIELD(workspace.partial_o.offset)                                                        \
  FIELD(workspace.partial_o.bytes)                                                         \
  FIELD(workspace.partial_max.offset)                                                      \
  FIELD(workspace.partial_max.bytes)                                                       \
  FIELD(workspace.total_bytes)                                                             \
  FIELD(device.num_sms)                                                                    \
  FIELD(device.max_smem_per_block)                                                         \
  FIELD(device.cc_major)                                                                   \
  FIELD(device.cc_minor)                                                                   \
  FIELD(options.max_parts)                                                                 \
  FIELD(options.min_parts)                                                                 \
  FIELD(options.min_part_cost)                                                             \
  FIELD(options.cluster_split)                                                             \
  FIELD(options.batch_invariant)                                                           \
  FIELD(options.chunk_blocks)                                                              \
  FIELD(options.schedule_placement)

// The functions over these fields are public: openmla/plan.h (check_dense_decode_plan, ...).

}  // namespace openmla::detail

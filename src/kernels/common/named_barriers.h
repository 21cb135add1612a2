// Every named-barrier id of the kernels (bar.sync / bar.arrive through
// common::named_barrier_sync / named_barrier_arrive), in one place. A CTA has
// 16 hardware barriers; id 0 is __syncthreads. Ids only have to be distinct
// within one kernel, so kernels reuse them; the static_asserts below list, per
// kernel, every id that kernel uses (its own and those of the building blocks
// it includes) and check they are distinct.
//
//   id  name                          kernel(s)                          threads
//   1   kSparseHeadsOnNConsumer       sparse heads-on-N                   128: the consumer warpgroup's
//                                                                         reductions and P^T publish
//   3   kDenseSoftmaxWarpgroup        dense column split                  128: WG1 after zeroing a stage's
//                                                                         tail rows (DenseProblem::prepare_stage)
//   5   kSparseHeadsOnMRawFree        sparse heads-on-M (one CTA)         384: every stage filler has read
//                                                                         the raw stage (producers sync,
//                                                                         consumers arrive)
//   5   kAlternateBlocksWarpgroup0    dense alternate blocks              128: inside WG0 (tail rows zeroed)
//   6   kAlternateBlocksWarpgroup1    dense alternate blocks              128: inside WG1 (tail rows zeroed)
// The heads-on-M consumers (heads_on_m/consumers.cuh) use none: where both
// consumer warpgroups meet from different code they use an mbarrier, since
// bar.sync is .aligned (one static instruction for all its threads). Id 6
// also carries the warpgroup vote on O's rescale in the alternate-blocks WG1.
#pragma once

#include <initializer_list>

namespace openmla::kernels::barrier_ids {

inline constexpr int kSparseHeadsOnNConsumer = 1;
inline constexpr int kDenseSoftmaxWarpgroup = 3;
inline constexpr int kSparseHeadsOnMRawFree = 5;
inline constexpr int kAlternateBlocksWarpgroup0 = 5;
inline constexpr int kAlternateBlocksWarpgroup1 = 6;

// True when every id is a named barrier (1..15) and no two are equal.
constexpr bool distinct_named_ids(std::initializer_list<int> ids) {
  for (const int* a = ids.begin(); a != ids.end(); ++a) {
    if (*a < 1 || *a > 15) return false;
    for (const int* b = a + 1; b != ids.end(); ++b) {
      if (*a == *b) return false;
    }
  }
  return true;
}

// Ids used together in one kernel.
static_assert(distinct_named_ids({kSparseHeadsOnNConsumer}), "sparse heads-on-N kernel");
static_assert(distinct_named_ids({kDenseSoftmaxWarpgroup}), "dense column-split kernel");
static_assert(distinct_named_ids({kAlternateBlocksWarpgroup0, kAlternateBlocksWarpgroup1}),
              "dense alternate-blocks kernel");
static_assert(distinct_named_ids({kSparseHeadsOnMRawFree}), "sparse heads-on-M kernel");

}  // namespace openmla::kernels::barrier_ids

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
//   4   kHeadsOnMConsumers            dense column split (cluster)        256: both consumer warpgroups
//                                                                         before the cluster merge reuses
//                                                                         Q and the K/V stages
//   5   kSparseHeadsOnMRawFree        sparse heads-on-M (one CTA)         384: every stage filler has read
//                                                                         the raw stage (producers sync,
//                                                                         consumers arrive)
//   5   kAlternateBlocksWarpgroup0    dense alternate blocks              128: inside WG0 (tail rows zeroed)
//   6   kAlternateBlocksWarpgroup1    dense alternate blocks              128: inside WG1 (tail rows zeroed)
// The sparse heads-on-M CTA-pair kernel uses none beyond its consumers'
// (kHeadsOnMConsumers is compiled out there: no cluster merge).
#pragma once

#include <initializer_list>

namespace openmla::kernels::barrier_ids {

inline constexpr int kSparseHeadsOnNConsumer = 1;
inline constexpr int kDenseSoftmaxWarpgroup = 3;
inline constexpr int kHeadsOnMConsumers = 4;
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
static_assert(distinct_named_ids({kDenseSoftmaxWarpgroup, kHeadsOnMConsumers}), "dense column-split kernel");
static_assert(distinct_named_ids({kAlternateBlocksWarpgroup0, kAlternateBlocksWarpgroup1}),
              "dense alternate-blocks kernel");
static_assert(distinct_named_ids({kHeadsOnMConsumers, kSparseHeadsOnMRawFree}), "sparse heads-on-M kernel");
static_assert(distinct_named_ids({kHeadsOnMConsumers}), "sparse heads-on-M CTA-pair kernel");

}  // namespace openmla::kernels::barrier_ids

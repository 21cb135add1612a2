// PrefillProblem: the sparse prefill call as a Problem of the heads-on-M tile
// (the contract: heads_on_m/problem.cuh). Item = query
// token; tile row r = head 64 q_group + r (rows past h_q pad the tile and are
// never written); a block's invalid columns come from the producer's validity
// bits (the gather warpgroup's); the attention sink is folded into the final row factor; the row max
// of the scaled logits goes to max_logits (or partial_max for a split token).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "kernels/sm90/prefill_sparse/config.h"
#include "kernels/sm90/prefill_sparse/gather.cuh"
#include "openmla/schedule.h"

namespace openmla::kernels::prefill_sparse {

template <class Traits>
struct PrefillProblem {
  using Params = KernelParams;
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr bool kMayClusterSplit = false;
  static constexpr bool kWritesMaxLogits = true;
  static __device__ __forceinline__ bool clustered(const Params&) { return false; }

  static __device__ __forceinline__ heads_on_m::ItemBlocks item_blocks(const Params& params, const PartWork& part,
                                                                         int item) {
    return heads_on_m::item_blocks_of_length(part, item, token_length(params, item));
  }

  static __device__ __forceinline__ heads_on_m::QueryRow query_row(const Params& params, int q_group, int tile_row) {
    const int head = q_group * kHeadsPerCta + tile_row;
    return heads_on_m::QueryRow{tile_row, head < params.h_q, 0, head};
  }

  struct ItemMask {};
  static __device__ __forceinline__ ItemMask item_mask(const Params&, const heads_on_m::ItemBlocks&,
                                                       const heads_on_m::QueryRow (&)[2]) {
    return ItemMask{};
  }
  static __device__ __forceinline__ void fill_stage(SharedStorage&, int, int, int) {}
  static __device__ __forceinline__ void release_stage(SharedStorage& smem, int stage) {
    common::mbarrier_arrive(&smem.kv_empty[stage]);
  }
  // Invalid rows were zero-filled by the gather: nothing to fix.
  static __device__ __forceinline__ void prepare_stage(const ItemMask&, SharedStorage&, int, Element*, int, int) {}

  template <class TensorSRowCol>
  static __device__ __forceinline__ void mask_scores(const ItemMask&, const SharedStorage& smem, int stage,
                                                     TensorSRowCol& tSrS_rc, int lane, int) {
    heads_on_m::mask_invalid_keys(*reinterpret_cast<const uint64_t*>(smem.extra.stage_valid[stage]), tSrS_rc, lane);
  }

  // The sink of tokens that are not split (split tokens get it in the combine); padding rows have none.
  static __device__ __forceinline__ float score_scale_log2(const Params& params) { return params.scale_log2; }

  static __device__ __forceinline__ float row_norm(const Params& params, int, const heads_on_m::ItemBlocks& blocks,
                                                   const heads_on_m::QueryRow& row, float row_max, float row_sum) {
    return heads_on_m::row_norm_with_sink(!blocks.partial && params.attn_sink != nullptr && row.real, params.attn_sink,
                                          row.head, row_max, row_sum);
  }

  static __device__ __forceinline__ Element* out_row(const Params& params, int item, const heads_on_m::QueryRow& row) {
    return reinterpret_cast<Element*>(params.out) + item * params.out_stride_s +
           int64_t(row.head) * params.out_stride_h;  // [512]
  }
  static __device__ __forceinline__ float* lse_entry(const Params& params, int item, const heads_on_m::QueryRow& row) {
    return params.lse + int64_t(item) * params.h_q + row.head;
  }
  // Row of partial_o / partial_lse / partial_max: [slot, head].
  static __device__ __forceinline__ int64_t partial_row(const Params& params, const heads_on_m::ItemBlocks& blocks,
                                                        const heads_on_m::QueryRow& row) {
    return int64_t(blocks.slot) * params.h_q + row.head;
  }
  // max_logit: the row max of softmax_scale * q.k (natural units), -inf for a row that saw no key.
  static __device__ __forceinline__ void store_max_logit(const Params& params, int item,
                                                         const heads_on_m::ItemBlocks& blocks,
                                                         const heads_on_m::QueryRow& row, float max_logit) {
    if (blocks.partial) {
      params.partial_max[partial_row(params, blocks, row)] = max_logit;
    } else {
      params.max_logits[int64_t(item) * params.h_q + row.head] = max_logit;
    }
  }
};

}  // namespace openmla::kernels::prefill_sparse

// HeadsOnMProblem: the sparse FP8 decode call as a Problem of the shared
// heads-on-M consumer warpgroups (the contract: heads_on_m/problem.cuh).
// Item = (request, query token); tile row r = head 64 q_group + r; every
// 64-position block's invalid columns come from the producer's validity bits;
// the attention sink is folded into the final row factor.
// Producer: HeadsOnMProducer (h_q = 64: one raw stage, the consumers help
// fill; heads_on_m_mainloop.cuh) or CtaPairProducer (h_q = 128: two bf16
// stages shared by a CTA pair; cta_pair_producer.cuh).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/mainloop.cuh"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "openmla/schedule.h"

namespace openmla::kernels::decode_sparse_fp8 {

template <class Traits, class Producer>
struct HeadsOnMProblem {
  using Params = KernelParams;
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr bool kMayClusterSplit = false;
  static constexpr bool kWritesMaxLogits = true;  // when params.max_logits is set (store_max_logit)
  static __device__ __forceinline__ bool clustered(const Params&) { return false; }

  static __device__ __forceinline__ heads_on_m::ItemBlocks item_blocks(const Params& params, const PartWork& part,
                                                                         int item) {
    return heads_on_m::item_blocks_of_length(part, item, item_length(params, item));
  }

  static __device__ __forceinline__ heads_on_m::QueryRow query_row(const Params&, int q_group, int tile_row) {
    return heads_on_m::QueryRow{tile_row, true, 0, q_group * kHeadsOnMHeadsPerCta + tile_row};
  }

  struct ItemMask {};
  static __device__ __forceinline__ ItemMask item_mask(const Params&, const heads_on_m::ItemBlocks&,
                                                       const heads_on_m::QueryRow (&)[2]) {
    return ItemMask{};
  }
  static __device__ __forceinline__ void fill_stage(SharedStorage& smem, int block_counter, int warpgroup,
                                                    int thread) {
    if constexpr (Producer::kConsumersHelpFill) Producer::help_fill(smem, block_counter, warpgroup, thread);
  }
  // In a CTA pair the peer writes this CTA's stage rows and ours the
  // peer's, so each stage is released to both producers.
  static __device__ __forceinline__ void release_stage(SharedStorage& smem, int stage) {
    common::mbarrier_arrive(&smem.kv_empty[stage]);
    if constexpr (Producer::kClusterCtas > 1) {
      const uint32_t peer = cute::block_rank_in_cluster() ^ 1u;
      common::mbarrier_arrive_cluster(common::map_to_cluster_rank(&smem.kv_empty[stage], peer));
    }
  }
  // Invalid rows were written as zeros by the producer: nothing to fix.
  static __device__ __forceinline__ void prepare_stage(const ItemMask&, SharedStorage&, int, Element*, int, int) {}

  template <class TensorSRowCol>
  static __device__ __forceinline__ void mask_scores(const ItemMask&, const SharedStorage& smem, int stage,
                                                     TensorSRowCol& tSrS_rc, int lane, int) {
    heads_on_m::mask_invalid_keys(Producer::stage_valid_bits(smem, stage), tSrS_rc, lane);
  }

  // The sink of items that are not split (split items get it in the combine).
  static __device__ __forceinline__ float row_norm(const Params& params, int, const heads_on_m::ItemBlocks& blocks,
                                                   const heads_on_m::QueryRow& row, float row_max, float row_sum) {
    return heads_on_m::row_norm_with_sink(!blocks.partial && params.attn_sink != nullptr, params.attn_sink, row.head,
                                          row_max, row_sum);
  }

  static __device__ __forceinline__ Element* out_row(const Params& params, int item, const heads_on_m::QueryRow& row) {
    const int b = item / params.s_q;
    const int s = item - b * params.s_q;
    return reinterpret_cast<Element*>(params.out) + b * params.out_stride_b + s * params.out_stride_s +
           int64_t(row.head) * params.out_stride_h;  // [512]
  }
  static __device__ __forceinline__ float* lse_entry(const Params& params, int item, const heads_on_m::QueryRow& row) {
    const int b = item / params.s_q;
    const int s = item - b * params.s_q;
    return params.lse + b * params.lse_stride_b + int64_t(row.head) * params.lse_stride_h + s;
  }
  // Sparse prefill over the FP8 cache only (params.max_logits set): the row max of the scaled logits.
  static __device__ __forceinline__ void store_max_logit(const Params& params, int item,
                                                         const heads_on_m::ItemBlocks& blocks,
                                                         const heads_on_m::QueryRow& row, float max_logit) {
    if (params.max_logits == nullptr) return;
    if (blocks.partial) {
      params.partial_max[int64_t(blocks.slot) * params.h_q + row.head] = max_logit;
    } else {
      params.max_logits[int64_t(item) * params.h_q + row.head] = max_logit;
    }
  }
  // Row of partial_o / partial_lse: [slot, head].
  static __device__ __forceinline__ int64_t partial_row(const Params& params, const heads_on_m::ItemBlocks& blocks,
                                                        const heads_on_m::QueryRow& row) {
    return int64_t(blocks.slot) * params.h_q + row.head;
  }
};

}  // namespace openmla::kernels::decode_sparse_fp8

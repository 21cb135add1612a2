// DenseProblem: the paged BF16/FP16 decode call as a Problem of the shared
// heads-on-M consumer warpgroups (the contract: heads_on_m/problem.cuh). Tile
// rows are packed (query token, head) pairs of one KV head; causal masking;
// results to out / lse or, for split items, partial_o / partial_lse; the
// cluster split's pieces go to the in-kernel merge (cluster_merge.cuh).
#pragma once

#include <cute/tensor.hpp>

#include <climits>
#include <cmath>

#include "kernels/common/barriers.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/sm90/decode_dense/cluster_merge.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/rows_and_blocks.cuh"
#include "kernels/sm90/heads_on_m/consumer_steps.cuh"
#include "kernels/sm90/heads_on_m/problem.cuh"

namespace openmla::kernels::decode_dense {

template <class Traits>
struct DenseProblem {
  using Params = KernelParams;
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr bool kMayClusterSplit = true;
  static constexpr bool kWritesMaxLogits = false;

  static __device__ __forceinline__ bool clustered(const Params& params) { return params.cluster_split > 1; }

  // One consumer warpgroup's O half of this CTA's piece -> the merge buffer.
  template <class TensorORowCol>
  static __device__ __forceinline__ void stash_piece_o(SharedStorage& smem, const TensorORowCol& tOrO_rc,
                                                       const QueryRow (&rows)[2], const float (&norm)[2],
                                                       int col_offset, int lane) {
    ClusterMerge<Traits>::stash_o(smem, tOrO_rc, rows, norm, col_offset, lane);
  }

  static __device__ __forceinline__ ItemBlocks item_blocks(const Params& params, const PartWork& part, int item) {
    return decode_dense::item_blocks(params, part, item);
  }

  static __device__ __forceinline__ QueryRow query_row(const Params& params, int q_group, int tile_row) {
    return make_query_row(params, q_group / params.num_m_tiles, q_group % params.num_m_tiles, tile_row);
  }

  // Causal: query token s sees keys [0, length - s_q + s]; padding rows see
  // nothing. Blocks ending at or before unmasked_end need no mask for this
  // thread's real rows (padding rows are never stored, and Q is zero there).
  struct ItemMask {
    int length;
    int row_limit[2];
    int unmasked_end;
  };
  static __device__ __forceinline__ ItemMask item_mask(const Params& params, const ItemBlocks& blocks,
                                                       const QueryRow (&rows)[2]) {
    ItemMask mask;
    mask.length = blocks.length;
    mask.unmasked_end = INT_MAX;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mask.row_limit[i] = !rows[i].real ? 0
                          : params.causal ? blocks.length - params.s_q + rows[i].s + 1
                                          : blocks.length;
      if (rows[i].real) mask.unmasked_end = min(mask.unmasked_end, mask.row_limit[i]);
    }
    return mask;
  }

  // The producer's TMA fills every stage alone.
  static __device__ __forceinline__ void fill_stage(SharedStorage&, int, int, int) {}

  // The tail past the length: TMA left it stale (or never loaded it).
  static __device__ __forceinline__ void prepare_stage(const ItemMask& mask, SharedStorage&, int,
                                                       Element* stage_base, int block, int thread) {
    const int valid = block_valid_tokens(mask.length, block);
    if (valid < BLOCK_N) {
      heads_on_m::ConsumerSteps<Traits>::zero_tail_rows(stage_base, valid, thread);
      common::fence_view_async_shared();
      common::named_barrier_sync(barrier_ids::kDenseSoftmaxWarpgroup, kWarpgroupThreads);
    }
  }

  static __device__ __forceinline__ void release_stage(SharedStorage& smem, int stage) {
    common::mbarrier_arrive(&smem.kv_empty[stage]);
  }

  template <class TensorSRowCol>
  static __device__ __forceinline__ void mask_scores(const ItemMask& mask, const SharedStorage&, int,
                                                     TensorSRowCol& tSrS_rc, int lane, int block) {
    if ((block + 1) * BLOCK_N > mask.unmasked_end) {
      heads_on_m::ConsumerSteps<Traits>::mask_scores(tSrS_rc, lane, block * BLOCK_N, mask.row_limit);
    }
  }

  // Softmax scale (log2 domain) of the raw scores: FP8 inputs fold in their
  // per-tensor descales, read on the device so graph replays may change them.
  static __device__ __forceinline__ float score_scale_log2(const Params& params) {
    if (params.q_scale == nullptr) return params.scale_log2;
    // NOTE: a descale that is not positive and finite cannot be refused from the
    // device: it turns every score, hence out and lse, into NaN (loud, not wrong).
    const float descale = __ldg(params.q_scale) * __ldg(params.kv_scale);
    return descale > 0.0f && descale < INFINITY ? params.scale_log2 * descale : NAN;
  }

  // row_max: log2 domain; row_sum: whole-row sum. 0 for a row that saw nothing.
  // FP8: V's descale applies to the whole row, once, here.
  static __device__ __forceinline__ float row_norm(const Params& params, int, const ItemBlocks&, const QueryRow&,
                                                   float, float row_sum) {
    if (!(row_sum > 0.0f)) return 0.0f;
    return (params.kv_scale == nullptr ? 1.0f : __ldg(params.kv_scale)) / row_sum;
  }

  static __device__ __forceinline__ Element* out_row(const Params& params, int item, const QueryRow& row) {
    return static_cast<Element*>(params.out) + int64_t(item) * params.out_stride_b +
           int64_t(row.s) * params.out_stride_s + int64_t(row.head) * params.out_stride_h;  // [512]
  }
  static __device__ __forceinline__ float* lse_entry(const Params& params, int item, const QueryRow& row) {
    return params.lse + int64_t(item) * params.lse_stride_b + int64_t(row.head) * params.lse_stride_h + row.s;
  }
  // Row of partial_o / partial_lse: [slot, s, head].
  static __device__ __forceinline__ int64_t partial_row(const Params& params, const ItemBlocks& blocks,
                                                        const QueryRow& row) {
    return int64_t(blocks.slot) * (params.s_q * params.h_q) + row.s * params.h_q + row.head;
  }
};

}  // namespace openmla::kernels::decode_dense

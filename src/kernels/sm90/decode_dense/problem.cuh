// What the consumer warpgroups (consumers.cuh) need to know about one kind of
// call: which query rows a tile holds, which blocks an item has, which scores
// to mask, the final row factors and where results go. DenseProblem is the
// paged BF16/FP16 cache; the sparse FP8 wide-head kernel supplies its own
// (decode_sparse_fp8/wide_problem.cuh) and reuses the same consumers.
//
// A problem type provides:
//   using Params;                        kernel parameter block (has partial_o,
//                                        partial_lse, scale_log2)
//   kMayClusterSplit, clustered(params)  in-kernel cluster merge (dense only)
//   item_blocks(params, part, item)      ItemBlocks of the part's item
//   query_row(params, q_group, row)      QueryRow of tile row `row`
//   ItemMask item_mask(...)              per-item masking state
//   fill_stage(...)                      WG1 / WG2, before waiting for a stage:
//                                        their share of filling it (if any)
//   prepare_stage(...)                   WG1, before S: fix up the stage
//   release_stage(smem, stage)           lane 0 of each consumer warp, after its
//                                        last read of the stage
//   mask_scores(...)                     -inf for keys a row must not see
//   row_norm(...)                        factor of the final O row
//   out_row / lse_entry / partial_row    where a row's results go
#pragma once

#include <cute/tensor.hpp>

#include <climits>
#include <cmath>

#include "kernels/common/barriers.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/mainloop.cuh"

namespace openmla::kernels::decode_dense {

// The two query rows one consumer thread owns (rows r and r + 8 of the tile).
struct QueryRow {
  int tile_row;  // 0..63
  bool real;     // false for padding rows past the tile's rows
  int s;         // query token (0 when the item is one token)
  int head;      // query head
};

__device__ __forceinline__ QueryRow make_query_row(const KernelParams& params, int kv_head, int m_tile,
                                                   int tile_row) {
  QueryRow row;
  row.tile_row = tile_row;
  const int packed = m_tile * BLOCK_M + tile_row;
  row.real = packed < params.rows_per_kv;
  row.s = row.real ? packed / params.heads_per_kv : 0;
  row.head = kv_head * params.heads_per_kv + (row.real ? packed % params.heads_per_kv : 0);
  return row;
}

template <class Traits>
struct DenseProblem {
  using Params = KernelParams;
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr bool kMayClusterSplit = true;

  static __device__ __forceinline__ bool clustered(const Params& params) { return params.cluster_split > 1; }

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
      Mainloop<Traits>::zero_tail_rows(stage_base, valid, thread);
      common::fence_view_async_shared();
      common::named_barrier_sync(kBarrierSoftmaxWg, kWarpgroupThreads);
    }
  }

  static __device__ __forceinline__ void release_stage(SharedStorage& smem, int stage) {
    common::mbarrier_arrive(&smem.kv_empty[stage]);
  }

  template <class TensorSRowCol>
  static __device__ __forceinline__ void mask_scores(const ItemMask& mask, const SharedStorage&, int,
                                                     TensorSRowCol& tSrS_rc, int lane, int block) {
    if ((block + 1) * BLOCK_N > mask.unmasked_end) {
      Mainloop<Traits>::mask_scores(tSrS_rc, lane, block * BLOCK_N, mask.row_limit);
    }
  }

  // row_max: log2 domain; row_sum: whole-row sum. 0 for a row that saw nothing.
  static __device__ __forceinline__ float row_norm(const Params&, int, const ItemBlocks&, const QueryRow&, float,
                                                   float row_sum) {
    return row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
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

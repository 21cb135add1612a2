// The Problem contract of the heads-on-M consumer warpgroups (consumers.cuh):
// what they need to know about one kind of call — which query rows a tile
// holds, which blocks an item has, which scores to mask, the final row
// factors and where results go — and the two types it trades in (QueryRow,
// ItemBlocks). Implementations: decode_dense/problem.cuh (DenseProblem, the
// paged BF16/FP16 cache) and decode_sparse_fp8/heads_on_m_problem.cuh
// (HeadsOnMProblem, the sparse FP8 cache) and prefill_sparse/problem.cuh
// (PrefillProblem, BF16 rows gathered by index).
//
// A problem type provides:
//   using Params;                        kernel parameter block (has partial_o,
//                                        partial_lse, scale_log2)
//   kWritesMaxLogits                     store_max_logit(params, item, blocks,
//                                        row, value) gets each final row's max
//                                        of the scaled logits (sparse prefill)
//   kMayClusterSplit, clustered(params)  in-kernel cluster merge; when
//                                        kMayClusterSplit, also
//   stash_piece_o(...)                   one consumer's O half of a cluster
//                                        piece -> the merge buffer
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

#include <cmath>
#include <cstdint>

#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "openmla/schedule.h"

namespace openmla::kernels::heads_on_m {

// The two query rows one consumer thread owns (rows r and r + 8 of the tile).
struct QueryRow {
  int tile_row;  // 0..63
  bool real;     // false for padding rows past the tile's rows
  int s;         // query token (0 when the item is one token)
  int head;      // query head
};

// The blocks of one item that a part owns.
struct ItemBlocks {
  int length;       // KV tokens of the request, clamped to [0, max_length]
  int begin_block;  // first 64-token block (inclusive)
  int end_block;    // one past the last block
  bool partial;     // write partial_o / partial_lse instead of out / lse
  int slot;         // partial slot (when partial)
};

// `length`: the item's KV length (dense) or counted index positions (sparse).
__device__ __forceinline__ ItemBlocks item_blocks_of_length(const PartWork& part, int item, int length) {
  ItemBlocks r;
  r.length = length;
  // NOTE: (length - 1) / BLOCK_N + 1, not (length + BLOCK_N - 1) / BLOCK_N: lengths reach INT32_MAX.
  const int num_blocks = max(1, (r.length - 1) / BLOCK_N + 1);
  r.begin_block = part_item_begin_block(part, item);
  r.end_block = item == part.end_item ? part.end_block : num_blocks;
  r.partial = part_item_is_partial(part, item);
  r.slot = r.partial ? part_item_slot(part, item) : 0;
  return r;
}

// -inf for the scores of the keys whose bit in `valid` is clear (bit c: key c
// of the 64-key block; the sparse problems' per-stage validity words).
// Column c of a thread's row view is 2 (lane % 4) + (c % 2) + 8 (c / 2)
// (sm90 64xN accumulator: https://docs.nvidia.com/cuda/parallel-thread-execution/#wgmma-64n16-d).
template <class TensorSRowCol>
__device__ __forceinline__ void mask_invalid_keys(uint64_t valid, TensorSRowCol& tSrS_rc, int lane) {
  if (valid == ~uint64_t(0)) return;
  const uint64_t bits = valid >> (2 * (lane % 4));
#pragma unroll
  for (int j = 0; j < cute::size<1>(tSrS_rc); ++j) {
    if (((bits >> ((j % 2) + 8 * (j / 2))) & 1) == 0) {
#pragma unroll
      for (int i = 0; i < cute::size<0>(tSrS_rc); ++i) tSrS_rc(i, j) = -INFINITY;
    }
  }
}

// The final factor of an O row: 1 / row sum (0 for a row that saw no key),
// times, when apply_sink, the attention sink's 1 / (1 + exp(attn_sink[head] - LSE))
// (the sparse problems leave it to the combine for split items).
// row_max in the log2 domain.
__device__ __forceinline__ float row_norm_with_sink(bool apply_sink, const float* attn_sink, int head, float row_max,
                                                    float row_sum) {
  if (!(row_sum > 0.0f)) return 0.0f;
  float norm = 1.0f / row_sum;
  if (apply_sink) {
    const float lse = (row_max + log2f(row_sum)) * common::kLn2;  // natural log
    norm *= 1.0f / (1.0f + expf(__ldg(attn_sink + head) - lse));
  }
  return norm;
}

// Valid (loaded, finite) tokens of block `block`: [0, 64) clipped to the length.
__device__ __forceinline__ int block_valid_tokens(int length, int block) {
  return min(max(length - block * BLOCK_N, 0), BLOCK_N);
}

}  // namespace openmla::kernels::heads_on_m

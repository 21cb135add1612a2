// The dense decode call's side of the heads-on-M tile's two types
// (heads_on_m/problem.cuh): the KV blocks of an item (the request's length
// from seqlens) and the query row of a tile row (rows of a tile are packed
// (query token, head) pairs of one KV head).
#pragma once

#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "openmla/schedule.h"

namespace openmla::kernels::decode_dense {

using heads_on_m::block_valid_tokens;
using heads_on_m::item_blocks_of_length;
using heads_on_m::ItemBlocks;
using heads_on_m::QueryRow;

__device__ __forceinline__ ItemBlocks item_blocks(const KernelParams& params, const PartWork& part,
                                                  int item) {
  return item_blocks_of_length(part, item, min(max(__ldg(params.seqlens + item), 0), params.max_length));
}

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

}  // namespace openmla::kernels::decode_dense

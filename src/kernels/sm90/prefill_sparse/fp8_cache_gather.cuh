// The gather warpgroup of the sparse prefill alternate-blocks kernel in
// FP8-cache mode: K/V rows come straight from the 656-byte paged FP8 cache
// (sparse decode's), dequantised to bf16 into the same buffers, halves and
// barriers as the BF16 gather (alternate_blocks_kernel.cuh), so the consumers
// do not change.
//
// Lane l of warp w holds the rows 16 w + l / 8 + 4 j (j < 4) of a block and,
// of each row's half, pieces l % 8 and l % 8 + 8 (16 codes each): one warp
// load reads 128 contiguous code bytes of four rows, and a lane's rows share
// two swizzle phases, so every store is one of four registers plus a
// constant. The codes and scales of the next half to store wait in registers
// (32 + 8), loaded as soon as the previous half was stored, so a freed half
// costs its dequantisation and stores, not a load's latency. RoPE (bf16 in
// the cache) goes by cp.async with the right half: unit l % 8 of the same rows.
// NOTE: a first version gave lane l the rows 16 w + 2 i + l / 16 (i < 8): eight
// swizzle phases, whose hoisted store addresses made ptxas spill at 88 registers.
// Cache offsets: lane l holds row 16 w + l % 16 of the pair's block l / 16
// (-1: invalid, never read); the next pair's indices are loaded a pair ahead.
#pragma once

#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/fp8/sparse_cache_rows.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/prefill_sparse/config.h"
#include "kernels/sm90/prefill_sparse/gather.cuh"

namespace openmla::kernels::prefill_sparse {

// Kernel: AlternateBlocksKernel (T, SharedStorage, BlockPairCursor, gather_q, kAlternateLeftTiles halves).
template <class Kernel>
struct Fp8CacheGather {
  using T = typename Kernel::T;
  using SharedStorage = typename Kernel::SharedStorage;
  using BlockPairCursor = typename Kernel::BlockPairCursor;
  using Gather = RowGather<T>;
  static constexpr int kRowsPerLane = 4;      // rows l / 8 + 4 j of the warp's 16
  static constexpr int kPiecesPerLane = 2;    // pieces l % 8 and l % 8 + 8 of a half row
  static constexpr int kPiecesPerHalf = 16;   // 16 codes each: 256 dims
  static constexpr int kRopeTile = kHeadDimLatent / heads_on_m::kChunkCols;  // 8
  static constexpr uint32_t kChunkBytes = uint32_t(T::kChunkElems) * 2;  // 8 KB
  static constexpr uint32_t kFullMask = 0xffffffffu;
  static_assert(T::kNumChunks == kRopeTile + 1, "FP8-cache mode is d_qk = 576");

  // Expected arrivals on half_full[buf][half]: every thread after its stores, the right half's
  // RoPE cp.async (one .noinc arrival a thread), the validity writers on half buf of buffer buf.
  static constexpr int half_full_arrivals(int buf, int half) {
    return kWarpgroupThreads * (half == 0 ? 1 : 2) + (half == buf ? kWarpsPerWarpgroup : 0);
  }

  struct HalfCodes {
    uint4 codes[kRowsPerLane][kPiecesPerLane];   // row 16 w + l / 8 + 4 j, piece l % 8 + 8 k
    float scales[kRowsPerLane][kPiecesPerLane];  // group 2 half + k (0 for an invalid row)
  };

  // Index of row 16 w + l % 16 of the pair's block l / 16 (-1 past the token's blocks).
  static __device__ __forceinline__ int32_t pair_index(const KernelParams& params, const BlockPairCursor& cur,
                                                       int warp, int lane) {
    const int block = cur.even_block + lane / kPiecesPerHalf;
    return block < cur.end_block
               ? Gather::block_index(params, cur.item, cur.length, block, warp * kRowsPerProducerWarp + lane % 16)
               : -1;
  }

  // Cache offset of this lane's row j of the pair's block `odd`.
  static __device__ __forceinline__ int64_t row_offset(int64_t pair_offsets, int odd, int j, int lane) {
    return __shfl_sync(kFullMask, pair_offsets, kPiecesPerHalf * odd + lane / 8 + 4 * j);
  }

  // Codes and scales of half `kHalf` of this lane's rows of the pair's block `odd`.
  template <int kHalf>
  static __device__ __forceinline__ void load_half(const KernelParams& params, int64_t pair_offsets, int odd, int lane,
                                                   HalfCodes& half) {
#pragma unroll
    for (int j = 0; j < kRowsPerLane; ++j) {
      const int64_t offset = row_offset(pair_offsets, odd, j, lane);
#pragma unroll
      for (int k = 0; k < kPiecesPerLane; ++k) {
        common::load_token(params, offset, kPiecesPerHalf * kHalf + 8 * k + lane % 8, half.codes[j][k],
                           half.scales[j][k]);
      }
    }
  }

  // Half `kHalf` of the pair's block `odd` into buffer `buf` (the right half with its RoPE), then
  // this thread's arrivals. The buffer's own half first publishes the rows' validity (as the
  // BF16 gather does: its warpgroup read the old bits before it freed that half).
  template <int kHalf>
  static __device__ __forceinline__ void store_half(const KernelParams& params, SharedStorage& smem, int buf,
                                                    int64_t pair_offsets, int odd, const HalfCodes& half, int warp,
                                                    int lane) {
    const uint32_t valid = __ballot_sync(kFullMask, pair_offsets >= 0);
    if (buf == kHalf && lane == 0) {
      smem.extra.stage_valid[buf][warp] = uint16_t(valid >> (kPiecesPerHalf * odd));
      common::mbarrier_arrive(&smem.extra.half_full[buf][kHalf]);
    }
    const uint32_t base = common::smem_u32(smem.kv[buf]);
    // Row j of this lane: 16 w + l / 8 + 4 j, so row & 7 = l / 8 + 4 (j % 2).
    const uint32_t lane_row = uint32_t(warp * kRowsPerProducerWarp + lane / 8);
    if constexpr (kHalf == 1) {
      const uint32_t unit = uint32_t(lane % 8);
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        const int64_t offset = row_offset(pair_offsets, odd, j, lane);
        const uint32_t row = lane_row + 4u * uint32_t(j);
        const uint32_t dst = base + kRopeTile * kChunkBytes + row * T::kRowBytes + ((unit ^ (row & 7u)) << 4);
        const uint8_t* src = params.kv_cache + (offset >= 0 ? offset : 0) + kSparseFp8RopeOffset + 16 * unit;
        common::cp_async_16_zfill(dst, src, offset >= 0);
      }
    }
    // Piece p = l % 8 + 8 k: units 2 (p % 4), 2 (p % 4) + 1 of tile 4 kHalf + p / 4; lanes with
    // l & 4 store their second unit first (store_token), so each 8-lane phase hits 8 bank groups.
    const bool swap = (lane & 4) != 0;
    const uint32_t unit_first = uint32_t(2 * (lane % 4) + (swap ? 1 : 0));
    const uint32_t lane_base = base + uint32_t(4 * kHalf + (lane % 8) / 4) * kChunkBytes + lane_row * T::kRowBytes;
    // One warp-wide test of the scales (the cache's are <= 2^7 unless |values| exceed 57344), so
    // the usual path is straight-line.
    float max_scale = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowsPerLane; ++j) max_scale = fmaxf(max_scale, fmaxf(half.scales[j][0], half.scales[j][1]));
    const auto store_rows = [&](auto store_piece) {
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        const uint32_t unit_xor = (unit_first ^ ((lane_row + 4u * uint32_t(j)) & 7u)) << 4;
#pragma unroll
        for (int k = 0; k < kPiecesPerLane; ++k) {
          store_piece(lane_base + uint32_t(2 * k) * kChunkBytes + uint32_t(4 * j) * T::kRowBytes, unit_xor,
                      half.codes[j][k], half.scales[j][k]);
        }
      }
    };
    if (__all_sync(kFullMask, max_scale <= common::kMaxSingleStepScale)) {
      store_rows([&](uint32_t row_addr, uint32_t unit_xor, const uint4& codes, float scale) {
        common::store_token_straight<false>(common::LocalStageWriter{}, row_addr, unit_xor, swap, codes, scale);
      });
    } else {  // rare: values above 448 * 128
      store_rows([&](uint32_t row_addr, uint32_t unit_xor, const uint4& codes, float scale) {
        common::store_token_straight<true>(common::LocalStageWriter{}, row_addr, unit_xor, swap, codes, scale);
      });
    }
    common::fence_view_async_shared();  // generic-proxy stores -> WGMMA operands
    common::mbarrier_arrive(&smem.extra.half_full[buf][kHalf]);
    if constexpr (kHalf == 1) common::cp_async_arrive_noinc(&smem.extra.half_full[buf][kHalf]);
  }

  // Every pair of the part, in the BF16 gather's order (K0 left, K0 right, K1 right, K1 left),
  // each half after its last reader freed it; a new token's Q before its first pair.
  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    BlockPairCursor cur;
    cur.first(params, part);
    if (!cur.valid) return;
    Kernel::gather_q(params, smem, cur.item, q_group, warp, lane);
    int64_t offsets = common::token_offset(params, pair_index(params, cur, warp, lane));
    HalfCodes half;
    load_half<0>(params, offsets, 0, lane, half);
    BlockPairCursor nxt = cur;
    nxt.advance(params, part);
    int32_t next_index = nxt.valid ? pair_index(params, nxt, warp, lane) : -1;
    bool first = true;
    uint32_t phase = 0;
    uint32_t q_phase = 0;
    for (;;) {
      if (!first) common::mbarrier_wait(&smem.extra.tile_free[0][0], phase);
      store_half<0>(params, smem, 0, offsets, 0, half, warp, lane);
      load_half<1>(params, offsets, 0, lane, half);
      if (!first) common::mbarrier_wait(&smem.extra.tile_free[0][1], phase);
      store_half<1>(params, smem, 0, offsets, 0, half, warp, lane);
      if (cur.has_odd) load_half<1>(params, offsets, 1, lane, half);
      if (!first) common::mbarrier_wait(&smem.extra.tile_free[1][1], phase);
      if (cur.has_odd) {
        store_half<1>(params, smem, 1, offsets, 1, half, warp, lane);
        load_half<0>(params, offsets, 1, lane, half);
      }
      if (!first) common::mbarrier_wait(&smem.extra.tile_free[1][0], phase);
      if (cur.has_odd) store_half<0>(params, smem, 1, offsets, 1, half, warp, lane);
      if (!first) phase ^= 1;
      if (!nxt.valid) break;
      // ---- the next pair: its first half's codes now, its Q once the consumers' last S retired
      offsets = common::token_offset(params, next_index);
      load_half<0>(params, offsets, 0, lane, half);
      if (nxt.item != cur.item) {
        common::mbarrier_wait(&smem.q_empty, q_phase);
        q_phase ^= 1;
        Kernel::gather_q(params, smem, nxt.item, q_group, warp, lane);
      }
      cur = nxt;
      nxt.advance(params, part);
      next_index = nxt.valid ? pair_index(params, nxt, warp, lane) : -1;
      first = false;
    }
    common::cp_async_wait_all();  // nothing in flight when the warpgroup exits
  }
};

}  // namespace openmla::kernels::prefill_sparse

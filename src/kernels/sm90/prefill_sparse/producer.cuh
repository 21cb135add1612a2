// Producer warpgroup of the sm90 sparse prefill kernel, with the traits and
// shared memory it adds to the heads-on-M tile (heads_on_m/traits.h): gathers
// the BF16 rows that each query token's indices name into the two K/V stages
// and copies each token's Q tile.
//
// Pipeline (two stages of 64 rows x d_qk, Q once per token):
//   kv_full[s]   128 cp.async arrivals (.noinc) + 4 validity-bit writers   producer -> consumers
//   kv_empty[s]  8 arrivals: lane 0 of every consumer warp                  consumers -> producer
//   q_full       128 cp.async arrivals (.noinc)                             producer -> consumers
//   q_empty      4 arrivals: lane 0 of every softmax-warpgroup warp, after the token's last S
// Warp w owns rows [16 w, 16 w + 16) of every block: lane l < 16 looks up row
// 16 w + l's index (a block ahead), then the warp copies its 16 rows one at a
// time, 32 lanes x 16 bytes per instruction, so each instruction reads 512
// contiguous bytes of one row. A row whose index is invalid (negative, >=
// s_kv, or past the token's topk_length) is zero-filled and never read; its
// column is masked by the validity bits.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/problem.cuh"
#include "kernels/sm90/heads_on_m/traits.h"
#include "kernels/sm90/prefill_sparse/config.h"
#include "openmla/schedule.h"

namespace openmla::kernels::prefill_sparse {

// Shared memory this kernel adds to the heads-on-M tile's plan (Q 72 KB + two
// stages 144 KB + P 8 KB): the stages' validity bits.
struct PrefillExtraStorage {
  // Bit r of stage s's 64-bit word: row r holds a counted, in-range token
  // (the consumers' column mask); 16 bits per producer warp.
  alignas(8) uint16_t stage_valid[kNumStages][kWarpsPerWarpgroup];
};

template <int kHeadDimQK>
using PrefillTraits = heads_on_m::Traits<DType::kBF16, kHeadDimQK, kNumStages, PrefillExtraStorage>;

// Counted index positions of a query token: clamp(topk_length[s], 0, topk).
__device__ __forceinline__ int token_length(const KernelParams& params, int token) {
  if (params.topk_length == nullptr) return params.topk;
  return min(max(__ldg(params.topk_length + token), 0), params.topk);
}

template <class Traits>
struct GatherProducer {
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kUnitsPerRow = Traits::kHeadDimQK * int(sizeof(Element)) / 16;  // 72 or 64
  static constexpr int kUnitsPerLane = (kUnitsPerRow + kWarpSize - 1) / kWarpSize;     // 3 or 2
  static constexpr uint32_t kChunkBytes = uint32_t(Traits::kChunkElems) * sizeof(Element);  // 8 KB
  static constexpr int kFullArrivals = kWarpgroupThreads + kWarpsPerWarpgroup;
  static constexpr uint32_t kFullMask = 0xffffffffu;

  // Element offset of index `index` in kv, or -1 when the row is not to be read.
  static __device__ __forceinline__ int64_t row_offset(const KernelParams& params, int32_t index) {
    return index >= 0 && index < params.s_kv ? int64_t(index) * params.kv_stride_s : -1;
  }

  // Index of row `row` of block `block` of token `token` (length: its counted positions), or -1.
  static __device__ __forceinline__ int32_t block_index(const KernelParams& params, int token, int length, int block,
                                                        int row) {
    const int pos = block * BLOCK_N + row;
    return pos < length ? __ldg(params.indices + token * params.indices_stride_s + pos) : -1;
  }

  // Copy 16 rows into the 128B-swizzled chunked layout of a stage or of Q:
  // row r's unit u (16 bytes) lands in chunk u / 8 at r * 128 + ((u % 8) ^ (r & 7)) * 16.
  // lane_offset: lane l < 16 holds its row's element offset (-1: zero-fill).
  static __device__ __forceinline__ void copy_rows(const uint16_t* base, int64_t lane_offset, uint32_t dst_base,
                                                   int first_row, int lane) {
    const uint32_t lane_chunk = uint32_t(lane / 8) * kChunkBytes;
    const uint32_t lane_unit = uint32_t(lane % 8);
#pragma unroll 4
    for (int j = 0; j < kRowsPerProducerWarp; ++j) {
      const int64_t offset = __shfl_sync(kFullMask, lane_offset, j);
      const bool valid = offset >= 0;
      const int row = first_row + j;
      const uint16_t* src = base + (valid ? offset : 0) + 8 * lane;  // never read when invalid
      const uint32_t dst = dst_base + lane_chunk + uint32_t(row) * Traits::kRowBytes +
                           ((lane_unit ^ uint32_t(row & 7)) << 4);
#pragma unroll
      for (int k = 0; k < kUnitsPerLane; ++k) {
        if (k * kWarpSize + lane < kUnitsPerRow) {
          common::cp_async_16_zfill(dst + uint32_t(k) * 4 * kChunkBytes, src + k * kWarpSize * 8, valid);
        }
      }
    }
  }

  static __device__ __forceinline__ void init_barriers(SharedStorage&) {}

  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int first_row = warp * kRowsPerProducerWarp;
    const int head0 = q_group * kHeadsPerCta;
    int block_counter = 0;
    int item_counter = 0;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      const int length = token_length(params, item);
      const heads_on_m::ItemBlocks blocks = heads_on_m::item_blocks_of_length(part, item, length);
      if (blocks.begin_block >= blocks.end_block) continue;
      // lane l < 16: row first_row + l's index of the next block.
      int32_t index = lane < kRowsPerProducerWarp ? block_index(params, item, length, blocks.begin_block,
                                                                first_row + lane)
                                                  : -1;
      for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
        const int stage = block_counter % kNumStages;
        const uint32_t phase = (block_counter / kNumStages) & 1;
        const int64_t offset = lane < kRowsPerProducerWarp ? row_offset(params, index) : -1;
        const uint32_t valid_bits = __ballot_sync(kFullMask, offset >= 0) & 0xffffu;
        if (block + 1 < blocks.end_block && lane < kRowsPerProducerWarp) {
          index = block_index(params, item, length, block + 1, first_row + lane);
        }

        // ---- the consumers are done with this stage: gather block `block` into it ----
        common::mbarrier_wait(&smem.kv_empty[stage], phase ^ 1);
        copy_rows(params.kv, offset, common::smem_u32(smem.kv[stage]), first_row, lane);
        common::cp_async_arrive_noinc(&smem.kv_full[stage]);
        if (lane == 0) {
          smem.extra.stage_valid[stage][warp] = uint16_t(valid_bits);
          common::mbarrier_arrive(&smem.kv_full[stage]);
        }

        // ---- Q of a new token, after its first block's gather is on its way (the
        // consumers hand Q back after the previous token's last S) ----
        if (block == blocks.begin_block) {
          if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
          const int head = head0 + first_row + lane;
          const int64_t q_offset = lane < kRowsPerProducerWarp && head < params.h_q
                                       ? int64_t(item) * params.q_stride_s + int64_t(head) * params.q_stride_h
                                       : -1;
          copy_rows(params.q, q_offset, common::smem_u32(smem.q), first_row, lane);
          common::cp_async_arrive_noinc(&smem.q_full);
          ++item_counter;
        }
      }
    }
    common::cp_async_wait_all();  // nothing in flight when the warpgroup exits
  }
};

}  // namespace openmla::kernels::prefill_sparse

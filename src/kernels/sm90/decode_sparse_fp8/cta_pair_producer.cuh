// Producer warpgroup of the sm90 sparse FP8 heads-on-M kernel at h_q = 128
// (DecodeKernel::kSparseHeadsOnMCtaPair): the part's two q-group CTAs are a
// CTA pair (a cluster of 2) that share the loading. Every head
// attends to the same tokens, so CTA r loads and dequantises only stage rows
// [32 r, 32 r + 32) of each block into its own stage, and each warp then
// bulk-copies its 8 rows (one 1 KB piece per chunk) into the same place of
// the peer's stage: half the dequantisation and half the loads per CTA.
//
// Pipeline (two bf16 stages, no raw stage; the consumers are heads_on_m/consumers.cuh):
//   kv_full[s]   (128 arrivals + 36 KB of the peer's bulk copies)  WG0 of both CTAs -> consumers
//   kv_empty[s]  (16 arrivals: consumer warps of both CTAs)        consumers of both CTAs -> WG0
//   q_full (128) / q_empty (4)                                     as in the dense column-split kernel
// The rows of block n + 1 are loaded into registers while block n is
// stored, so the load latency overlaps the stores.
// A stage is rewritten only after both CTAs' consumers released it, so the
// peer's consumers have seen this CTA's copies land: the copies' reads of
// the local rows are done by then.
// NOTE (H200, b = 128, s_q = 2, topk 2048, TFLOP/s): with one stage (the
// raw-stage design, fill between P.V and S) the CTA pair ran at 241 against 343
// without it: the 36 KB a block each CTA sends its peer sat on the critical
// path. Two stages with 16-byte st.async to the peer: 328 (timing-only
// without the peer stores 379: the st.async stream held up the producer);
// bulk copies instead: 369; then the shift for power-of-two page sizes,
// warp-uniform copy operands, 120 registers: ~385 (docs/kernels/decode_sparse_fp8.md).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/mainloop.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/traits.h"

namespace openmla::kernels::decode_sparse_fp8 {

struct CtaPairExtraStorage {
  // Per stage, bit r of the 64-bit word: stage row r holds a counted,
  // in-range token (the consumers' column mask). Byte k: rows 8 k .. 8 k + 7.
  alignas(8) uint8_t stage_valid[2][BLOCK_N / 8];
};

using CtaPairTraits = heads_on_m::Traits<DType::kBF16, HEAD_DIM_QK, /*kStages=*/2, CtaPairExtraStorage>;

// 128 threads; warp w owns stage rows own_row0 + j, own_row0 = 32 r + 8 w,
// j < 8. Lane l holds 16 codes (dims 16 l .. 16 l + 15) of each of the 8
// rows, as the heads-on-N producer does, and units l % 8 of the RoPE of rows
// l / 8 and l / 8 + 4. Lanes 0-7 look up the warp's rows' indices, lanes 8-15
// the peer's rows at the same places (their validity only).
template <class Traits>
struct CtaPairProducer {
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kClusterCtas = 2;
  static constexpr int kRegs = 120;  // setmaxnreg (consumers 192): 32 of codes, 8 of RoPE, 8 scales, addresses
  static constexpr bool kConsumersHelpFill = false;
  static constexpr int kFullArrivals = kWarpgroupThreads;
  static constexpr int kRowsPerCta = BLOCK_N / kClusterCtas;                // 32
  static constexpr int kRows = kRowsPerCta / kWarpsPerWarpgroup;            // 8 rows a warp
  static_assert(kRows == kRopeRowsPerWarp, "a warp's rows are the RoPE helpers' 8 rows");
  static constexpr int kRopeChunk = kHeadDimLatent / kChunkCols;            // 8
  static constexpr uint32_t kChunkBytes = uint32_t(Traits::kChunkElems) * 2;            // 8 KB
  static constexpr uint32_t kStageBytes = uint32_t(Traits::kNumChunks) * kChunkBytes;   // 72 KB
  static constexpr uint32_t kPeerBytes = uint32_t(kRowsPerCta * HEAD_DIM_QK * 2);       // 36 KB a block
  static constexpr uint32_t kFullMask = 0xffffffffu;
  static_assert(Traits::kNumStages == 2, "the peer traffic overlaps the consumers only with two stages");

  static __device__ __forceinline__ void init_barriers(SharedStorage&) {}

  static __device__ __forceinline__ uint64_t stage_valid_bits(const SharedStorage& smem, int stage) {
    return *reinterpret_cast<const uint64_t*>(smem.extra.stage_valid[stage]);
  }

  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int thread) {
    // Warp-uniform (a shuffle from lane 0), so the bulk copies' operands
    // stay in uniform registers: no per-copy loop over the lanes' values.
    const int warp = __shfl_sync(kFullMask, thread / kWarpSize, 0);
    const int lane = thread % kWarpSize;
    const int rank = int(cute::block_rank_in_cluster());
    const uint32_t peer = uint32_t(rank ^ 1);
    const int own_row0 = rank * kRowsPerCta + warp * kRows;
    const int peer_row0 = (rank ^ 1) * kRowsPerCta + warp * kRows;
    const int index_row = lane < kRows ? own_row0 + lane : lane < 2 * kRows ? peer_row0 + lane - kRows : -1;
    auto row_index = [&](const BlockCursor& c) -> int32_t {
      return index_row >= 0 ? block_row_index(params, c, index_row) : -1;
    };

    // This warp's rows of chunk 0 of stage 0, here and in the peer (then + stage, + chunk).
    const uint32_t own_rows =
        __shfl_sync(kFullMask, common::smem_u32(smem.kv[0]) + uint32_t(own_row0) * Traits::kRowBytes, 0);
    const uint32_t peer_rows = __shfl_sync(
        kFullMask, common::map_to_cluster_rank(smem.kv[0], peer) + uint32_t(own_row0) * Traits::kRowBytes, 0);
    const uint32_t peer_kv_full0 = __shfl_sync(kFullMask, common::map_to_cluster_rank(&smem.kv_full[0], peer), 0);
    const uint32_t peer_kv_full1 = __shfl_sync(kFullMask, common::map_to_cluster_rank(&smem.kv_full[1], peer), 0);

    // ---- this lane's store addresses (heads-on-N producer's layout, rows own_row0 + j) ----
    const bool swap = (lane & 4) != 0;
    const uint32_t unit_first = 2 * (lane % 4) + (swap ? 1 : 0);
    const uint32_t row_base0 = common::smem_u32(smem.kv[0]) + uint32_t(lane / 4) * kChunkBytes +
                               uint32_t(own_row0) * Traits::kRowBytes;
    const uint32_t unit_xor0 = unit_first << 4;  // own_row0 is a multiple of 8: row & 7 = j

    // ---- lookahead: registers hold block n, offsets block n + 1, far_index block n + 2 ----
    BlockCursor cursor = cursor_begin(params, part);
    BlockCursor far = cursor;
    cursor_advance(far, params, part);
    int64_t offsets = token_offset(params, row_index(cursor));
    uint32_t valid_bits = __ballot_sync(kFullMask, offsets >= 0);
    uint4 codes[kRows];
    float scales[kRows];
    uint4 rope[kRopeUnitsPerLane];
    load_rows(params, offsets, lane, codes, scales, rope);
    offsets = token_offset(params, row_index(far));
    cursor_advance(far, params, part);
    int32_t far_index = row_index(far);

    int block_counter = 0;
    int item_counter = 0;
    for (; cursor.active(); cursor_advance(cursor, params, part), ++block_counter) {
      const int stage = block_counter % Traits::kNumStages;
      const uint32_t phase = (block_counter / Traits::kNumStages) & 1;
      // ---- Q of a new item (the consumers released Q after the last item's S) ----
      if (cursor.first) {
        if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
        copy_q_tile<kHeadsOnMHeadsPerCta, kWarpgroupThreads>(params, cursor.item, q_group * kHeadsOnMHeadsPerCta, smem.q,
                                                         thread);
      }

      // ---- both CTAs' consumers are done with this stage: store block n, load block n + 1 ----
      common::mbarrier_wait(&smem.kv_empty[stage], phase ^ 1);
      if (lane == 0 || lane == kRows) {
        smem.extra.stage_valid[stage][(lane == 0 ? own_row0 : peer_row0) / 8] = uint8_t(valid_bits >> lane);
      }
      const uint32_t stage_addr = common::smem_u32(smem.kv[0]) + uint32_t(stage) * kStageBytes;
      store_rope_rows(stage_addr + kRopeChunk * kChunkBytes, own_row0, lane, rope);
      load_rope_rows(params, offsets, /*first_lane=*/0, lane, rope);
      const uint32_t row_base = row_base0 + uint32_t(stage) * kStageBytes;
      // The rows' offsets up front (one shuffle wait, not one per row): +0.6% at 120 registers, -1% at 88.
      int64_t row_offset[kRows];
#pragma unroll
      for (int j = 0; j < kRows; ++j) row_offset[j] = __shfl_sync(kFullMask, offsets, j);
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        store_token(LocalStageWriter{}, row_base + j * Traits::kRowBytes, unit_xor0 ^ uint32_t(j << 4), swap, codes[j],
                    scales[j]);
        load_token(params, row_offset[j], lane, codes[j], scales[j]);
      }

      // ---- the warp's rows -> the peer (one 1 KB bulk copy a chunk) ----
      common::fence_view_async_shared();  // generic-proxy stores -> bulk copies and WGMMA operands
      __syncwarp();
      if (lane == 0) {
        const uint32_t peer_kv_full = stage == 0 ? peer_kv_full0 : peer_kv_full1;
        const uint32_t stage_offset = uint32_t(stage) * kStageBytes;
#pragma unroll
        for (int c = 0; c < Traits::kNumChunks; ++c) {
          common::bulk_copy_to_peer(peer_rows + stage_offset + c * kChunkBytes, own_rows + stage_offset + c * kChunkBytes,
                                    kRows * Traits::kRowBytes, peer_kv_full);
        }
      }

      // ---- publish (Q copies landed); the arrival of thread 0 also expects
      // the peer's bytes of this block ----
      if (cursor.first) {
        common::cp_async_wait_all();
        common::fence_view_async_shared();
      }
      if (thread == 0) {
        common::mbarrier_arrive_expect_tx(&smem.kv_full[stage], kPeerBytes);
      } else {
        common::mbarrier_arrive(&smem.kv_full[stage]);
      }
      if (cursor.first) {
        common::mbarrier_arrive(&smem.q_full);
        ++item_counter;
      }

      // ---- shift the lookahead by one block ----
      valid_bits = __ballot_sync(kFullMask, offsets >= 0);
      offsets = token_offset(params, far_index);
      cursor_advance(far, params, part);
      far_index = row_index(far);
    }
  }
};

}  // namespace openmla::kernels::decode_sparse_fp8

// Producer of the sm90 sparse FP8 heads-on-M kernel for h_q = 64
// (DecodeKernel::kSparseHeadsOnM: 64 heads per CTA on the MMA's M): the
// warpgroup that gathers and dequantises the cache rows, with the shared
// memory and traits it adds to the heads-on-M tile (heads_on_m/traits.h).
// The consumers are the shared heads-on-M ones (heads_on_m/consumers.cuh)
// with HeadsOnMProblem (heads_on_m_problem.cuh).
//
// Pipeline (one bf16 stage, one raw stage):
//   raw_full      (128 cp.async arrivals)       gather (WG0)         -> fillers (all)
//   kv_full[0]    (384 arrivals)                fillers (all)        -> consumers
//   kv_empty[0]   (8 arrivals: consumer warps)  consumers            -> WG0 (chunks 0-3)
//   barrier_ids::kSparseHeadsOnMRawFree (named, 384)  fillers        -> gather (WG0)
//   q_full (128) / q_empty (4)                  as in the dense column-split kernel
// Block n: every warpgroup fills its share of the bf16 stage from the raw
// stage once raw_full(n) is complete (WG0: scale groups 0-1 after kv_empty,
// WG2: groups 2-3, WG1: RoPE), then the consumers compute block n while WG0
// gathers block n + 1 into the raw stage with cp.async.
// NOTE: WG0 alone dequantised a block in ~1.0 us with the consumers idle
// (globaltimer timeline, h_q = 128); shared with WG2 and WG1 it is ~0.7 us
// (h_q = 128: 309 -> 345 TFLOP/s).
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/fp8/dequant.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/mainloop.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/traits.h"
#include "openmla/schedule.h"

namespace openmla::kernels::decode_sparse_fp8 {

// Every stage filler (all three warpgroups) passes barrier_ids::kSparseHeadsOnMRawFree
// once it has read the raw stage; the producers sync, the consumers only arrive.
inline constexpr int kHeadsOnMFillThreads = heads_on_m::kNumThreads;  // 384

// Shared memory this kernel adds to the heads-on-M tile's plan (Q 72 KB + one
// bf16 stage 72 KB + P 8 KB): the raw stage, 64 x 656 B = 41 KB.
struct HeadsOnMExtraStorage {
  alignas(16) uint8_t raw[BLOCK_N * kSparseFp8TokenBytes];  // [64 rows][656 B] as stored in the cache
  // Bit r of the 64-bit word: row r of the bf16 stage holds a counted,
  // in-range token (the consumers' column mask); 16 rows per producer warp.
  alignas(8) uint16_t stage_valid[kWarpsPerWarpgroup];
  int64_t row_offset[kWarpsPerWarpgroup][BLOCK_N / kWarpsPerWarpgroup];  // per gather warp: its rows' cache offsets
  uint64_t raw_full;  // 128 arrivals: each producer thread's gather copies landed (cp.async noinc)
};

using HeadsOnMTraits = heads_on_m::Traits<DType::kBF16, HEAD_DIM_QK, /*kStages=*/1, HeadsOnMExtraStorage>;

// ---- producer warpgroup -------------------------------------------------------------------------
// 128 threads. Gather: warp w copies rows [16 w, 16 w + 16) of the next block
// with 16-byte cp.async (gather()), zero-filling rows whose index is invalid.
// NOTE: 656-byte bulk copies (TMA) ran at ~8 us a block here: small copies
// at unaligned addresses are slow in the copy engine; cp.async is not. An L2
// prefetch a block ahead of the gather measured no gain (removed).
// Dequantisation: WG0 thread t takes row t % 64, scale group t / 64 (128
// codes = 8 units of 16); WG2 the groups 2 and 3, WG1 the RoPE (help_fill).
// NOTE: the raw row stride 656 B = 164 words = 4 (mod 32), so the 8 rows of a
// quarter warp read distinct 16-byte bank groups; the swizzled stores of 8
// consecutive rows land in distinct groups too (unit ^ (row & 7)).
template <class Traits>
struct HeadsOnMProducer {
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kClusterCtas = 1;
  static constexpr int kRegs = 40;  // setmaxnreg of this warpgroup (as the dense column-split producer)
  static constexpr bool kConsumersHelpFill = true;
  static constexpr int kFullArrivals = kHeadsOnMFillThreads;  // every filler arrives on kv_full
  static constexpr int kRopeUnitsPerThread = kHeadDimRope * 2 / 16 / 2;  // 4
  static constexpr int kRowsPerWarp = BLOCK_N / kWarpsPerWarpgroup;     // 16
  static constexpr uint32_t kFullMask = 0xffffffffu;

  // This warp's gather rows of the cursor's block (lanes 0-15: row 16 w + lane).
  static __device__ __forceinline__ int32_t lane_row_index(const KernelParams& params, const BlockCursor& cursor,
                                                           int warp, int lane) {
    return lane < kRowsPerWarp ? block_row_index(params, cursor, warp * kRowsPerWarp + lane) : -1;
  }

  // Copy this warp's 16 rows into the raw stage and arrive on raw_full when
  // they land; index: lane l < 16 holds row 16 w + l's (loaded a block
  // earlier, so its latency is hidden). A row is one step: lanes 0-31 copy
  // its 512 code bytes, lanes 0-8 its scales and RoPE (16-byte cp.async);
  // an index outside the cache zero-fills the row and is never dereferenced.
  // Returns the rows' validity bits (bit j: row 16 w + j).
  // NOTE: one row per warp instruction keeps each to 4 lines of 128 bytes;
  // spreading 16 rows over an instruction (2 lanes a row) was slower (LSU
  // throttled: 264 vs 309 TFLOP/s at h_q = 128). Row offsets go through
  // shared memory, read 4 rows at a time ahead of their copies (shuffles
  // per row left each copy waiting on its shuffle).
  static __device__ __forceinline__ uint32_t gather(const KernelParams& params, SharedStorage& smem, int32_t index,
                                                    int warp, int lane) {
    constexpr int kCodeUnits = kHeadDimLatent / 16;                            // 32: one per lane
    constexpr int kTailUnits = kSparseFp8TokenBytes / 16 - kCodeUnits;         // 9: scales + RoPE
    constexpr int kRowBatch = 4;
    const int64_t offset = token_offset(params, index);  // -1: outside the cache, never read
    const bool valid = offset >= 0;
    int64_t* offsets = smem.extra.row_offset[warp];  // [16]
    if (lane < kRowsPerWarp) offsets[lane] = offset;
    __syncwarp();
    const uint32_t offsets_addr = common::smem_u32(offsets);
    const uint32_t dst_rows = common::smem_u32(smem.extra.raw) +
                              uint32_t(warp * kRowsPerWarp * kSparseFp8TokenBytes + 16 * lane);
    const uint8_t* src_lane = params.kv_cache + 16 * lane;
#pragma unroll
    for (int j0 = 0; j0 < kRowsPerWarp; j0 += kRowBatch) {
      int64_t row_offset[kRowBatch];
#pragma unroll
      for (int k = 0; k < kRowBatch; ++k) row_offset[k] = common::ld_shared_s64(offsets_addr + 8 * (j0 + k));
#pragma unroll
      for (int k = 0; k < kRowBatch; ++k) {
        const bool row_valid = row_offset[k] >= 0;
        const uint8_t* src = src_lane + (row_valid ? row_offset[k] : 0);  // never read when invalid
        const uint32_t dst = dst_rows + uint32_t((j0 + k) * kSparseFp8TokenBytes);
        common::cp_async_16_zfill(dst, src, row_valid);
        if (lane < kTailUnits) common::cp_async_16_zfill(dst + 16 * kCodeUnits, src + 16 * kCodeUnits, row_valid);
      }
    }
    common::cp_async_arrive_noinc(&smem.extra.raw_full);
    __syncwarp();  // offsets are rewritten by the next gather
    return __ballot_sync(kFullMask, lane < kRowsPerWarp && valid);
  }

  // 128 codes of one scale group -> 2 chunk rows of the stage (16 units).
  // NOTE: shared loads are issued kLoadBatch at a time ahead of their use:
  // the accesses are volatile asm, so program order is issue order, and one
  // load per dependent chain left the producer latency-bound.
  template <class Dequant>
  static __device__ __forceinline__ void dequantise_group(uint32_t codes_base, uint32_t chunk_base, Dequant dequant) {
    constexpr uint32_t kChunkBytes = uint32_t(Traits::kChunkElems) * sizeof(Element);  // 8 KB
    constexpr int kUnitsPerChunk = kChunkCols / 16;                                     // 4 units of 16 codes
    constexpr int kUnits = kSparseFp8ValuesPerScale / 16;                               // 8
    constexpr int kLoadBatch = 4;
#pragma unroll
    for (int k0 = 0; k0 < kUnits; k0 += kLoadBatch) {
      uint4 codes[kLoadBatch];
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) codes[b] = common::ld_shared_v4(codes_base + 16 * (k0 + b));
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) {
        const int k = k0 + b;
        const uint32_t dst = chunk_base + uint32_t(k / kUnitsPerChunk) * kChunkBytes;
        const uint32_t unit = uint32_t(2 * (k % kUnitsPerChunk));
        common::st_shared_v4(dst ^ (unit << 4), dequant(codes[b].x, codes[b].y));
        common::st_shared_v4(dst ^ ((unit + 1) << 4), dequant(codes[b].z, codes[b].w));
      }
    }
  }

  // Scale group `group` of raw row `row` -> the bf16 stage (chunks 2 group
  // and 2 group + 1). Invalid rows were zero-filled by the gather (codes,
  // scales and RoPE), so they dequantise to zeros without a branch.
  // Addresses: a stage row's 128 B chunk row starts on a 128 B boundary, so
  // unit u of row r is (chunk row | (r & 7) << 4) ^ u << 4, one LOP3 with an
  // immediate, and nothing per unit stays live in registers.
  static __device__ __forceinline__ void dequantise_scale_group(SharedStorage& smem, int row, int group) {
    constexpr uint32_t kChunkBytes = uint32_t(Traits::kChunkElems) * sizeof(Element);  // 8 KB
    uint32_t raw_row = common::smem_u32(smem.extra.raw) + uint32_t(row * kSparseFp8TokenBytes);
    uint32_t stage_row = common::smem_u32(smem.kv[0]) + uint32_t(row) * Traits::kRowBytes + (uint32_t(row & 7) << 4);
    // NOTE: laundered so the per-unit addresses are not hoisted out of the
    // block loop (they would spill at the producer's 40 registers).
    asm volatile("" : "+r"(raw_row), "+r"(stage_row));
    const float scale = common::ld_shared_f32(raw_row + kSparseFp8ScaleOffset + 4 * group);
    const uint32_t codes_base = raw_row + uint32_t(group * kSparseFp8ValuesPerScale);
    const uint32_t chunk_base = stage_row + uint32_t(2 * group) * kChunkBytes;
    // NOTE: the scale test is made once per group, not per unit: a branch
    // per unit split the loop into basic blocks and serialised its shared
    // loads (the producer ran ~4.8 us a block at h_q = 128).
    if (scale <= common::kMaxSingleStepScale) {
      const __nv_bfloat162 factor = common::single_step_factor(scale);
      dequantise_group(codes_base, chunk_base, [&](uint32_t lo, uint32_t hi) {
        return common::dequant_e4m3x8_to_bf16_single_step(lo, hi, factor);
      });
    } else {
      dequantise_group(codes_base, chunk_base,
                       [&](uint32_t lo, uint32_t hi) { return common::dequant_e4m3x8_to_bf16(lo, hi, scale); });
    }
  }

  // RoPE half `half` of raw row `row` (bf16 as stored) -> units 4 half ..
  // 4 half + 3 of the stage's chunk 8.
  static __device__ __forceinline__ void copy_rope(SharedStorage& smem, int row, int half) {
    constexpr uint32_t kChunkBytes = uint32_t(Traits::kChunkElems) * sizeof(Element);  // 8 KB
    const uint32_t raw_row = common::smem_u32(smem.extra.raw) + uint32_t(row * kSparseFp8TokenBytes);
    const uint32_t rope_base = common::smem_u32(smem.kv[0]) + uint32_t(kHeadDimLatent / kChunkCols) * kChunkBytes +
                               uint32_t(row) * Traits::kRowBytes + (uint32_t(row & 7) << 4);
    uint4 units[kRopeUnitsPerThread];
#pragma unroll
    for (int u = 0; u < kRopeUnitsPerThread; ++u) {
      units[u] = common::ld_shared_v4(raw_row + kSparseFp8RopeOffset + 16 * (kRopeUnitsPerThread * half + u));
    }
#pragma unroll
    for (int u = 0; u < kRopeUnitsPerThread; ++u) {
      common::st_shared_v4(rope_base ^ (uint32_t(kRopeUnitsPerThread * half + u) << 4), units[u]);
    }
  }

  static __device__ __forceinline__ void init_barriers(SharedStorage& smem) {
    common::mbarrier_init(&smem.extra.raw_full, kWarpgroupThreads);
  }

  // The consumers' column mask of the stage (bit r: row r is a real token).
  static __device__ __forceinline__ uint64_t stage_valid_bits(const SharedStorage& smem, int) {
    return *reinterpret_cast<const uint64_t*>(smem.extra.stage_valid);
  }

  // The consumers' share of filling the stage with block `block_counter`
  // (HeadsOnMProblem::fill_stage): WG2 dequantises scale groups 2 and 3 (stage
  // chunks 4-7, which only its own P.V reads), WG1 copies the RoPE (chunk 8,
  // which only S reads); both have finished the previous block by program
  // order. Then they release the raw stage to the next gather.
  static __device__ __forceinline__ void help_fill(SharedStorage& smem, int block_counter, int warpgroup,
                                                   int thread) {
    common::mbarrier_wait(&smem.extra.raw_full, block_counter & 1);
    const int row = thread % BLOCK_N;
    if (warpgroup == 2) {
      dequantise_scale_group(smem, row, 2 + thread / BLOCK_N);
    } else {
      copy_rope(smem, row, thread / BLOCK_N);
    }
    common::fence_view_async_shared();  // generic-proxy stores -> WGMMA operands
    common::mbarrier_arrive(&smem.kv_full[0]);
    common::named_barrier_arrive(barrier_ids::kSparseHeadsOnMRawFree, kHeadsOnMFillThreads);
  }

  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int row = thread % BLOCK_N;
    const int half = thread / BLOCK_N;

    // Gather block 0; next_index: this lane's row of block n + 1.
    BlockCursor cursor = cursor_begin(params, part);
    uint32_t raw_valid = gather(params, smem, lane_row_index(params, cursor, warp, lane), warp, lane);
    int32_t next_index;
    {
      BlockCursor ahead = cursor;
      cursor_advance(ahead, params, part);
      next_index = lane_row_index(params, ahead, warp, lane);
    }

    int block_counter = 0;
    int item_counter = 0;
    for (; cursor.active(); cursor_advance(cursor, params, part), ++block_counter) {
      const uint32_t phase = block_counter & 1;
      // ---- Q of a new item (the consumers released Q after the last item's S) ----
      if (cursor.first) {
        if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
        copy_q_tile<kHeadsOnMHeadsPerCta, kWarpgroupThreads>(params, cursor.item, q_group * kHeadsOnMHeadsPerCta, smem.q,
                                                         thread);
      }

      // ---- raw block n landed, WG1's P.V done: dequantise scale group `half` ----
      common::mbarrier_wait(&smem.extra.raw_full, phase);
      common::mbarrier_wait(&smem.kv_empty[0], phase ^ 1);
      dequantise_scale_group(smem, row, half);  // groups 0, 1: stage chunks 0-3 (WG1's P.V half)
      if (lane == 0) smem.extra.stage_valid[warp] = uint16_t(raw_valid);
      if (cursor.first) common::cp_async_wait_all();
      common::fence_view_async_shared();  // generic-proxy stores -> WGMMA operands
      common::mbarrier_arrive(&smem.kv_full[0]);
      if (cursor.first) {
        common::mbarrier_arrive(&smem.q_full);
        ++item_counter;
      }

      // ---- every thread (consumers too) has read the raw stage: gather block n + 1 ----
      common::named_barrier_sync(barrier_ids::kSparseHeadsOnMRawFree, kHeadsOnMFillThreads);
      BlockCursor ahead = cursor;
      cursor_advance(ahead, params, part);
      if (ahead.active()) {
        raw_valid = gather(params, smem, next_index, warp, lane);
        cursor_advance(ahead, params, part);
        next_index = lane_row_index(params, ahead, warp, lane);
      }
    }
  }
};

}  // namespace openmla::kernels::decode_sparse_fp8

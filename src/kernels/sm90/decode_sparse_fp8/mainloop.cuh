// Main loop pieces of the sm90 sparse FP8 decode kernel for h_q <= 32 (the
// heads-on-N kernel): the (item, block) cursor every role walks (shared with
// the heads-on-M kernels), the producer (index lookahead, FP8 -> BF16
// dequantisation, RoPE and Q copies) and the consumer building blocks (the
// two WGMMA products, column reductions of the transposed scores).
//
// Pipeline: kNumStages = 2 bf16 stages of 64 tokens x 576.
//   kv_full[s]  (256 producer arrivals after their stores, Q cp.async
//               completion and proxy fence)              producers -> consumer
//   kv_empty[s] (128 consumer arrivals)                  consumer -> producers
//   q_full      (256 arrivals, with the stage of an item's first block)
//   q_empty     (4 arrivals: the consumer warps, after the item's last S^T)
// Producer lookahead, per warp: each row's index reaches a shared-memory ring
// (index_ring, 8 blocks) by a 4-byte cp.async 5 blocks ahead of its use, and
// the next block's codes, scales and RoPE of the warp's 8 rows are loaded into
// registers ahead of their stores.
// NOTE: the ring took 4-6 % off h_q 8-32 (docs/performance.md, session 27): an
// index loaded into a register shares the row loads' scoreboard, so every step
// waited for an index round trip. No L2 prefetch and no cache hint (session
// 26): a bulk prefetch of block n + 3's rows cost 1-4 %; evict-first loads won
// where no row is read twice and cost 1.5-9 % where requests share rows. Two
// blocks of rows in flight (a second register set, whose loads ptxas puts on
// the same scoreboard; or a raw cp.async stage) measured 2-24 % slower.
#pragma once

#include <cute/tensor.hpp>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/fp8/dequant.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/traits.h"
#include "openmla/schedule.h"

namespace openmla::kernels::decode_sparse_fp8 {

// ---- the (item, block) walk of one part ----------------------------------------------------------
// Items are (request, query token) pairs: item = b * s_q + s.
struct BlockCursor {
  int item;       // -1 once past the part
  int block;      // 64-position block of the item
  int end_block;  // one past the part's last block of the item
  int length;     // counted index positions: clamp(topk_length[b], 0, topk)
  bool first;     // first block of the item in this part

  __device__ __forceinline__ bool active() const { return item >= 0; }
  __device__ __forceinline__ bool last() const { return block + 1 == end_block; }
};

__device__ __forceinline__ int item_length(const KernelParams& params, int item) {
  if (params.topk_length == nullptr) return params.topk;
  const int b = item / params.s_q;
  return min(max(__ldg(params.topk_length + b), 0), params.topk);
}

__device__ __forceinline__ void cursor_enter(BlockCursor& cursor, const KernelParams& params,
                                             const PartWork& part, int item) {
  for (; item <= part.end_item; ++item) {
    const int length = item_length(params, item);
    const int num_blocks = max(1, (length - 1) / BLOCK_N + 1);  // no overflow at INT32_MAX
    const int begin = part_item_begin_block(part, item);
    const int end = item == part.end_item ? part.end_block : num_blocks;
    if (begin < end) {  // always true for a valid schedule; guards the walk all roles share
      cursor = BlockCursor{item, begin, end, length, true};
      return;
    }
  }
  cursor = BlockCursor{-1, 0, 0, 0, false};
}

__device__ __forceinline__ BlockCursor cursor_begin(const KernelParams& params, const PartWork& part) {
  BlockCursor cursor;
  cursor_enter(cursor, params, part, part.begin_item);
  return cursor;
}

__device__ __forceinline__ void cursor_advance(BlockCursor& cursor, const KernelParams& params,
                                               const PartWork& part) {
  if (!cursor.active()) return;
  if (cursor.block + 1 < cursor.end_block) {
    ++cursor.block;
    cursor.first = false;
  } else {
    cursor_enter(cursor, params, part, cursor.item + 1);
  }
}

// Index of token row `row` of the cursor's block, or -1 when the position is
// not counted or the cursor is past the part.
__device__ __forceinline__ int32_t block_row_index(const KernelParams& params, const BlockCursor& cursor,
                                                   int row) {
  if (!cursor.active()) return -1;
  const int pos = cursor.block * BLOCK_N + row;
  if (pos >= cursor.length) return -1;
  const int b = cursor.item / params.s_q;
  const int s = cursor.item - b * params.s_q;
  return __ldg(params.indices + b * params.indices_stride_b + s * params.indices_stride_s + pos);
}

// ---- Q tile ------------------------------------------------------------------------------------
// Q rows of heads [head0, head0 + kRows) of an item, cp.async into the
// chunked 128B-swizzled layout (chunk c = 64 columns = kRows x 128 bytes),
// by kThreads threads; the caller waits and fences.
template <int kRows, int kThreads>
__device__ __forceinline__ void copy_q_tile(const KernelParams& params, int item, int head0, void* q_smem,
                                            int thread) {
  constexpr int kUnitsPerRow = HEAD_DIM_QK * 2 / 16;  // 72 16-byte pieces of a Q row
  constexpr int kChunkBytes = kRows * kChunkCols * 2;
  const int b = item / params.s_q;
  const int s = item - b * params.s_q;
  const uint16_t* q_item = params.q + b * params.q_stride_b + s * params.q_stride_s +
                           int64_t(head0) * params.q_stride_h;  // [kRows, 576] rows of the item
  uint8_t* q_bytes = static_cast<uint8_t*>(q_smem);
  for (int idx = thread; idx < kRows * kUnitsPerRow; idx += kThreads) {
    const int row = idx / kUnitsPerRow;
    const int unit = idx - row * kUnitsPerRow;
    const int chunk = unit / 8;
    uint8_t* dst = q_bytes + chunk * kChunkBytes + row * 128 + (((unit % 8) ^ (row & 7)) << 4);
    common::cp_async_16_zfill(dst, q_item + row * params.q_stride_h + unit * 8, true);
  }
}

// ---- one token row through a warp (shared by the heads-on-N and CTA-pair producers) ----------------
// Byte offset of a token in the cache, or -1 for any index outside it (never
// dereferenced then).
__device__ __forceinline__ int64_t token_offset(const KernelParams& params, int32_t index) {
  if (index < 0 || index >= params.num_tokens) return -1;
  const uint32_t page_size = uint32_t(params.page_size);
  uint32_t page, slot;
  if ((page_size & (page_size - 1)) == 0) {  // the usual page sizes: a shift, not a division
    page = uint32_t(index) >> (__ffs(int(page_size)) - 1);
    slot = uint32_t(index) & (page_size - 1);
  } else {
    page = uint32_t(index) / page_size;
    slot = uint32_t(index) - page * page_size;
  }
  return int64_t(page) * params.kv_stride_page + int64_t(slot) * kSparseFp8TokenBytes;
}

// Lane l: 16 latent codes (dims 16 l .. 16 l + 15) and the scale of its
// 128-value group; zeros (scale 0) for an invalid token, so the
// dequantisation needs no branch.
__device__ __forceinline__ void load_token(const KernelParams& params, int64_t offset, int lane, uint4& codes,
                                           float& scale) {
  codes = make_uint4(0u, 0u, 0u, 0u);
  scale = 0.0f;
  if (offset >= 0) {
    const uint8_t* token = params.kv_cache + offset;  // [656]
    codes = __ldg(reinterpret_cast<const uint4*>(token) + lane);
    scale = __ldg(reinterpret_cast<const float*>(token + kSparseFp8ScaleOffset) +
                  lane / (kSparseFp8ValuesPerScale / 16));
  }
}

// Stores of a stage filler that only this CTA reads.
struct LocalStageWriter {
  __device__ __forceinline__ void store(uint32_t dst, const uint4& v) const { common::st_shared_v4(dst, v); }
};

// Lane l's 16 bf16 values of one token row: two 16-byte units of chunk
// l / 4. The 128B swizzle puts unit u of row r at u ^ (r & 7).
// NOTE: lanes with (l & 4) store their second unit first, so the 8 lanes of
// each quarter-warp phase hit 8 distinct 16-byte bank groups; the words are
// swapped before the dequantisation (4 selects instead of 8 after it).
// unit_xor: (first unit ^ (row & 7)) << 4 of this lane and row.
template <class Writer>
__device__ __forceinline__ void store_token(const Writer& writer, uint32_t row_addr, uint32_t unit_xor, bool swap,
                                            const uint4& codes, float scale) {
  const uint32_t first_lo = swap ? codes.z : codes.x;
  const uint32_t first_hi = swap ? codes.w : codes.y;
  const uint32_t second_lo = swap ? codes.x : codes.z;
  const uint32_t second_hi = swap ? codes.y : codes.w;
  uint4 first, second;
  if (scale <= common::kMaxSingleStepScale) {  // one test and one factor for both units
    const __nv_bfloat162 factor = common::single_step_factor(scale);
    first = common::dequant_e4m3x8_to_bf16_single_step(first_lo, first_hi, factor);
    second = common::dequant_e4m3x8_to_bf16_single_step(second_lo, second_hi, factor);
  } else {
    first = common::dequant_e4m3x8_to_bf16(first_lo, first_hi, scale);
    second = common::dequant_e4m3x8_to_bf16(second_lo, second_hi, scale);
  }
  writer.store(row_addr + unit_xor, first);
  writer.store(row_addr + (unit_xor ^ 16u), second);
}

// RoPE of a warp's 8 token rows (8 x 8 units of bf16, taken as they are):
// lane l holds unit l % 8 of rows l / 8 and l / 8 + 4 (zeros for an invalid
// token). Loaded a block ahead like the codes, so no copy latency sits
// between a stage's release and its refill. offsets: lane first_lane + j
// holds row j's.
inline constexpr int kRopeUnits = kHeadDimRope * 2 / 16;                 // 8 16-byte pieces of RoPE a row
inline constexpr int kRopeRowsPerWarp = 8;
inline constexpr int kRopeUnitsPerLane = kRopeRowsPerWarp * kRopeUnits / kWarpSize;  // 2

__device__ __forceinline__ void load_rope_rows(const KernelParams& params, int64_t offsets, int first_lane, int lane,
                                               uint4 (&rope)[kRopeUnitsPerLane]) {
#pragma unroll
  for (int k = 0; k < kRopeUnitsPerLane; ++k) {
    const int j = lane / kRopeUnits + k * (kWarpSize / kRopeUnits);
    const int64_t offset = __shfl_sync(0xffffffffu, offsets, first_lane + j);
    rope[k] = make_uint4(0u, 0u, 0u, 0u);
    if (offset >= 0) {
      rope[k] = __ldg(reinterpret_cast<const uint4*>(params.kv_cache + offset + kSparseFp8RopeOffset) +
                      lane % kRopeUnits);
    }
  }
}

// -> rows row0 + j of the RoPE chunk at rope_chunk (128-byte rows, 128B
// swizzle); row0 is a multiple of 8.
__device__ __forceinline__ void store_rope_rows(uint32_t rope_chunk, int row0, int lane,
                                                const uint4 (&rope)[kRopeUnitsPerLane]) {
  constexpr uint32_t kRowBytes = kChunkCols * 2;  // 128
  const uint32_t unit = uint32_t(lane % kRopeUnits);
#pragma unroll
  for (int k = 0; k < kRopeUnitsPerLane; ++k) {
    const uint32_t row = uint32_t(row0 + lane / kRopeUnits + k * (kWarpSize / kRopeUnits));
    common::st_shared_v4(rope_chunk + row * kRowBytes + ((unit ^ (row & 7)) << 4), rope[k]);
  }
}

// A producer warp's 8 rows of one block in registers: lane l's 16 codes and
// group scale of each row, and its RoPE units (load_token, load_rope_rows).
// offsets: lane j < 8 holds row j's.
__device__ __forceinline__ void load_rows(const KernelParams& params, int64_t offsets, int lane,
                                          uint4 (&codes)[kRopeRowsPerWarp], float (&scales)[kRopeRowsPerWarp],
                                          uint4 (&rope)[kRopeUnitsPerLane]) {
  load_rope_rows(params, offsets, /*first_lane=*/0, lane, rope);
#pragma unroll
  for (int j = 0; j < kRopeRowsPerWarp; ++j) {
    load_token(params, __shfl_sync(0xffffffffu, offsets, j), lane, codes[j], scales[j]);
  }
}

// ---- producer ----------------------------------------------------------------------------------
template <class Traits>
struct Producer {
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kHeads = Traits::kHeads;
  static constexpr int kRows = kRowsPerProducerWarp;          // 8 rows of every stage per warp: [8 w, 8 w + 8)
  static constexpr int kQLoadRow = kRows / 2;  // Q copies go out mid-block (the consumer frees Q late)
  static_assert(kRows == kRopeRowsPerWarp && Traits::kRowBytes == kChunkCols * 2, "the RoPE helpers' row layout");
  static constexpr uint32_t kFullMask = 0xffffffffu;

  static __device__ __forceinline__ void copy_q(const KernelParams& params, int item, int head0,
                                                SharedStorage& smem, int thread) {
    copy_q_tile<kHeads, kProducerThreads>(params, item, head0, smem.q, thread);
  }

  // Lane j < 8 of the warp: row 8 w + j's index of the cursor's block into ring slot `slot` by a
  // 4-byte cp.async, or -1 (a plain store) when the position is not counted; only this lane reads
  // the slot back.
  static __device__ __forceinline__ void fetch_index(const KernelParams& params, SharedStorage& smem,
                                                     const BlockCursor& cursor, int slot, int lane_row, int lane) {
    if (lane >= kRows) return;
    int32_t* dst = &smem.index_ring[slot][lane_row];
    const int pos = cursor.block * BLOCK_N + lane_row;
    if (cursor.active() && pos < cursor.length) {
      const int b = cursor.item / params.s_q;
      const int s = cursor.item - b * params.s_q;
      common::cp_async_4(common::smem_u32(dst),
                         params.indices + b * params.indices_stride_b + s * params.indices_stride_s + pos);
    } else {
      *dst = -1;
    }
  }

  // Lane j < 8: the cache offset of row 8 w + j of the block in ring slot `slot` (-1 elsewhere).
  static __device__ __forceinline__ int64_t ring_offset(const KernelParams& params, SharedStorage& smem, int slot,
                                                        int lane_row, int lane) {
    const int32_t index =
        lane < kRows ? common::ld_shared_s32(common::smem_u32(&smem.index_ring[slot][lane_row])) : -1;
    return token_offset(params, index);
  }

  // Per warp and block n: the rows' indices arrive kIndexAhead blocks ahead in a shared-memory ring
  // (cp.async), so no register load of an index shares the rows' scoreboard and no step waits for
  // an index round trip; the rows of block n + 1 are loaded into registers while block n's are
  // stored. Every step commits one cp.async group.
  static constexpr int kIndexAhead = 5;
  static_assert(kIndexAhead < kIndexRingBlocks, "a slot is rewritten only after its block was read");
  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int head0,
                             int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;
    const int lane_row = warp * kRows + lane % kRows;

    // ---- block 0's indices now, blocks 1 .. kIndexAhead - 1 into the ring ----
    BlockCursor c0 = cursor_begin(params, part);
    BlockCursor cfar = c0;
    int64_t offsets = token_offset(params, lane < kRows ? block_row_index(params, cfar, lane_row) : -1);  // block n
    cursor_advance(cfar, params, part);
    for (int g = 1; g < kIndexAhead; ++g) {
      fetch_index(params, smem, cfar, g % kIndexRingBlocks, lane_row, lane);
      cursor_advance(cfar, params, part);
    }
    common::cp_async_wait_all();

    // ---- this lane's store addresses (shared-window offsets) ----
    const bool swap = (lane & 4) != 0;
    const uint32_t unit_first = 2 * (lane % 4) + (swap ? 1 : 0);
    const uint32_t own_row0 = uint32_t(warp * kRows);  // then + j
    const uint32_t row_base0 = common::smem_u32(smem.kv[0]) + (lane / 4) * Traits::kKvChunkBytes +
                               own_row0 * Traits::kRowBytes;
    // row & 7 = (own_row0 & 7) ^ j: own_row0 is a multiple of 8.
    const uint32_t unit_xor0 = (unit_first ^ (own_row0 & 7u)) << 4;

    // ---- registers: the warp's rows of the next block (codes, scales, RoPE) ----
    uint4 codes[kRows];
    float scales[kRows];
    uint4 rope[kRopeUnitsPerLane];
    load_rows(params, offsets, lane, codes, scales, rope);

    int block_counter = 0;
    int item_counter = 0;
    // One block; returns whether the part has another.
    auto step = [&]() {
      const int stage = block_counter % kNumStages;
      const uint32_t phase = (block_counter / kNumStages) & 1;
      fetch_index(params, smem, cfar, (block_counter + kIndexAhead) % kIndexRingBlocks, lane_row, lane);
      cursor_advance(cfar, params, part);

      common::mbarrier_wait(&smem.kv_empty[stage], phase ^ 1);
      // Block n + 1's indices were fetched kIndexAhead - 1 steps (groups) ago.
      common::cp_async_wait_group<kIndexAhead - 2>();
      const int64_t next_offsets =
          ring_offset(params, smem, (block_counter + 1) % kIndexRingBlocks, lane_row, lane);  // block n + 1
      if (lane < kRows) smem.token_valid[stage][lane_row] = offsets >= 0 ? 1 : 0;
      store_rope_rows(common::smem_u32(smem.kv[stage]) + Traits::kRopeChunk * Traits::kKvChunkBytes, warp * kRows, lane,
                      rope);
      load_rope_rows(params, next_offsets, /*first_lane=*/0, lane, rope);

      // ---- dequantise the warp's rows; refill each register slot as it frees ----
      const uint32_t row_base = row_base0 + uint32_t(stage) * Traits::kStageBytes;
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        if (j == kQLoadRow && c0.first) {
          if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
          copy_q(params, c0.item, head0, smem, thread);
        }
        store_token(LocalStageWriter{}, row_base + j * Traits::kRowBytes, unit_xor0 ^ uint32_t(j << 4), swap, codes[j],
                    scales[j]);
        load_token(params, __shfl_sync(kFullMask, next_offsets, j), lane, codes[j], scales[j]);
      }

      // ---- publish: Q copies landed, stores visible to WGMMA ----
      // NOTE: waiting for Q waits for the index copies in flight too (groups complete in order):
      // once per item.
      if (c0.first) common::cp_async_wait_all();
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.kv_full[stage]);
      if (c0.first) {
        common::mbarrier_arrive(&smem.q_full);
        ++item_counter;
      }
      common::cp_async_commit();

      offsets = next_offsets;
      cursor_advance(c0, params, part);
      ++block_counter;
      return c0.active();
    };
    while (c0.active() && step()) {
    }
    common::cp_async_wait_all();  // no copy in flight when the warp exits
  }
};

// ---- consumers ---------------------------------------------------------------------------------------
template <class Traits>
struct Mainloop {
  using Element = typename Traits::Element;

  // S^T = K.Q^T over the stage's 64 tokens.
  template <class TiledMma, class TensorQ, class TensorS>
  static __device__ __forceinline__ void gemm_qk(TiledMma& tiled_mma, Element* stage_base, const TensorQ& tSrQ,
                                                 int thread, TensorS& tSrS) {
    using namespace cute;
    Tensor sK = make_tensor(make_smem_ptr(stage_base), typename Traits::SmemLayoutK{});  // (64 tokens, 576)
    Tensor tSrK = tiled_mma.get_thread_slice(thread).partition_fragment_A(sK);       // (MMA, 1, 36)
    common::wgmma_product(tiled_mma, tSrK, tSrQ, tSrS);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
  }

  // O^T += V^T.P^T.
  template <class TiledMma, class TensorP, class TensorO>
  static __device__ __forceinline__ void gemm_pv(TiledMma& tiled_mma, Element* stage_base, const TensorP& tOrPt,
                                                 int thread, TensorO& tOrO) {
    using namespace cute;
    Tensor sVt = make_tensor(make_smem_ptr(stage_base), typename Traits::SmemLayoutVt{});  // (512, 64)
    Tensor tOrV = tiled_mma.get_thread_slice(thread).partition_fragment_A(sVt);        // (MMA, 8, 4)
    common::wgmma_accumulate(tiled_mma, tOrV, tOrPt, tOrO);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
  }
};

// Reduce per-thread column partials over the 64 token rows of a 64 x N
// accumulator: the rows of a column live in the 8 lanes sharing lane % 4
// (xor 4, 8, 16) and in the 4 warps (smem `red`, one barrier).
// See https://docs.nvidia.com/cuda/parallel-thread-execution/#wgmma-64n16-d
template <int kCols, int kHeads, class Op>
__device__ __forceinline__ void column_allreduce(float (&values)[kCols], const int (&heads)[kCols],
                                                 float (*red)[kHeads], int warp, int lane, Op op) {
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) {
#pragma unroll
    for (int offset = 4; offset < kWarpSize; offset <<= 1) {
      values[jj] = op(values[jj], __shfl_xor_sync(0xffffffffu, values[jj], offset));
    }
  }
  if (lane < 4) {
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) red[warp][heads[jj]] = values[jj];
  }
  common::named_barrier_sync(barrier_ids::kSparseHeadsOnNConsumer, kWarpgroupThreads);
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) {
    float v = red[0][heads[jj]];
#pragma unroll
    for (int w = 1; w < kWarpsPerWarpgroup; ++w) v = op(v, red[w][heads[jj]]);
    values[jj] = v;
  }
}

}  // namespace openmla::kernels::decode_sparse_fp8

// Main loop pieces of the sm90 sparse FP8 decode kernel: the (item, block)
// cursor every role walks, the producer (index lookahead, L2 prefetch, FP8 ->
// BF16 dequantisation, RoPE and Q copies) and the consumer building blocks
// (the two WGMMA products, column reductions of the transposed scores).
//
// Pipeline: kNumStages = 2 bf16 stages of 64 tokens x 576.
//   kv_full[s]  (128 arrivals: every producer thread, after its stores,
//               cp.async completion and proxy fence)        producer -> consumers
//   kv_empty[s] (256 arrivals: every consumer thread)        consumers -> producer
//   q_full      (128 arrivals, at the end of an item's first block in the part)
//   q_empty     (4 arrivals: the warps of WG1, after the item's last S^T)
// Producer lookahead, per warp (16 token rows of every stage):
//   indices of block n + 3 loaded, tokens of block n + 2 prefetched into L2
//   (cp.async.bulk.prefetch, 656 B each), kTokensInFlight token loads in
//   registers, running into block n + 1.
#pragma once

#include <cute/tensor.hpp>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/fp8/dequant.cuh"
#include "kernels/common/tma.cuh"
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
    const int num_blocks = max(1, (length + BLOCK_N - 1) / BLOCK_N);
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

// ---- producer --------------------------------------------------------------------------------------
template <class Traits>
struct Producer {
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kHeads = Traits::kHeads;
  static constexpr int kRows = kTokensPerProducerWarp;       // 16 token rows per warp
  static constexpr int kQUnitsPerRow = HEAD_DIM_QK * 2 / 16;  // 72 16-byte pieces of a Q row
  static constexpr int kRopeUnits = kHeadDimRope * 2 / 16;    // 8 16-byte pieces of RoPE
  static constexpr int kQLoadToken = kRows / 2;  // issue Q mid-block: WG1 frees it late in the last block
  static constexpr uint32_t kFullMask = 0xffffffffu;

  // Lane l < 16 of warp w: index of token row w * 16 + l of the cursor's block,
  // or -1 when the position is not counted or the cursor is past the part.
  static __device__ __forceinline__ int32_t load_index(const KernelParams& params, const BlockCursor& cursor,
                                                       int warp, int lane) {
    if (!cursor.active() || lane >= kRows) return -1;
    const int pos = cursor.block * BLOCK_N + warp * kRows + lane;
    if (pos >= cursor.length) return -1;
    const int b = cursor.item / params.s_q;
    const int s = cursor.item - b * params.s_q;
    return __ldg(params.indices + b * params.indices_stride_b + s * params.indices_stride_s + pos);
  }

  // Byte offset of a token in the cache, or -1 for any index outside it
  // (never dereferenced then).
  static __device__ __forceinline__ int64_t token_offset(const KernelParams& params, int32_t index) {
    if (index < 0 || index >= params.num_tokens) return -1;
    const int page = index / params.page_size;
    const int slot = index - page * params.page_size;
    return int64_t(page) * params.kv_stride_page + int64_t(slot) * kSparseFp8TokenBytes;
  }

  static __device__ __forceinline__ void prefetch_l2(const KernelParams& params, int64_t offset) {
    if (offset >= 0) {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(params.kv_cache + offset),
                   "n"(kSparseFp8TokenBytes)
                   : "memory");
    }
  }

  // Lane l: 16 latent codes (dims 16 l .. 16 l + 15) and the scale of its
  // 128-value group. Warp-uniform branch: every lane works on the same token.
  static __device__ __forceinline__ void load_token(const KernelParams& params, int64_t offset, int lane,
                                                    uint4& codes, float& scale) {
    if (offset >= 0) {
      const uint8_t* token = params.kv_cache + offset;  // [656]
      codes = __ldg(reinterpret_cast<const uint4*>(token) + lane);
      scale = __ldg(reinterpret_cast<const float*>(token + kSparseFp8ScaleOffset) +
                    lane / (kSparseFp8ValuesPerScale / 16));
    }
  }

  // Write lane l's 16 bf16 values (two 16-byte units of chunk l / 4) of token
  // row `row`; zeros for an invalid token. The 128B swizzle puts unit u of
  // row r at u ^ (r & 7).
  // NOTE: lanes with (l & 4) store their second unit first, so the 8 lanes of
  // each quarter-warp phase hit 8 distinct 16-byte bank groups.
  static __device__ __forceinline__ void store_token(uint8_t* stage, int row, int lane, bool valid,
                                                     const uint4& codes, float scale) {
    uint32_t w[8];
    if (valid) {
      common::dequant_e4m3x16_to_bf16(codes, scale, w);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = 0u;
    }
    const bool swap = (lane & 4) != 0;
    const int unit_first = 2 * (lane % 4) + (swap ? 1 : 0);
    const int unit_second = unit_first ^ 1;
    uint8_t* row_base = stage + (lane / 4) * Traits::kKvChunkBytes + row * Traits::kRowBytes;
    const uint4 lo = make_uint4(w[0], w[1], w[2], w[3]);
    const uint4 hi = make_uint4(w[4], w[5], w[6], w[7]);
    *reinterpret_cast<uint4*>(row_base + ((unit_first ^ (row & 7)) << 4)) = swap ? hi : lo;
    *reinterpret_cast<uint4*>(row_base + ((unit_second ^ (row & 7)) << 4)) = swap ? lo : hi;
  }

  // RoPE: 16 rows x 8 units of bf16, copied as they are (cp.async, zero-filled
  // for invalid tokens). Lane l copies unit l & 7 of rows (l >> 3) + 4 k.
  static __device__ __forceinline__ void copy_rope(const KernelParams& params, int64_t offsets, uint8_t* stage,
                                                   int warp, int lane) {
    const int unit = lane % kRopeUnits;
    uint8_t* chunk = stage + Traits::kRopeChunk * Traits::kKvChunkBytes;
#pragma unroll
    for (int k = 0; k < kRows * kRopeUnits / kWarpSize; ++k) {
      const int j = lane / kRopeUnits + k * (kWarpSize / kRopeUnits);
      const int64_t offset = __shfl_sync(kFullMask, offsets, j);
      const int row = warp * kRows + j;
      const bool valid = offset >= 0;
      const uint8_t* src = valid ? params.kv_cache + offset + kSparseFp8RopeOffset + 16 * unit : params.kv_cache;
      common::cp_async_16_zfill(chunk + row * Traits::kRowBytes + ((unit ^ (row & 7)) << 4), src, valid);
    }
  }

  // Q rows of heads [64 g, 64 g + N) of the item, cp.async into the chunked
  // swizzled layout (all 128 producer threads).
  static __device__ __forceinline__ void copy_q(const KernelParams& params, int item, int q_group,
                                                SharedStorage& smem, int thread) {
    const int b = item / params.s_q;
    const int s = item - b * params.s_q;
    const uint16_t* q_item = params.q + b * params.q_stride_b + s * params.q_stride_s +
                             int64_t(q_group) * kMaxHeadsPerCta * params.q_stride_h;
    uint8_t* q_bytes = reinterpret_cast<uint8_t*>(smem.q);
    for (int idx = thread; idx < kHeads * kQUnitsPerRow; idx += kWarpgroupThreads) {
      const int row = idx / kQUnitsPerRow;
      const int unit = idx - row * kQUnitsPerRow;
      const int chunk = unit / 8;
      uint8_t* dst = q_bytes + chunk * Traits::kQChunkBytes + row * Traits::kRowBytes +
                     (((unit % 8) ^ (row & 7)) << 4);
      common::cp_async_16_zfill(dst, q_item + row * params.q_stride_h + unit * 8, true);
    }
  }

  static __device__ void run(const KernelParams& params, const PartWork& part, SharedStorage& smem, int q_group,
                             int thread) {
    const int warp = thread / kWarpSize;
    const int lane = thread % kWarpSize;

    // ---- lookahead state: cursors of blocks n .. n + 3 ----
    BlockCursor c0 = cursor_begin(params, part);
    BlockCursor c1 = c0;
    cursor_advance(c1, params, part);
    BlockCursor c2 = c1;
    cursor_advance(c2, params, part);
    BlockCursor c3 = c2;
    cursor_advance(c3, params, part);
    int64_t off0 = token_offset(params, load_index(params, c0, warp, lane));  // block n
    int64_t off1 = token_offset(params, load_index(params, c1, warp, lane));  // block n + 1
    int32_t index2 = load_index(params, c2, warp, lane);                     // block n + 2, raw
    prefetch_l2(params, off0);
    prefetch_l2(params, off1);

    uint4 codes[kTokensInFlight];
    float scales[kTokensInFlight];
#pragma unroll
    for (int k = 0; k < kTokensInFlight; ++k) {
      load_token(params, __shfl_sync(kFullMask, off0, k), lane, codes[k], scales[k]);
    }

    int block_counter = 0;
    int item_counter = 0;
    while (c0.active()) {
      const int stage = block_counter % kNumStages;
      const uint32_t phase = (block_counter / kNumStages) & 1;

      // ---- lookahead: indices of n + 3, L2 prefetch of n + 2 ----
      const int32_t index3 = load_index(params, c3, warp, lane);
      const int64_t off2 = token_offset(params, index2);
      prefetch_l2(params, off2);

      common::mbarrier_wait(&smem.kv_empty[stage], phase ^ 1);
      uint8_t* stage_bytes = reinterpret_cast<uint8_t*>(smem.kv[stage]);
      if (lane < kRows) smem.token_valid[stage][warp * kRows + lane] = off0 >= 0 ? 1 : 0;
      copy_rope(params, off0, stage_bytes, warp, lane);

      // ---- dequantise the warp's 16 rows; refill each register slot as it frees ----
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        if (j == kQLoadToken && c0.first) {
          if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
          copy_q(params, c0.item, q_group, smem, thread);
        }
        const int slot = j % kTokensInFlight;
        const int64_t offset = __shfl_sync(kFullMask, off0, j);
        store_token(stage_bytes, warp * kRows + j, lane, offset >= 0, codes[slot], scales[slot]);
        const int ahead = j + kTokensInFlight;
        const int64_t next = ahead < kRows ? __shfl_sync(kFullMask, off0, ahead)
                                           : __shfl_sync(kFullMask, off1, ahead - kRows);
        load_token(params, next, lane, codes[slot], scales[slot]);
      }

      // ---- publish: RoPE / Q copies landed, generic stores visible to WGMMA ----
      common::cp_async_wait_all();
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.kv_full[stage]);
      if (c0.first) {
        common::mbarrier_arrive(&smem.q_full);
        ++item_counter;
      }

      c0 = c1;
      c1 = c2;
      c2 = c3;
      cursor_advance(c3, params, part);
      off0 = off1;
      off1 = off2;
      index2 = index3;
      ++block_counter;
    }
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
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
    for (int k = 0; k < size<2>(tSrK); ++k) {
      gemm(tiled_mma, tSrK(_, _, k), tSrQ(_, _, k), tSrS);
      tiled_mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
  }

  // O^T_half += V^T_half.P^T.
  template <class TiledMma, class TensorP, class TensorO>
  static __device__ __forceinline__ void gemm_pv(TiledMma& tiled_mma, Element* v_half_base, const TensorP& tOrPt,
                                                 int thread, TensorO& tOrO) {
    using namespace cute;
    Tensor sVt = make_tensor(make_smem_ptr(v_half_base), typename Traits::SmemLayoutVtHalf{});  // (256, 64)
    Tensor tOrV = tiled_mma.get_thread_slice(thread).partition_fragment_A(sVt);             // (MMA, 4, 4)
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
#pragma unroll
    for (int k = 0; k < size<2>(tOrV); ++k) {
      gemm(tiled_mma, tOrV(_, _, k), tOrPt(_, _, k), tOrO);
    }
    warpgroup_commit_batch();
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
  common::named_barrier_sync(kBarrierSoftmaxWg, kWarpgroupThreads);
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) {
    float v = red[0][heads[jj]];
#pragma unroll
    for (int w = 1; w < kWarpsPerWarpgroup; ++w) v = op(v, red[w][heads[jj]]);
    values[jj] = v;
  }
}

}  // namespace openmla::kernels::decode_sparse_fp8

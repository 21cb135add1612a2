// The V dequantisers of the sm90 dense FP8 decode kernel: per block they turn
// columns [0, 512) of the e4m3 K/V stage into the BF16 V buffer the P.V
// products read. 224 threads share it: warps 1-3 of the producer warpgroup
// (which also gather each item's e4m3 Q tile, decode_dense/producers.cuh) and
// the P.V warpgroup WG2, between its P.V of block c - 1 and of block c (WG1
// meanwhile runs S and the softmax of block c).
// NOTE: with warps 1-3 alone (96 threads) the dequantisation was the critical
// path: 3.7 us a block, 0.46x the vLLM fork's FP8 kernel at b = 128, h_q = 16.
//
// Barriers, per block c of the part (stage s = c % kNumStages):
//   wait kv_full[s]   the stage's TMA landed
//   wait v_empty      both consumers' P.V of block c - 1 retired (8 warp arrivals)
//   write smem.v      rows past the block's valid tokens as zeros (0 * NaN in P.V)
//   arrive v_full     every thread, after fence.proxy.async (WGMMA reads v)
//   arrive kv_empty   lane 0 of each warp (WG1 arrives too, after its S)
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/barriers.cuh"
#include "kernels/common/fp8/dequant.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/producers.cuh"
#include "kernels/sm90/decode_dense/rows_and_blocks.cuh"
#include "kernels/sm90/decode_dense/fp8_traits.h"

namespace openmla::kernels::decode_dense {

// WG2 (0-127) and warps 1-3 of the producer warpgroup (kQLoadThreads).
inline constexpr int kFp8DequantThreads = heads_on_m::kWarpgroupThreads + kQLoadThreads;

template <class Traits>
struct Fp8VDequant {
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kUnitBytes = 16;                                   // e4m3 codes per load
  static constexpr int kUnitsPerChunkRow = kChunkCols / kUnitBytes;       // 4
  static constexpr int kUnitsPerChunk = BLOCK_N * kUnitsPerChunkRow;      // 256
  static constexpr int kUnits = Traits::kNumVChunks * kUnitsPerChunk;     // 2048 per block

  // V of one stage -> smem.v. Unit u = (chunk, token, 16-byte piece): lanes
  // walk the pieces of consecutive tokens, so a warp's loads are 512
  // contiguous bytes.
  // Source: e4m3, 64-byte rows, 64B swizzle: piece p of token t sits at
  //   p ^ ((t >> 1) & 3) (address bits [4:5] ^= [7:8]).
  // Destination: bf16, 128-byte rows, 128B swizzle: the piece's two 16-byte
  //   halves 2p, 2p + 1 sit at (2p) ^ (t & 7), (2p + 1) ^ (t & 7)
  //   (bits [4:6] ^= [7:9]).
  // https://docs.nvidia.com/cuda/cuda-c-programming-guide/#tensor-memory-access (swizzle patterns)
  // `thread`: 0-127 WG2, 128-223 warps 1-3 of the producer warpgroup.
  static __device__ __forceinline__ void dequant_stage(const SharedStorage& smem, int stage, SharedStorage& out,
                                                       int valid, int thread) {
    const uint32_t src_base = common::smem_u32(smem.kv[stage]);
    const uint32_t dst_base = common::smem_u32(out.v);
    const __nv_bfloat162 unbias = __float2bfloat162_rn(common::kE4m3ToBf16Bias);
#pragma unroll 2
    for (int u = thread; u < kUnits; u += kFp8DequantThreads) {
      const int chunk = u / kUnitsPerChunk;
      const int token = (u / kUnitsPerChunkRow) % BLOCK_N;
      const int piece = u % kUnitsPerChunkRow;
      const uint32_t src = src_base + chunk * Traits::kChunkElems + token * kChunkCols +
                           ((piece ^ ((token >> 1) & 3)) * kUnitBytes);
      const uint32_t dst_row = dst_base + chunk * Traits::kChunkElems * 2 + token * Traits::kVRowBytes;
      uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);
      if (token < valid) {
        const uint4 codes = common::ld_shared_v4(src);
        lo = common::dequant_e4m3x8_to_bf16_single_step(codes.x, codes.y, unbias);
        hi = common::dequant_e4m3x8_to_bf16_single_step(codes.z, codes.w, unbias);
      }
      common::st_shared_v4(dst_row + (((2 * piece) ^ (token & 7)) * kUnitBytes), lo);
      common::st_shared_v4(dst_row + (((2 * piece + 1) ^ (token & 7)) * kUnitBytes), hi);
    }
  }

  // One thread's share of block `block_counter`'s V (see the file comment).
  static __device__ __forceinline__ void fill_share(SharedStorage& smem, int block_counter, int valid, int thread) {
    const int stage = block_counter % Traits::kNumStages;
    const uint32_t phase = (block_counter / Traits::kNumStages) & 1;
    common::mbarrier_wait(&smem.kv_full[stage], phase);
    common::mbarrier_wait(&smem.v_empty, (block_counter & 1) ^ 1);
    dequant_stage(smem, stage, smem, valid, thread);
    common::fence_view_async_shared();
    common::mbarrier_arrive(&smem.v_full);
    __syncwarp();
    if (thread % 32 == 0) common::mbarrier_arrive(&smem.kv_empty[stage]);
  }

  // Warps 1-3 of the producer warpgroup: Q per item, their V share per block,
  // for the whole part (`thread` 0-95).
  static __device__ void produce_q_and_v(const KernelParams& params, const PartWork& part,
                                         SharedStorage& smem, int kv_head, int m_tile, int thread) {
    using Gather = Producers<Traits>;
    int block_counter = 0;
    int item_counter = 0;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      const heads_on_m::ItemBlocks blocks = item_blocks(params, part, item);
      if (blocks.begin_block >= blocks.end_block) continue;
      if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
      Gather::template gather_q_tile<kQLoadThreads>(params, smem, item, kv_head, m_tile, thread);
      common::cp_async_wait_all();
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.q_full);
      ++item_counter;

      for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
        fill_share(smem, block_counter, heads_on_m::block_valid_tokens(blocks.length, block),
                   heads_on_m::kWarpgroupThreads + thread);
      }
    }
  }
};

}  // namespace openmla::kernels::decode_dense

// Producer roles of the sm90 dense decode kernels: the paged K/V TMA ring and
// the Q gather (the column-split kernel's warpgroup 0; the alternate-blocks
// kernel uses the Q gather only). The consumer side is the shared heads-on-M
// tile (heads_on_m/consumers.cuh, consumer_steps.cuh).
//
// Pipeline: kNumStages = 2 K/V stages of 64 tokens x d_qk.
//   kv_full[s]  (1 arrival + TMA bytes)  producer warp -> consumers
//   kv_empty[s] (8 arrivals: 4 warps of each consumer warpgroup) consumers -> producer
//   q_full  (96 arrivals: the Q-gather threads)  once per item
//   q_empty (4 arrivals: the warps of WG1, after the item's last Q.K^T)
//   p_full / p_empty (128 arrivals each: every WG1 / WG2 thread) per block,
//   for the P tile and the row factors (heads_on_m/consumers.cuh)
// Every role walks the same (item, block) sequence of its part, so stage and
// phase counters agree without communication.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/barriers.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/rows_and_blocks.cuh"
#include "kernels/sm90/heads_on_m/traits.h"
#include "openmla/schedule.h"

namespace openmla::kernels::decode_dense {

template <class Traits>
struct Producers {
  using Element = typename Traits::ElementQK;  // of Q and the K/V stages
  using SharedStorage = typename Traits::SharedStorage;

  // ---- producer: K/V ring (warp 0) --------------------------------------------------------
  // Block b of a request: tokens [64 b, 64 b + 64), loaded as 64 / box_tokens
  // boxes per 64-column chunk. Boxes whose first token is past the length are
  // not loaded (their block-table entries may be garbage) and not counted in
  // the barrier's transaction bytes; the consumer zeroes those rows.
  // NOTE: all 32 lanes issue TMAs (lane i takes boxes i, i + 32, ...), so
  // small pages (4 boxes x 9 chunks at page 16) cost no more issue slots than
  // page 64; lane k < num_boxes looks up page k.
  static __device__ void produce_kv(const KernelParams& params, const PartWork& part,
                                    SharedStorage& smem, int kv_head, int lane) {
    constexpr int kMaxLoads = kMaxBoxesPerBlock * Traits::kNumChunks;
    constexpr int kIssueRounds = (kMaxLoads + 31) / 32;
    const uint32_t box_bytes = uint32_t(params.box_tokens) * Traits::kBoxRowBytes;
    int block_counter = 0;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      const ItemBlocks blocks = item_blocks(params, part, item);
      const int32_t* table = params.block_table + int64_t(item) * params.block_table_stride_b;  // [max_pages]
      for (int block = blocks.begin_block; block < blocks.end_block; ++block, ++block_counter) {
        const int stage = block_counter % Traits::kNumStages;
        const uint32_t phase = (block_counter / Traits::kNumStages) & 1;
        const int first_token = block * BLOCK_N;
        const int valid = block_valid_tokens(blocks.length, block);
        const int num_boxes = (valid + params.box_tokens - 1) / params.box_tokens;
        // Page lookups go out before the empty-slot wait so their latency hides
        // behind the consumers' work on the previous blocks.
        const int my_page =
            lane < num_boxes ? __ldg(table + (first_token + lane * params.box_tokens) / params.page_size) : 0;
        // Every box of a block starts at the same token of its page (boxes are whole pages below 64
        // tokens, a single box above): one division per block, not one per issue round.
        const int token_in_page = first_token % params.page_size;
        common::mbarrier_wait(&smem.kv_empty[stage], phase ^ 1);
        if (lane == 0) {
          common::mbarrier_arrive_expect_tx(&smem.kv_full[stage],
                                            uint32_t(num_boxes) * Traits::kNumChunks * box_bytes);
        }
        __syncwarp();
        Element* stage_base = smem.kv[stage];
        const int num_loads = num_boxes * Traits::kNumChunks;
#pragma unroll
        for (int round = 0; round < kIssueRounds; ++round) {
          const int load = round * 32 + lane;
          const int box = min(load / Traits::kNumChunks, kMaxBoxesPerBlock - 1);
          const int chunk = load % Traits::kNumChunks;
          const int page = __shfl_sync(0xffffffffu, my_page, box);
          if (load < num_loads) {
            common::tma_load_4d(&params.tma_kv, &smem.kv_full[stage],
                                stage_base + chunk * Traits::kChunkElems + box * params.box_tokens * kChunkCols,
                                chunk * kChunkCols, kv_head, token_in_page, page);
          }
        }
      }
    }
  }

  // ---- producer: Q gather (kQLoadThreads threads) ---------------------------------------------
  // Packed row r of the tile is query token s = (64 m + r) / hpk, head
  // kv_head * hpk + (64 m + r) % hpk. Such rows are not a regular tensor when
  // hpk does not divide 64, so they are gathered with 16-byte cp.async into the
  // swizzled layout; padding rows are zero-filled.
  // Thread t copies 16-byte piece t % 8 of every 128-byte chunk row for rows
  // t / 8, t / 8 + 12, ...: the row's (s, head) division happens once per row,
  // and within a row the source and the swizzled destination of chunk k are
  // fixed offsets from chunk 0's (a 128B-swizzle row permutes pieces inside
  // its own chunk row only).
  // NOTE: per-piece index arithmetic (two runtime divisions per 16 bytes) made
  // this loop ~100 instructions per piece, several microseconds per item, all
  // of it on the critical path of a short call.
  // One item's Q tile -> smem.q by kThreads threads (cp.async, not waited).
  template <int kThreads>
  static __device__ __forceinline__ void gather_q_tile(const KernelParams& params, SharedStorage& smem, int item,
                                                       int kv_head, int m_tile, int thread) {
    using namespace cute;
    constexpr int kElemsPerPiece = 16 / int(sizeof(Element));  // 8
    constexpr int kPieceLanes = kChunkCols / kElemsPerPiece;     // 8 pieces per chunk row
    constexpr int kRowGroups = kThreads / kPieceLanes;           // rows in flight
    static_assert(kThreads % kPieceLanes == 0);
    Tensor sQ = make_tensor(make_smem_ptr(smem.q), typename Traits::SmemLayoutQ{});  // (64, d_qk)
    const Element* q = static_cast<const Element*>(params.q);
    const int piece_col = (thread % kPieceLanes) * kElemsPerPiece;
    const Element* q_item = q + int64_t(item) * params.q_stride_b;  // [s_q, h_q, d_qk]
    for (int row = thread / kPieceLanes; row < BLOCK_M; row += kRowGroups) {
      const int packed = m_tile * BLOCK_M + row;
      const bool real = packed < params.rows_per_kv;
      const int s = real ? packed / params.heads_per_kv : 0;
      const int head = kv_head * params.heads_per_kv + (real ? packed % params.heads_per_kv : 0);
      const Element* src = real ? q_item + s * params.q_stride_s + head * params.q_stride_h + piece_col : q;
      Element* dst = &sQ(row, piece_col);  // chunk 0; chunk k is kChunkElems further
#pragma unroll
      for (int chunk = 0; chunk < Traits::kNumChunks; ++chunk) {
        common::cp_async_16_zfill(dst + chunk * Traits::kChunkElems, real ? src + chunk * kChunkCols : q, real);
      }
    }
  }

  static __device__ void produce_q(const KernelParams& params, const PartWork& part, SharedStorage& smem,
                                   int kv_head, int m_tile, int thread) {
    int item_counter = 0;
    for (int item = part.begin_item; item <= part.end_item; ++item) {
      const ItemBlocks blocks = item_blocks(params, part, item);
      if (blocks.begin_block >= blocks.end_block) continue;
      if (item_counter > 0) common::mbarrier_wait(&smem.q_empty, (item_counter - 1) & 1);
      gather_q_tile<kQLoadThreads>(params, smem, item, kv_head, m_tile, thread);
      common::cp_async_wait_all();
      common::fence_view_async_shared();
      common::mbarrier_arrive(&smem.q_full);
      ++item_counter;
    }
  }
};

}  // namespace openmla::kernels::decode_dense

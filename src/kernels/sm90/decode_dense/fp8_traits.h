// CuTe layouts, WGMMA atoms and the shared-memory plan of the sm90 dense FP8
// decode kernel: the heads-on-M tile (heads_on_m/traits.h) with e4m3 Q and
// K/V stages for an FP8 S = Q.K^T, and V dequantised to a separate BF16
// buffer for a BF16 P.V (BF16 P keeps the output as accurate as the BF16
// kernels; e4m3 P measured 2-4e-2 rel-L2 in the vLLM fork's kernel).
//
// Shared memory (d_qk = 576, three stages; 512 gives 32 + 3 x 32 KB):
//   q      64 x 576 e4m3   36 KB   K-major, 64B swizzle, 9 chunks of 64 columns
//   kv[3]  64 x 576 e4m3   108 KB  same layout (TMA boxes of 64 bytes)
//   v      64 x 512 bf16   64 KB   columns [0, 512) of a stage, dequantised;
//                                  128B swizzle, the BF16 stage's V layout
//   p      64 x 64 bf16    8 KB    K-major, 128B swizzle (A of P.V for WG2)
//   row factors, mbarriers
// FP8 WGMMA takes K-major operands only: Q and K are; V (MN-major for P.V) is
// not, hence the BF16 copy.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/numeric_types.h>

#include <cstdint>

#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/heads_on_m/config.h"
#include "openmla/types.h"

namespace openmla::kernels::decode_dense {

template <int kHeadDimQK_, int kStages_>
struct Fp8Traits : heads_on_m::PvTile<cutlass::bfloat16_t> {
  using Element = cutlass::bfloat16_t;     // V (dequantised), P and out
  using ElementQK = cutlass::float_e4m3_t;  // Q and the K/V stages
  static constexpr bool kSeparateV = true;
  // S = Q.K^T in pieces of 2 k-blocks (64 columns) summed in fp32 registers
  // (heads_on_m/consumer_steps.cuh, issue_qk_promoted). Max LSE error over the
  // FP8 GPU cases (H200, 2026-12-02): 7.8e-4, 1.2e-3, 1.9e-3, 3.7e-3 for
  // pieces of 1, 2, 3, 6 k-blocks (the bar: 2e-3).
  static constexpr int kQkPromoteKBlocks = 2;
  static constexpr int kHeadDimQK = kHeadDimQK_;
  static constexpr int kNumStages = kStages_;
  static_assert(kHeadDimQK == 576 || kHeadDimQK == 512, "d_qk is 576 (latent + RoPE) or 512");
  static constexpr int kNumChunks = kHeadDimQK / kChunkCols;   // 9 or 8 TMA boxes across a row
  static constexpr int kNumVChunks = HEAD_DIM_V / kChunkCols;  // 8
  static constexpr int kChunkElems = BLOCK_N * kChunkCols;     // 4096 elements: 4 KB e4m3, 8 KB bf16
  static constexpr int kBoxRowBytes = kChunkCols;              // one e4m3 chunk row: 64 bytes
  static constexpr int kVRowBytes = kChunkCols * int(sizeof(Element));  // one bf16 chunk row: 128 bytes

  // ---- MMAs ----------------------------------------------------------------------
  // S = Q.K^T in e4m3 (WGMMA 64x64x32), both K-major.
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<ElementQK, ElementQK, float,
                                 cute::Shape<cute::Int<BLOCK_M>, cute::Int<BLOCK_N>, cute::Int<kHeadDimQK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>()));
  // P.V in bf16: heads_on_m::PvTile.

  // ---- shared-memory layouts ---------------------------------------------------------
  // NOTE: 576 e4m3 columns are 4.5 128-byte rows, so Q/K use the 64-byte
  // swizzle: one 64-column chunk = one 64-byte TMA box row.
  using SmemLayoutAtomQK = cute::GMMA::Layout_K_SW64_Atom<ElementQK>;  // (8, 64)
  using SmemLayoutQ = decltype(cute::tile_to_shape(
      SmemLayoutAtomQK{}, cute::Shape<cute::Int<BLOCK_M>, cute::Int<kHeadDimQK>>{}));  // (64 rows, d_qk)
  using SmemLayoutK = decltype(cute::tile_to_shape(
      SmemLayoutAtomQK{}, cute::Shape<cute::Int<BLOCK_N>, cute::Int<kHeadDimQK>>{}));  // (64 tokens, d_qk)

  struct SharedStorage {
    alignas(1024) ElementQK q[BLOCK_M * kHeadDimQK];               // SmemLayoutQ
    alignas(1024) ElementQK kv[kNumStages][BLOCK_N * kHeadDimQK];  // SmemLayoutK per stage
    alignas(1024) Element v[BLOCK_N * HEAD_DIM_V];                 // 8 chunks of (64 tokens x 64 columns)
    alignas(1024) Element p[BLOCK_M * BLOCK_N];                    // SmemLayoutP
    float row_scale[BLOCK_M];
    float row_norm[BLOCK_M];
    float piece_lse[BLOCK_M];  // unused (no cluster split); the consumers' contract names it
    uint64_t kv_full[kNumStages];
    uint64_t kv_empty[kNumStages];  // WG1 after S, the V dequantisers after reading V
    uint64_t v_full;                // the V dequantisers -> both consumers
    uint64_t v_empty;               // both consumers' P.V retired -> the V dequantisers
    uint64_t q_full;
    uint64_t q_empty;
    uint64_t p_full;
    uint64_t p_empty;
  };
  static constexpr int kSmemAlignSlack = 1024;
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + kSmemAlignSlack;
  static_assert(kSmemBytes <= 227 * 1024, "shared-memory plan exceeds the sm90 per-block limit");

  static __device__ __forceinline__ Element* v_base(SharedStorage& smem, int) { return smem.v; }
};

}  // namespace openmla::kernels::decode_dense

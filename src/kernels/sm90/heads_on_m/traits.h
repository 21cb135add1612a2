// CuTe layouts, WGMMA atoms and the shared-memory plan of the sm90 heads-on-M
// attention tile, per (element type, d_qk, K/V stages, kernel-specific storage).
// Used by the dense decode kernels and the sparse FP8 heads-on-M kernels.
//
// Shared memory (d_qk = 576, bf16, two stages; 512 gives 64 + 2 x 64 KB):
//   q      64 x 576   72 KB   K-major, 128B swizzle, 9 chunks of 64 columns
//   kv[2]  64 x 576   144 KB  same layout; V = columns [0, 512) of the same bytes
//   p      64 x 64    8 KB    K-major, 128B swizzle (softmax output, A of P.V)
//   row_scale/row_norm  2 x 256 B, mbarriers
// Every 64-column chunk is one contiguous 64-row x 128-byte block (8 KB), which
// is exactly what a 128B-swizzled TMA box (or several stacked boxes) writes.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/numeric_types.h>

#include <cstdint>

#include "kernels/sm90/heads_on_m/config.h"
#include "openmla/types.h"

namespace openmla::kernels::heads_on_m {

template <DType kDType>
struct ElementOf;
template <>
struct ElementOf<DType::kBF16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct ElementOf<DType::kFP16> {
  using type = cutlass::half_t;
};

// The P.V half of the tile, shared by every traits type (this file's and the
// dense FP8 kernel's, decode_dense/fp8_traits.h): P (64 rows x 64 tokens) and V
// in 16-bit `Element`, each consumer warpgroup owning 256 of the 512 O columns.
template <class Element>
struct PvTile {
  // O_half += P.V_half: (64 rows) x (256 columns), reduction over 64 tokens;
  // P K-major, V MN-major (columns contiguous).
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<BLOCK_M>, cute::Int<HEAD_DIM_V_HALF>, cute::Int<BLOCK_N>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));

  // The same product with P taken from the registers of the warpgroup that
  // computed it (WG1): no shared-memory read of P, no wait for all of it.
  using TiledMmaPVRegs = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<BLOCK_M>, cute::Int<HEAD_DIM_V_HALF>, cute::Int<BLOCK_N>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));

  using SmemLayoutP = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<BLOCK_M>, cute::Int<BLOCK_N>>{}));  // (64 rows, 64 tokens), K-major
  // One consumer's half of V: columns [256 h, 256 h + 256) of a V buffer laid
  // out as 64-column chunks of (64 tokens x 128 bytes), seen as (256 columns,
  // 64 tokens) MN-major. Atoms run along tokens first so each 64-column chunk
  // stays one contiguous 8 KB block (a 16-bit K/V stage's chunk layout).
  using SmemLayoutVHalf = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_MN_SW128_Atom<Element>{},
      cute::Shape<cute::Int<HEAD_DIM_V_HALF>, cute::Int<BLOCK_N>>{}, cute::Step<cute::_2, cute::_1>{}));
  static constexpr int kVHalfOffset = (HEAD_DIM_V_HALF / kChunkCols) * (BLOCK_N * kChunkCols);  // elements

  // P: fp32 accumulator fragment -> smem with stmatrix.
  using SmemCopyAtomP = cute::Copy_Atom<cute::SM90_U32x4_STSM_N, Element>;
};

// Shared-memory fields a kernel adds to the common plan (none for the dense
// column-split kernel).
struct NoExtraStorage {};

// kStages_: K/V stages of the ring; ExtraStorage_: kernel-specific shared
// memory placed after the common fields (e.g. the sparse heads-on-M kernel's
// raw FP8 stage next to its one bf16 stage).
template <DType kDType_, int kHeadDimQK_, int kStages_, class ExtraStorage_ = NoExtraStorage>
struct Traits : PvTile<typename ElementOf<kDType_>::type> {
  using Element = typename ElementOf<kDType_>::type;  // Q, K, V, P and out
  using ElementQK = Element;                           // Q and the K/V stages (the dense FP8 traits: e4m3)
  using ExtraStorage = ExtraStorage_;
  // V is columns [0, 512) of the K/V stage (the dense FP8 traits: a separate
  // BF16 buffer with its own v_full / v_empty barriers).
  static constexpr bool kSeparateV = false;
  static constexpr int kQkPromoteKBlocks = 0;  // S in one accumulator (see the dense FP8 traits)
  static constexpr DType kDType = kDType_;
  static constexpr int kHeadDimQK = kHeadDimQK_;
  static constexpr int kNumStages = kStages_;
  static_assert(kHeadDimQK == 576 || kHeadDimQK == 512, "d_qk is 576 (latent + RoPE) or 512");
  static constexpr int kNumChunks = kHeadDimQK / kChunkCols;      // 9 or 8 TMA boxes across a row
  static constexpr int kNumVChunks = HEAD_DIM_V / kChunkCols;     // 8
  static constexpr int kChunkElems = BLOCK_N * kChunkCols;        // 4096 elements = 8 KB
  static constexpr int kRowBytes = kChunkCols * int(sizeof(Element));  // 128
  static_assert(kRowBytes == 128, "one chunk row is one 128-byte swizzle row");

  // ---- MMAs ----------------------------------------------------------------------
  // S = Q.K^T: (64 rows) x (64 tokens), reduction over d_qk; both K-major.
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<BLOCK_M>, cute::Int<BLOCK_N>, cute::Int<kHeadDimQK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>()));
  // ---- shared-memory layouts ---------------------------------------------------------
  using SmemLayoutAtomK = cute::GMMA::Layout_K_SW128_Atom<Element>;  // (8, 64)
  using SmemLayoutQ = decltype(cute::tile_to_shape(
      SmemLayoutAtomK{}, cute::Shape<cute::Int<BLOCK_M>, cute::Int<kHeadDimQK>>{}));  // (64 rows, d_qk)
  using SmemLayoutK = decltype(cute::tile_to_shape(
      SmemLayoutAtomK{}, cute::Shape<cute::Int<BLOCK_N>, cute::Int<kHeadDimQK>>{}));  // (64 tokens, d_qk)


  struct SharedStorage {
    alignas(1024) Element q[BLOCK_M * kHeadDimQK];               // SmemLayoutQ
    alignas(1024) Element kv[kNumStages][BLOCK_N * kHeadDimQK];  // SmemLayoutK per stage
    alignas(1024) Element p[BLOCK_M * BLOCK_N];                  // SmemLayoutP
    float row_scale[BLOCK_M];  // per block: factor for O before P.V is added
    float row_norm[BLOCK_M];   // last block of an item: 1 / row sum (0 for an empty row)
    float piece_lse[BLOCK_M];  // dense cluster split: this CTA's piece LSE per row (decode_dense/cluster_merge.cuh)
    uint64_t kv_full[kNumStages];
    uint64_t kv_empty[kNumStages];
    uint64_t q_full;
    uint64_t q_empty;
    uint64_t p_full;   // 128 arrivals: every WG1 thread after writing P / row factors
    uint64_t p_empty;  // 128 arrivals: every WG2 thread after its P.V retired (the pair kernels: 4, a lane per warp)
    uint64_t consumers_done;  // dense cluster split: 256 arrivals, both consumer warpgroups before the merge
    ExtraStorage extra;
  };
  // The dynamic smem base is aligned up to 1024 B inside the kernel.
  static constexpr int kSmemAlignSlack = 1024;

  // Where P.V reads V for K/V stage `stage` (columns [0, 512) of its bytes).
  static __device__ __forceinline__ Element* v_base(SharedStorage& smem, int stage) { return smem.kv[stage]; }
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + kSmemAlignSlack;
  static_assert(kSmemBytes <= 227 * 1024, "shared-memory plan exceeds the sm90 per-block limit");

  // Transaction bytes of one TMA box (64 columns x box_tokens rows).
  static constexpr int kBoxRowBytes = kRowBytes;
};

}  // namespace openmla::kernels::heads_on_m

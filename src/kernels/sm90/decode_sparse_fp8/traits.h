// CuTe layouts, WGMMA atoms and the shared-memory plan of the sm90 sparse FP8
// decode kernel for h_q <= 32 (the heads-on-N kernel), per heads-per-CTA N in
// {8, 16, 32}.
//
// Shared memory (N = 32; smaller N shrink q and pt), ~186 KB:
//   kv[2]  64 x 576 bf16   144 KB  dequantised K (V = columns [0, 512)), K-major,
//                                  128B swizzle, 9 chunks of 64 columns (8 KB each)
//   q      N x 576 bf16     36 KB  same chunked layout, N rows per chunk
//   pt     N x 64 bf16       4 KB  P^T, MN-major (heads contiguous): B of V^T.P^T
//   index_ring 8 x 64 int32  2 KB  the producers' indices, 1-5 blocks ahead (cp.async)
//   red    4 x N fp32      512 B   per-warp column maxima / sums of the consumer
//   token_valid, mbarriers
// Every large buffer is a multiple of 1 KB and starts on a 1 KB boundary
// (swizzle atoms); the struct itself is placed on a 1 KB boundary.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/numeric_types.h>

#include <cstddef>

#include "kernels/sm90/decode_sparse_fp8/config.h"

namespace openmla::kernels::decode_sparse_fp8 {

// Largest MN-major swizzle atom whose MN extent divides N (bf16).
template <int kHeads>
struct PtAtom;
template <>
struct PtAtom<32> {
  using type = cute::GMMA::Layout_MN_SW64_Atom<cutlass::bfloat16_t>;
};
template <>
struct PtAtom<16> {
  using type = cute::GMMA::Layout_MN_SW32_Atom<cutlass::bfloat16_t>;
};
template <>
struct PtAtom<8> {
  using type = cute::GMMA::Layout_MN_INTER_Atom<cutlass::bfloat16_t>;
};

template <int kHeads_>
struct Traits {
  using Element = cutlass::bfloat16_t;
  static constexpr int kHeads = kHeads_;              // N: query heads of one CTA
  static_assert(kernel_supported(kHeads), "heads per CTA: 8, 16 or 32");
  static constexpr int kNumChunks = HEAD_DIM_QK / kChunkCols;     // 9
  static constexpr int kRopeChunk = kHeadDimLatent / kChunkCols;  // 8
  static constexpr int kRowBytes = kChunkCols * int(sizeof(Element));  // 128
  static constexpr int kKvChunkBytes = BLOCK_N * kRowBytes;  // 8 KB
  static constexpr int kStageBytes = kNumChunks * kKvChunkBytes;  // 72 KB
  static_assert(kRowBytes == 128, "one chunk row is one 128-byte swizzle row");

  // ---- MMAs --------------------------------------------------------------------------------
  // S^T = K.Q^T: (64 tokens) x (N heads), reduction over 576; both K-major.
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<BLOCK_N>, cute::Int<kHeads>, cute::Int<HEAD_DIM_QK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>()));
  // O^T += V^T.P^T: (512 dims) x (N heads), reduction over 64 tokens;
  // V^T MN-major (dims contiguous), P^T MN-major (heads contiguous).
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeads>, cute::Int<BLOCK_N>>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>()));

  // ---- shared-memory layouts -----------------------------------------------------------------
  using SmemLayoutAtomK = cute::GMMA::Layout_K_SW128_Atom<Element>;  // (8, 64)
  using SmemLayoutK = decltype(cute::tile_to_shape(
      SmemLayoutAtomK{}, cute::Shape<cute::Int<BLOCK_N>, cute::Int<HEAD_DIM_QK>>{}));  // (64 tokens, 576)
  using SmemLayoutQ = decltype(cute::tile_to_shape(
      SmemLayoutAtomK{}, cute::Shape<cute::Int<kHeads>, cute::Int<HEAD_DIM_QK>>{}));  // (N heads, 576)
  // V^T: K's columns [0, 512) seen as (512 dims, 64 tokens) MN-major. Atoms
  // run along tokens first so each 64-dim chunk stays one contiguous 8 KB
  // block, as in SmemLayoutK.
  using SmemLayoutVt = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_MN_SW128_Atom<Element>{}, cute::Shape<cute::Int<HEAD_DIM_V>, cute::Int<BLOCK_N>>{},
      cute::Step<cute::_2, cute::_1>{}));
  using SmemLayoutPt = decltype(cute::tile_to_shape(
      typename PtAtom<kHeads>::type{}, cute::Shape<cute::Int<kHeads>, cute::Int<BLOCK_N>>{},
      cute::Step<cute::_2, cute::_1>{}));  // (N heads, 64 tokens)

  struct SharedStorage {
    Element kv[kNumStages][BLOCK_N * HEAD_DIM_QK];  // SmemLayoutK per stage
    Element q[kHeads * HEAD_DIM_QK];                // SmemLayoutQ
    Element pt[kHeads * BLOCK_N];                   // SmemLayoutPt
    int32_t index_ring[kIndexRingBlocks][BLOCK_N];  // the producers' indices of blocks n + 1 .. n + 5 (-1: not counted)
    float red[kWarpsPerWarpgroup][kHeads];          // consumer per-warp column partials
    uint8_t token_valid[kNumStages][BLOCK_N];
    uint64_t kv_full[kNumStages];   // local producers + peers' DSMEM bytes
    uint64_t kv_empty[kNumStages];  // consumer threads
    uint64_t q_full;
    uint64_t q_empty;
  };
  // NOTE: no alignas on the members: every large buffer size is a multiple of
  // 1 KB, so a 1 KB aligned base aligns them all without padding the struct.
  static_assert(offsetof(SharedStorage, q) % 1024 == 0 && offsetof(SharedStorage, pt) % 1024 == 0,
                "swizzled buffers must start on 1 KB boundaries");
  // The kernel aligns the dynamic smem base up to 1 KB (the base is 1 KB
  // aligned in practice; the kernel traps if an unexpected base would not fit).
  static constexpr int kSmemLimit = 227 * 1024;
  static constexpr int kSmemAlign = 1024;
  static_assert(int(sizeof(SharedStorage)) <= kSmemLimit, "shared-memory plan exceeds the sm90 per-block limit");
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + kSmemAlign <= kSmemLimit
                                        ? int(sizeof(SharedStorage)) + kSmemAlign
                                        : kSmemLimit;
};

}  // namespace openmla::kernels::decode_sparse_fp8

// Consumer building blocks of the sm90 heads-on-M attention tile: the two
// WGMMA products (S = Q.K^T, O_half += P.V_half from shared memory or from
// registers), the P store for the other consumer warpgroup, zeroing a
// stage's tail rows and causal masking of S. Used by consumers.cuh and the
// dense alternate-blocks kernel.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "kernels/common/barriers.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/sm90/heads_on_m/config.h"
#include "kernels/sm90/heads_on_m/traits.h"

namespace openmla::kernels::heads_on_m {

template <class Traits>
struct ConsumerSteps {
  using Element = typename Traits::Element;
  using ElementQK = typename Traits::ElementQK;
  using SharedStorage = typename Traits::SharedStorage;

  // ---- consumer: zero the V rows past the valid tokens ---------------------------------------------
  // TMA left them stale (or never loaded them); 0 * NaN would poison P.V.
  // Whole 128-byte rows are zeroed, so the swizzle inside a row is irrelevant.
  static __device__ void zero_tail_rows(Element* stage_base, int valid, int thread) {
    constexpr int kPiecesPerChunkRow = Traits::kRowBytes / 16;  // 8
    const int tail_rows = BLOCK_N - valid;
    const int pieces_per_chunk = tail_rows * kPiecesPerChunkRow;
    uint4* base = reinterpret_cast<uint4*>(stage_base);
    for (int idx = thread; idx < Traits::kNumVChunks * pieces_per_chunk; idx += kWarpgroupThreads) {
      const int chunk = idx / pieces_per_chunk;
      const int rest = idx % pieces_per_chunk;
      const int row = valid + rest / kPiecesPerChunkRow;
      const int piece = rest % kPiecesPerChunkRow;
      base[(chunk * Traits::kChunkElems * int(sizeof(Element))) / 16 + row * kPiecesPerChunkRow + piece] =
          make_uint4(0, 0, 0, 0);
    }
  }

  // NOTE: smem base pointers are laundered through an empty asm before the
  // GMMA descriptors are built from them. Otherwise the compiler hoists the
  // loop-invariant descriptors of every k-step (and of both stages) into
  // registers, which spills once S and O are both in flight.
  template <class T>
  static __device__ __forceinline__ T* opaque(T* ptr) {
    asm volatile("" : "+l"(ptr));
    return ptr;
  }

  // ---- consumer: S = Q.K^T (issued, not waited) -------------------------------------------------
  // The caller waits with warpgroup_wait<N>() and fences tSrS afterwards.
  template <class TiledMma, class TensorS>
  static __device__ __forceinline__ void issue_qk(TiledMma& tiled_mma, ElementQK* q_base, ElementQK* stage_base,
                                                  int thread, TensorS& tSrS) {
    using namespace cute;
    Tensor sQ = make_tensor(make_smem_ptr(opaque(q_base)), typename Traits::SmemLayoutQ{});      // (64, d_qk)
    Tensor sK = make_tensor(make_smem_ptr(opaque(stage_base)), typename Traits::SmemLayoutK{});  // (64 tokens, d_qk)
    auto thr_mma = tiled_mma.get_thread_slice(thread);
    Tensor tSrQ = thr_mma.partition_fragment_A(sQ);  // (MMA, 1, d_qk/16)
    Tensor tSrK = thr_mma.partition_fragment_B(sK);  // (MMA, 1, d_qk/16)
    if constexpr (Traits::kQkPromoteKBlocks > 0) {
      issue_qk_promoted(tiled_mma, tSrQ, tSrK, tSrS);
    } else {
      common::wgmma_product(tiled_mma, tSrQ, tSrK, tSrS);
    }
  }

  // S = Q.K^T as pieces of kQkPromoteKBlocks k-blocks, each from a zero
  // accumulator, summed in fp32 registers (done on return).
  // NOTE: FP8 WGMMA keeps only ~14 bits when it adds into its accumulator
  // (DeepSeek-V3 report, sec. 3.3.2): 18 k-blocks of 32 in one accumulator
  // left LSE errors of 2.6e-3 at logits ~2; summing short pieces in fp32
  // bounds the loss by one piece's.
  template <class TiledMma, class TensorQ, class TensorK, class TensorS>
  static __device__ __forceinline__ void issue_qk_promoted(TiledMma& tiled_mma, const TensorQ& tSrQ,
                                                           const TensorK& tSrK, TensorS& tSrS) {
    using namespace cute;
    constexpr int kBlocks = decltype(size<2>(tSrQ))::value;
    constexpr int kPiece = Traits::kQkPromoteKBlocks;
    Tensor tSrPiece = make_fragment_like(tSrS);  // (MMA, 1, 1) fp32
    common::wgmma_issue_range<true, 0, kPiece>(tiled_mma, tSrQ, tSrK, tSrS);
    for_each(make_int_sequence<(kBlocks + kPiece - 1) / kPiece - 1>{}, [&](auto piece) {
      constexpr int kBegin = (decltype(piece)::value + 1) * kPiece;
      constexpr int kEnd = kBegin + kPiece < kBlocks ? kBegin + kPiece : kBlocks;
      common::wgmma_issue_range<true, kBegin, kEnd>(tiled_mma, tSrQ, tSrK, tSrPiece);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      warpgroup_fence_operand(tSrPiece);
#pragma unroll
      for (int v = 0; v < size(tSrS); ++v) tSrS(v) += tSrPiece(v);
    });
  }

  // ---- consumer: O_half += P.V_half (issued, not waited) --------------------------------------------
  template <class TiledMma, class TensorO>
  static __device__ __forceinline__ void issue_pv(TiledMma& tiled_mma, Element* p_base, Element* v_half_base,
                                                  int thread, TensorO& tOrO) {
    using namespace cute;
    Tensor sP = make_tensor(make_smem_ptr(opaque(p_base)), typename Traits::SmemLayoutP{});          // (64, 64)
    Tensor sV = make_tensor(make_smem_ptr(opaque(v_half_base)), typename Traits::SmemLayoutVHalf{});  // (256 cols, 64 tokens)
    auto thr_mma = tiled_mma.get_thread_slice(thread);
    Tensor tOrP = thr_mma.partition_fragment_A(sP);  // (MMA, 1, 4)
    Tensor tOrV = thr_mma.partition_fragment_B(sV);  // (MMA, 1, 4)
    common::wgmma_accumulate(tiled_mma, tOrP, tOrV, tOrO);
  }

  // ---- consumer: O_half += P.V_half with P in registers (issued, not waited) -------------------------
  // tSrP: P in the S accumulator's fragment ((2, 2, 8), 1, 1). For the sm90
  // 64xN layouts, accumulator values 8k..8k+7 of a thread are exactly its
  // A-operand registers of k-block k (PTX "wgmma 64xNx16 A fragment"), so P
  // is viewed as ((2, 2, 2), 1, 4) without moving a register.
  template <class TiledMma, class TensorP, class TensorO>
  static __device__ __forceinline__ void issue_pv_regs(TiledMma& tiled_mma, TensorP& tSrP, Element* v_half_base,
                                                       int thread, TensorO& tOrO) {
    using namespace cute;
    static_assert(decltype(size(tSrP))::value == 32, "P fragment of a 64x64 accumulator");
    Tensor sV = make_tensor(make_smem_ptr(opaque(v_half_base)), typename Traits::SmemLayoutVHalf{});  // (256 cols, 64 tokens)
    auto thr_mma = tiled_mma.get_thread_slice(thread);
    Tensor tOrV = thr_mma.partition_fragment_B(sV);  // (MMA, 1, 4)
    Tensor tOrP = make_tensor(tSrP.data(), Layout<Shape<Shape<_2, _2, _2>, _1, _4>,
                                                  Stride<Stride<_1, _2, _4>, _0, _8>>{});  // (MMA, 1, 4)
    warpgroup_fence_operand(tSrP);
    common::wgmma_accumulate(tiled_mma, tOrP, tOrV, tOrO);
  }

  // ---- consumer: P -> shared memory ---------------------------------------------------------------
  // group_address(g): this thread's shared-window address of stmatrix group g
  // (p_store_addresses). With the sm90 64x64 accumulator partitioned for
  // SM90_U32x4_STSM_N, stmatrix g stores P values 8g..8g+7 of the thread's
  // fragment (two per register).
  template <class TensorP, class GroupAddress>
  static __device__ __forceinline__ void store_p(const TensorP& tSrP, const GroupAddress& group_address) {
    using namespace cute;
    static_assert(decltype(size(tSrP))::value == 32, "P fragment of a 64x64 accumulator");
    Tensor tSrP_u32 = recast<uint32_t>(tSrP);  // (16) two P values each
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(group_address(g)),
                   "r"(tSrP_u32(4 * g)), "r"(tSrP_u32(4 * g + 1)), "r"(tSrP_u32(4 * g + 2)),
                   "r"(tSrP_u32(4 * g + 3))
                   : "memory");
    }
  }

  // The four stmatrix destinations of this thread in the P tile, as
  // shared-window addresses, formed once per CTA (the swizzled 64-bit address
  // math of a CuTe copy cost ~40 instructions per block on WG1's critical path).
  static __device__ __forceinline__ void p_store_addresses(Element* p_base, int thread, uint32_t (&dst)[4]) {
    using namespace cute;
    typename Traits::TiledMmaQK mma_qk;
    Tensor sP = make_tensor(make_smem_ptr(p_base), typename Traits::SmemLayoutP{});  // (64, 64)
    auto thr_copy_p = make_tiled_copy_C(typename Traits::SmemCopyAtomP{}, mma_qk).get_thread_slice(thread);
    Tensor tPsP = thr_copy_p.partition_D(sP);  // ((8, 4), 1, 1): four 16-byte rows per thread
    static_assert(decltype(size<0, 0>(tPsP))::value == 8 && decltype(size<0, 1>(tPsP))::value == 4 &&
                  decltype(size<1>(tPsP))::value == 1 && decltype(size<2>(tPsP))::value == 1);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      dst[g] = common::smem_u32(&tPsP(make_coord(make_coord(0, g), 0, 0)));
      asm volatile("" : "+r"(dst[g]));  // keep them in registers, not rebuilt per block
    }
  }

  // ---- consumer: mask S --------------------------------------------------------------------------------
  // Row i of the view sees tokens [0, row_limit[i]); everything else -> -inf
  // (this also replaces NaN from stale K rows).
  // NOTE: in the sm90 64xN accumulator, column j of a thread's row view is
  // 2 * (lane % 4) + (j % 2) + 8 * (j / 2) (PTX "wgmma 64xNx16 D fragment"), so
  // the per-block test reduces to compile-time offsets against one bound per row.
  template <class TensorSRowCol>
  static __device__ __forceinline__ void mask_scores(TensorSRowCol& tSrS_rc, int lane, int first_token,
                                                     const int (&row_limit)[2]) {
    using namespace cute;
#pragma unroll
    for (int i = 0; i < size<0>(tSrS_rc); ++i) {
      const int bound = row_limit[i] - first_token - 2 * (lane % 4);  // column offsets below this are visible
#pragma unroll
      for (int j = 0; j < size<1>(tSrS_rc); ++j) {
        if ((j % 2) + 8 * (j / 2) >= bound) tSrS_rc(i, j) = -INFINITY;
      }
    }
  }
};

}  // namespace openmla::kernels::heads_on_m

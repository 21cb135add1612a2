// Issue of one accumulating sm90 WGMMA product over its k-blocks.
#pragma once

#include <cute/tensor.hpp>

namespace openmla::kernels::common {

// One product over the k-blocks (mode 2) of the partitioned operands, as one
// commit group (issued, not waited: the caller waits with warpgroup_wait<N>
// and fences C afterwards). A may be a register fragment (RS; the caller
// fences those registers first) or a shared-memory descriptor fragment (SS).
// kOverwrite: the first k-block replaces C instead of adding to it.
template <bool kOverwrite, class TiledMma, class TensorA, class TensorB, class TensorC>
__device__ __forceinline__ void wgmma_issue(TiledMma& tiled_mma, const TensorA& tA, const TensorB& tB, TensorC& tC) {
  using namespace cute;
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  tiled_mma.accumulate_ = kOverwrite ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int k = 0; k < size<2>(tA); ++k) {
    gemm(tiled_mma, tA(_, _, k), tB(_, _, k), tC);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

// The same over k-blocks [kBegin, kEnd) only.
template <bool kOverwrite, int kBegin, int kEnd, class TiledMma, class TensorA, class TensorB, class TensorC>
__device__ __forceinline__ void wgmma_issue_range(TiledMma& tiled_mma, const TensorA& tA, const TensorB& tB,
                                                  TensorC& tC) {
  using namespace cute;
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  tiled_mma.accumulate_ = kOverwrite ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int k = kBegin; k < kEnd; ++k) {
    gemm(tiled_mma, tA(_, _, k), tB(_, _, k), tC);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

// C += A.B
template <class TiledMma, class TensorA, class TensorB, class TensorC>
__device__ __forceinline__ void wgmma_accumulate(TiledMma& tiled_mma, const TensorA& tA, const TensorB& tB,
                                                 TensorC& tC) {
  wgmma_issue<false>(tiled_mma, tA, tB, tC);
}

// C = A.B
template <class TiledMma, class TensorA, class TensorB, class TensorC>
__device__ __forceinline__ void wgmma_product(TiledMma& tiled_mma, const TensorA& tA, const TensorB& tB,
                                              TensorC& tC) {
  wgmma_issue<true>(tiled_mma, tA, tB, tC);
}

}  // namespace openmla::kernels::common

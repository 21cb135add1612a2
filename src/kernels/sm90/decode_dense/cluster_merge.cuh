// In-kernel merge of a cluster-split dense decode call (DecodeKernel::kDenseColumnSplitCluster).
//
// The C CTAs of a cluster share one (request, q-group): CTA rank r attends to
// blocks [r nb / C, (r + 1) nb / C) of the request's nb blocks (a "piece",
// possibly empty). Afterwards every CTA leaves in its own shared memory
//   merge buffer  [64 rows, 512 (+8 pad)]       its piece's O in the output
//                 element type (bf16 / fp16)    dtype, normalised by the
//                                               piece's row sums (half the
//                                               DSMEM bytes of fp32; the merge
//                                               sums in fp32)
//   piece_lse     [64] fp32                     the piece's row LSE (natural
//                                               log; -inf: the piece saw no key)
// and, after a cluster barrier, rank k merges output columns
// [512 k / C, 512 (k + 1) / C) of all 64 rows from the C pieces through
// distributed shared memory:
//   LSE = log sum_p exp(lse_p),  O = sum_p exp(lse_p - LSE) O_p,
// written straight to out / lse (+inf and O = 0 for a row no piece saw).
// This replaces the schedule and combine grids of the split-KV path for short
// calls, whose time is mostly the latency of those two grid boundaries.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>

#include <cmath>
#include <cstddef>

#include "kernels/common/barriers.cuh"
#include "kernels/common/online_softmax.cuh"
#include "kernels/sm90/decode_dense/config.h"
#include "kernels/sm90/decode_dense/rows_and_blocks.cuh"

namespace openmla::kernels::decode_dense {

// Row stride of the merge buffer in elements. NOTE: a warp's 4-byte stores of
// the accumulator cover 8 rows x 16 bytes; a stride of 4 words (mod 32) puts
// the 8 rows in distinct banks (one wavefront per store).
inline constexpr int kMergeRowElems = HEAD_DIM_V + 8;

template <class Traits>
struct ClusterMerge {
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;

  // The merge buffer reuses Q and the K/V stages, contiguous from the start
  // of SharedStorage; both are dead once the two consumer warpgroups have
  // met at smem.consumers_done after their last product
  // (heads_on_m/consumers.cuh).
  static constexpr size_t kBufferBytes = size_t(BLOCK_M) * kMergeRowElems * sizeof(Element);
  static_assert(offsetof(SharedStorage, q) == 0 && offsetof(SharedStorage, kv) == sizeof(SharedStorage::q),
                "Q and the K/V stages are one region");
  static_assert(sizeof(SharedStorage::q) + sizeof(SharedStorage::kv) >= kBufferBytes,
                "the merge buffer fits in Q + K/V");

  static __device__ __forceinline__ Element* buffer(SharedStorage& smem) {
    return reinterpret_cast<Element*>(smem.q);
  }

  // One consumer warpgroup's 64 x 256 O half (columns [col_offset,
  // col_offset + 256)), times the per-row factor `norm` (1 / row sum).
  // tOrO_rc: (2 rows, 64 values) view of the accumulator; value j of a
  // thread's row is column col_offset + 2 (lane % 4) + (j % 2) + 8 (j / 2).
  template <class TensorORowCol>
  static __device__ __forceinline__ void stash_o(SharedStorage& smem, const TensorORowCol& tOrO_rc,
                                                 const QueryRow (&rows)[2], const float (&norm)[2], int col_offset,
                                                 int lane) {
    using namespace cute;
    constexpr int kCols = decltype(size<1>(tOrO_rc))::value;  // 64 values, covering 256 columns
    Element* base = buffer(smem) + col_offset + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      Element* dst = base + rows[i].tile_row * kMergeRowElems;  // [512] row of the buffer
#pragma unroll
      for (int j = 0; j < kCols; j += 2) {
        cutlass::Array<Element, 2> pair;
        pair[0] = Element(tOrO_rc(i, j) * norm[i]);
        pair[1] = Element(tOrO_rc(i, j + 1) * norm[i]);
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + 4 * j) = pair;
      }
    }
  }

  // Rank `rank`'s columns of the merged rows. thread: 0..255 over the two
  // consumer warpgroups; four threads per row, each kVecs float4 columns
  // 16 floats apart (a quad reads 64 contiguous bytes per step).
  template <int kClusterSize>
  static __device__ void merge(const KernelParams& params, SharedStorage& smem, int item, int rank, int kv_head,
                               int m_tile, int thread) {
    constexpr int kColsPerCta = HEAD_DIM_V / kClusterSize;
    constexpr int kVecs = kColsPerCta / 16;
    static_assert(kVecs >= 1 && kColsPerCta % 16 == 0, "four threads of 4 columns per step");
    const int row = thread / 4;
    const QueryRow query = make_query_row(params, kv_head, m_tile, row);
    if (!query.real) return;

    // Every remote load goes out at once — the pieces' LSEs and columns — so
    // the merge costs one DSMEM round trip, not two (the weights only scale the
    // columns afterwards). NOTE: no skip for pieces of weight 0: every stashed
    // value is finite (an empty piece stashes 0).
    const int col0 = rank * kColsPerCta + 4 * (thread % 4);
    const Element* src = buffer(smem) + row * kMergeRowElems + col0;  // this CTA's copy; peers' by mapa
    float piece_lse[kClusterSize];
    uint2 bits[kClusterSize][kVecs];  // 4 elements of piece p at columns col0 + 16 v
#pragma unroll
    for (int p = 0; p < kClusterSize; ++p) {
      piece_lse[p] = common::ld_shared_cluster_f32(common::map_to_cluster_rank(&smem.piece_lse[row], uint32_t(p)));
      const uint32_t remote = common::map_to_cluster_rank(src, uint32_t(p));
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        bits[p][v] = common::ld_shared_cluster_b32x2(remote + uint32_t(v * 16 * sizeof(Element)));
      }
    }
    float max_lse = -INFINITY;
#pragma unroll
    for (int p = 0; p < kClusterSize; ++p) max_lse = fmaxf(max_lse, piece_lse[p]);
    float4 acc[kVecs];
#pragma unroll
    for (int v = 0; v < kVecs; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    float lse = INFINITY;  // a row no piece saw: O = 0, LSE = +inf
    if (max_lse != -INFINITY) {
      float weight[kClusterSize];
      float sum = 0.f;
#pragma unroll
      for (int p = 0; p < kClusterSize; ++p) {
        weight[p] = __expf(piece_lse[p] - max_lse);  // exactly 0 for an empty piece
        sum += weight[p];
      }
      lse = max_lse + logf(sum);
      const float inv_sum = 1.f / sum;
#pragma unroll
      for (int p = 0; p < kClusterSize; ++p) {
        const float w = weight[p] * inv_sum;
#pragma unroll
        for (int v = 0; v < kVecs; ++v) {
          const cutlass::Array<Element, 2> lo = *reinterpret_cast<const cutlass::Array<Element, 2>*>(&bits[p][v].x);
          const cutlass::Array<Element, 2> hi = *reinterpret_cast<const cutlass::Array<Element, 2>*>(&bits[p][v].y);
          acc[v].x += w * float(lo[0]);
          acc[v].y += w * float(lo[1]);
          acc[v].z += w * float(hi[0]);
          acc[v].w += w * float(hi[1]);
        }
      }
    }

    Element* dst = static_cast<Element*>(params.out) + int64_t(item) * params.out_stride_b +
                   int64_t(query.s) * params.out_stride_s + int64_t(query.head) * params.out_stride_h +
                   col0;  // [512] row of out, from this thread's first column
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      cutlass::Array<Element, 2> lo, hi;
      lo[0] = Element(acc[v].x);
      lo[1] = Element(acc[v].y);
      hi[0] = Element(acc[v].z);
      hi[1] = Element(acc[v].w);
      *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + 16 * v) = lo;
      *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + 16 * v + 2) = hi;
    }
    if (rank == 0 && thread % 4 == 0) {
      params.lse[int64_t(item) * params.lse_stride_b + int64_t(query.head) * params.lse_stride_h + query.s] = lse;
    }
  }

  static __device__ void merge(const KernelParams& params, SharedStorage& smem, int item, int rank, int kv_head,
                               int m_tile, int thread) {
    switch (params.cluster_split) {
      case 2: merge<2>(params, smem, item, rank, kv_head, m_tile, thread); break;
      case 4: merge<4>(params, smem, item, rank, kv_head, m_tile, thread); break;
      default: merge<8>(params, smem, item, rank, kv_head, m_tile, thread); break;
    }
  }
};

}  // namespace openmla::kernels::decode_dense

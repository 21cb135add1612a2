// Online (streaming) softmax over WGMMA accumulator fragments.
//
// An sm90 64xN fp32 accumulator gives each thread 2 rows; the N columns of a
// row are spread over the 4 lanes of a quad (lanes 4k..4k+3), see the
// "wgmma 64xNx16 D fragment" figure:
//   https://docs.nvidia.com/cuda/parallel-thread-execution/#wgmma-64n16-d
// Row reductions therefore finish with two xor-shuffles inside the quad.
//
// Everything runs in the log2 domain: s2 = softmax_scale * log2(e) * s, so the
// exponentials are single ex2 instructions. Masked entries are -inf on entry.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

namespace openmla::kernels::common {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// View a ((2, 2, V), MMA_M, MMA_N) sm90 accumulator layout as
// ((2, MMA_M) rows, (2, V, MMA_N) cols), so row i of the view is one query row.
template <class Layout>
__host__ __device__ constexpr auto accumulator_rowcol_layout(Layout layout) {
  using namespace cute;
  static_assert(rank(Layout{}) == 3, "expects ((2,2,V), MMA_M, MMA_N)");
  return make_layout(make_layout(get<0, 1>(layout), get<1>(layout)),
                     make_layout(get<0, 0>(layout), get<0, 2>(layout), get<2>(layout)));
}

template <class Tensor>
__host__ __device__ constexpr auto make_rowcol_view(Tensor&& tensor) {
  return cute::make_tensor(tensor.data(), accumulator_rowcol_layout(tensor.layout()));
}

// 2^x in one MUFU instruction (flush-to-zero below 2^-126; exp2(-inf) = 0).
// Probabilities are rounded to bf16 next, far coarser than its ~2 ulp error.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA pipe: x = j + f with j = round(x) and f in [-0.5, 0.5]; 2^f
// from a cubic (max relative error 7.5e-5, well under bf16's 2^-9 rounding),
// 2^j built from exponent bits. Why: MUFU.EX2 retires 16 results per SM clock,
// so the softmax's 32 exponentials per thread leave the FMA pipe idle for 7 of
// every 8 issue cycles; moving some of them here shortens that critical path.
// x <= -127 gives exactly 0 (as exp2(-inf) must); NaN stays NaN.
__device__ __forceinline__ float exp2_poly(float x) {
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: x + it holds round(x) in its low mantissa bits
  float clamped;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(clamped) : "f"(x), "f"(-127.0f));
  const float shifted = __fadd_rn(clamped, kRoundShift);
  const float frac = __fsub_rn(clamped, __fsub_rn(shifted, kRoundShift));
  float poly = fmaf(0.05517121f, frac, 0.24261023f);
  poly = fmaf(poly, frac, 0.69326103f);
  poly = fmaf(poly, frac, 0.99992818f);
  // shifted's bits are 0x4B400000 + j; shifting by 23 drops the constant, so
  // this is (j + 127) << 23: 2^j, and +0 for j = -127.
  const float pow2_whole = __int_as_float((__float_as_int(shifted) << 23) + 0x3F800000);
  return poly * pow2_whole;
}

__device__ __forceinline__ float quad_allreduce_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}

__device__ __forceinline__ float quad_allreduce_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

// The max a row's exponentials are taken against: 0 while the row has seen
// nothing (max -inf), so exp2(-inf - (-inf)) never produces NaN.
__device__ __forceinline__ float max_offset(float row_max) { return row_max == -INFINITY ? 0.0f : row_max; }

// exp2(m_old - m_new): the factor that moves sums and products from max m_old
// to m_new (0 for a row that saw nothing before, 1 while it still sees nothing).
__device__ __forceinline__ float rescale_factor(float m_old, float m_new) {
  return exp2_approx(m_old - max_offset(m_new));
}

// The running max a row's exponentials and sums are taken against (the reference) moves only when a
// block's max exceeds it by more than this (log2 units), so P <= 2^8 and O is rescaled only when the
// reference moves: after a row's first blocks, almost never. Exact while nothing overflows: O, the
// row sums and the LSE are all relative to the same reference. Why: with the exact running max, a
// warp's 16 rows kept their max in only about a third of the blocks (random scores), so most blocks
// paid 128 multiplies per thread on each O half between softmax and P.V.
inline constexpr float kLazyMaxLog2 = 8.0f;

// The reference after a block whose row max is block_max (both log2 units; -inf: nothing seen);
// seen_max, the true running max (max_logits needs it, the reference is not), takes block_max too.
__device__ __forceinline__ float lazy_reference(float reference, float block_max, float& seen_max) {
  seen_max = fmaxf(seen_max, block_max);
  return block_max > reference + kLazyMaxLog2 ? block_max : reference;
}

// True when this thread's rows keep their factor exactly 1 (their max did not move).
__device__ __forceinline__ bool rows_unscaled(const float (&row_scale)[2]) {
  return row_scale[0] == 1.0f && row_scale[1] == 1.0f;
}

// The same over the warp's 16 rows.
__device__ __forceinline__ bool warp_rows_unscaled(const float (&row_scale)[2]) {
  return __all_sync(0xffffffffu, rows_unscaled(row_scale));
}

// O rows (a (2 rows, n) row/column view of an accumulator) *= the row factors,
// skipped when the warp's 16 rows all keep their maximum: 128 multiplies fewer
// between softmax and P.V.
template <class TensorORowCol>
__device__ __forceinline__ void rescale_rows(TensorORowCol& tOrO_rc, const float (&row_scale)[2]) {
  if (warp_rows_unscaled(row_scale)) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < cute::size<1>(tOrO_rc); ++j) tOrO_rc(i, j) *= row_scale[i];
  }
}

// kPolyPeriod > 0: column j of a row takes exp2_poly instead of MUFU.EX2 when
// j % kPolyPeriod == kPolyPeriod - 1, so both pipes share the exponentials.
template <int kRows, int kPolyPeriod = 0>
struct OnlineSoftmax {
  float row_max[kRows];   // the reference of s2 over the row (lazy_reference; -inf: nothing seen yet)
  float seen_max[kRows];  // the true running max of s2 (max_logits)
  float row_sum[kRows];   // running sum of exp2(s2 - row_max), this thread's columns only

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      row_max[i] = -INFINITY;
      seen_max[i] = -INFINITY;
      row_sum[i] = 0.0f;
    }
  }

  // s_rc: (kRows, cols) fp32 scores, masked entries -inf. Overwrites them with
  // P = exp2(s2 - new_max) and returns, per row, the factor the running O must
  // be multiplied by before P.V is added (0 while the row has seen nothing).
  template <class TensorS>
  __device__ __forceinline__ void update(TensorS& s_rc, float scale_log2, float (&row_scale)[kRows]) {
    using namespace cute;
    constexpr int kCols = decltype(size<1>(s_rc))::value;
    constexpr int kChains = 4;  // independent max / sum chains: this sits between two MMAs
    static_assert(decltype(size<0>(s_rc))::value == kRows, "row count mismatch");
    static_assert(kCols % kChains == 0);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      float partial_max[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) partial_max[c] = s_rc(i, c);
#pragma unroll
      for (int j = kChains; j < kCols; ++j) partial_max[j % kChains] = fmaxf(partial_max[j % kChains], s_rc(i, j));
      float block_max = fmaxf(fmaxf(partial_max[0], partial_max[1]), fmaxf(partial_max[2], partial_max[3]));
      // NOTE: scale_log2 > 0, so scaling after the max is exact and keeps -inf.
      block_max = quad_allreduce_max(block_max) * scale_log2;
      const float new_max = lazy_reference(row_max[i], block_max, seen_max[i]);
      const float offset = max_offset(new_max);
      row_scale[i] = rescale_factor(row_max[i], new_max);
      row_max[i] = new_max;
      float partial_sum[kChains] = {};
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const float x = fmaf(s_rc(i, j), scale_log2, -offset);
        float p;
        if constexpr (kPolyPeriod > 0) {
          p = j % kPolyPeriod == kPolyPeriod - 1 ? exp2_poly(x) : exp2_approx(x);
        } else {
          p = exp2_approx(x);
        }
        s_rc(i, j) = p;
        partial_sum[j % kChains] += p;
      }
      row_sum[i] = row_sum[i] * row_scale[i] + ((partial_sum[0] + partial_sum[1]) + (partial_sum[2] + partial_sum[3]));
    }
  }

  // Whole-row sums (every lane of the quad gets the same value).
  __device__ __forceinline__ void total_sums(float (&sums)[kRows]) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i) sums[i] = quad_allreduce_sum(row_sum[i]);
  }
};

}  // namespace openmla::kernels::common

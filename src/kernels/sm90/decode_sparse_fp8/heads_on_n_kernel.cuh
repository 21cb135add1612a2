// sm90 sparse FP8 MLA decode for h_q <= 32: the heads-on-N kernel
// (DecodeKernel::kSparseHeadsOnN; DeepSeek Sparse Attention, 656-byte cache).
//
// Computes, for the h_q = N query heads and SM part blockIdx.y of the
// split-KV schedule, softmax(scale * q.k) v over the index positions of each
// (request, query token) item in the part's range. Tokens are on M and heads
// on N, so h_q = 8/16 run without padding:
//   S^T (64 tokens x N) = K.Q^T,   O^T (512 x N) += V^T.P^T.
// h_q = 64 / 128 run in the heads-on-M kernels (heads_on_m_kernel.cuh).
//
// Warp roles (384 threads, one CTA per SM):
//   WG0 consumer (setmaxnreg 232): S^T (WGMMA 64xNx16, SS), token mask, online
//       softmax over the token rows (column reductions across lanes and
//       warps), P^T -> smem, O^T += V^T.P^T (SS), epilogue.
//   WG1-2 producers (setmaxnreg 136, 8 warps): index lookahead, row loads,
//       FP8 -> BF16 dequantisation of their own rows (bit trick + one bf16x2
//       multiply, common/fp8/dequant.cuh), RoPE, Q by cp.async.
// Shared memory: 2 bf16 K/V stages 144 KB + Q (N x 576) + P^T + column
// partials (traits.h). Pipeline depth: 2 stages; the producers' register
// lookahead hides the gather latency (mainloop.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include <cmath>
#include <string>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/named_barriers.h"
#include "kernels/common/online_softmax.cuh"
#include "kernels/common/prologue.cuh"
#include "kernels/common/schedule/own_part.cuh"
#include "kernels/sm90/decode_sparse_fp8/config.h"
#include "kernels/sm90/decode_sparse_fp8/epilogue.cuh"
#include "kernels/sm90/decode_sparse_fp8/mainloop.cuh"
#include "kernels/sm90/decode_sparse_fp8/traits.h"

namespace openmla::kernels::decode_sparse_fp8 {

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// ---- consumer: scores, softmax, O^T ----------------------------------------------------------
template <class Traits>
__device__ void run_consumer(const KernelParams& params, const PartWork& part, typename Traits::SharedStorage& smem,
                             int head0, int thread) {
  using namespace cute;
  constexpr int N = Traits::kHeads;
  constexpr int kCols = N / 4;  // head columns per thread
  const int warp = thread / kWarpSize;
  const int lane = thread % kWarpSize;

  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(thread);
  auto thr_pv = mma_pv.get_thread_slice(thread);

  Tensor sQ = make_tensor(make_smem_ptr(smem.q), typename Traits::SmemLayoutQ{});     // (N, 576)
  Tensor sPt = make_tensor(make_smem_ptr(smem.pt), typename Traits::SmemLayoutPt{});  // (N, 64)
  Tensor sP = make_tensor(sPt.data(), select<1, 0>(sPt.layout()));                    // (64 tokens, N) view
  Tensor tSrQ = thr_qk.partition_fragment_B(sQ);                                       // (MMA, 1, 36)
  Tensor tOrPt = thr_pv.partition_fragment_B(sPt);                                     // (MMA, 1, 4)
  Tensor tPsP = thr_qk.partition_C(sP);                                                // (MMA, 1, 1) smem

  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BLOCK_N>, Int<N>>{});     // (MMA, 1, 1) fp32
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<HEAD_DIM_V>, Int<N>>{});  // (MMA, 8, 1) fp32
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<BLOCK_N>, Int<N>>{}));
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<HEAD_DIM_V>, Int<N>>{}));
  Tensor tSrS_rc = common::make_rowcol_view(tSrS);  // (2 token rows, N/4 head cols)
  Tensor tScS_rc = common::make_rowcol_view(tScS);
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (16 dim rows, N/4 head cols)
  Tensor tOcO_rc = common::make_rowcol_view(tOcO);
  Tensor tOcO0_rc = common::make_rowcol_view(
      mma_pv.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<HEAD_DIM_V>, Int<N>>{})));
  static_assert(decltype(size<1>(tSrS_rc))::value == kCols && decltype(size<1>(tOrO_rc))::value == kCols,
                "S^T and O^T fragments share their head columns");

  // This thread's (token, head) coordinates: its (0, 0) plus thread 0's
  // compile-time offsets (see Epilogue::store_o), so no per-value
  // coordinates occupy registers.
  Tensor tScS0_rc = common::make_rowcol_view(
      mma_qk.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<BLOCK_N>, Int<N>>{})));
  const int token0 = int(get<0>(tScS_rc(0, 0)));
  const int col0 = int(get<1>(tScS_rc(0, 0)));
  int col_head[kCols];  // this CTA's head columns (0 .. N - 1)
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) col_head[jj] = col0 + int(get<1>(tScS0_rc(0, jj)));
  int row_token[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) row_token[i] = token0 + int(get<0>(tScS0_rc(i, 0)));

  // Running max of scale_log2 * s per head column (-inf: nothing seen;
  // identical in every thread of a column) and this thread's part of the
  // running sum of exp2(. - max).
  float col_max[kCols];
  float col_sum[kCols];
  int block_counter = 0;
  int item_counter = 0;
  for (BlockCursor cursor = cursor_begin(params, part); cursor.active(); cursor_advance(cursor, params, part)) {
    const int stage = block_counter % kNumStages;
    const uint32_t phase = (block_counter / kNumStages) & 1;
    const bool last = cursor.last();
    if (cursor.first) {
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        col_max[jj] = -INFINITY;
        col_sum[jj] = 0.0f;
      }
      clear(tOrO);
      common::mbarrier_wait(&smem.q_full, item_counter & 1);
    }
    common::mbarrier_wait(&smem.kv_full[stage], phase);

    // ---- S^T = K.Q^T; hand Q back after the item's last product ----
    Mainloop<Traits>::gemm_qk(mma_qk, smem.kv[stage], tSrQ, thread, tSrS);
    if (last) {
      __syncwarp();
      if (lane == 0) common::mbarrier_arrive(&smem.q_empty);
    }

    // ---- mask tokens that are not counted, invalid or out of range ----
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (smem.token_valid[stage][row_token[i]] == 0) {
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) tSrS_rc(i, jj) = -INFINITY;
      }
    }

    // ---- online softmax over the 64 token rows of each head column ----
    float block_max[kCols];
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) block_max[jj] = fmaxf(tSrS_rc(0, jj), tSrS_rc(1, jj));
    column_allreduce<kCols, N>(block_max, col_head, smem.red, warp, lane, MaxOp{});
    float col_scale[kCols];
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) {
      // NOTE: scale_log2 > 0, so scaling after the max is exact and keeps -inf.
      const float new_max = fmaxf(col_max[jj], block_max[jj] * params.scale_log2);
      const float offset = common::max_offset(new_max);
      col_scale[jj] = common::rescale_factor(col_max[jj], new_max);
      col_max[jj] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float p = common::exp2_approx(fmaf(tSrS_rc(i, jj), params.scale_log2, -offset));
        tSrS_rc(i, jj) = p;
        sum += p;
      }
      col_sum[jj] = col_sum[jj] * col_scale[jj] + sum;
    }

    // ---- publish P^T (every warp's PV of the previous block is done: the
    // reduction above synced the warpgroup after it) ----
#pragma unroll
    for (int v = 0; v < size(tSrS); v += 2) {
      // Values v, v + 1 are adjacent head columns of one token row; heads are
      // contiguous in P^T (MN-major), so they form one 4-byte store.
      __nv_bfloat162 pair = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
      *reinterpret_cast<__nv_bfloat162*>(&tPsP(v)) = pair;
    }
    common::fence_view_async_shared();
    common::named_barrier_sync(barrier_ids::kSparseHeadsOnNConsumer, kWarpgroupThreads);

    // ---- O^T = O^T * col_scale + V^T.P^T ----
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) {
#pragma unroll
      for (int i = 0; i < size<0>(tOrO_rc); ++i) tOrO_rc(i, jj) *= col_scale[jj];
    }
    Mainloop<Traits>::gemm_pv(mma_pv, smem.kv[stage], tOrPt, thread, tOrO);
    // Every thread's reads of the stage are done: release it.
    common::mbarrier_arrive(&smem.kv_empty[stage]);

    // ---- last block: whole-column sums -> norm and LSE, then O ----
    if (last) {
      const ItemOutput target = item_output(params, part, cursor.item);
      float total[kCols];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) total[jj] = col_sum[jj];
      column_allreduce<kCols, N>(total, col_head, smem.red, warp, lane, SumOp{});
      float col_norm[kCols];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        const bool empty = !(total[jj] > 0.0f);
        const float lse = (col_max[jj] + log2f(total[jj])) * common::kLn2;
        float norm = empty ? 0.0f : 1.0f / total[jj];
        const int head = head0 + col_head[jj];
        if (!target.partial && params.attn_sink != nullptr && !empty) {
          // O *= 1 / (1 + exp(sink - LSE)); sink = +inf gives 0.
          norm *= 1.0f / (1.0f + expf(__ldg(params.attn_sink + head) - lse));
        }
        col_norm[jj] = norm;
        if (warp == 0 && lane < 4) Epilogue<Traits>::store_lse(params, target, head, empty, lse, col_max[jj]);
      }
      Epilogue<Traits>::store_o(params, target, head0, tOrO_rc, tOcO_rc, tOcO0_rc, col_norm);
      // `red` is reused by the next block's max reduction.
      common::named_barrier_sync(barrier_ids::kSparseHeadsOnNConsumer, kWarpgroupThreads);
      ++item_counter;
    }
    ++block_counter;
  }
}

// ---- the kernel ---------------------------------------------------------------------------------
template <class Traits>
__global__ void __launch_bounds__(kNumThreads, 1)
    decode_sparse_fp8_heads_on_n_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  extern __shared__ uint8_t smem_raw[];
  const uintptr_t raw = reinterpret_cast<uintptr_t>(smem_raw);
  const uintptr_t base = (raw + Traits::kSmemAlign - 1) & ~uintptr_t(Traits::kSmemAlign - 1);
  if (base - raw + sizeof(SharedStorage) > size_t(Traits::kSmemBytes)) __trap();  // see traits.h
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(base);
  const PartWork part = common::own_part(params.schedule, common::schedule_scratch(smem.kv));
  if (part.flags & kPartEmpty) return;  // uniform over the CTA

  const int head0 = int(blockIdx.x) * Traits::kHeads;
  const int warpgroup = common::warp_uniform_warpgroup(kWarpgroupThreads);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kNumStages; ++s) {
      common::mbarrier_init(&smem.kv_full[s], kProducerThreads);
      common::mbarrier_init(&smem.kv_empty[s], kWarpgroupThreads);  // every consumer thread
    }
    common::mbarrier_init(&smem.q_full, kProducerThreads);
    common::mbarrier_init(&smem.q_empty, kWarpsPerWarpgroup);
    common::mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    run_consumer<Traits>(params, part, smem, head0, int(threadIdx.x));
  } else {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    Producer<Traits>::run(params, part, smem, head0, int(threadIdx.x) - kWarpgroupThreads);
  }
}

// ---- host launch of one instantiation -----------------------------------------------------------
template <int kHeadsPerCta>
Status launch_heads_on_n_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  using KernelTraits = Traits<kHeadsPerCta>;
  return common::launch_dependent("decode_sparse_fp8_heads_on_n", &decode_sparse_fp8_heads_on_n_kernel<KernelTraits>,
                                  grid, dim3(kNumThreads), KernelTraits::kSmemBytes, stream, /*cluster_x=*/1, params);
}

}  // namespace openmla::kernels::decode_sparse_fp8

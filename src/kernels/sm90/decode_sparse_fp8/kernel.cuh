// sm90 sparse FP8 MLA decode (DeepSeek Sparse Attention, 656-byte cache).
//
// Computes, for q-group blockIdx.x (query heads [64 g, 64 g + N)) and SM part
// blockIdx.y of the split-KV schedule, softmax(scale * q.k) v over the index
// positions of each (request, query token) item in the part's range. Tokens
// are on M and heads on N, so h_q = 8/16/32 run without padding:
//   S^T (64 tokens x N) = K.Q^T,   O^T (512 x N) += V^T.P^T.
//
// Warp roles (384 threads, one CTA per SM):
//   WG0 producer (setmaxnreg 96 at N = 64, else 152): index lookahead, L2
//       prefetch of the 656-byte tokens, FP8 -> BF16 dequantisation into the
//       stage (bit trick + one bf16x2 multiply, common/fp8/dequant.cuh), RoPE
//       and Q by cp.async.
//   WG1 softmax (setmaxnreg 248 / 200): S^T (WGMMA 64xNx16, SS), token mask,
//       online softmax over the token rows (column reductions across lanes
//       and warps), P^T -> smem, O^T[0:256) += V^T.P^T (SS).
//   WG2 (setmaxnreg 160 / 152): O^T[256:512) += V^T.P^T with P^T and the column
//       scales from smem.
// Shared memory: 2 bf16 K/V stages 144 KB + Q (N x 576) + P^T + row stats
// (traits.h). Pipeline depth: 2 stages; the producer's register and L2
// lookahead hides the gather latency (mainloop.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include <cmath>
#include <string>

#include "kernels/common/barriers.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/online_softmax.cuh"
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

// ---- both consumers: O^T_half = O^T_half * col_scale + V^T_half.P^T ------------------------------
template <class Traits, class TiledMma, class TensorP, class TensorO, class TensorORowCol, class TensorCRowCol>
__device__ __forceinline__ void pv_step(TiledMma& mma_pv, const TensorP& tOrPt, typename Traits::Element* v_half,
                                        const typename Traits::SharedStorage& smem, int block_counter, int thread,
                                        TensorO& tOrO, TensorORowCol& tOrO_rc, const TensorCRowCol& tOcO_rc) {
  using namespace cute;
#pragma unroll
  for (int jj = 0; jj < size<1>(tOrO_rc); ++jj) {
    const float scale = smem.col_scale[block_counter & 1][int(get<1>(tOcO_rc(0, jj)))];
#pragma unroll
    for (int i = 0; i < size<0>(tOrO_rc); ++i) tOrO_rc(i, jj) *= scale;
  }
  Mainloop<Traits>::gemm_pv(mma_pv, v_half, tOrPt, thread, tOrO);
}

// ---- WG1: scores, softmax, low O^T half -------------------------------------------------------
template <class Traits>
__device__ void run_softmax_warpgroup(const KernelParams& params, const PartWork& part,
                                      typename Traits::SharedStorage& smem, int q_group, int thread) {
  using namespace cute;
  using Element = typename Traits::Element;
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

  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<BLOCK_N>, Int<N>>{});            // (MMA, 1, 1) fp32
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<HEAD_DIM_V_HALF>, Int<N>>{});   // (MMA, 4, 1) fp32
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<BLOCK_N>, Int<N>>{}));
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<HEAD_DIM_V_HALF>, Int<N>>{}));
  Tensor tSrS_rc = common::make_rowcol_view(tSrS);  // (2 token rows, N/4 head cols)
  Tensor tScS_rc = common::make_rowcol_view(tScS);
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);  // (8 dim rows, N/4 head cols)
  Tensor tOcO_rc = common::make_rowcol_view(tOcO);
  Tensor tOcO0_rc = common::make_rowcol_view(
      mma_pv.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<HEAD_DIM_V_HALF>, Int<N>>{})));
  static_assert(decltype(size<1>(tSrS_rc))::value == kCols, "column count");

  // This thread's (token, head) coordinates: its (0, 0) plus thread 0's
  // compile-time offsets (see Epilogue::store_o), so no per-value
  // coordinates occupy registers.
  Tensor tScS0_rc = common::make_rowcol_view(
      mma_qk.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<BLOCK_N>, Int<N>>{})));
  const int token0 = int(get<0>(tScS_rc(0, 0)));
  const int head0 = int(get<1>(tScS_rc(0, 0)));
  int col_head[kCols];
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) col_head[jj] = head0 + int(get<1>(tScS0_rc(0, jj)));
  int row_token[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) row_token[i] = token0 + int(get<0>(tScS0_rc(i, 0)));

  // Running max of scale_log2 * s per head (-inf: nothing seen) lives in
  // smem.col_max[block parity] (identical for every thread of a column; keeps
  // 16 registers free at N = 64). col_sum: this thread's part of the running
  // sum of exp2(. - max).
  float col_sum[kCols];
  int block_counter = 0;
  int item_counter = 0;
  for (BlockCursor cursor = cursor_begin(params, part); cursor.active(); cursor_advance(cursor, params, part)) {
    const int stage = block_counter % kNumStages;
    const uint32_t phase = (block_counter / kNumStages) & 1;
    const bool last = cursor.last();
    if (cursor.first) {
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) col_sum[jj] = 0.0f;
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

    // P^T and the column factors of the previous block are free once WG2's
    // product is done (long before: S^T just ran).
    common::named_barrier_sync(kBarrierPEmpty, kBarrierPThreads);

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
    // NOTE: block j reads col_max[j & 1] and writes col_max[(j + 1) & 1]; the
    // barriers between (P_full, then the reduction's) order readers and writer.
    const float* max_in = smem.col_max[block_counter & 1];
    float* max_out = smem.col_max[(block_counter + 1) & 1];
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) {
      const float old_max = cursor.first ? -INFINITY : max_in[col_head[jj]];
      // NOTE: scale_log2 > 0, so scaling after the max is exact and keeps -inf.
      const float new_max = fmaxf(old_max, block_max[jj] * params.scale_log2);
      // A column with nothing visible yet keeps max -inf; subtract 0 so
      // exp2(-inf - (-inf)) never produces NaN.
      const float offset = new_max == -INFINITY ? 0.0f : new_max;
      const float col_scale = common::exp2_approx(old_max - offset);
      if (warp == 0 && lane < 4) max_out[col_head[jj]] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float p = common::exp2_approx(fmaf(tSrS_rc(i, jj), params.scale_log2, -offset));
        tSrS_rc(i, jj) = p;
        sum += p;
      }
      col_sum[jj] = col_sum[jj] * col_scale + sum;
      // Published with P^T at the P_full barrier below.
      if (warp == 0 && lane < 4) smem.col_scale[block_counter & 1][col_head[jj]] = col_scale;
    }

    // ---- last block: whole-column sums -> norm (to smem below) and LSE ----
    float col_norm[kCols];
    if (last) {
      const ItemOutput target = item_output(params, part, cursor.item);
      float total[kCols];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) total[jj] = col_sum[jj];
      // Everyone has read the maxima out of `red` before it is reused.
      common::named_barrier_sync(kBarrierSoftmaxWg, kWarpgroupThreads);
      column_allreduce<kCols, N>(total, col_head, smem.red, warp, lane, SumOp{});
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        const bool empty = !(total[jj] > 0.0f);
        // max_out was written before the reduction's barrier.
        const float lse = (max_out[col_head[jj]] + log2f(total[jj])) * common::kLn2;
        float norm = empty ? 0.0f : 1.0f / total[jj];
        const int head = q_group * kMaxHeadsPerCta + col_head[jj];
        if (!target.partial && params.attn_sink != nullptr && !empty) {
          // O *= 1 / (1 + exp(sink - LSE)); sink = +inf gives 0.
          norm *= 1.0f / (1.0f + expf(__ldg(params.attn_sink + head) - lse));
        }
        col_norm[jj] = norm;
        if (warp == 0 && lane < 4) Epilogue<Traits>::store_lse(params, target, head, empty, lse);
      }
    }

    // ---- publish P^T and the column factors to both consumers ----
#pragma unroll
    for (int v = 0; v < size(tSrS); v += 2) {
      // Values v, v + 1 are adjacent head columns of one token row; heads are
      // contiguous in P^T (MN-major), so they form one 4-byte store.
      __nv_bfloat162 pair = __floats2bfloat162_rn(tSrS(v), tSrS(v + 1));
      *reinterpret_cast<__nv_bfloat162*>(&tPsP(v)) = pair;
    }
    if (last && warp == 0 && lane < 4) {
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) smem.col_norm[col_head[jj]] = col_norm[jj];
    }
    common::fence_view_async_shared();
    common::named_barrier_sync(kBarrierPFull, kBarrierPThreads);

    // ---- O^T[0:256) ----
    pv_step<Traits>(mma_pv, tOrPt, smem.kv[stage], smem, block_counter, thread, tOrO, tOrO_rc, tOcO_rc);
    common::mbarrier_arrive(&smem.kv_empty[stage]);  // every thread: its reads of the stage are done

    if (last) {
      Epilogue<Traits>::store_o(params, item_output(params, part, cursor.item), q_group, tOrO_rc, tOcO_rc,
                                tOcO0_rc, smem.col_norm, 0);
      ++item_counter;
    }
    ++block_counter;
  }
}

// ---- WG2: high O^T half -----------------------------------------------------------------------
template <class Traits>
__device__ void run_pv_warpgroup(const KernelParams& params, const PartWork& part,
                                 typename Traits::SharedStorage& smem, int q_group, int thread) {
  using namespace cute;
  constexpr int N = Traits::kHeads;

  typename Traits::TiledMmaPV mma_pv;
  auto thr_pv = mma_pv.get_thread_slice(thread);
  Tensor sPt = make_tensor(make_smem_ptr(smem.pt), typename Traits::SmemLayoutPt{});  // (N, 64)
  Tensor tOrPt = thr_pv.partition_fragment_B(sPt);                                     // (MMA, 1, 4)
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<HEAD_DIM_V_HALF>, Int<N>>{});   // (MMA, 4, 1) fp32
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<HEAD_DIM_V_HALF>, Int<N>>{}));
  Tensor tOrO_rc = common::make_rowcol_view(tOrO);
  Tensor tOcO_rc = common::make_rowcol_view(tOcO);
  Tensor tOcO0_rc = common::make_rowcol_view(
      mma_pv.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<HEAD_DIM_V_HALF>, Int<N>>{})));

  // The P^T buffer starts empty: one arrival stands for "block -1 consumed".
  common::named_barrier_arrive(kBarrierPEmpty, kBarrierPThreads);
  int block_counter = 0;
  for (BlockCursor cursor = cursor_begin(params, part); cursor.active(); cursor_advance(cursor, params, part)) {
    const int stage = block_counter % kNumStages;
    const uint32_t phase = (block_counter / kNumStages) & 1;
    const bool last = cursor.last();
    if (cursor.first) clear(tOrO);
    common::mbarrier_wait(&smem.kv_full[stage], phase);
    common::named_barrier_sync(kBarrierPFull, kBarrierPThreads);

    pv_step<Traits>(mma_pv, tOrPt, smem.kv[stage] + Traits::kVtHalfOffset, smem, block_counter, thread, tOrO,
                    tOrO_rc, tOcO_rc);
    common::mbarrier_arrive(&smem.kv_empty[stage]);  // every thread: its reads of the stage are done
    if (last) {
      Epilogue<Traits>::store_o(params, item_output(params, part, cursor.item), q_group, tOrO_rc, tOcO_rc,
                                tOcO0_rc, smem.col_norm, HEAD_DIM_V_HALF);
    }
    // Release P^T, the column scales and norms (read by the epilogue above)
    // unless no block follows in this part (keeps the named barrier's
    // arrive/sync counts balanced).
    const bool part_done = last && cursor.item == part.end_item;
    if (!part_done) common::named_barrier_arrive(kBarrierPEmpty, kBarrierPThreads);
    ++block_counter;
  }
}

// ---- the kernel ---------------------------------------------------------------------------------
template <class Traits>
__global__ void __launch_bounds__(kNumThreads, 1)
    decode_sparse_fp8_kernel(const __grid_constant__ KernelParams params) {
  using SharedStorage = typename Traits::SharedStorage;
  // The schedule comes from the previous grid (launched as its dependent).
  common::wait_for_previous_grid();
  common::allow_next_grid();
  const PartWork part = params.parts[blockIdx.y];
  if (part.flags & kPartEmpty) return;

  extern __shared__ uint8_t smem_raw[];
  const uintptr_t raw = reinterpret_cast<uintptr_t>(smem_raw);
  const uintptr_t base = (raw + Traits::kSmemAlign - 1) & ~uintptr_t(Traits::kSmemAlign - 1);
  if (base - raw + sizeof(SharedStorage) > size_t(Traits::kSmemBytes)) __trap();  // see traits.h
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(base);

  const int q_group = blockIdx.x;
  // Warp-uniform role index (keeps the role branches free of divergence).
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreads, 0);
  const int thread = threadIdx.x % kWarpgroupThreads;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kNumStages; ++s) {
      common::mbarrier_init(&smem.kv_full[s], kWarpgroupThreads);
      common::mbarrier_init(&smem.kv_empty[s], 2 * kWarpgroupThreads);
    }
    common::mbarrier_init(&smem.q_full, kWarpgroupThreads);
    common::mbarrier_init(&smem.q_empty, kWarpsPerWarpgroup);
    common::mbarrier_init_fence();
  }
  __syncthreads();

  constexpr RegisterSplit kRegs = register_split(Traits::kHeads);
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kRegs.producer>();
    Producer<Traits>::run(params, part, smem, q_group, thread);
  } else if (warpgroup == 1) {
    cutlass::arch::warpgroup_reg_alloc<kRegs.softmax>();
    run_softmax_warpgroup<Traits>(params, part, smem, q_group, thread);
  } else {
    cutlass::arch::warpgroup_reg_dealloc<kRegs.pv>();
    run_pv_warpgroup<Traits>(params, part, smem, q_group, thread);
  }
}

// ---- host launch of one instantiation -----------------------------------------------------------
template <int kHeadsPerCta>
Status launch_kernel(const KernelParams& params, dim3 grid, cudaStream_t stream) {
  using KernelTraits = Traits<kHeadsPerCta>;
  return common::launch_dependent("decode_sparse_fp8", &decode_sparse_fp8_kernel<KernelTraits>, grid,
                                  dim3(kNumThreads), KernelTraits::kSmemBytes, stream, params);
}

}  // namespace openmla::kernels::decode_sparse_fp8

// Tile constants and warp roles of the sm90 heads-on-M attention tile: 64
// query rows on the WGMMA's M, 64 keys a stage, two consumer warpgroups that
// each own half of the 512 output columns. Used by the dense decode kernel
// (decode_dense/column_split_kernel.cuh, alternate_blocks_kernel.cuh) and the
// sparse FP8 heads-on-M kernels (decode_sparse_fp8/heads_on_m_kernel.cuh).
// Host-and-device; no CuTe here.
#pragma once

#include "openmla/types.h"

namespace openmla::kernels::heads_on_m {

// ---- tiles --------------------------------------------------------------------------
inline constexpr int BLOCK_M = 64;                      // query rows per CTA (one WGMMA M)
inline constexpr int BLOCK_N = kKvBlockTokens;          // keys per stage
inline constexpr int HEAD_DIM_V = kHeadDimV;            // 512
inline constexpr int HEAD_DIM_V_HALF = HEAD_DIM_V / 2;  // O columns per consumer warpgroup
inline constexpr int kChunkCols = 64;                   // 128-byte swizzle row = one TMA box width
static_assert(BLOCK_N == 64, "the schedule's KV block is 64 keys");

// ---- warp roles --------------------------------------------------------------------
// warpgroup 0: the kernel's producer (its own design per kernel).
// warpgroup 1: S = Q.K^T, online softmax, O[:, 0:256) += P.V (P in registers), P -> smem (for WG2)
// warpgroup 2: O[:, 256:512) += P.V with P from smem
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kNumWarpgroups = 3;
inline constexpr int kNumThreads = kNumWarpgroups * kWarpgroupThreads;

// Every 4th exponential of WG1's softmax runs on the FMA pipe (exp2_poly):
// -0.9% cycles at h_q = 128, s_q = 2 (measured 2026-11-30, after P.V_left was
// issued ahead of the P publish; before that reorder it made no difference).
inline constexpr int kSoftmaxPolyPeriod = 4;

}  // namespace openmla::kernels::heads_on_m

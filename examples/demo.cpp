// OpenMLA demo: one DeepSeek-V3-shaped MLA decode step (b = 4, h_q = 128,
// s_k around 1000, page size 64, BF16). Runs on the GPU when an sm90 device is
// present, otherwise on the CPU reference. Prints shapes, time and a checksum.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "openmla/fp8.h"
#include "openmla/openmla.h"
#include "openmla/reference.h"

namespace {

constexpr int kBatch = 4, kHeadsQ = 128, kQueryTokens = 1, kPageSize = 64;

bool has_hopper_gpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  openmla::DeviceInfo info;
  return openmla::query_device_info(0, &info).is_ok() && info.cc_major == 9;
}

int fail(const char* what, const openmla::Status& status) {
  std::fprintf(stderr, "demo: %s failed: %s\n", what, status.message().c_str());
  return 1;
}

#define DEMO_CUDA(call)                                                              \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "demo: %s: %s\n", #call, cudaGetErrorString(e_));         \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

}  // namespace

int main() {
  using namespace openmla;
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.f, 1.f);

  // ---- shapes and host inputs
  std::vector<int32_t> seqlens = {1000, 937, 1063, 1024};  // s_k around 1000
  const int max_pages = (*std::max_element(seqlens.begin(), seqlens.end()) + kPageSize - 1) / kPageSize;
  const int num_pages = kBatch * max_pages;
  DenseDecodeShape shape;
  shape.batch = kBatch;
  shape.s_q = kQueryTokens;
  shape.h_q = kHeadsQ;
  shape.page_size = kPageSize;
  shape.num_pages = num_pages;
  shape.max_pages_per_seq = max_pages;

  std::vector<uint16_t> q(size_t(kBatch) * kQueryTokens * kHeadsQ * kHeadDimQK);        // [b, s_q, h_q, 576]
  std::vector<uint16_t> kv(size_t(num_pages) * kPageSize * kHeadDimQK);                  // [pages, 64, 1, 576]
  std::vector<int32_t> block_table(size_t(kBatch) * max_pages);                          // [b, max_pages]
  std::vector<uint16_t> out(size_t(kBatch) * kQueryTokens * kHeadsQ * kHeadDimV);        // [b, s_q, h_q, 512]
  std::vector<float> lse(size_t(kBatch) * kHeadsQ * kQueryTokens);                       // [b, h_q, s_q]
  for (auto& x : q) x = float_to_bf16_bits(normal(rng));
  for (auto& x : kv) x = float_to_bf16_bits(normal(rng));
  std::vector<int32_t> pages(static_cast<size_t>(num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  for (size_t i = 0; i < block_table.size(); ++i) block_table[i] = pages[i];

  DenseDecodeParams params;
  params.shape = shape;
  params.q_stride_h = kHeadDimQK;
  params.q_stride_s = int64_t(kHeadsQ) * kHeadDimQK;
  params.q_stride_b = kQueryTokens * params.q_stride_s;
  params.kv_stride_head = kHeadDimQK;
  params.kv_stride_token = kHeadDimQK;
  params.kv_stride_page = int64_t(kPageSize) * kHeadDimQK;
  params.block_table_stride_b = max_pages;
  params.out_stride_h = kHeadDimV;
  params.out_stride_s = int64_t(kHeadsQ) * kHeadDimV;
  params.out_stride_b = kQueryTokens * params.out_stride_s;
  params.lse_stride_h = kQueryTokens;
  params.lse_stride_b = int64_t(kHeadsQ) * kQueryTokens;
  params.softmax_scale = 1.f / std::sqrt(float(kHeadDimQK));

  std::printf("OpenMLA demo: dense MLA decode, b=%d s_q=%d h_q=%d h_kv=1 d_qk=%d d_v=%d page=%d bf16\n", kBatch,
              kQueryTokens, kHeadsQ, kHeadDimQK, kHeadDimV, kPageSize);
  std::printf("  seqlens = {%d, %d, %d, %d}, q [%d, %d, %d, %d], kv cache [%d, %d, 1, %d]\n", seqlens[0], seqlens[1],
              seqlens[2], seqlens[3], kBatch, kQueryTokens, kHeadsQ, kHeadDimQK, num_pages, kPageSize, kHeadDimQK);

  double elapsed_us = 0;
  const char* backend = "cpu-reference";
  if (has_hopper_gpu()) {
    backend = "gpu-sm90";
    DeviceInfo device;
    if (auto s = query_device_info(0, &device); !s) return fail("query_device_info", s);
    DecodePlan plan;
    if (auto s = plan_dense_decode(shape, device, &plan); !s) return fail("plan_dense_decode", s);
    void *d_q, *d_kv, *d_out, *d_workspace;
    int32_t *d_table, *d_seqlens;
    float* d_lse;
    DEMO_CUDA(cudaMalloc(&d_q, q.size() * 2));
    DEMO_CUDA(cudaMalloc(&d_kv, kv.size() * 2));
    DEMO_CUDA(cudaMalloc(&d_out, out.size() * 2));
    DEMO_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_lse), lse.size() * 4));
    DEMO_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_table), block_table.size() * 4));
    DEMO_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_seqlens), seqlens.size() * 4));
    DEMO_CUDA(cudaMalloc(&d_workspace, plan.workspace.total_bytes));
    DEMO_CUDA(cudaMemcpy(d_q, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    DEMO_CUDA(cudaMemcpy(d_kv, kv.data(), kv.size() * 2, cudaMemcpyHostToDevice));
    DEMO_CUDA(cudaMemcpy(d_table, block_table.data(), block_table.size() * 4, cudaMemcpyHostToDevice));
    DEMO_CUDA(cudaMemcpy(d_seqlens, seqlens.data(), seqlens.size() * 4, cudaMemcpyHostToDevice));
    params.q = d_q;
    params.kv_cache = d_kv;
    params.block_table = d_table;
    params.seqlens = d_seqlens;
    params.out = d_out;
    params.lse = d_lse;
    cudaEvent_t start, stop;
    DEMO_CUDA(cudaEventCreate(&start));
    DEMO_CUDA(cudaEventCreate(&stop));
    if (auto s = dense_decode_run(params, plan, d_workspace, plan.workspace.total_bytes, nullptr); !s)
      return fail("dense_decode_run (warm-up)", s);
    DEMO_CUDA(cudaEventRecord(start));
    if (auto s = dense_decode_run(params, plan, d_workspace, plan.workspace.total_bytes, nullptr); !s)
      return fail("dense_decode_run", s);
    DEMO_CUDA(cudaEventRecord(stop));
    DEMO_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    DEMO_CUDA(cudaEventElapsedTime(&ms, start, stop));
    elapsed_us = ms * 1000.0;
    DEMO_CUDA(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));
    DEMO_CUDA(cudaMemcpy(lse.data(), d_lse, lse.size() * 4, cudaMemcpyDeviceToHost));
    std::printf("  plan: %d SM parts x %d q-groups, workspace %zu bytes\n", plan.num_parts, plan.num_q_groups,
                plan.workspace.total_bytes);
  } else {
    params.q = q.data();
    params.kv_cache = kv.data();
    params.block_table = block_table.data();
    params.seqlens = seqlens.data();
    params.out = out.data();
    params.lse = lse.data();
    const auto start = std::chrono::steady_clock::now();
    if (auto s = reference_dense_decode(params); !s) return fail("reference_dense_decode", s);
    elapsed_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }

  double checksum = 0, lse_sum = 0;
  for (uint16_t x : out) checksum += bf16_bits_to_float(x);
  for (float x : lse) lse_sum += x;
  std::printf("  backend %s: out [%d, %d, %d, %d] bf16, lse [%d, %d, %d] fp32\n", backend, kBatch, kQueryTokens,
              kHeadsQ, kHeadDimV, kBatch, kHeadsQ, kQueryTokens);
  std::printf("  time %.1f us, checksum(out) = %.6f, sum(lse) = %.4f\n", elapsed_us, checksum, lse_sum);
  return 0;
}

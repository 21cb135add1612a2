// GPU checks of the softmax's FMA-pipe exponential (exp2_poly) against exp2:
// relative error, exact zeros for x <= -127 and -inf, NaN kept.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/online_softmax.cuh"

namespace openmla {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

__global__ void exp2_poly_kernel(const float* x, float* y, int n) {  // x, y: [n]
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kernels::common::exp2_poly(x[i]);
}

std::vector<float> run_exp2_poly(const std::vector<float>& x) {
  float* d_x = nullptr;
  float* d_y = nullptr;
  const size_t bytes = x.size() * sizeof(float);
  std::vector<float> y(x.size(), 0.0f);
  if (cudaMalloc(&d_x, bytes) != cudaSuccess || cudaMalloc(&d_y, bytes) != cudaSuccess) return {};
  cudaMemcpy(d_x, x.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemset(d_y, 0xff, bytes);  // NaN: every output must be written
  exp2_poly_kernel<<<int((x.size() + 255) / 256), 256>>>(d_x, d_y, int(x.size()));
  cudaMemcpy(y.data(), d_y, bytes, cudaMemcpyDeviceToHost);
  cudaFree(d_x);
  cudaFree(d_y);
  return y;
}

TEST(OnlineSoftmaxGpu, Exp2PolyMatchesExp2) {
  // The softmax's arguments: s * scale - max <= 0 (a hair above 0 from rounding).
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-125.0f + 125.5f * float(i) / 200000.0f);
  const std::vector<float> y = run_exp2_poly(x);
  ASSERT_EQ(y.size(), x.size());
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp2(double(x[i]));
    worst = std::max(worst, std::fabs(double(y[i]) - want) / want);
  }
  EXPECT_LT(worst, 1e-4) << "max relative error of exp2_poly on [-125, 0.5]";
}

TEST(OnlineSoftmaxGpu, Exp2PolyEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -1e30f, -200.0f, -127.0f, -126.9f, std::nanf(""), 0.0f, -1.0f};
  const std::vector<float> y = run_exp2_poly(x);
  ASSERT_EQ(y.size(), x.size());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], 0.0f) << "x = " << x[i] << " must give exactly 0";
  EXPECT_GE(y[4], 0.0f);
  EXPECT_LT(y[4], 1e-37f);
  EXPECT_TRUE(std::isnan(y[5])) << "NaN must stay NaN";
  EXPECT_NEAR(y[6], 1.0f, 1e-4f);
  EXPECT_NEAR(y[7], 0.5f, 0.5e-4f);
}

}  // namespace
}  // namespace openmla

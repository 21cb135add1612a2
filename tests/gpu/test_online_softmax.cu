// GPU checks of the softmax's FMA-pipe exponential (exp2_poly) against exp2:
// relative error, exact zeros for x <= -127 and -inf, NaN kept.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/online_softmax.cuh"
#include "test_util/device_buffer.h"

namespace openmla {
namespace {

__global__ void exp2_poly_kernel(const float* x, float* y, int n) {  // x, y: [n]
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kernels::common::exp2_poly(x[i]);
}

// y[i] = exp2_poly(x[i]) on the GPU (y starts as NaN, so every entry must be written).
void run_exp2_poly(const std::vector<float>& x, std::vector<float>& y) {
  test::DeviceBuffer<float> d_x, d_y;
  ASSERT_NO_FATAL_FAILURE(test::upload(d_x, x));
  ASSERT_NO_FATAL_FAILURE(test::upload(d_y, std::vector<float>(x.size(), std::nanf(""))));
  exp2_poly_kernel<<<int((x.size() + 255) / 256), 256>>>(d_x.ptr, d_y.ptr, int(x.size()));
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  y.resize(x.size());
  ASSERT_NO_FATAL_FAILURE(test::download(y, d_y));
}

TEST(OnlineSoftmaxGpu, Exp2PolyMatchesExp2) {
  // The softmax's arguments: s * scale - max <= 0 (a hair above 0 from rounding).
  std::vector<float> x;
  for (int i = 0; i <= 200000; ++i) x.push_back(-125.0f + 125.5f * float(i) / 200000.0f);
  std::vector<float> y;
  ASSERT_NO_FATAL_FAILURE(run_exp2_poly(x, y));
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
  std::vector<float> y;
  ASSERT_NO_FATAL_FAILURE(run_exp2_poly(x, y));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], 0.0f) << "x = " << x[i] << " must give exactly 0";
  EXPECT_GE(y[4], 0.0f);
  EXPECT_LT(y[4], 1e-37f);
  EXPECT_TRUE(std::isnan(y[5])) << "NaN must stay NaN";
  EXPECT_NEAR(y[6], 1.0f, 1e-4f);
  EXPECT_NEAR(y[7], 0.5f, 0.5e-4f);
}

}  // namespace
}  // namespace openmla

// End-to-end dense decode through the public API (schedule kernel -> attention
// -> combine): one CUDA-graph capture replayed with new device-resident
// seqlens, compared with the CPU reference after every replay.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "openmla/openmla.h"
#include "openmla/reference.h"
#include "test_util/device_buffer.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {


using test::DeviceBuffer;
using test::upload;

// Bytes held by a device buffer.
template <class T>
size_t bytes_of(const DeviceBuffer<T>& buffer) {
  return buffer.count * sizeof(T);
}

// One dense call's tensors on the device and its run captured in a graph.
struct CapturedDenseCall {
  DeviceBuffer<uint8_t> q, kv, out;
  DeviceBuffer<int32_t> table, seqlens;
  DeviceBuffer<float> lse;
  void* workspace = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedDenseCall() = default;
  CapturedDenseCall(const CapturedDenseCall&) = delete;
  CapturedDenseCall& operator=(const CapturedDenseCall&) = delete;
  ~CapturedDenseCall() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    cudaFree(workspace);
  }
};

// Uploads `inputs` into `call` and captures dense_decode_run with `plan` on `stream`.
void capture_dense_call(test::DenseDecodeInputs& inputs, const DecodePlan& plan, cudaStream_t stream,
                        CapturedDenseCall* call) {
  upload(call->q, inputs.q);
  upload(call->kv, inputs.kv_cache);
  upload(call->table, inputs.block_table);
  upload(call->seqlens, inputs.seqlens);
  upload(call->out, inputs.out);
  upload(call->lse, inputs.lse);
  ASSERT_CUDA(cudaMalloc(&call->workspace, std::max<size_t>(plan.workspace.total_bytes, 256)));
  DenseDecodeParams params = inputs.params();
  params.q = call->q.ptr;
  params.kv_cache = call->kv.ptr;
  params.block_table = call->table.ptr;
  params.seqlens = call->seqlens.ptr;
  params.out = call->out.ptr;
  params.lse = call->lse.ptr;
  cudaGraph_t graph;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status captured = dense_decode_run(params, plan, call->workspace, plan.workspace.total_bytes, stream);
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.is_ok()) << captured.message();
  ASSERT_CUDA(cudaGraphInstantiate(&call->exec, graph, 0));
  cudaGraphDestroy(graph);
}

struct GraphCase {
  int batch, s_q, h_q, page_size;
  bool causal;
  PlanOptions options;
};

class DenseDecodeGraph : public ::testing::TestWithParam<GraphCase> {};

TEST_P(DenseDecodeGraph, ReplayWithNewLengthsMatchesReference) {
  const GraphCase c = GetParam();
  test::DenseDecodeConfig config;
  config.batch = c.batch;
  config.s_q = c.s_q;
  config.h_q = c.h_q;
  config.page_size = c.page_size;
  config.causal = c.causal;
  config.max_seqlen = 3000;
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config, 1234 + c.h_q + c.s_q);
  const std::vector<int32_t> full_lengths(inputs.seqlens.begin(), inputs.seqlens.end());

  DeviceInfo device;
  ASSERT_TRUE(query_device_info(0, &device).is_ok());
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(inputs.shape, device, &plan, c.options).is_ok());

  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CapturedDenseCall call;
  ASSERT_NO_FATAL_FAILURE(capture_dense_call(inputs, plan, stream, &call));
  DeviceBuffer<uint8_t>& out = call.out;
  DeviceBuffer<int32_t>& seqlens = call.seqlens;
  DeviceBuffer<float>& lse = call.lse;

  test::Rng rng(99);
  for (int replay = 0; replay < 4; ++replay) {
    // New lengths, never past the tokens that hold data; replay 2 shrinks the live batch.
    for (int b = 0; b < c.batch; ++b) {
      const int32_t full = full_lengths[size_t(b)];
      inputs.seqlens[size_t(b)] = replay == 0 ? full : (replay == 2 && b >= c.batch / 2) ? 0 : rng.uniform_int(0, full);
    }
    inputs.poison_outputs();
    ASSERT_CUDA(cudaMemcpyAsync(out.ptr, inputs.out.data(), bytes_of(out), cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaMemcpyAsync(lse.ptr, inputs.lse.data(), bytes_of(lse), cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaMemcpyAsync(seqlens.ptr, inputs.seqlens.data(), bytes_of(seqlens), cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaGraphLaunch(call.exec, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    ASSERT_CUDA(cudaMemcpy(inputs.out.data(), out.ptr, bytes_of(out), cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(inputs.lse.data(), lse.ptr, bytes_of(lse), cudaMemcpyDeviceToHost));
    const std::vector<float> gpu_out = inputs.out_values(), gpu_lse = inputs.lse_values();

    inputs.poison_outputs();
    ASSERT_TRUE(reference_dense_decode(inputs.params()).is_ok());
    const std::vector<float> ref_out = inputs.out_values(), ref_lse = inputs.lse_values();

    for (size_t i = 0; i < gpu_out.size(); ++i) {
      ASSERT_FALSE(std::isnan(gpu_out[i])) << "replay " << replay << ": output element " << i << " not written";
    }
    EXPECT_LE(test::rel_l2(gpu_out, ref_out), 1e-2) << "replay " << replay;
    const test::LseComparison lse_check = test::compare_lse(gpu_lse, ref_lse, 1e-3);
    EXPECT_TRUE(lse_check.ok) << "replay " << replay << ": " << lse_check.message;
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DenseDecodeGraph,
    ::testing::Values(GraphCase{9, 1, 16, 64, false, {}},                      // automatic split
                      GraphCase{9, 1, 16, 64, false, PlanOptions{.cluster_split = 8}},  // cluster split, C = 8
                      GraphCase{5, 2, 128, 64, true, PlanOptions{.cluster_split = 2}},  // cluster split, two tiles
                      GraphCase{5, 2, 128, 64, true, {}},                      // MTP, two tiles per part
                      GraphCase{6, 1, 64, 32, false, PlanOptions{.max_parts = 1}},  // forced no-split
                      GraphCase{4, 3, 32, 16, true, PlanOptions{.min_parts = 40}}));  // forced split

// The pair kernel's loader and consumers over many replays, L2 flushed between them, each
// part ending on a pair without an odd block (b = 1, s_q = 4, h_q = 128, 2048 tokens: 16 parts
// of 2-3 blocks), alternating with a column-split call (pages of 32) as the bench did when it hung: a loader
// that counted K1's frees per pair waited, now and then, on a phase the consumers had already
// completed twice, and spun after they exited (H200, 2026-12-03; docs/performance.md, session
// 34). Timing-dependent: the old protocol hung within a few thousand replays in the bench. The
// last replay is checked against the reference.
TEST(DenseDecodePairKernel, PartsEndingWithoutAnOddBlockNeverHang) {
  DeviceInfo device;
  ASSERT_TRUE(query_device_info(0, &device).is_ok());
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  test::DenseDecodeInputs inputs[2];
  DecodePlan plans[2];
  CapturedDenseCall calls[2];
  const int heads[2] = {16, 128};
  const int page_sizes[2] = {32, 64};  // pages of 32: the column split; of 64: the pair kernel
  for (int i = 0; i < 2; ++i) {
    test::DenseDecodeConfig config;
    config.batch = 1;
    config.s_q = 4;
    config.h_q = heads[i];
    config.page_size = page_sizes[i];
    config.causal = true;
    config.seqlens = {2048};
    inputs[i] = test::make_dense_decode_inputs(config, 77 + i);
    // The split-KV schedule (automatic would run these short calls as cluster splits).
    ASSERT_TRUE(plan_dense_decode(inputs[i].shape, device, &plans[i], PlanOptions{.cluster_split = 1}).is_ok());
    ASSERT_NO_FATAL_FAILURE(capture_dense_call(inputs[i], plans[i], stream, &calls[i]));
  }
  ASSERT_EQ(plans[0].kernel, DecodeKernel::kDenseColumnSplit);
  ASSERT_EQ(plans[1].kernel, DecodeKernel::kDenseAlternateBlocks);
  const size_t flush_bytes = size_t(256) << 20;  // > 4x the L2: every replay starts cold
  void* flush = nullptr;
  ASSERT_CUDA(cudaMalloc(&flush, flush_bytes));
  for (int round = 0; round < 20; ++round) {
    for (CapturedDenseCall& call : calls) {
      for (int replay = 0; replay < 400; ++replay) {
        ASSERT_CUDA(cudaMemsetAsync(flush, replay & 0xff, flush_bytes, stream));
        ASSERT_CUDA(cudaGraphLaunch(call.exec, stream));
      }
    }
    // A hung kernel never returns the stream: fail with a message rather than at ctest's timeout.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    cudaError_t state = cudaErrorNotReady;
    while ((state = cudaStreamQuery(stream)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state == cudaErrorNotReady) {
      ADD_FAILURE() << "round " << round << ": the replays did not finish in 30 s (a kernel hung)";
      std::fflush(nullptr);
      std::abort();  // the device cannot be used by the tests after this one
    }
    ASSERT_CUDA(state);
  }
  test::DenseDecodeInputs& pair = inputs[1];
  ASSERT_CUDA(cudaMemcpy(pair.out.data(), calls[1].out.ptr, bytes_of(calls[1].out), cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(pair.lse.data(), calls[1].lse.ptr, bytes_of(calls[1].lse), cudaMemcpyDeviceToHost));
  const std::vector<float> gpu_out = pair.out_values(), gpu_lse = pair.lse_values();
  pair.poison_outputs();
  ASSERT_TRUE(reference_dense_decode(pair.params()).is_ok());
  EXPECT_LE(test::rel_l2(gpu_out, pair.out_values()), 1e-2);
  const test::LseComparison lse_check = test::compare_lse(gpu_lse, pair.lse_values(), 1e-3);
  EXPECT_TRUE(lse_check.ok) << lse_check.message;
  cudaFree(flush);
  cudaStreamDestroy(stream);
}

// A plan made for other shapes is refused, not trusted.
TEST(DenseDecodeRun, RejectsPlanForOtherShapes) {
  test::DenseDecodeConfig config;
  config.batch = 3;
  test::DenseDecodeInputs inputs = test::make_dense_decode_inputs(config, 5);
  DenseDecodeShape other = inputs.shape;
  other.batch = 4;
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(other, DeviceInfo{}, &plan).is_ok());
  void* workspace = nullptr;
  ASSERT_CUDA(cudaMalloc(&workspace, plan.workspace.total_bytes));
  const Status status = dense_decode_run(inputs.params(), plan, workspace, plan.workspace.total_bytes, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("argument 'plan'"), std::string::npos) << status.message();
  cudaFree(workspace);
}

}  // namespace
}  // namespace openmla

// Batch-invariant mode (PlanOptions::batch_invariant, docs/batch_invariance.md)
// on the GPU: the same request placed at random positions of batches of 1, 7,
// 64 and 128 among random other requests, run eagerly and as a CUDA-graph
// replay, must give bitwise the same out and LSE (memcmp) every time; and the
// result must still be attention (close to the default mode's).
// Dense BF16 / FP16 (both dense kernels) and sparse FP8 (h_q 16, 64, 128).
// Also: the device schedule of invariant plans has the host's bytes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/schedule/launch.h"
#include "kernels/common/workspace.h"
#include "openmla/openmla.h"
#include "test_util/device_buffer.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {


using test::DeviceBuffer;

constexpr int kBatchSizes[] = {1, 7, 64, 128};

// One request's out row [s_q, h_q, d_v] and LSE row [h_q, s_q], as bytes.
struct RequestResult {
  std::vector<uint8_t> out;
  std::vector<uint8_t> lse;
};

// Device buffers of one batch size; pool rows are copied in per call.
struct BatchBuffers {
  DeviceBuffer<uint8_t> q, out, workspace;
  DeviceBuffer<int32_t> index, lengths;  // block table or indices; seqlens or topk_length
  DeviceBuffer<float> lse;
};

// Copies `rows` of `row_elems` elements of `pool` (rows pool_rows[i]) to `dst`.
template <class T>
void gather_rows(const std::vector<int>& pool_rows, const T* pool, int64_t row_elems, std::vector<T>* dst) {
  dst->resize(pool_rows.size() * size_t(row_elems));
  for (size_t i = 0; i < pool_rows.size(); ++i) {
    std::memcpy(dst->data() + i * row_elems, pool + pool_rows[i] * row_elems, size_t(row_elems) * sizeof(T));
  }
}

template <class T>
void upload_into(DeviceBuffer<T>& dst, const std::vector<T>& src, cudaStream_t stream) {
  ASSERT_LE(src.size(), dst.count);
  ASSERT_CUDA(cudaMemcpyAsync(dst.ptr, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
}

// Row `row` of the outputs (rows of out_row_bytes / lse_row_bytes).
void read_row(const BatchBuffers& buffers, int row, size_t out_row_bytes, size_t lse_row_bytes,
              RequestResult* result) {
  result->out.resize(out_row_bytes);
  result->lse.resize(lse_row_bytes);
  ASSERT_CUDA(cudaMemcpy(result->out.data(), buffers.out.ptr + row * out_row_bytes, out_row_bytes,
                         cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(result->lse.data(), reinterpret_cast<const uint8_t*>(buffers.lse.ptr) + row * lse_row_bytes,
                         lse_row_bytes, cudaMemcpyDeviceToHost));
}

// The sparse families' calls: `rows` of the pool (clamped to its last row) as the
// call's q rows, index rows and lengths, copied into the buffers (grown as needed).
void fill_sparse_rows(const std::vector<int>& rows, int pool_rows_count, const uint16_t* pool_q, int64_t q_row_elems,
                      const int32_t* pool_indices, int64_t index_row_elems, const int32_t* pool_lengths,
                      BatchBuffers& b, cudaStream_t stream) {
  std::vector<int> pool_rows(rows);
  for (int& r : pool_rows) r = std::min(r, pool_rows_count - 1);
  std::vector<uint16_t> q;
  std::vector<int32_t> indices, lengths;
  gather_rows(pool_rows, pool_q, q_row_elems, &q);
  gather_rows(pool_rows, pool_indices, index_row_elems, &indices);
  gather_rows(pool_rows, pool_lengths, 1, &lengths);
  const size_t q_bytes = q.size() * sizeof(uint16_t);
  if (b.q.count < q_bytes) b.q.allocate(q_bytes);
  if (b.index.count < indices.size()) b.index.allocate(indices.size());
  if (b.lengths.count < lengths.size()) b.lengths.allocate(lengths.size());
  ASSERT_CUDA(cudaMemcpyAsync(b.q.ptr, q.data(), q_bytes, cudaMemcpyHostToDevice, stream));
  upload_into(b.index, indices, stream);
  upload_into(b.lengths, lengths, stream);
}

// Per-row topk_length of a sparse pool: the targets' lengths first, random ones after.
template <class Lengths>
void assign_target_lengths(Lengths& lengths, int count, const std::vector<int32_t>& targets, int32_t topk,
                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  lengths.assign(size_t(count), 0);
  for (int r = 0; r < count; ++r) {
    lengths[size_t(r)] = r < int(targets.size()) ? targets[size_t(r)] : int32_t(rng() % uint64_t(topk + 1));
  }
}

void expect_bitwise_equal(const RequestResult& got, const RequestResult& want, const std::string& where) {
  ASSERT_EQ(got.out.size(), want.out.size());
  ASSERT_EQ(got.lse.size(), want.lse.size());
  size_t first_out = got.out.size();
  for (size_t i = 0; i < got.out.size(); ++i) {
    if (got.out[i] != want.out[i]) {
      first_out = i;
      break;
    }
  }
  EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size()), 0)
      << where << ": out differs (first byte " << first_out << " of " << got.out.size() << ")";
  EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), got.lse.size()), 0) << where << ": lse differs";
}

// The harness shared by both families. `run(params_batch, plan, buffers, stream)`
// launches one call; `fill(pool_rows, buffers, stream)` copies the batch's rows in.
template <class RunCall, class FillBatch, class PlanFor>
void check_invariance(const char* family, const std::vector<int>& targets, int pool_size, size_t out_row_bytes,
                      size_t lse_row_bytes, const PlanFor& plan_for, const FillBatch& fill, const RunCall& run,
                      std::vector<RequestResult>* baselines) {
  std::mt19937_64 rng(20261201);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  baselines->assign(targets.size(), RequestResult{});
  for (const int batch : kBatchSizes) {
    DecodePlan plan;
    ASSERT_TRUE(plan_for(batch, &plan).is_ok());
    BatchBuffers buffers;
    buffers.workspace.allocate(std::max<size_t>(plan.workspace.total_bytes, 256));
    buffers.out.allocate(size_t(batch) * out_row_bytes);
    buffers.lse.allocate(size_t(batch) * lse_row_bytes / sizeof(float));
    std::vector<int> rows(size_t(batch), int(targets.size()));
    ASSERT_NO_FATAL_FAILURE(fill(rows, buffers, stream));  // sizes the input buffers
    // One eager call first: kernel attributes are set on first use, outside the capture.
    const Status warmup = run(batch, plan, buffers, stream);
    ASSERT_TRUE(warmup.is_ok()) << warmup.message();
    ASSERT_CUDA(cudaStreamSynchronize(stream));

    // One graph per batch size, captured once; every replay reads the buffers' new contents.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const Status captured = run(batch, plan, buffers, stream);
    ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(captured.is_ok()) << captured.message();
    ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

    for (size_t t = 0; t < targets.size(); ++t) {
      for (int trial = 0; trial < 2; ++trial) {
        // Random other requests, the target at a random position.
        for (int& row : rows) row = int(targets.size()) + int(rng() % uint64_t(pool_size - int(targets.size())));
        const int position = int(rng() % uint64_t(batch));
        rows[size_t(position)] = int(t);
        ASSERT_NO_FATAL_FAILURE(fill(rows, buffers, stream));
        for (const bool graph_replay : {false, true}) {
          ASSERT_CUDA(cudaMemsetAsync(buffers.out.ptr, 0xff, buffers.out.count, stream));  // NaN poison
          ASSERT_CUDA(cudaMemsetAsync(buffers.lse.ptr, 0xff, buffers.lse.count * sizeof(float), stream));
          if (graph_replay) {
            ASSERT_CUDA(cudaGraphLaunch(exec, stream));
          } else {
            const Status status = run(batch, plan, buffers, stream);
            ASSERT_TRUE(status.is_ok()) << status.message();
          }
          ASSERT_CUDA(cudaStreamSynchronize(stream));
          RequestResult result;
          ASSERT_NO_FATAL_FAILURE(read_row(buffers, position, out_row_bytes, lse_row_bytes, &result));
          RequestResult& baseline = (*baselines)[t];
          if (baseline.out.empty()) {
            baseline = result;  // batch 1, eager: the reference for every other placement
            continue;
          }
          ASSERT_NO_FATAL_FAILURE(expect_bitwise_equal(
              result, baseline,
              std::string(family) + " target " + std::to_string(t) + " batch " + std::to_string(batch) +
                  " position " + std::to_string(position) + (graph_replay ? " graph" : " eager")));
        }
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

// ---- dense ------------------------------------------------------------------------------------------------
struct DenseCase {
  DType dtype;
  int h_q, s_q;
  PlanOptions options;  // batch_invariant set by the test
};

class DenseBatchInvariant : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseBatchInvariant, RequestIsBitwiseTheSameInEveryBatch) {
  const DenseCase c = GetParam();
  const std::vector<int> target_lengths = {1, 63, 64, 1000, 16384, 100000};
  test::DenseDecodeConfig config;
  config.dtype = c.dtype;
  config.h_q = c.h_q;
  config.s_q = c.s_q;
  config.causal = c.s_q > 1;
  config.extra_table_columns = 3;
  std::mt19937_64 rng(5);
  config.seqlens.assign(target_lengths.begin(), target_lengths.end());
  for (int i = 0; i < 40; ++i) config.seqlens.push_back(i % 20 == 0 ? 20000 : int32_t(rng() % 3000));
  config.batch = int(config.seqlens.size());
  test::DenseDecodeInputs pool = test::make_dense_decode_inputs(config, 77 + c.h_q);
  const DenseDecodeShape pool_shape = pool.shape;
  const size_t elem = dtype_size(pool_shape.q_dtype);
  const size_t out_row_bytes = size_t(pool.out_stride_b) * dtype_size(pool_shape.out_dtype);
  const size_t lse_row_bytes = size_t(pool.lse_stride_b) * sizeof(float);

  DeviceBuffer<uint8_t> kv;
  test::upload(kv, pool.kv_cache);
  DeviceBuffer<float> q_scale, kv_scale;  // FP8: the kernel reads the descales on the device
  const bool fp8 = pool_shape.kv_dtype == DType::kFP8E4M3;
  if (fp8) {
    test::upload(q_scale, pool.q_scale);
    test::upload(kv_scale, pool.kv_scale);
  }
  DeviceInfo device;
  ASSERT_TRUE(query_device_info(0, &device).is_ok());
  PlanOptions options = c.options;
  options.batch_invariant = true;

  const auto shape_of = [&](int batch) {
    DenseDecodeShape shape = pool_shape;
    shape.batch = batch;
    return shape;
  };
  const auto params_of = [&](int batch, BatchBuffers& b) {
    DenseDecodeParams p = pool.params();
    p.shape = shape_of(batch);
    p.q = b.q.ptr;
    p.kv_cache = kv.ptr;
    p.block_table = b.index.ptr;
    p.seqlens = b.lengths.ptr;
    p.out = b.out.ptr;
    p.lse = b.lse.ptr;
    if (fp8) {
      p.q_scale = q_scale.ptr;
      p.kv_scale = kv_scale.ptr;
    }
    return p;
  };
  const auto plan_for = [&](int batch, DecodePlan* plan) {
    return plan_dense_decode(shape_of(batch), device, plan, options);
  };
  const auto fill = [&](const std::vector<int>& rows, BatchBuffers& b, cudaStream_t stream) {
    std::vector<int> pool_rows(rows);
    for (int& r : pool_rows) r = std::min(r, pool_shape.batch - 1);
    std::vector<uint8_t> q;
    std::vector<int32_t> table, seqlens;
    gather_rows(pool_rows, pool.q.data(), pool.q_stride_b * int64_t(elem), &q);
    gather_rows(pool_rows, pool.block_table.data(), pool.block_table_stride_b, &table);
    gather_rows(pool_rows, pool.seqlens.data(), 1, &seqlens);
    if (b.q.count < q.size()) b.q.allocate(q.size());
    if (b.index.count < table.size()) b.index.allocate(table.size());
    if (b.lengths.count < seqlens.size()) b.lengths.allocate(seqlens.size());
    upload_into(b.q, q, stream);
    upload_into(b.index, table, stream);
    upload_into(b.lengths, seqlens, stream);
  };
  const auto run = [&](int batch, const DecodePlan& plan, BatchBuffers& b, cudaStream_t stream) {
    return dense_decode_run(params_of(batch, b), plan, b.workspace.ptr, b.workspace.count, stream);
  };
  std::vector<RequestResult> baselines;
  ASSERT_NO_FATAL_FAILURE(check_invariance("dense", std::vector<int>(target_lengths.begin(), target_lengths.end()),
                                           pool_shape.batch, out_row_bytes, lse_row_bytes, plan_for, fill, run,
                                           &baselines));

  // Still attention: each target alone, invariant mode against the default mode.
  for (size_t t = 0; t < target_lengths.size(); ++t) {
    DecodePlan plan;
    ASSERT_TRUE(plan_dense_decode(shape_of(1), device, &plan).is_ok());
    BatchBuffers b;
    b.workspace.allocate(std::max<size_t>(plan.workspace.total_bytes, 256));
    b.out.allocate(out_row_bytes);
    b.lse.allocate(lse_row_bytes / sizeof(float));
    ASSERT_NO_FATAL_FAILURE(fill({int(t)}, b, nullptr));
    const Status status = dense_decode_run(params_of(1, b), plan, b.workspace.ptr, b.workspace.count, nullptr);
    ASSERT_TRUE(status.is_ok()) << status.message();
    ASSERT_CUDA(cudaDeviceSynchronize());
    RequestResult default_mode;
    ASSERT_NO_FATAL_FAILURE(read_row(b, 0, out_row_bytes, lse_row_bytes, &default_mode));
    std::vector<float> got, want, got_lse, want_lse;
    for (size_t i = 0; i < out_row_bytes / dtype_size(pool_shape.out_dtype); ++i) {
      got.push_back(test::load_value(pool_shape.out_dtype, baselines[t].out.data(), int64_t(i)));
      want.push_back(test::load_value(pool_shape.out_dtype, default_mode.out.data(), int64_t(i)));
    }
    got_lse.resize(lse_row_bytes / 4);
    want_lse.resize(lse_row_bytes / 4);
    std::memcpy(got_lse.data(), baselines[t].lse.data(), lse_row_bytes);
    std::memcpy(want_lse.data(), default_mode.lse.data(), lse_row_bytes);
    EXPECT_LE(test::rel_l2(got, want), 1e-2) << "length " << target_lengths[t];
    const test::LseComparison lse_check = test::compare_lse(got_lse, want_lse, 1e-3);
    EXPECT_TRUE(lse_check.ok) << "length " << target_lengths[t] << ": " << lse_check.message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DenseBatchInvariant,
    ::testing::Values(DenseCase{DType::kBF16, 16, 1, {}},    // column split, 32-block chunks
                      DenseCase{DType::kFP16, 16, 1, {}},
                      DenseCase{DType::kBF16, 128, 1, {}},   // alternate blocks (two query tiles), 128-block chunks
                      DenseCase{DType::kBF16, 128, 2, PlanOptions{.chunk_blocks = 32}},  // MTP, causal, shorter chunks
                      // The FP8 column split (e4m3 Q/KV, descales on the device).
                      DenseCase{DType::kFP8E4M3, 16, 1, {}},
                      DenseCase{DType::kFP8E4M3, 128, 2, PlanOptions{.chunk_blocks = 32}}),
    [](const ::testing::TestParamInfo<DenseCase>& info) {
      const DType dtype = info.param.dtype;
      return std::string(dtype == DType::kFP16 ? "fp16" : dtype == DType::kFP8E4M3 ? "fp8" : "bf16") + "_h" +
             std::to_string(info.param.h_q) + "_s" + std::to_string(info.param.s_q) +
             (info.param.options.chunk_blocks > 0 ? "_chunk" + std::to_string(info.param.options.chunk_blocks) : "");
    });

// ---- sparse -----------------------------------------------------------------------------------------------
struct SparseCase {
  int h_q, s_q;
  PlanOptions options;
};

class SparseBatchInvariant : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseBatchInvariant, RequestIsBitwiseTheSameInEveryBatch) {
  const SparseCase c = GetParam();
  constexpr int kTopk = 4096;
  const std::vector<int32_t> target_topk = {0, 1, 63, 64, 1000, 1025, kTopk};
  test::SparseDecodeConfig config;
  config.batch = 40;
  config.s_q = c.s_q;
  config.h_q = c.h_q;
  config.topk = kTopk;
  config.num_pages = 160;
  config.all_invalid_row = false;
  config.use_topk_length = false;  // every index position filled; topk_length set below
  config.use_attn_sink = true;     // the combine applies the sink to split items
  test::SparseDecodeInputs pool = test::make_sparse_decode_inputs(config, 31 + c.h_q);
  assign_target_lengths(pool.topk_length, config.batch, target_topk, kTopk, 9);
  const SparseDecodeShape pool_shape = pool.shape;
  const size_t out_row_bytes = size_t(pool.out_stride_b) * sizeof(uint16_t);
  const size_t lse_row_bytes = size_t(pool.lse_stride_b) * sizeof(float);

  DeviceBuffer<uint8_t> kv;
  DeviceBuffer<float> sink;
  test::upload(kv, pool.kv_cache);
  test::upload(sink, pool.attn_sink);
  DeviceInfo device;
  ASSERT_TRUE(query_device_info(0, &device).is_ok());
  PlanOptions options = c.options;
  options.batch_invariant = true;

  const auto shape_of = [&](int batch) {
    SparseDecodeShape shape = pool_shape;
    shape.batch = batch;
    return shape;
  };
  const auto params_of = [&](int batch, BatchBuffers& b) {
    SparseDecodeParams p = pool.params();
    p.shape = shape_of(batch);
    p.q = b.q.ptr;
    p.kv_cache = kv.ptr;
    p.indices = b.index.ptr;
    p.topk_length = b.lengths.ptr;
    p.attn_sink = sink.ptr;
    p.out = b.out.ptr;
    p.lse = b.lse.ptr;
    return p;
  };
  const auto plan_for = [&](int batch, DecodePlan* plan) {
    return plan_sparse_decode(shape_of(batch), device, plan, options);
  };
  const auto fill = [&](const std::vector<int>& rows, BatchBuffers& b, cudaStream_t stream) {
    fill_sparse_rows(rows, pool_shape.batch, pool.q.data(), pool.q_stride_b, pool.indices.data(),
                     pool.indices_stride_b, pool.topk_length.data(), b, stream);
  };
  const auto run = [&](int batch, const DecodePlan& plan, BatchBuffers& b, cudaStream_t stream) {
    return sparse_decode_run(params_of(batch, b), plan, b.workspace.ptr, b.workspace.count, stream);
  };
  std::vector<int> targets(target_topk.begin(), target_topk.end());
  std::vector<RequestResult> baselines;
  ASSERT_NO_FATAL_FAILURE(check_invariance("sparse", targets, pool_shape.batch, out_row_bytes, lse_row_bytes, plan_for,
                                           fill, run, &baselines));

  // Still attention: each target alone, against the default mode.
  for (size_t t = 0; t < target_topk.size(); ++t) {
    DecodePlan plan;
    ASSERT_TRUE(plan_sparse_decode(shape_of(1), device, &plan).is_ok());
    BatchBuffers b;
    b.workspace.allocate(std::max<size_t>(plan.workspace.total_bytes, 256));
    b.out.allocate(out_row_bytes);
    b.lse.allocate(lse_row_bytes / sizeof(float));
    ASSERT_NO_FATAL_FAILURE(fill({int(t)}, b, nullptr));
    const Status status = sparse_decode_run(params_of(1, b), plan, b.workspace.ptr, b.workspace.count, nullptr);
    ASSERT_TRUE(status.is_ok()) << status.message();
    ASSERT_CUDA(cudaDeviceSynchronize());
    RequestResult default_mode;
    ASSERT_NO_FATAL_FAILURE(read_row(b, 0, out_row_bytes, lse_row_bytes, &default_mode));
    std::vector<float> got, want, got_lse(lse_row_bytes / 4), want_lse(lse_row_bytes / 4);
    for (size_t i = 0; i < out_row_bytes / 2; ++i) {
      got.push_back(test::load_value(DType::kBF16, baselines[t].out.data(), int64_t(i)));
      want.push_back(test::load_value(DType::kBF16, default_mode.out.data(), int64_t(i)));
    }
    std::memcpy(got_lse.data(), baselines[t].lse.data(), lse_row_bytes);
    std::memcpy(want_lse.data(), default_mode.lse.data(), lse_row_bytes);
    if (target_topk[t] > 0) EXPECT_LE(test::rel_l2(got, want), 1e-2) << "topk_length " << target_topk[t];
    const test::LseComparison lse_check = test::compare_lse(got_lse, want_lse, 1e-3);
    EXPECT_TRUE(lse_check.ok) << "topk_length " << target_topk[t] << ": " << lse_check.message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SparseBatchInvariant,
    ::testing::Values(SparseCase{16, 1, {}},                              // heads on N, 2 chunks at topk 4096
                      SparseCase{16, 2, {}},
                      SparseCase{64, 1, {}},                              // heads on M, 1 chunk
                      SparseCase{64, 1, PlanOptions{.chunk_blocks = 16}},  // heads on M, 4 chunks
                      SparseCase{128, 1, {}},                             // CTA pair, 1 chunk
                      SparseCase{128, 2, PlanOptions{.chunk_blocks = 16}}),  // CTA pair, split chunks
    [](const ::testing::TestParamInfo<SparseCase>& info) {
      return "h" + std::to_string(info.param.h_q) + "_s" + std::to_string(info.param.s_q) +
             (info.param.options.chunk_blocks > 0 ? "_chunk" + std::to_string(info.param.options.chunk_blocks) : "");
    });

// ---- sparse prefill: a query token's rows do not depend on the other tokens of the call ---------------------
struct PrefillCase {
  int h_q, d_qk, fp8_cache_page_size;
  PlanOptions options;
};

class PrefillBatchInvariant : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(PrefillBatchInvariant, TokenIsBitwiseTheSameInEveryCall) {
  const PrefillCase c = GetParam();
  constexpr int kTopk = 4096;
  const std::vector<int32_t> target_topk = {0, 1, 63, 64, 1000, 1025, kTopk};
  test::SparsePrefillConfig config;
  config.s_q = 40;  // the pool of tokens the calls draw from
  config.h_q = c.h_q;
  config.d_qk = c.d_qk;
  config.s_kv = 64 * 160;
  config.topk = kTopk;
  config.all_invalid_row = false;
  config.use_attn_sink = true;  // the combine applies the sink to split tokens
  config.fp8_cache_page_size = c.fp8_cache_page_size;
  test::SparsePrefillInputs pool = test::make_sparse_prefill_inputs(config, 41 + c.h_q);
  assign_target_lengths(pool.topk_length, config.s_q, target_topk, kTopk, 13);
  const SparsePrefillShape pool_shape = pool.shape;
  const size_t out_row_bytes = size_t(pool.out_stride_s) * sizeof(uint16_t);
  const size_t lse_row_bytes = size_t(c.h_q) * sizeof(float);

  DeviceBuffer<uint16_t> kv;
  DeviceBuffer<uint8_t> kv_cache;
  DeviceBuffer<float> sink, max_logits;
  if (pool_shape.fp8_kv_cache) {
    test::upload(kv_cache, pool.kv_cache);
  } else {
    test::upload(kv, pool.kv);
  }
  test::upload(sink, pool.attn_sink);
  max_logits.allocate(size_t(128) * c.h_q);  // the largest call's [s_q, h_q]
  DeviceInfo device;
  ASSERT_TRUE(query_device_info(0, &device).is_ok());
  PlanOptions options = c.options;
  options.batch_invariant = true;

  const auto shape_of = [&](int tokens) {
    SparsePrefillShape shape = pool_shape;
    shape.s_q = tokens;
    return shape;
  };
  const auto params_of = [&](int tokens, BatchBuffers& b) {
    SparsePrefillParams p = pool.params();
    p.shape = shape_of(tokens);
    p.q = b.q.ptr;
    p.kv = pool_shape.fp8_kv_cache ? nullptr : kv.ptr;
    p.kv_cache = pool_shape.fp8_kv_cache ? kv_cache.ptr : nullptr;
    p.indices = b.index.ptr;
    p.topk_length = b.lengths.ptr;
    p.attn_sink = sink.ptr;
    p.out = b.out.ptr;
    p.max_logits = max_logits.ptr;
    p.lse = b.lse.ptr;
    return p;
  };
  const auto plan_for = [&](int tokens, DecodePlan* plan) {
    return plan_sparse_prefill(shape_of(tokens), device, plan, options);
  };
  const auto fill = [&](const std::vector<int>& rows, BatchBuffers& b, cudaStream_t stream) {
    fill_sparse_rows(rows, pool_shape.s_q, pool.q.data(), pool.q_stride_s, pool.indices.data(),
                     pool.indices_stride_s, pool.topk_length.data(), b, stream);
  };
  const auto run = [&](int tokens, const DecodePlan& plan, BatchBuffers& b, cudaStream_t stream) {
    return sparse_prefill_run(params_of(tokens, b), plan, b.workspace.ptr, b.workspace.count, stream);
  };
  std::vector<int> targets(target_topk.begin(), target_topk.end());
  std::vector<RequestResult> baselines;
  ASSERT_NO_FATAL_FAILURE(check_invariance("prefill", targets, pool_shape.s_q, out_row_bytes, lse_row_bytes, plan_for,
                                           fill, run, &baselines));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PrefillBatchInvariant,
    ::testing::Values(PrefillCase{16, kHeadDimQK, 0, {}},                                 // padded tile, 2 chunks
                      PrefillCase{128, kHeadDimQK, 0, PlanOptions{.chunk_blocks = 16}},   // split chunks
                      PrefillCase{64, kHeadDimLatent, 0, {}},                             // d_qk 512
                      PrefillCase{64, kHeadDimQK, 64, PlanOptions{.chunk_blocks = 16}}),  // FP8 cache
    [](const ::testing::TestParamInfo<PrefillCase>& info) {
      return "h" + std::to_string(info.param.h_q) + "_d" + std::to_string(info.param.d_qk) +
             (info.param.fp8_cache_page_size > 0 ? "_fp8cache" : "") +
             (info.param.options.chunk_blocks > 0 ? "_chunk" + std::to_string(info.param.options.chunk_blocks) : "");
    });

// ---- the schedule kernel builds the host's bytes for invariant plans ---------------------------------------
TEST(BatchInvariantScheduleGpu, DeviceScheduleMatchesHostBytes) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    DeviceInfo device;
    device.num_sms = 1 + int(rng() % 264);
    DenseDecodeShape shape;
    // Trial 0: 60000 parts (the scheduler's scratch in global memory); the rest fit shared memory.
    shape.batch = trial == 0 ? 600 : 1 + int(rng() % 300);
    shape.h_q = trial == 0 ? 16 : 1 + int(rng() % 128);
    shape.max_pages_per_seq = trial == 0 ? 1600 : 1 + int(rng() % 1000);
    shape.num_pages = shape.max_pages_per_seq;
    DecodePlan plan;
    const Status planned = plan_dense_decode(shape, device, &plan, PlanOptions{.batch_invariant = true});
    if (!planned.is_ok()) continue;  // more possible chunks than a grid holds
    std::vector<int32_t> lengths(size_t(shape.batch));
    for (int32_t& l : lengths) l = int32_t(rng() % uint64_t(plan.lengths.max_length + 100));  // some clamp

    DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
    DeviceBuffer<int32_t> d_lengths(lengths.size());
    ASSERT_CUDA(cudaMemset(workspace.ptr, 0xff, plan.workspace.total_bytes));
    ASSERT_CUDA(cudaMemcpy(d_lengths.ptr, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice));
    ItemLengths device_lengths = plan.lengths;
    device_lengths.lengths = d_lengths.ptr;
    ASSERT_TRUE(kernels::schedule::launch(plan, device_lengths, kernels::decode_workspace(plan, workspace.ptr), nullptr)
                    .is_ok());
    ASSERT_CUDA(cudaDeviceSynchronize());

    ItemLengths host_lengths = plan.lengths;
    host_lengths.lengths = lengths.data();
    HostSchedule host;
    ASSERT_TRUE(build_schedule_host(plan, host_lengths, &host).is_ok());
    const Status checked = check_plan(plan, host_lengths, host);
    ASSERT_TRUE(checked.is_ok()) << checked.message();
    std::vector<PartWork> parts(size_t(plan.num_parts));
    std::vector<CombineEntry> combine(size_t(plan.num_parts));
    ASSERT_CUDA(cudaMemcpy(parts.data(), workspace.ptr + plan.workspace.parts.offset, parts.size() * sizeof(PartWork),
                           cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(combine.data(), workspace.ptr + plan.workspace.combine.offset,
                           combine.size() * sizeof(CombineEntry), cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(parts.data(), host.parts.data(), parts.size() * sizeof(PartWork)), 0) << "trial " << trial;
    ASSERT_EQ(std::memcmp(combine.data(), host.combine.data(), combine.size() * sizeof(CombineEntry)), 0)
        << "trial " << trial;
  }
}

}  // namespace
}  // namespace openmla

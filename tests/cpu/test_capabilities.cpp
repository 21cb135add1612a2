// can_implement answers exactly what run accepts: one capability table
// (openmla/capabilities.h) behind both. Sweeps dtypes x page sizes x head
// counts x d_qk and holds each can_implement answer against the checks run()
// makes before it touches the stream (api/run_checks.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "api/run_checks.h"
#include "validate/validate.h"
#include "openmla/openmla.h"
#include "test_util/host_buffer.h"

namespace openmla {
namespace {

using Buffer = test::HostBuffer;
constexpr auto make_buffer = test::make_host_buffer;

// The message after "<entry>: ", so answers of two entries can be compared.
std::string without_entry(const Status& status) {
  const std::string& m = status.message();
  const size_t colon = m.find(": ");
  return colon == std::string::npos ? m : m.substr(colon + 2);
}

// can_implement's answer against run's checks for one call: both accept, or
// both refuse with the same code and message (entry aside), naming an
// argument unless the refusal is the whole family's.
void expect_same_answer(const Status& can, const Status& run, const std::string& what, bool names_argument = true) {
  if (can.is_ok()) {
    EXPECT_TRUE(run.is_ok()) << what << ": can_implement says yes, run refuses: " << run.message();
    return;
  }
  EXPECT_FALSE(run.is_ok()) << what << ": can_implement refuses (" << can.message() << "), run accepts";
  EXPECT_EQ(can.code(), run.code()) << what;
  EXPECT_EQ(without_entry(can), without_entry(run)) << what;
  if (names_argument) EXPECT_NE(can.message().find("argument '"), std::string::npos) << what << ": " << can.message();
}

const float kUnitScale = 1.0f;

struct DenseCall {
  Buffer q, kv, block_table, seqlens, out, lse;
  DenseDecodeParams p;

  DenseCall(DType dtype, int page_size, int h_q, int d_qk) {
    DenseDecodeShape& s = p.shape;
    s.batch = 3, s.s_q = 2, s.h_q = h_q, s.h_kv = 1, s.d_qk = d_qk, s.d_v = kHeadDimV;
    s.page_size = page_size, s.max_pages_per_seq = std::max(1, 256 / page_size);
    s.num_pages = s.batch * s.max_pages_per_seq;
    s.q_dtype = s.kv_dtype = dtype;
    s.out_dtype = dtype == DType::kFP8E4M3 ? DType::kBF16 : dtype;
    const size_t in_bytes = dtype_size(dtype), out_bytes = dtype_size(s.out_dtype);
    const int64_t d = d_qk, dv = s.d_v;
    q = make_buffer(size_t(s.batch) * s.s_q * h_q * d * in_bytes);
    kv = make_buffer(size_t(s.num_pages) * page_size * d * in_bytes);
    block_table = make_buffer(size_t(s.batch) * s.max_pages_per_seq * 4);
    seqlens = make_buffer(size_t(s.batch) * 4);
    out = make_buffer(size_t(s.batch) * s.s_q * h_q * dv * out_bytes);
    lse = make_buffer(size_t(s.batch) * h_q * s.s_q * 4);
    p.q = q.get();
    p.q_stride_h = d, p.q_stride_s = h_q * d, p.q_stride_b = s.s_q * h_q * d;
    p.kv_cache = kv.get();
    p.kv_stride_head = d, p.kv_stride_token = d, p.kv_stride_page = page_size * d;
    p.block_table = static_cast<const int32_t*>(block_table.get());
    p.block_table_stride_b = s.max_pages_per_seq;
    p.seqlens = static_cast<const int32_t*>(seqlens.get());
    p.out = out.get();
    p.out_stride_h = dv, p.out_stride_s = h_q * dv, p.out_stride_b = s.s_q * h_q * dv;
    p.lse = static_cast<float*>(lse.get());
    p.lse_stride_h = s.s_q, p.lse_stride_b = h_q * s.s_q;
    p.softmax_scale = 1.0f / std::sqrt(576.0f);
    if (dtype == DType::kFP8E4M3) p.q_scale = p.kv_scale = &kUnitScale;
  }
};

TEST(Capabilities, DenseCanImplementAgreesWithRun) {
  const DeviceInfo device;
  int accepted = 0, refused = 0;
  for (DType dtype : {DType::kBF16, DType::kFP16, DType::kFP8E4M3, DType::kFP32}) {
    for (int page_size : {1, 8, 16, 32, 48, 64, 96, 128, 256}) {
      for (int h_q : {1, 16, 64, 128}) {
        for (int d_qk : {kHeadDimLatent, kHeadDimQK, 320}) {
          const std::string what = std::string(dtype_name(dtype)) + " page " + std::to_string(page_size) +
                                   " h_q " + std::to_string(h_q) + " d_qk " + std::to_string(d_qk);
          DenseCall call(dtype, page_size, h_q, d_qk);
          const Status can = dense_decode_can_implement(call.p);
          DecodePlan plan;
          const Status planned = plan_dense_decode(call.p.shape, device, &plan);
          if (!planned.is_ok()) {
            // A shape the planner refuses is one can_implement refuses too.
            EXPECT_FALSE(can.is_ok()) << what << ": planner refuses (" << planned.message() << ")";
            ++refused;
            continue;
          }
          Buffer workspace = make_buffer(plan.workspace.total_bytes);
          const Status run = detail::check_dense_decode_run("dense_decode_run", call.p, plan, workspace.get(),
                                                            plan.workspace.total_bytes);
          expect_same_answer(can, run, what);
          (can.is_ok() ? accepted : refused) += 1;
        }
      }
    }
  }
  // The sweep crosses the table's edge in both directions.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, 50);
}

// The capability table's dense rows, one by one (a change to the table must change this test).
TEST(Capabilities, DenseTableRows) {
  EXPECT_TRUE(dense_decode_gpu_dtype(DType::kBF16, DType::kBF16, DType::kBF16));
  EXPECT_TRUE(dense_decode_gpu_dtype(DType::kFP16, DType::kFP16, DType::kFP16));
  EXPECT_TRUE(dense_decode_gpu_dtype(DType::kFP8E4M3, DType::kFP8E4M3, DType::kBF16));
  EXPECT_FALSE(dense_decode_gpu_dtype(DType::kFP8E4M3, DType::kFP8E4M3, DType::kFP8E4M3));
  EXPECT_FALSE(dense_decode_gpu_dtype(DType::kBF16, DType::kFP16, DType::kBF16));
  for (int page_size : {8, 16, 32, 64, 128, 192, 256}) EXPECT_TRUE(dense_decode_gpu_page_size(page_size)) << page_size;
  for (int page_size : {1, 2, 4, 12, 24, 48, 80, 96}) EXPECT_FALSE(dense_decode_gpu_page_size(page_size)) << page_size;
  EXPECT_TRUE(dense_decode_gpu_head_dims(576, 512));
  EXPECT_TRUE(dense_decode_gpu_head_dims(512, 512));
  EXPECT_FALSE(dense_decode_gpu_head_dims(576, 576));
}

struct SparseCall {
  Buffer q, kv, indices, out, lse;
  SparseDecodeParams p;

  SparseCall(int h_q, int topk, int page_size) {
    SparseDecodeShape& s = p.shape;
    s.batch = 2, s.s_q = 2, s.h_q = h_q, s.topk = topk, s.page_size = page_size;
    s.num_pages = std::max(1, 512 / page_size);
    const int64_t d = kHeadDimQK, dv = kHeadDimV;
    q = make_buffer(size_t(s.batch) * s.s_q * h_q * d * 2);
    kv = make_buffer(size_t(s.num_pages) * page_size * kSparseFp8TokenBytes);
    indices = make_buffer(size_t(s.batch) * s.s_q * std::max(topk, 1) * 4);
    out = make_buffer(size_t(s.batch) * s.s_q * h_q * dv * 2);
    lse = make_buffer(size_t(s.batch) * h_q * s.s_q * 4);
    p.q = q.get();
    p.q_stride_h = d, p.q_stride_s = h_q * d, p.q_stride_b = s.s_q * h_q * d;
    p.kv_cache = static_cast<const uint8_t*>(kv.get());
    p.kv_stride_page_bytes = int64_t(page_size) * kSparseFp8TokenBytes;
    p.indices = static_cast<const int32_t*>(indices.get());
    p.indices_stride_s = topk, p.indices_stride_b = int64_t(s.s_q) * topk;
    p.out = out.get();
    p.out_stride_h = dv, p.out_stride_s = h_q * dv, p.out_stride_b = s.s_q * h_q * dv;
    p.lse = static_cast<float*>(lse.get());
    p.lse_stride_h = s.s_q, p.lse_stride_b = h_q * s.s_q;
    p.softmax_scale = 1.0f / std::sqrt(576.0f);
  }
};

TEST(Capabilities, SparseCanImplementAgreesWithRun) {
  const DeviceInfo device;
  int accepted = 0, refused = 0;
  for (int h_q : {1, 8, 16, 24, 32, 48, 64, 96, 128, 256}) {
    for (int topk : {64, 100, 2048}) {
      for (int page_size : {1, 64, 100}) {
        const std::string what =
            "h_q " + std::to_string(h_q) + " topk " + std::to_string(topk) + " page " + std::to_string(page_size);
        SparseCall call(h_q, topk, page_size);
        const Status can = sparse_decode_can_implement(call.p);
        DecodePlan plan;
        const Status planned = plan_sparse_decode(call.p.shape, device, &plan);
        if (!planned.is_ok()) {
          EXPECT_FALSE(can.is_ok()) << what << ": planner refuses (" << planned.message() << ")";
          ++refused;
          continue;
        }
        Buffer workspace = make_buffer(plan.workspace.total_bytes);
        const Status run = detail::check_sparse_decode_run("sparse_decode_run", call.p, plan, workspace.get(),
                                                           plan.workspace.total_bytes);
        expect_same_answer(can, run, what);
        (can.is_ok() ? accepted : refused) += 1;
      }
    }
  }
  EXPECT_GT(accepted, 10);
  EXPECT_GT(refused, 10);
}

// One sparse prefill call's buffers (contents unused: only the checks run).
struct PrefillCall {
  Buffer q, kv, indices, out, max_logits, lse;
  SparsePrefillParams p;
  PrefillCall(int h_q, int topk, int d_qk) {
    const int s_q = 4, s_kv = 300, dv = kHeadDimV;
    q = make_buffer(size_t(s_q) * h_q * d_qk * 2), kv = make_buffer(size_t(s_kv) * d_qk * 2);
    indices = make_buffer(size_t(s_q) * topk * 4), out = make_buffer(size_t(s_q) * h_q * dv * 2);
    max_logits = make_buffer(size_t(s_q) * h_q * 4), lse = make_buffer(size_t(s_q) * h_q * 4);
    p.shape.s_q = s_q, p.shape.s_kv = s_kv, p.shape.h_q = h_q, p.shape.topk = topk, p.shape.d_qk = d_qk;
    p.q = q.get(), p.q_stride_s = int64_t(h_q) * d_qk, p.q_stride_h = d_qk;
    p.kv = kv.get(), p.kv_stride_s = d_qk;
    p.indices = static_cast<const int32_t*>(indices.get()), p.indices_stride_s = topk;
    p.out = out.get(), p.out_stride_s = int64_t(h_q) * dv, p.out_stride_h = dv;
    p.max_logits = static_cast<float*>(max_logits.get());
    p.lse = static_cast<float*>(lse.get());
    p.softmax_scale = 0.04f;
  }
};

TEST(Capabilities, SparsePrefillCanImplementAgreesWithRun) {
  const DeviceInfo device;
  int accepted = 0, refused = 0;
  for (int h_q : {1, 8, 24, 64, 100, 128, 129}) {
    for (int topk : {1, 64, 100, 16384, 16385}) {
      for (int d_qk : {kHeadDimQK, kHeadDimLatent, 520}) {
        const std::string what =
            "h_q " + std::to_string(h_q) + " topk " + std::to_string(topk) + " d_qk " + std::to_string(d_qk);
        PrefillCall call(h_q, topk, d_qk);
        const Status can = sparse_prefill_can_implement(call.p);
        DecodePlan plan;
        const Status planned = plan_sparse_prefill(call.p.shape, device, &plan);
        if (!planned.is_ok()) {
          EXPECT_FALSE(can.is_ok()) << what << ": planner refuses (" << planned.message() << ")";
          ++refused;
          continue;
        }
        // BF16 kv: every planned shape names the one prefill kernel.
        EXPECT_EQ(plan.kernel, DecodeKernel::kSparsePrefillAlternateBlocks) << what;
        Buffer workspace = make_buffer(plan.workspace.total_bytes);
        const Status run = detail::check_sparse_prefill_run("sparse_prefill_run", call.p, plan, workspace.get(),
                                                            plan.workspace.total_bytes);
        expect_same_answer(can, run, what);
        (can.is_ok() ? accepted : refused) += 1;
      }
    }
  }
  EXPECT_GT(accepted, 30);
  EXPECT_GT(refused, 10);
}

// FP8-cache mode: one K/V source, the cache's token count, and the decode kernels' head counts.
TEST(Capabilities, SparsePrefillFp8CacheChecks) {
  const DeviceInfo device;
  const int page_size = 64, num_pages = 5;
  const auto fp8_call = [&](int h_q, int topk) {
    auto call = std::make_unique<PrefillCall>(h_q, topk, kHeadDimQK);
    SparsePrefillParams& p = call->p;
    p.shape.fp8_kv_cache = true;
    p.shape.page_size = page_size, p.shape.num_pages = num_pages, p.shape.s_kv = page_size * num_pages;
    p.kv_cache = static_cast<const uint8_t*>(call->kv.get());  // 300 * 576 * 2 bytes >= 5 * 64 * 656
    p.kv = nullptr;
    p.kv_stride_page_bytes = int64_t(page_size) * kSparseFp8TokenBytes;
    return call;
  };
  const auto expect_error = [](const Status& status, StatusCode code, const std::string& needle) {
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  };
  {  // accepted, planned with the sparse decode kernel of the head count
    auto call = fp8_call(128, 128);
    EXPECT_TRUE(sparse_prefill_can_implement(call->p).is_ok()) << sparse_prefill_can_implement(call->p).message();
    DecodePlan plan;
    ASSERT_TRUE(plan_sparse_prefill(call->p.shape, device, &plan).is_ok());
    EXPECT_EQ(plan.kernel, DecodeKernel::kSparseHeadsOnMCtaPair);
    Buffer workspace = make_buffer(plan.workspace.total_bytes);
    EXPECT_TRUE(detail::check_sparse_prefill_run("sparse_prefill_run", call->p, plan, workspace.get(),
                                                 plan.workspace.total_bytes)
                    .is_ok());
    // A BF16-mode plan is refused for the FP8-cache call.
    SparsePrefillShape bf16 = call->p.shape;
    bf16.fp8_kv_cache = false, bf16.page_size = 0, bf16.num_pages = 0;
    DecodePlan bf16_plan;
    ASSERT_TRUE(plan_sparse_prefill(bf16, device, &bf16_plan).is_ok());
    EXPECT_EQ(bf16_plan.kernel, DecodeKernel::kSparsePrefillAlternateBlocks);
    expect_error(detail::check_sparse_prefill_run("sparse_prefill_run", call->p, bf16_plan, workspace.get(),
                                                  plan.workspace.total_bytes),
                 StatusCode::kInvalidArgument, "argument 'plan'");
  }
  {  // both sources set
    auto call = fp8_call(64, 128);
    call->p.kv = call->q.get();
    expect_error(sparse_prefill_can_implement(call->p), StatusCode::kInvalidArgument, "argument 'kv' is set but not read");
  }
  {  // s_kv is not the cache's token count
    auto call = fp8_call(64, 128);
    call->p.shape.s_kv += 1;
    expect_error(sparse_prefill_can_implement(call->p), StatusCode::kInvalidArgument, "argument 's_kv'");
  }
  {  // page fields without FP8-cache mode
    PrefillCall call(64, 128, kHeadDimQK);
    call.p.shape.page_size = 64;
    expect_error(sparse_prefill_can_implement(call.p), StatusCode::kInvalidArgument, "argument 'page_size'");
  }
  {  // d_qk 512 has no 656-byte format
    auto call = fp8_call(64, 128);
    call->p.shape.d_qk = kHeadDimLatent;
    expect_error(sparse_prefill_can_implement(call->p), StatusCode::kNotSupported, "argument 'd_qk'");
  }
  // GPU capability: the decode kernels' head counts and whole 64-position blocks.
  expect_error(sparse_prefill_can_implement(fp8_call(24, 128)->p), StatusCode::kNotSupported, "argument 'h_q'");
  expect_error(sparse_prefill_can_implement(fp8_call(64, 100)->p), StatusCode::kNotSupported, "argument 'topk'");
}

}  // namespace
}  // namespace openmla

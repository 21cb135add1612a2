// GPU checks of the one-warp schedule kernel (same bytes as the host planner,
// also under CUDA-graph replay with new lengths) and of the combine kernel
// against reference_combine.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/combine/launch.h"
#include "kernels/common/schedule/launch.h"
#include "kernels/common/schedule/own_part.cuh"
#include "kernels/common/schedule/part_schedule.h"
#include "kernels/common/workspace.h"
#include "openmla/fp8.h"
#include "openmla/reference.h"
#include "test_util/device_buffer.h"
#include "test_util/schedule_records.h"

namespace openmla {
namespace {


using test::DeviceBuffer;

std::vector<int32_t> random_lengths(std::mt19937_64& rng, int count, int max_length) {
  std::vector<int32_t> lengths(static_cast<size_t>(count));
  for (auto& len : lengths) {
    const int pick = int(rng() % 6);
    len = pick == 0 ? 0 : pick == 1 ? 1 : pick == 2 ? max_length : int32_t(rng() % (max_length + 1));
  }
  return lengths;
}

TEST(ScheduleGpu, DeviceScheduleMatchesHostBytes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 90; ++trial) {
    // Every third trial a batch-invariant plan (plan/chunk_partition.h: longest chunks first).
    const bool invariant = trial % 3 == 2;
    DeviceInfo device;
    device.num_sms = 1 + int(rng() % 264);
    DenseDecodeShape shape;
    // 16384 items still fit the kernel's shared-memory scratch; 40000 take the global path.
    shape.batch = trial == 0 ? 16384 : trial == 1 ? 40000 : 1 + int(rng() % 3000);
    shape.s_q = 1 + int(rng() % 4);
    shape.h_q = 1 + int(rng() % 128);
    shape.max_pages_per_seq = 1 + int(rng() % 2000);
    if (invariant) shape.batch = 1 + int(rng() % 500);  // a part per possible chunk: fewer requests
    // Every sixth trial a long query block: parts of whole requests, no slots
    // (trial 4: 20000 requests, so the kernel's global-memory scratch path too).
    const bool long_query = trial % 6 == 4;
    if (long_query) {
      shape.batch = trial == 4 ? 20000 : 2 + int(rng() % 40);
      shape.s_q = 40 + int(rng() % 600);
      shape.h_q = 64 + int(rng() % 65);
    }
    shape.num_pages = shape.max_pages_per_seq;
    DecodePlan plan;
    const Status planned =
        plan_dense_decode(shape, device, &plan,
                          invariant    ? PlanOptions{.batch_invariant = true}
                          : long_query ? PlanOptions{}
                                       : PlanOptions{.min_parts = int(rng() % 3) * 50});
    if (invariant && planned.code() == StatusCode::kNotSupported) continue;  // too many possible chunks
    ASSERT_TRUE(planned.is_ok()) << planned.message();
    std::vector<int32_t> lengths = random_lengths(rng, shape.batch, plan.lengths.max_length + 100);  // some clamp

    DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
    DeviceBuffer<int32_t> d_lengths(lengths.size());
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
    ASSERT_TRUE(check_plan(plan, host_lengths, host).is_ok());
    test::expect_workspace_records(plan, workspace.ptr, host);
  }
}

// An attention grid's schedule prologue alone: each CTA builds its part with
// own_part (the lanes' closed form for up to 32 items, else the block
// partition) and leaves its records in the workspace.
__global__ void own_part_probe_kernel(const __grid_constant__ kernels::PartSchedule schedule) {
  __shared__ alignas(16) uint8_t scratch[plan_detail::kInKernelScheduleScratchBytes];
  (void)kernels::common::own_part(schedule, scratch);
}

// Records built in the attention grid, by either path, are the host
// schedule's bytes: random plans of 1-40 items (dense and sparse, forced parts
// and least part costs, up to 264 SMs), lengths out of range both ways or none.
TEST(ScheduleGpu, InKernelBuildMatchesHostBytes) {
  std::mt19937_64 rng(33);
  int in_lanes = 0, one_item = 0, in_block = 0;
  for (int trial = 0; trial < 400; ++trial) {
    DeviceInfo device;
    device.num_sms = 1 + int(rng() % 264);
    PlanOptions options{.min_parts = trial % 4 == 1 ? 1 + int(rng() % 200) : 0,
                        .min_part_cost = trial % 8 == 2 ? 1 + int(rng() % 40) : 0,
                        .cluster_split = 1,
                        .schedule_placement = SchedulePlacement::kAttentionKernel};
    DecodePlan plan;
    Status planned;
    if (trial % 2 == 0) {
      DenseDecodeShape shape;
      shape.batch = trial % 8 == 0 ? 1 : 1 + int(rng() % 40);  // one item: ScheduleBuild::kBuildOneItem
      shape.s_q = 1 + int(rng() % 4);
      shape.h_q = 1 + int(rng() % 128);
      shape.max_pages_per_seq = 1 + int(rng() % 300);
      shape.num_pages = shape.max_pages_per_seq;
      planned = plan_dense_decode(shape, device, &plan, options);
    } else {
      options.cluster_split = 0;
      SparseDecodeShape shape;
      shape.batch = trial % 8 == 1 ? 1 : 1 + int(rng() % 40);
      shape.s_q = trial % 8 == 1 ? 1 : 1 + int(rng() % 2);
      shape.h_q = 64;
      shape.topk = 64 * (1 + int(rng() % 64));
      shape.page_size = 64;
      shape.num_pages = 1 << 12;
      planned = plan_sparse_decode(shape, device, &plan, options);
    }
    ASSERT_TRUE(planned.is_ok()) << planned.message();
    if (!plan.schedule_in_kernel) continue;
    const int length_count = plan.num_items / plan.lengths.items_per_length;
    std::vector<int32_t> lengths = random_lengths(rng, length_count, plan.lengths.max_length + 100);  // some clamp
    if (trial % 3 == 0) lengths[rng() % lengths.size()] = -int32_t(rng() % 1000) - 1;
    const bool no_lengths = trial % 5 == 4;  // every item the default length

    DeviceBuffer<int32_t> d_lengths(lengths.size());
    ASSERT_CUDA(cudaMemcpy(d_lengths.ptr, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice));
    const test::ScheduleRecords records(plan);
    const kernels::PartSchedule schedule =
        kernels::part_schedule(plan, records.buffers(), no_lengths ? nullptr : d_lengths.ptr, /*build_schedule=*/true);
    ASSERT_NE(schedule.build, kernels::kReadParts);
    own_part_probe_kernel<<<dim3(unsigned(1 + rng() % 3), unsigned(plan.num_parts)), 128>>>(schedule);
    ASSERT_CUDA(cudaGetLastError());
    ASSERT_CUDA(cudaDeviceSynchronize());

    ItemLengths host_lengths = plan.lengths;
    host_lengths.lengths = no_lengths ? nullptr : lengths.data();
    HostSchedule host;
    ASSERT_TRUE(build_schedule_host(plan, host_lengths, &host).is_ok());
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(plan.num_items) + " items, " +
                 std::to_string(plan.num_parts) + " parts");
    records.expect_equal(host);
    (schedule.build == kernels::kBuildInLanes   ? in_lanes
     : schedule.build == kernels::kBuildOneItem ? one_item
                                                : in_block) += 1;
  }
  EXPECT_GT(in_lanes, 100);  // every build ran often enough to mean something
  EXPECT_GT(one_item, 30);
  EXPECT_GT(in_block, 30);
}

// Capture the schedule kernel once; replay it after changing the lengths in place.
TEST(ScheduleGpu, GraphReplayRebuildsFromNewLengths) {
  std::mt19937_64 rng(11);
  DeviceInfo device;
  DenseDecodeShape shape;
  shape.batch = 100;
  shape.h_q = 16;
  shape.max_pages_per_seq = 256;
  shape.num_pages = 256;
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(shape, device, &plan).is_ok());
  DeviceBuffer<uint8_t> workspace(plan.workspace.total_bytes);
  DeviceBuffer<int32_t> d_lengths(size_t(shape.batch));
  ItemLengths device_lengths = plan.lengths;
  device_lengths.lengths = d_lengths.ptr;

  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_TRUE(kernels::schedule::launch(plan, device_lengths, kernels::decode_workspace(plan, workspace.ptr), stream)
                  .is_ok());
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 5; ++replay) {
    std::vector<int32_t> lengths = random_lengths(rng, shape.batch, 256 * 64);
    if (replay == 3) std::fill(lengths.begin() + 10, lengths.end(), 0);  // smaller live batch
    ASSERT_CUDA(cudaMemcpyAsync(d_lengths.ptr, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    ItemLengths host_lengths = plan.lengths;
    host_lengths.lengths = lengths.data();
    HostSchedule host;
    ASSERT_TRUE(build_schedule_host(plan, host_lengths, &host).is_ok());
    test::expect_workspace_records(plan, workspace.ptr, host);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The combine kernel against reference_combine on random partials, with empty
// pieces (-inf LSE), fully empty rows and an attention sink. Both row layouts
// (four warps per row, a warp per row) meet items of 2 to 4 pieces (kFewPieces:
// the four-warp layout's short merge) and of more (the general merge).
TEST(CombineGpu, MatchesReferenceCombine) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  int few_pieces[2] = {0, 0}, many_pieces[2] = {0, 0};  // split items seen, by many_rows
  for (int trial = 0; trial < 10; ++trial) {
    const bool sparse = trial % 2 == 1;
    // Trials 0-2 and 6-7: few rows per item (four warps per row); 3-5 and 8-9: many rows (a warp per
    // row). Trials 3-4 split 1-2 requests over the 24 SMs (many pieces each); trials 6-9 have more
    // items than SMs (split items then have 2 pieces).
    const bool many_rows = (trial >= 3 && trial < 6) || trial >= 8;
    const int batch = trial < 3 ? 3 + trial : trial < 6 ? trial - 2 : 30 + trial, s_q = sparse ? 2 : 3;
    const int h_q = sparse ? (many_rows ? 64 : 16) : (many_rows ? 40 : 5);
    DeviceInfo device;
    device.num_sms = 24;
    DecodePlan plan;
    std::vector<int32_t> lengths;
    if (sparse) {
      SparseDecodeShape shape{.batch = batch, .s_q = s_q, .h_q = h_q, .topk = 2048, .num_pages = 64};
      ASSERT_TRUE(plan_sparse_decode(shape, device, &plan).is_ok());
    } else {
      DenseDecodeShape shape{.batch = batch, .s_q = s_q, .h_q = h_q, .num_pages = 64, .max_pages_per_seq = 64};
      ASSERT_TRUE(plan_dense_decode(shape, device, &plan).is_ok());
      lengths = random_lengths(rng, batch, 4096);
    }
    ItemLengths host_lengths = plan.lengths;
    host_lengths.lengths = lengths.empty() ? nullptr : lengths.data();
    HostSchedule schedule;
    ASSERT_TRUE(build_schedule_host(plan, host_lengths, &schedule).is_ok());
    ASSERT_GT(plan.num_slots, 0);
    for (const CombineEntry& entry : schedule.combine) {
      if (entry.num_pieces >= 2) ++(entry.num_pieces <= 4 ? few_pieces : many_pieces)[many_rows];
    }

    const size_t rows = size_t(plan.rows_per_item);
    std::vector<float> partial_o(size_t(plan.num_slots) * rows * 512);  // [slots, rows, 512]
    std::vector<float> partial_lse(size_t(plan.num_slots) * rows);      // [slots, rows]
    for (auto& x : partial_o) x = normal(rng);
    for (size_t i = 0; i < partial_lse.size(); ++i) {
      partial_lse[i] = (i % 7 == 0 || i % rows == 1) ? -INFINITY : 3.f * normal(rng);  // row 1: all empty
    }
    std::vector<float> sink(static_cast<size_t>(h_q));
    for (auto& x : sink) x = normal(rng);
    sink[0] = INFINITY;

    const size_t out_elems = size_t(batch) * s_q * h_q * 512;  // [b, s_q, h_q, 512]
    std::vector<uint16_t> ref_out(out_elems, 0x7fc0), gpu_out(out_elems, 0x7fc0);
    std::vector<float> ref_lse(size_t(batch) * h_q * s_q, NAN), gpu_lse(ref_lse.size(), NAN);  // [b, h_q, s_q]

    CombineParams params;
    params.batch = batch;
    params.s_q = s_q;
    params.h_q = h_q;
    params.q_tokens_per_item = plan.q_tokens_per_item;
    params.num_entries = plan.num_parts;
    params.num_slots = plan.num_slots;
    params.out_stride_h = 512;
    params.out_stride_s = int64_t(h_q) * 512;
    params.out_stride_b = int64_t(s_q) * params.out_stride_s;
    params.lse_stride_h = s_q;
    params.lse_stride_b = int64_t(h_q) * s_q;
    CombineParams host_params = params;
    host_params.entries = schedule.combine.data();
    host_params.partial_o = partial_o.data();
    host_params.partial_lse = partial_lse.data();
    host_params.attn_sink = sparse ? sink.data() : nullptr;
    host_params.out = ref_out.data();
    host_params.lse = ref_lse.data();
    ASSERT_TRUE(reference_combine(host_params).is_ok());

    DeviceBuffer<CombineEntry> d_entries(schedule.combine.size());
    DeviceBuffer<float> d_po(partial_o.size()), d_plse(partial_lse.size()), d_sink(sink.size()), d_lse(gpu_lse.size());
    DeviceBuffer<uint16_t> d_out(out_elems);
    ASSERT_CUDA(cudaMemcpy(d_entries.ptr, schedule.combine.data(), schedule.combine.size() * sizeof(CombineEntry),
                           cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_po.ptr, partial_o.data(), partial_o.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_plse.ptr, partial_lse.data(), partial_lse.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_sink.ptr, sink.data(), sink.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_out.ptr, gpu_out.data(), out_elems * 2, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_lse.ptr, gpu_lse.data(), gpu_lse.size() * 4, cudaMemcpyHostToDevice));
    CombineParams device_params = params;
    device_params.entries = d_entries.ptr;
    device_params.partial_o = d_po.ptr;
    device_params.partial_lse = d_plse.ptr;
    device_params.attn_sink = sparse ? d_sink.ptr : nullptr;
    device_params.out = d_out.ptr;
    device_params.lse = d_lse.ptr;
    ASSERT_TRUE(kernels::combine::launch(device_params, plan.rows_per_item, nullptr).is_ok());
    ASSERT_CUDA(cudaDeviceSynchronize());
    ASSERT_CUDA(cudaMemcpy(gpu_out.data(), d_out.ptr, out_elems * 2, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(gpu_lse.data(), d_lse.ptr, gpu_lse.size() * 4, cudaMemcpyDeviceToHost));

    // Combined rows are compared; rows of unsplit items stay NaN in both.
    double err = 0, norm = 0;
    for (size_t i = 0; i < out_elems; ++i) {
      const float r = bf16_bits_to_float(ref_out[i]), g = bf16_bits_to_float(gpu_out[i]);
      ASSERT_EQ(std::isnan(r), std::isnan(g)) << "element " << i;
      if (std::isnan(r)) continue;
      err += (double(r) - g) * (double(r) - g);
      norm += double(r) * r;
    }
    EXPECT_LE(std::sqrt(err / std::max(norm, 1e-30)), 1e-2) << "trial " << trial;
    for (size_t i = 0; i < gpu_lse.size(); ++i) {
      ASSERT_EQ(std::isnan(ref_lse[i]), std::isnan(gpu_lse[i])) << "lse " << i;
      ASSERT_EQ(std::isinf(ref_lse[i]), std::isinf(gpu_lse[i])) << "lse " << i;
      if (std::isfinite(ref_lse[i])) EXPECT_NEAR(ref_lse[i], gpu_lse[i], 1e-3) << "lse " << i;
    }
  }
  for (int many_rows = 0; many_rows < 2; ++many_rows) {
    EXPECT_GT(few_pieces[many_rows], 0) << "many_rows " << many_rows;
    EXPECT_GT(many_pieces[many_rows], 0) << "many_rows " << many_rows;
  }
}

}  // namespace
}  // namespace openmla

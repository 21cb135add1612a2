// Batch-invariant mode (PlanOptions::batch_invariant, docs/batch_invariance.md):
// the planner and the host schedule. What the kernels compute for an item is
// fixed by the pieces the schedule gives it (block ranges, partial or not, how
// many pieces the combine merges), so those must depend on the item's own
// length only: not on the batch size, the item's position or the other items.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "openmla/plan.h"

namespace openmla {
namespace {

constexpr PlanOptions kInvariant{.batch_invariant = true};

// What one item gets from a schedule: its pieces in KV order and its combine entry.
struct ItemPieces {
  std::vector<int32_t> begin_blocks, end_blocks;
  std::vector<bool> partial;
  int32_t combine_pieces = 0;  // num_pieces of its combine entry; 0 when it has none
  bool operator==(const ItemPieces& o) const {
    return begin_blocks == o.begin_blocks && end_blocks == o.end_blocks && partial == o.partial &&
           combine_pieces == o.combine_pieces;
  }
};

std::string describe(const ItemPieces& p) {
  std::string s = "pieces:";
  for (size_t k = 0; k < p.begin_blocks.size(); ++k) {
    s += " [" + std::to_string(p.begin_blocks[k]) + ", " + std::to_string(p.end_blocks[k]) + ")" +
         (p.partial[k] ? "p" : "");
  }
  return s + ", combine pieces " + std::to_string(p.combine_pieces);
}

// Parts may run an item's pieces in any order (longest chunks first), so the
// pieces are sorted into KV order.
ItemPieces pieces_of(const HostSchedule& schedule, int32_t item) {
  struct Piece {
    int32_t begin, end;
    bool partial;
  };
  std::vector<Piece> found;
  for (const PartWork& part : schedule.parts) {
    if ((part.flags & kPartEmpty) || item < part.begin_item || item > part.end_item) continue;
    found.push_back(Piece{part_item_begin_block(part, item), item == part.end_item ? part.end_block : -1,
                          part_item_is_partial(part, item)});
  }
  std::sort(found.begin(), found.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  ItemPieces pieces;
  for (const Piece& piece : found) {
    pieces.begin_blocks.push_back(piece.begin);
    pieces.end_blocks.push_back(piece.end);
    pieces.partial.push_back(piece.partial);
  }
  for (const CombineEntry& entry : schedule.combine) {
    if (entry.num_pieces > 0 && entry.item == item) pieces.combine_pieces = entry.num_pieces;
  }
  return pieces;
}

// Schedules `lengths` with `plan` and requires check_plan to accept it.
HostSchedule checked_schedule(const DecodePlan& plan, const std::vector<int32_t>& lengths) {
  ItemLengths item_lengths = plan.lengths;
  item_lengths.lengths = lengths.data();
  HostSchedule schedule;
  EXPECT_TRUE(build_schedule_host(plan, item_lengths, &schedule).is_ok());
  const Status checked = check_plan(plan, item_lengths, schedule);
  EXPECT_TRUE(checked.is_ok()) << checked.message();
  return schedule;
}

DenseDecodeShape dense_shape(int batch, int h_q, int max_length) {
  return DenseDecodeShape{.batch = batch, .h_q = h_q, .page_size = 64, .num_pages = 1 << 16,
                          .max_pages_per_seq = (max_length + 63) / 64};
}

// The same request at different positions of batches of 1, 7, 64 and 128 with
// random other requests, on machines of different SM counts: the same pieces.
TEST(BatchInvariantSchedule, AnItemsPiecesDependOnItsLengthOnly) {
  std::mt19937_64 rng(20261201);
  constexpr int kMaxLength = 100000;
  for (int h_q : {16, 64, 128}) {
    for (int32_t length : {0, 1, 63, 64, 1000, 1024, 1025, 16384, 100000}) {
      ItemPieces first;
      bool have_first = false;
      for (int batch : {1, 7, 64, 128}) {
        for (int num_sms : {132, 78}) {
          DeviceInfo device;
          device.num_sms = num_sms;
          DecodePlan plan;
          ASSERT_TRUE(plan_dense_decode(dense_shape(batch, h_q, kMaxLength), device, &plan, kInvariant).is_ok());
          std::vector<int32_t> lengths(static_cast<size_t>(batch));
          for (int32_t& l : lengths) l = int32_t(rng() % (kMaxLength + 1));
          const int position = int(rng() % batch);
          lengths[size_t(position)] = length;
          const HostSchedule schedule = checked_schedule(plan, lengths);
          const ItemPieces pieces = pieces_of(schedule, position);
          if (!have_first) {
            first = pieces;
            have_first = true;
          }
          EXPECT_EQ(pieces, first) << "h_q " << h_q << " length " << length << " batch " << batch << " position "
                                   << position << " sms " << num_sms << ": " << describe(pieces) << " vs "
                                   << describe(first);
        }
      }
      // The pieces are the fixed chunks [k K, min((k + 1) K, blocks)), partial iff there are several.
      const int32_t chunk = batch_invariant_chunk_blocks(h_q);
      const int32_t blocks = length <= 0 ? 1 : (length - 1) / kKvBlockTokens + 1;
      const int32_t chunks = (blocks - 1) / chunk + 1;
      ASSERT_EQ(int32_t(first.begin_blocks.size()), chunks) << "h_q " << h_q << " length " << length;
      for (int32_t k = 0; k < chunks; ++k) {
        EXPECT_EQ(first.begin_blocks[size_t(k)], k * chunk);
        EXPECT_EQ(first.end_blocks[size_t(k)], std::min((k + 1) * chunk, blocks));
        EXPECT_EQ(first.partial[size_t(k)], chunks > 1);
      }
      EXPECT_EQ(first.combine_pieces, chunks > 1 ? chunks : 0);
    }
  }
}

// Sparse items are (request, query token) pairs sharing the request's
// topk_length: the pieces of every token of a request depend on that length only.
TEST(BatchInvariantSchedule, SparseItemsDependOnTheirTopkLengthOnly) {
  std::mt19937_64 rng(7);
  for (int h_q : {16, 64, 128}) {
    for (int s_q : {1, 2}) {
      for (int32_t topk_length : {0, 1, 63, 64, 1000, 2048}) {
        ItemPieces first;
        bool have_first = false;
        for (int batch : {1, 7, 64, 128}) {
          const SparseDecodeShape shape{.batch = batch, .s_q = s_q, .h_q = h_q, .topk = 2048, .page_size = 64,
                                        .num_pages = 1 << 12};
          DecodePlan plan;
          ASSERT_TRUE(plan_sparse_decode(shape, DeviceInfo{}, &plan, kInvariant).is_ok());
          std::vector<int32_t> lengths(static_cast<size_t>(batch));
          for (int32_t& l : lengths) l = int32_t(rng() % 2049);
          const int position = int(rng() % batch);
          lengths[size_t(position)] = topk_length;
          const HostSchedule schedule = checked_schedule(plan, lengths);
          for (int token = 0; token < s_q; ++token) {
            const ItemPieces pieces = pieces_of(schedule, position * s_q + token);
            if (!have_first) {
              first = pieces;
              have_first = true;
            }
            EXPECT_EQ(pieces, first) << "h_q " << h_q << " topk_length " << topk_length << " batch " << batch;
          }
        }
      }
    }
  }
}

// Sparse prefill: a query token's pieces depend on its own topk_length only, not
// on the other tokens of the call or their number (BF16 and FP8-cache modes).
TEST(BatchInvariantSchedule, PrefillTokensDependOnTheirTopkLengthOnly) {
  std::mt19937_64 rng(11);
  for (bool fp8_cache : {false, true}) {
    for (int h_q : {16, 128}) {
      for (int32_t topk_length : {0, 1, 64, 1000, 2048, 8192}) {
        ItemPieces first;
        bool have_first = false;
        for (int s_q : {1, 7, 64, 4096}) {
          SparsePrefillShape shape{.s_q = s_q, .h_q = h_q, .s_kv = 1 << 16, .topk = 8192};
          if (fp8_cache) shape.fp8_kv_cache = true, shape.page_size = 64, shape.num_pages = (1 << 16) / 64;
          DecodePlan plan;
          ASSERT_TRUE(plan_sparse_prefill(shape, DeviceInfo{}, &plan, kInvariant).is_ok());
          if (plan.num_slots > 0) ASSERT_GT(plan.workspace.partial_max.bytes, 0u);  // pieces' max logits
          std::vector<int32_t> lengths(static_cast<size_t>(s_q));
          for (int32_t& l : lengths) l = int32_t(rng() % 8193);
          const int position = int(rng() % s_q);
          lengths[size_t(position)] = topk_length;
          const HostSchedule schedule = checked_schedule(plan, lengths);
          const ItemPieces pieces = pieces_of(schedule, position);
          if (!have_first) {
            first = pieces;
            have_first = true;
          }
          EXPECT_EQ(pieces, first) << "fp8 " << fp8_cache << " h_q " << h_q << " topk_length " << topk_length
                                   << " s_q " << s_q;
        }
      }
    }
  }
}

// Parts run longest chunk first (the hardware hands CTAs to SMs in grid order,
// so the last wave then holds the short chunks): every full chunk, then the
// items' last chunks by size class ((chunk_blocks - size) / ceil(chunk_blocks / 8)),
// largest first, then the empty parts.
TEST(BatchInvariantSchedule, PartsRunLongestChunksFirst) {
  std::mt19937_64 rng(20261203);
  for (int h_q : {16, 128}) {
    DecodePlan plan;
    ASSERT_TRUE(plan_dense_decode(dense_shape(128, h_q, 4 * 4096), DeviceInfo{}, &plan, kInvariant).is_ok());
    std::normal_distribution<double> normal(4096, 2048);
    std::vector<int32_t> lengths(128);
    for (int32_t& l : lengths) l = int32_t(std::clamp(normal(rng), 0.0, 4.0 * 4096));
    const HostSchedule schedule = checked_schedule(plan, lengths);
    const int32_t chunk = plan.chunk_blocks;
    int32_t size_class = 0, smallest = chunk, non_empty = 0;
    bool seen_empty = false;
    for (const PartWork& part : schedule.parts) {
      if (part.flags & kPartEmpty) {
        seen_empty = true;
        continue;
      }
      ASSERT_FALSE(seen_empty) << "h_q " << h_q << ": a chunk after an empty part";
      const int32_t size = part.end_block - part.begin_block;
      const int32_t part_class = (chunk - size) / ((chunk + 7) / 8);  // 0: a full chunk; 7: the shortest
      EXPECT_GE(part_class, size_class) << "h_q " << h_q << " part " << non_empty << ": out of size order";
      size_class = std::max(size_class, part_class);
      smallest = std::min(smallest, size);
      ++non_empty;
    }
    int32_t total_chunks = 0;
    for (int32_t l : lengths) total_chunks += (std::max(1, (l + 63) / 64) - 1) / chunk + 1;
    EXPECT_EQ(non_empty, total_chunks);
    EXPECT_LT(smallest, chunk / 2) << "lengths this spread leave short last chunks";
  }
}

// Random shapes, lengths and SM counts: every invariant plan passes check_plan
// (which in this mode also requires each part to be one fixed chunk).
TEST(BatchInvariantSchedule, RandomInputsSatisfyEveryInvariant) {
  std::mt19937_64 rng(20261202);
  for (int c = 0; c < 20000; ++c) {
    DeviceInfo device;
    device.num_sms = 1 + int(rng() % 264);
    DecodePlan plan;
    std::vector<int32_t> lengths;
    if (rng() % 2 == 0) {
      const int max_length = 1 + int(rng() % 200000);
      const int h_kv = 1 + int(rng() % 2);
      DenseDecodeShape shape = dense_shape(1 + int(rng() % 300), h_kv * (1 + int(rng() % 64)), max_length);
      shape.h_kv = h_kv;
      shape.s_q = 1 + int(rng() % 4);
      const Status planned = plan_dense_decode(shape, device, &plan, kInvariant);
      if (!planned.is_ok()) {  // too many possible chunks for one grid
        ASSERT_EQ(planned.code(), StatusCode::kNotSupported) << planned.message();
        continue;
      }
      lengths.resize(size_t(shape.batch));
      for (int32_t& l : lengths) l = rng() % 4 == 0 ? max_length : int32_t(rng() % (max_length + 1));
    } else {
      static constexpr int kHeads[] = {8, 16, 32, 64, 128};
      const SparseDecodeShape shape{.batch = 1 + int(rng() % 300), .s_q = 1 + int(rng() % 4),
                                    .h_q = kHeads[rng() % 5], .topk = 64 * (1 + int(rng() % 64)),
                                    .page_size = 64, .num_pages = 1 << 12};
      const Status planned = plan_sparse_decode(shape, device, &plan, kInvariant);
      if (!planned.is_ok()) {
        ASSERT_EQ(planned.code(), StatusCode::kNotSupported) << planned.message();
        continue;
      }
      lengths.resize(size_t(shape.batch));
      for (int32_t& l : lengths) l = int32_t(rng() % (shape.topk + 2)) - 1;  // -1: clamped to 0
    }
    ASSERT_EQ(plan.chunk_blocks, batch_invariant_chunk_blocks(plan.rows_per_item)) << "case " << c;
    ASSERT_NE(plan.kernel, DecodeKernel::kDenseColumnSplitCluster) << "case " << c;
    ASSERT_NO_FATAL_FAILURE(checked_schedule(plan, lengths)) << "case " << c;
  }
}

// The plan is sized from shapes only: parts and slots follow the batch and the
// longest possible item, never the SM count, and the chunk size never the batch.
TEST(BatchInvariantPlan, SizedFromShapesOnly) {
  for (int h_q : {16, 128}) {
    int chunk_blocks = -1;
    for (int batch : {1, 7, 64, 128}) {
      for (int num_sms : {132, 114, 8}) {
        DeviceInfo device;
        device.num_sms = num_sms;
        DecodePlan plan;
        ASSERT_TRUE(plan_dense_decode(dense_shape(batch, h_q, 16384), device, &plan, kInvariant).is_ok());
        const int chunks = (16384 / 64 + plan.chunk_blocks - 1) / plan.chunk_blocks;
        EXPECT_EQ(plan.num_parts, batch * chunks);
        EXPECT_EQ(plan.num_slots, chunks > 1 ? plan.num_parts : 0);
        EXPECT_EQ(plan.workspace.partial_o.bytes, size_t(plan.num_slots) * plan.rows_per_item * 512 * 4);
        if (chunk_blocks < 0) chunk_blocks = plan.chunk_blocks;
        EXPECT_EQ(plan.chunk_blocks, chunk_blocks) << "batch " << batch;
        EXPECT_EQ(plan.kernel, choose_dense_kernel(dense_shape(batch, h_q, 16384), 1));
      }
    }
  }
  // One chunk at most (max length <= chunk): nothing can split, no slots.
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(dense_shape(128, 16, 1024), DeviceInfo{}, &plan, kInvariant).is_ok());
  EXPECT_EQ(plan.num_parts, 128);
  EXPECT_EQ(plan.num_slots, 0);
  EXPECT_EQ(plan.workspace.partial_o.bytes, 0u);
}

// A short call that the default mode runs as a cluster split (the DSMEM merge)
// runs on the split-KV schedule in this mode; options.chunk_blocks sets the chunk.
TEST(BatchInvariantPlan, NeverTheClusterSplitAndChunkOption) {
  DeviceInfo device;
  device.num_sms = 132;
  DecodePlan plan;
  ASSERT_TRUE(plan_dense_decode(dense_shape(1, 16, 1024), device, &plan).is_ok());
  ASSERT_EQ(plan.kernel, DecodeKernel::kDenseColumnSplitCluster);  // the default mode's choice
  ASSERT_TRUE(plan_dense_decode(dense_shape(1, 16, 1024), device, &plan, kInvariant).is_ok());
  EXPECT_EQ(plan.kernel, DecodeKernel::kDenseAlternateBlocks);  // the split-KV kernel of page 64
  EXPECT_EQ(plan.cluster_size, 1);
  ASSERT_TRUE(plan_dense_decode(dense_shape(1, 16, 1024), device, &plan,
                                PlanOptions{.cluster_split = 1, .batch_invariant = true, .chunk_blocks = 4})
                  .is_ok());
  EXPECT_EQ(plan.chunk_blocks, 4);
  EXPECT_EQ(plan.num_parts, 4);
  // The plan identity tells the modes apart.
  DecodePlan default_plan;
  ASSERT_TRUE(plan_dense_decode(dense_shape(1, 16, 1024), device, &default_plan).is_ok());
  EXPECT_FALSE(compare_decode_plans("test", default_plan, plan).is_ok());
  EXPECT_TRUE(check_dense_decode_plan("test", dense_shape(1, 16, 1024), plan).is_ok());
}

TEST(BatchInvariantPlan, OptionsThatFixTheSplitAreRefused) {
  const DenseDecodeShape shape = dense_shape(2, 16, 4096);
  DecodePlan plan;
  for (const PlanOptions& options : {PlanOptions{.max_parts = 1, .batch_invariant = true},
                                     PlanOptions{.min_parts = 8, .batch_invariant = true},
                                     PlanOptions{.min_part_cost = 2, .batch_invariant = true},
                                     PlanOptions{.cluster_split = 2, .batch_invariant = true}}) {
    const Status status = plan_dense_decode(shape, DeviceInfo{}, &plan, options);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("batch_invariant"), std::string::npos) << status.message();
  }
  const Status chunk = plan_dense_decode(shape, DeviceInfo{}, &plan, PlanOptions{.chunk_blocks = 8});
  EXPECT_EQ(chunk.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(chunk.message().find("options.chunk_blocks"), std::string::npos) << chunk.message();
  const Status negative = plan_dense_decode(shape, DeviceInfo{}, &plan,
                                            PlanOptions{.batch_invariant = true, .chunk_blocks = -1});
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  // More possible chunks than a grid holds.
  const Status huge = plan_sparse_decode(
      SparseDecodeShape{.batch = 16384, .s_q = 4, .h_q = 16, .topk = 8192, .page_size = 64, .num_pages = 1 << 12},
      DeviceInfo{}, &plan, kInvariant);
  EXPECT_EQ(huge.code(), StatusCode::kNotSupported);
  EXPECT_NE(huge.message().find("options.batch_invariant"), std::string::npos) << huge.message();
  // Sparse prefill: one token per item, the same grid cap.
  const Status prefill = plan_sparse_prefill(SparsePrefillShape{.s_q = 131072, .h_q = 128, .s_kv = 1 << 20, .topk = 2048},
                                             DeviceInfo{}, &plan, kInvariant);
  EXPECT_EQ(prefill.code(), StatusCode::kNotSupported);
  EXPECT_NE(prefill.message().find("options.batch_invariant"), std::string::npos) << prefill.message();
  // Split accumulators past the bound: many rows per item (dense, s_q x h_q = 32768) and long requests.
  DenseDecodeShape rows = dense_shape(64, 128, 131072);
  rows.s_q = 256;
  const Status accumulators = plan_dense_decode(rows, DeviceInfo{}, &plan, kInvariant);
  EXPECT_EQ(accumulators.code(), StatusCode::kNotSupported);
  EXPECT_NE(accumulators.message().find("MiB of partial accumulators"), std::string::npos) << accumulators.message();
}

}  // namespace
}  // namespace openmla

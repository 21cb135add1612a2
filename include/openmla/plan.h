// Planning: a pure function of shapes and a DeviceInfo. It fixes the number of
// SM parts and the exact workspace layout; it never looks at sequence lengths,
// so one workspace serves every replay of a CUDA graph. The schedule itself is
// filled from the lengths: on the host (tests, CPU path) by
// build_schedule_host(), on the GPU by the one-block schedule kernel or, for
// DecodePlan::schedule_in_kernel, by each attention CTA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "openmla/params.h"
#include "openmla/schedule.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla {

// Alignment of every workspace region and of the workspace base pointer.
inline constexpr size_t kWorkspaceAlignment = 256;

// Fixed per-item cost, in KV blocks, added when balancing parts: it stands for
// loading Q and writing O, so parts with many short items are not overloaded.
inline constexpr int kItemOverheadBlocks = 5;

// Least work, in blocks (overhead included), worth a part of its own; with
// fewer cost units than parts, the surplus parts are marked empty.
// NOTE: 1 measured fastest on the H200 (2026-11-29, b = 1, h_q = 16,
// s_k = 1024: 21.6 us at 1, 26.1 at 2, 44 at 8): a short call is latency
// bound, and one-block pieces plus a combine beat a longer serial chain.
// PlanOptions::min_part_cost raises it.
inline constexpr int kMinPartCostBlocks = 1;

struct WorkspaceRegion {
  size_t offset = 0;  // from the workspace base, a multiple of kWorkspaceAlignment
  size_t bytes = 0;
};

// Named regions; the same code computes their sizes and places them.
struct WorkspaceLayout {
  WorkspaceRegion parts;        // PartWork[num_parts]
  WorkspaceRegion combine;      // CombineEntry[num_parts]
  WorkspaceRegion item_prefix;  // int64[num_items + 1], scheduler scratch (cost prefix)
  WorkspaceRegion part_bounds;  // int32[num_parts + 1, 2], scheduler scratch (item, block)
  WorkspaceRegion part_slots;   // int32[num_parts + 1], scheduler scratch (slot prefix; batch-invariant: last-chunk order)
  WorkspaceRegion partial_lse;  // float[num_slots, rows_per_item]
  WorkspaceRegion partial_o;    // float[num_slots, rows_per_item, d_v]
  WorkspaceRegion partial_max;  // float[num_slots, rows_per_item]: sparse prefill's piece max logits; else empty
  size_t total_bytes = 0;
};

// Where item lengths come from (in KV tokens). Host pointer for
// build_schedule_host(), device pointer for the GPU schedule.
//   length(i) = clamp(lengths ? lengths[i / items_per_length] : default_length, 0, max_length)
struct ItemLengths {
  const int32_t* lengths = nullptr;  // [num_items / items_per_length] or null
  int32_t items_per_length = 1;      // s_q for sparse decode (topk_length is per request)
  int32_t default_length = 0;        // used when lengths is null
  int32_t max_length = 0;            // lengths above this are clamped (never read past it)
};

// The GPU kernels a decode plan can name. Each says what its 64-row WGMMA tile
// puts on M and N and how many CTAs cooperate (docs/architecture.md).
enum class DecodeKernel : int32_t {
  kNone = 0,  // not planned
  // Dense: 64 packed query rows on M; two consumer warpgroups split O's 512
  // columns on every KV block; split-KV schedule and combine.
  kDenseColumnSplit = 1,
  // The same kernel run as clusters of cluster_size CTAs per (request, q-group)
  // that split the request's blocks and merge in distributed shared memory
  // (short calls; no schedule or combine grid, the workspace goes unused).
  kDenseColumnSplitCluster = 2,
  // Dense, d_qk = 576 with pages of whole 64-token blocks (any number of query
  // tiles): the two consumer warpgroups take alternate KV blocks.
  kDenseAlternateBlocks = 3,
  // Sparse FP8: 64 tokens on M, the h_q = 8, 16 or 32 heads on N; one CTA per part.
  kSparseHeadsOnN = 4,
  // Sparse FP8, h_q = 64: 64 heads on M (the dense consumer warpgroups); one CTA per part.
  kSparseHeadsOnM = 5,
  // Sparse FP8, h_q = 128: two 64-head CTAs per part in a cluster, each
  // dequantising half of every block for both.
  kSparseHeadsOnMCtaPair = 6,
  // 7: retired (kSparsePrefillHeadsOnM, 2026-12-02; kSparsePrefillAlternateBlocks
  // replaced it).
  // Sparse prefill (BF16 KV rows gathered by index): 64 heads of one query
  // token on M (h_q < 64 pads the tile), the two consumer warpgroups taking
  // alternate blocks of the token (as kDenseAlternateBlocks), a gather
  // warpgroup loading each token's Q while the previous token finishes; one
  // CTA per (64-head group, part).
  kSparsePrefillAlternateBlocks = 8,
};

// "dense_column_split", ... (for logs, the bench and error messages).
const char* decode_kernel_name(DecodeKernel kernel);
// Where the split-KV schedule of a dense or sparse decode plan is built (plans
// of the cluster split have none; sparse prefill and the batch-invariant mode
// always use the schedule kernel and refuse kAttentionKernel).
enum class SchedulePlacement : int32_t {
  kAutomatic = 0,   // the attention kernel from 6 items up (dense) or 2 (sparse decode), where its scratch fits
  kScheduleKernel,  // always a schedule kernel before the attention kernel
  kAttentionKernel, // the attention kernel wherever its scratch fits (else the schedule kernel)
};

struct PlanOptions {
  int max_parts = 0;  // 0: automatic; 1 forces the no-split path; n caps the part count
  int min_parts = 0;  // 0: automatic; raises the part count (tests force the split path)
  int min_part_cost = 0;  // 0: automatic; least work (blocks) per active part (tuning / benchmarks)
  // Dense only. 0: automatic (short calls whose C = 8 or 4 CTA clusters fill at
  // most half of the SMs, or C = 2 a quarter to all, each CTA walking at most 8
  // blocks of max_pages_per_seq; never when max_parts, min_parts or
  // schedule_placement ask for a schedule); 1: never; 2, 4 or 8: always, with that C.
  int cluster_split = 0;
  // Batch-invariant mode (docs/batch_invariance.md): every item's out and LSE
  // are bitwise the same whatever else is in the call. Each item is cut into
  // fixed chunks of chunk_blocks KV blocks, one SM part per chunk; an item of
  // several chunks is merged by the combine in chunk order. Never the cluster
  // split; max_parts, min_parts, min_part_cost and cluster_split (other than
  // 0 or 1) must be left automatic.
  bool batch_invariant = false;
  // Batch-invariant mode only: KV blocks per chunk (0: automatic,
  // batch_invariant_chunk_blocks()); a shape-only constant, never the batch.
  int chunk_blocks = 0;
  // Where a decode plan's split-KV schedule is built (DecodePlan::schedule_in_kernel);
  // the result is the same schedule. For tests and A/B runs.
  SchedulePlacement schedule_placement = SchedulePlacement::kAutomatic;
};

// Which planner made a plan; each run accepts only its own family's plans.
enum class PlanFamily : int32_t {
  kNone = 0,  // default-constructed: not made by a planner
  kDenseDecode,
  kSparseDecode,
  kSparsePrefill,
};
const char* plan_family_name(PlanFamily family);

struct DecodePlan {
  PlanFamily family = PlanFamily::kNone;
  int num_items = 0;          // batch (dense), batch * s_q (sparse decode) or s_q (sparse prefill)
  int q_tokens_per_item = 1;  // s_q (dense) or 1 (sparse)
  int rows_per_item = 0;      // q_tokens_per_item * h_q: query rows one item produces
  int num_q_groups = 0;       // CTAs per part: (query tiles) x (KV heads); sparse: 1, or h_q / 64 (wide kernel)
  int num_parts = 1;          // SM parts, always >= 1
  int num_slots = 0;          // partial slots = 2 * (num_parts - 1); 0 when nothing can split (one part, or
                              // long query blocks: parts of whole items, see docs/architecture.md)
  int d_v = kHeadDimV;
  int min_part_cost = kMinPartCostBlocks;  // least cost (blocks) per active part; 1 when parts are forced
  // Parts may take whole items instead of even cuts when no part is then
  // longer than an even cut plus one item's overhead (false when parts are
  // forced, so the split path runs exactly as asked). A plan without slots
  // (num_slots == 0) takes whole items whatever this says.
  bool whole_item_parts = true;
  // The kernel this plan runs, chosen by the planner from the shape alone
  // (choose_dense_kernel / choose_sparse_kernel); launchers only switch on it.
  DecodeKernel kernel = DecodeKernel::kNone;
  // kDenseColumnSplitCluster: CTAs per cluster (2, 4 or 8); 1 for every other kernel.
  int cluster_size = 1;
  // Batch-invariant mode: KV blocks per fixed chunk; every part holds one
  // chunk (or one whole item of one chunk). 0 in the default mode.
  int chunk_blocks = 0;
  // The attention kernel builds the split-KV schedule itself: each CTA runs the
  // partition in its shared memory and keeps its own part, so a call launches
  // no schedule kernel (whose launch and grid dependency cost 1-7 us a call).
  // Dense and sparse decode in the default mode, when the partition's scratch
  // (plan_detail::schedule_scratch_layout) fits kInKernelScheduleScratchBytes
  // (about 2500 items at 132 parts) and, unless options.schedule_placement asks
  // for it, the call has at least 1 item (3 for sparse decode at h_q = 64;
  // plan_detail::kInKernelScheduleMin*Items, measured). One item is built from
  // constants, up to 32 in each warp's lanes, more by the CTA in shared memory.
  // Never the cluster split (no schedule).
  bool schedule_in_kernel = false;
  ItemLengths lengths;        // lengths pointer left null by the planner
  WorkspaceLayout workspace;
  // The planner's inputs (besides the shape): run() re-plans from its params'
  // shape and these, and rejects a plan that differs in any field.
  DeviceInfo device;
  PlanOptions options;
  uint64_t fingerprint = 0;  // hash of every field above, set by the planner
};

// Bytes of split accumulators for a plan that can split (num_slots > 0; plans
// of whole requests for long query blocks have none): the bound, as a formula.
//   partial bytes = 2 * (num_parts - 1) * rows_per_item * (d_v + 1) * 4
// With num_parts = max(1, floor(num_sms / num_q_groups)) and
// num_q_groups >= rows_per_item / 64, this is at most
// 2 * num_sms * 64 * (d_v + 1) * 4 bytes (34.7 MB on 132 SMs) for every batch size.
constexpr size_t partial_accumulator_bytes(int num_parts, int rows_per_item, int d_v) {
  return num_parts <= 1 ? 0
                        : size_t(2) * size_t(num_parts - 1) * size_t(rows_per_item) *
                              size_t(d_v + 1) * sizeof(float);
}

// Batch-invariant mode: the automatic chunk size, in 64-token KV blocks, from
// the query rows one item produces (a shape, never the batch). A chunk of an
// item with several chunks writes rows_per_item * 513 floats of partial
// results and costs its CTA's start and end, so wider items take longer
// chunks: 32 blocks (2048 tokens) up to 32 rows, 64 up to 64, 128 above.
// NOTE: measured on the H200 (2026-12-01, docs/performance.md): at b = 128,
// 16-block chunks cost 13-14 % at h_q = 16 and 64-block chunks 11 % at
// h_q = 128, s_k = 16384; 32 and 128 cost 6-7.5 % and 1 %. At b = 1, h_q = 16,
// s_k = 16384 the 32-block chunks (8 CTAs) keep 96 % of the default mode.
constexpr int batch_invariant_chunk_blocks(int rows_per_item) {
  return rows_per_item <= 32 ? 32 : rows_per_item <= 64 ? 64 : 128;
}
// Batch-invariant mode: the plan has one part per possible chunk,
// num_items * ceil(max blocks / chunk_blocks), and a CUDA grid's y dimension
// caps it.
inline constexpr int kMaxBatchInvariantParts = 65535;
// ... and its split accumulators (one piece per part at most) are bounded so a
// plan never asks for more memory than a GPU could hold beside the model.
inline constexpr size_t kMaxBatchInvariantWorkspaceBytes = size_t(4) << 30;  // 4 GiB

// Query rows per CTA (one WGMMA M tile).
inline constexpr int kQueryRowsPerTile = 64;

// Dense decode packs (query token, head) rows of one KV head into 64-row tiles:
// rows_per_kv_head = s_q * h_q / h_kv, q-groups = h_kv * ceil(rows / 64).
// The one place these formulas live (planner, run checks and launcher use them).
constexpr int dense_rows_per_kv_head(const DenseDecodeShape& shape) {
  return shape.s_q * (shape.h_q / shape.h_kv);
}
constexpr int dense_query_tiles(const DenseDecodeShape& shape) {
  return (dense_rows_per_kv_head(shape) + kQueryRowsPerTile - 1) / kQueryRowsPerTile;
}
constexpr int dense_q_groups(const DenseDecodeShape& shape) { return shape.h_kv * dense_query_tiles(shape); }

// Sparse decode: h_q <= 32 runs in one CTA per part (heads on the WGMMA's N);
// h_q = 64 and 128 in CTAs of 64 heads (on M), one q-group per 64 heads.
inline constexpr int kSparseHeadsOnNMaxHeads = 32;  // largest h_q of kSparseHeadsOnN
inline constexpr int kSparseHeadsOnMHeadsPerCta = 64;  // heads per CTA of kSparseHeadsOnM(CtaPair)
constexpr int sparse_q_groups(int h_q) {
  return h_q <= kSparseHeadsOnNMaxHeads ? 1 : h_q / kSparseHeadsOnMHeadsPerCta;
}

// Sparse prefill: 64 heads of one query token per CTA; h_q < 64 (or not a
// multiple of 64) pads the last group's tile with rows that are never written.
constexpr int sparse_prefill_q_groups(int h_q) {
  return (h_q + kSparseHeadsOnMHeadsPerCta - 1) / kSparseHeadsOnMHeadsPerCta;
}

// The kernel choice, a pure function of the shape (and, for the dense cluster
// split, of the plan's cluster size): plan_* store it in DecodePlan::kernel.
DecodeKernel choose_dense_kernel(const DenseDecodeShape& shape, int cluster_size);
DecodeKernel choose_sparse_kernel(const SparseDecodeShape& shape);
DecodeKernel choose_sparse_prefill_kernel(const SparsePrefillShape& shape);

Status plan_dense_decode(const DenseDecodeShape& shape, const DeviceInfo& device, DecodePlan* plan,
                         const PlanOptions& options = {});
Status plan_sparse_decode(const SparseDecodeShape& shape, const DeviceInfo& device,
                          DecodePlan* plan, const PlanOptions& options = {});
// Sparse prefill: one item per query token (its own index list, topk_length
// positions), split over SM parts like sparse decode; split tokens are merged
// by the combine, which also takes the max of the pieces' max logits.
Status plan_sparse_prefill(const SparsePrefillShape& shape, const DeviceInfo& device, DecodePlan* plan,
                           const PlanOptions& options = {});

// Plan identity: every *_run re-plans its params' shape with the plan's
// recorded device and options and compares the two field by field, so a plan
// made for other shapes, another family, or edited afterwards is refused.
// ok, or kInvalidArgument naming the first differing field:
//   "<entry>: argument 'plan' was not made by plan_dense_decode for these shapes:
//    got plan.num_parts = 100000, expected plan.num_parts = 66 (...)"
Status check_dense_decode_plan(const char* entry, const DenseDecodeShape& shape, const DecodePlan& plan);
Status check_sparse_decode_plan(const char* entry, const SparseDecodeShape& shape, const DecodePlan& plan);
Status check_sparse_prefill_plan(const char* entry, const SparsePrefillShape& shape, const DecodePlan& plan);
// The comparison alone (`expected` from the planner); a plan of the other
// family reads "argument 'plan' was made for sparse_decode".
Status compare_decode_plans(const char* entry, const DecodePlan& given, const DecodePlan& expected);
// 64-bit FNV-1a over every field but the fingerprint (the planner stores it).
uint64_t decode_plan_fingerprint(const DecodePlan& plan);

// A schedule filled on the host.
struct HostSchedule {
  std::vector<PartWork> parts;        // [num_parts]
  std::vector<CombineEntry> combine;  // [num_parts]
};

// Fill the schedule on the host; `lengths.lengths` is a host pointer.
Status build_schedule_host(const DecodePlan& plan, const ItemLengths& lengths, HostSchedule* out);

// Assert every schedule invariant: parts >= 1; each (item, block) covered
// exactly once in order; splits contiguous; slots in range, unique and
// consecutive per item; combine entries consistent; empty parts marked.
Status check_plan(const DecodePlan& plan, const ItemLengths& lengths, const HostSchedule& schedule);

}  // namespace openmla

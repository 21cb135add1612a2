// Planning: a pure function of shapes and a DeviceInfo. It fixes the number of
// SM parts and the exact workspace layout; it never looks at sequence lengths,
// so one workspace serves every replay of a CUDA graph. The schedule itself is
// filled from the lengths: on the host (tests, CPU path) by
// build_schedule_host(), on the GPU by the one-warp schedule kernel.
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
  WorkspaceRegion part_slots;   // int32[num_parts + 1], scheduler scratch (slot prefix)
  WorkspaceRegion partial_lse;  // float[num_slots, rows_per_item]
  WorkspaceRegion partial_o;    // float[num_slots, rows_per_item, d_v]
  size_t total_bytes = 0;
};

// Where item lengths come from (in KV tokens). Host pointer for
// build_schedule_host(), device pointer for the schedule kernel.
//   length(i) = clamp(lengths ? lengths[i / items_per_length] : default_length, 0, max_length)
struct ItemLengths {
  const int32_t* lengths = nullptr;  // [num_items / items_per_length] or null
  int32_t items_per_length = 1;      // s_q for sparse decode (topk_length is per request)
  int32_t default_length = 0;        // used when lengths is null
  int32_t max_length = 0;            // lengths above this are clamped (never read past it)
};

struct PlanOptions {
  int max_parts = 0;  // 0: automatic; 1 forces the no-split path; n caps the part count
  int min_parts = 0;  // 0: automatic; raises the part count (tests force the split path)
  int min_part_cost = 0;  // 0: automatic; least work (blocks) per active part (tuning / benchmarks)
  // Dense only. 0: automatic (short calls that fit one wave of C = 8, 4 or 2
  // CTA clusters, unless max_parts / min_parts force a schedule); 1: never;
  // 2, 4 or 8: always, with that C.
  int cluster_split = 0;
};

// Which planner made a plan; each run accepts only its own family's plans.
enum class PlanFamily : int32_t {
  kNone = 0,  // default-constructed: not made by a planner
  kDenseDecode,
  kSparseDecode,
};
const char* plan_family_name(PlanFamily family);

struct DecodePlan {
  PlanFamily family = PlanFamily::kNone;
  int num_items = 0;          // batch (dense) or batch * s_q (sparse)
  int q_tokens_per_item = 1;  // s_q (dense) or 1 (sparse)
  int rows_per_item = 0;      // q_tokens_per_item * h_q: query rows one item produces
  int num_q_groups = 0;       // CTAs per part: (query tiles) x (KV heads); sparse: 1, or h_q / 64 (wide kernel)
  int num_parts = 1;          // SM parts, always >= 1
  int num_slots = 0;          // partial slots = 2 * (num_parts - 1); 0 when nothing can split
  int d_v = kHeadDimV;
  int min_part_cost = kMinPartCostBlocks;  // least cost (blocks) per active part; 1 when parts are forced
  // Parts may take whole items instead of even cuts when no part is then
  // longer than an even cut plus one item's overhead (false when parts are
  // forced, so the split path runs exactly as asked).
  bool whole_item_parts = true;
  // Dense decode of a short call: C > 1 runs each (request, q-group) as one
  // thread-block cluster of C CTAs that split its blocks evenly and merge
  // their pieces through distributed shared memory, in one kernel (no
  // schedule or combine grid; parts, slots and the workspace go unused).
  // 0: off (the split-KV schedule above).
  int cluster_split = 0;
  ItemLengths lengths;        // lengths pointer left null by the planner
  WorkspaceLayout workspace;
  // The planner's inputs (besides the shape): run() re-plans from its params'
  // shape and these, and rejects a plan that differs in any field.
  DeviceInfo device;
  PlanOptions options;
  uint64_t fingerprint = 0;  // hash of every field above, set by the planner
};

// Bytes of split accumulators for a plan: the bound, as a formula.
//   partial bytes = 2 * (num_parts - 1) * rows_per_item * (d_v + 1) * 4
// With num_parts = max(1, floor(num_sms / num_q_groups)) and
// num_q_groups >= rows_per_item / 64, this is at most
// 2 * num_sms * 64 * (d_v + 1) * 4 bytes (34.7 MB on 132 SMs) for every batch size.
constexpr size_t partial_accumulator_bytes(int num_parts, int rows_per_item, int d_v) {
  return num_parts <= 1 ? 0
                        : size_t(2) * size_t(num_parts - 1) * size_t(rows_per_item) *
                              size_t(d_v + 1) * sizeof(float);
}

// Query rows per CTA (one WGMMA M tile).
inline constexpr int kQueryRowsPerTile = 64;

// Sparse decode: h_q <= 32 runs in one CTA per part (heads on the WGMMA's N);
// h_q = 64 and 128 in CTAs of 64 heads (on M), one q-group per 64 heads.
inline constexpr int kSparseHeadsPerCta = 32;      // narrow kernel's largest head count
inline constexpr int kSparseWideHeadsPerCta = 64;  // wide kernel's heads per CTA
constexpr int sparse_q_groups(int h_q) { return h_q <= kSparseHeadsPerCta ? 1 : h_q / kSparseWideHeadsPerCta; }

Status plan_dense_decode(const DenseDecodeShape& shape, const DeviceInfo& device, DecodePlan* plan,
                         const PlanOptions& options = {});
Status plan_sparse_decode(const SparseDecodeShape& shape, const DeviceInfo& device,
                          DecodePlan* plan, const PlanOptions& options = {});

// Plan identity: every *_run re-plans its params' shape with the plan's
// recorded device and options and compares the two field by field, so a plan
// made for other shapes, another family, or edited afterwards is refused.
// ok, or kInvalidArgument naming the first differing field:
//   "<entry>: argument 'plan' was not made by plan_dense_decode for these shapes:
//    got plan.num_parts = 100000, expected plan.num_parts = 66 (...)"
Status check_dense_decode_plan(const char* entry, const DenseDecodeShape& shape, const DecodePlan& plan);
Status check_sparse_decode_plan(const char* entry, const SparseDecodeShape& shape, const DecodePlan& plan);
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

// Planner: shapes + DeviceInfo -> part count and workspace layout.
#include "openmla/plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "validate/validate.h"
#include "plan/chunk_partition.h"
#include "plan/partition.h"
#include "plan/plan_identity.h"

namespace openmla {
namespace {

// Upper bound on parts, whatever the options say (keeps scratch tiny).
constexpr int kMaxParts = 4096;
static_assert(2 * kMaxParts <= plan_detail::kSlotMask, "partial-slot prefixes fit part_slots' low bits");

size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Places the named regions back to back; the same code sizes and places them.
// partial_max: sparse prefill keeps each split piece's max logit per row.
WorkspaceLayout layout_workspace(int num_items, int num_parts, int num_slots, int rows_per_item, int d_v,
                                 bool partial_max) {
  WorkspaceLayout layout;
  size_t cursor = 0;
  auto place = [&cursor](WorkspaceRegion& region, size_t bytes) {
    region.offset = cursor;
    region.bytes = bytes;
    cursor += align_up(bytes);
  };
  place(layout.parts, sizeof(PartWork) * size_t(num_parts));
  place(layout.combine, sizeof(CombineEntry) * size_t(num_parts));
  place(layout.item_prefix, sizeof(int64_t) * (size_t(num_items) + 1));
  place(layout.part_bounds, sizeof(plan_detail::Bound) * (size_t(num_parts) + 1));
  place(layout.part_slots, sizeof(int32_t) * (size_t(num_parts) + 1));
  place(layout.partial_lse, sizeof(float) * size_t(num_slots) * size_t(rows_per_item));
  place(layout.partial_o, sizeof(float) * size_t(num_slots) * size_t(rows_per_item) * size_t(d_v));
  place(layout.partial_max, partial_max ? sizeof(float) * size_t(num_slots) * size_t(rows_per_item) : 0);
  layout.total_bytes = cursor;
  return layout;
}

// Batch-invariant mode (docs/batch_invariance.md): one part per possible
// chunk, num_items * ceil(max blocks / chunk_blocks), so every chunk is its own
// CTA and no part ever holds two chunks of one item; a chunk's slot is its
// index in (item, chunk) order, whatever part runs it (plan/chunk_partition.h).
// Parts and slots are sized by the shape (the batch and the longest possible
// item), never by the lengths. The caller validated the part count
// (validate_batch_invariant).
int64_t batch_invariant_parts(const DecodePlan& plan, int chunk_blocks) {
  const int64_t max_blocks = std::max<int64_t>(1, (int64_t(plan.lengths.max_length) + kKvBlockTokens - 1) / kKvBlockTokens);
  return int64_t(plan.num_items) * ((max_blocks + chunk_blocks - 1) / chunk_blocks);
}

int batch_invariant_chunk_size(const DecodePlan& plan, const PlanOptions& options) {
  return options.chunk_blocks > 0 ? options.chunk_blocks : batch_invariant_chunk_blocks(plan.rows_per_item);
}

void finish_batch_invariant_plan(DecodePlan* plan) {
  plan->chunk_blocks = batch_invariant_chunk_size(*plan, plan->options);
  plan->num_parts = int(batch_invariant_parts(*plan, plan->chunk_blocks));
  // Items of one chunk never need a slot: with one chunk per item at most,
  // nothing is ever split.
  plan->num_slots = plan->num_parts > plan->num_items ? plan->num_parts : 0;
  plan->min_part_cost = 1;
  plan->whole_item_parts = false;
  plan->workspace = layout_workspace(plan->num_items, plan->num_parts, plan->num_slots,
                                     plan->rows_per_item, plan->d_v,
                                     /*partial_max=*/plan->family == PlanFamily::kSparsePrefill);
}

// NOTE: the part count depends on shapes only. Every q-group CTA of a part
// walks the same KV range, so parts = SMs / q-groups keeps one wave; when the
// q-groups alone fill the machine (e.g. h_q = 128, s_q >= 67 on 132 SMs) the
// answer is one part, never zero.
int choose_num_parts(int num_q_groups, const DeviceInfo& device, const PlanOptions& options) {
  int parts = std::max(1, device.num_sms / std::max(1, num_q_groups));
  if (options.max_parts > 0) parts = std::min(parts, options.max_parts);
  if (options.min_parts > 0) parts = std::max(parts, options.min_parts);
  return std::clamp(parts, 1, kMaxParts);
}

// Up to this many parts of whole items for a long query block; past it the
// modelled gain is under a percent for the shapes measured (b = 4 to 64).
constexpr int kMaxWholeItemParts = 16;

// Finish time of a grid of q_groups x parts CTAs, one CTA per SM, when the
// hardware hands the CTAs (q-group fastest) to the earliest free SM; part p
// costs part_cost[p]. The SMs are kept as (free time, count) pairs in time
// order: the durations take few values, so the free times do too, and a run of
// equal CTAs moves whole groups of SMs at once. -1 when the pairs would not
// fit the fixed table (the caller then keeps one part).
int64_t modelled_finish(int64_t num_q_groups, const int64_t* part_cost, int num_parts, int num_sms) {
  struct FreeAt {
    int64_t time, count;
  };
  constexpr int kMaxTimes = 64;
  FreeAt free_at[kMaxTimes] = {{0, num_sms}};
  int num_times = 1;
  for (int p = 0; p < num_parts; ++p) {
    for (int64_t left = num_q_groups; left > 0;) {
      const int64_t time = free_at[0].time;
      const int64_t taken = std::min(left, free_at[0].count);
      left -= taken;
      if ((free_at[0].count -= taken) == 0) {  // drop the earliest entry
        std::copy(free_at + 1, free_at + num_times, free_at);
        --num_times;
      }
      // add `taken` SMs free at time + cost, keeping the table in time order
      const int64_t done = time + part_cost[p];
      int at = 0;
      while (at < num_times && free_at[at].time < done) ++at;
      if (at < num_times && free_at[at].time == done) {
        free_at[at].count += taken;
      } else {
        if (num_times == kMaxTimes) return -1;
        std::copy_backward(free_at + at, free_at + num_times, free_at + num_times + 1);
        free_at[at] = FreeAt{done, taken};
        ++num_times;
      }
    }
  }
  return free_at[num_times - 1].time;
}

// Long query blocks: once the q-groups alone pass half the SMs the part count
// is one, and every CTA walks every item. b = 4, h_q = 128, s_q = 67 on 132
// SMs makes 134 CTAs of four items each: two rounds of four items for 1.02
// rounds of work. Parts of whole items make more, shorter CTAs (three parts
// of 1, 2 and 1 items: 402 CTAs, done in five rounds of one item) and need no
// partial slots, so no partial O traffic and no combine. Picks the part count
// of least modelled finish time (ties: fewer parts) with every item at the
// longest length, cut where the schedule cuts (plan_detail::build_schedule with
// ItemCuts::kWholeItemsOnly: each cut at the item start nearest to an even share
// of the cost); 1 unless that is at least 10 % sooner than one part: the model
// leaves out causal rows seeing fewer keys and the L2 (measured: b = 4, s_q =
// 1024, modelled 63 / 64 rounds, ran 2.7 % slower, about the noise of that
// case). Only up to four rounds of q-groups (s_q <= 264 at h_q = 128 on 132
// SMs). Shapes only, like every planner choice; a few microseconds at most,
// no allocation (run() re-plans every call).
int choose_whole_item_parts(const DecodePlan& plan, const DeviceInfo& device) {
  const int64_t num_sms = device.num_sms, q_groups = plan.num_q_groups, items = plan.num_items;
  // Past four rounds of q-groups the last round's share is small and the model's
  // cost grows with the CTA count: one part.
  if (2 * q_groups <= num_sms || q_groups > 4 * num_sms || items < 2) return 1;
  const int64_t item_cost = plan_detail::item_cost(plan.lengths.max_length);
  const int64_t one_part_finish = (q_groups + num_sms - 1) / num_sms * items * item_cost;
  // No schedule finishes before the work spread evenly over the SMs: stop when even that is not 10 % sooner.
  const int64_t least_finish = (q_groups * items * item_cost + num_sms - 1) / num_sms;
  if (10 * least_finish > 9 * one_part_finish) return 1;
  int best_parts = 1;
  int64_t best_finish = one_part_finish;
  const int64_t total = items * item_cost;
  // At most sixteen rounds of CTAs in all: the model's cost stays bounded, and more parts only
  // shave a tail that is already a small share.
  const int64_t max_parts = std::min<int64_t>({items, kMaxWholeItemParts, 16 * num_sms / q_groups});
  for (int parts = 2; parts <= max_parts; ++parts) {
    int64_t part_cost[kMaxWholeItemParts];
    int64_t begin = 0;
    for (int p = 0; p < parts; ++p) {
      int64_t end = items;
      if (p + 1 < parts) {  // the schedule's cut (build_schedule, phase 2) for items of equal cost
        const int64_t position = total * (p + 1) / parts;
        const int64_t item = position / item_cost;
        end = plan_detail::cut_at_item_start(position, item * item_cost, (item + 1) * item_cost) ? item : item + 1;
      }
      part_cost[p] = (end - begin) * item_cost;
      begin = end;
    }
    const int64_t finish = modelled_finish(q_groups, part_cost, parts, int(num_sms));
    if (finish >= 0 && finish < best_finish) {
      best_finish = finish;
      best_parts = parts;
    }
  }
  return 10 * best_finish <= 9 * one_part_finish ? best_parts : 1;
}

void finish_plan(DecodePlan* plan, const DeviceInfo& device, const PlanOptions& options) {
  plan->device = device;
  plan->options = options;
  if (options.batch_invariant) {
    finish_batch_invariant_plan(plan);
    return;
  }
  plan->num_parts = choose_num_parts(plan->num_q_groups, device, options);
  plan->num_slots = plan->num_parts > 1 ? 2 * (plan->num_parts - 1) : 0;
  // Dense long query blocks (sparse families have at most two q-groups): parts
  // of whole items, no slots; a part cap still caps them.
  if (plan->family == PlanFamily::kDenseDecode && plan->num_parts == 1 && options.min_parts == 0 &&
      options.max_parts != 1) {
    const int parts = choose_whole_item_parts(*plan, device);
    plan->num_parts = options.max_parts > 0 ? std::min(parts, options.max_parts) : parts;
  }
  // Forcing parts (tests of the split path) also lets every part take work.
  plan->min_part_cost = options.min_part_cost > 0 ? options.min_part_cost
                        : options.min_parts > 0  ? 1
                                                 : kMinPartCostBlocks;
  plan->whole_item_parts = options.min_parts == 0;
  plan->workspace = layout_workspace(plan->num_items, plan->num_parts, plan->num_slots,
                                     plan->rows_per_item, plan->d_v,
                                     /*partial_max=*/plan->family == PlanFamily::kSparsePrefill);
}

// DecodePlan::schedule_in_kernel: decode plans of the default mode whose
// partition scratch fits the attention kernels' loan (a staged length per item assumed),
// from the kernel's least item count up (kInKernelScheduleMin*Items) unless the
// options place it.
bool choose_schedule_in_kernel(const DecodePlan& plan) {
  const SchedulePlacement placement = plan.options.schedule_placement;
  const int32_t min_items = plan.family != PlanFamily::kSparseDecode      ? plan_detail::kInKernelScheduleMinDenseItems
                             : plan.kernel == DecodeKernel::kSparseHeadsOnM ? plan_detail::kInKernelScheduleMinSparseHeadsOnMItems
                                                                            : plan_detail::kInKernelScheduleMinSparseItems;
  if (plan.family == PlanFamily::kSparsePrefill || plan.chunk_blocks > 0 ||
      plan.kernel == DecodeKernel::kDenseColumnSplitCluster || placement == SchedulePlacement::kScheduleKernel ||
      (placement == SchedulePlacement::kAutomatic && plan.num_items < min_items)) {
    return false;
  }
  return plan_detail::schedule_scratch_layout(plan.num_items, plan.num_parts, /*staged_lengths=*/plan.num_items).total <=
         plan_detail::kInKernelScheduleScratchBytes;
}

// Cluster split (DecodeKernel::kDenseColumnSplitCluster) for a dense call: C CTAs per
// (request, q-group) split the request's blocks, none of the SMs beyond them used. Measured on
// the H200 (docs/performance.md, session 34; graph replays, every C forced, b = 1-8, h_q 16 / 128,
// s_q 1 / 4, s_k 1024-16384): C = 8 and C = 4 beat the split-KV schedule wherever their CTAs fill
// at most half of the SMs (b = 1 h_q = 128 s_q = 4, s_k = 1024: 20.7 against 23.7 us; b = 2,
// s_k = 2048, h_q = 128: 23.7 against 30.2) and lose when they fill more (clusters wait for a
// second wave: b = 2 h_q = 128 s_q = 4 at C = 8, 37 against 25 us); C = 2 helps once its pairs
// fill a quarter to all of the SMs (b = 32 h_q = 16: 31 against 39 us, 2026-11-30). Every C
// loses once a CTA walks more than 8 blocks of the longest request the plan admits (b = 1
// h_q = 16 s_k = 16384 at C = 8: 64.5 against 50.4 us; C = 2 at 16 blocks, 42 against 37 us).
// Clusters of C whole-SM CTAs must sit in one GPC (GPCs of 16-18 SMs).
constexpr int kClusterMaxBlocksPerCta = 8;

int choose_cluster_split(const DecodePlan& plan, const DeviceInfo& device, const PlanOptions& options) {
  if (options.batch_invariant) return 0;  // the cluster merge is another reduction order
  if (options.cluster_split > 0) return options.cluster_split == 1 ? 0 : options.cluster_split;
  // The caller asked for a schedule (its parts, or where it is built).
  if (options.max_parts > 0 || options.min_parts > 0 || options.schedule_placement != SchedulePlacement::kAutomatic) {
    return 0;
  }
  const int64_t clusters = int64_t(plan.num_items) * plan.num_q_groups;
  const int64_t max_blocks = (int64_t(plan.lengths.max_length) + kKvBlockTokens - 1) / kKvBlockTokens;
  const auto blocks_fit = [&](int split) {
    return max_blocks >= split && (max_blocks + split - 1) / split <= kClusterMaxBlocksPerCta;
  };
  for (const int split : {8, 4}) {
    if (blocks_fit(split) && clusters * split * 2 <= device.num_sms) return split;
  }
  if (blocks_fit(2) && clusters * 2 * 4 >= device.num_sms && clusters * 2 <= device.num_sms) return 2;
  return 0;
}

// options.schedule_placement = kAttentionKernel where only the schedule kernel builds the schedule.
Status refuse_attention_kernel_schedule(const char* entry, const char* what) {
  return Status::invalid_argument(std::string(entry) +
                                  ": argument 'options.schedule_placement' = 2 (attention kernel) cannot apply: " + what +
                                  " builds its schedule in the schedule kernel; expected 0 (automatic) or 1");
}

Status validate_options(const char* entry, const PlanOptions& options) {
  if (options.cluster_split != 0 && options.cluster_split != 1 && options.cluster_split != 2 &&
      options.cluster_split != 4 && options.cluster_split != 8) {
    return Status::invalid_argument(std::string(entry) + ": argument 'options.cluster_split' must be 0 " +
                                    "(automatic), 1 (never), 2, 4 or 8: got " +
                                    std::to_string(options.cluster_split));
  }
  if (options.min_part_cost < 0) {
    return Status::invalid_argument(std::string(entry) + ": argument 'options.min_part_cost' must be >= 0: got " +
                                    std::to_string(options.min_part_cost) + " (0 = automatic)");
  }
  if (options.max_parts < 0 || options.min_parts < 0 || options.min_parts > kMaxParts ||
      (options.max_parts > 0 && options.min_parts > options.max_parts)) {
    return Status::invalid_argument(std::string(entry) +
                                    ": argument 'options' has invalid part limits: got min_parts = " +
                                    std::to_string(options.min_parts) + ", max_parts = " +
                                    std::to_string(options.max_parts) + ", expected 0 <= min_parts <= " +
                                    "max_parts (0 = automatic) and min_parts <= " +
                                    std::to_string(kMaxParts));
  }
  const int32_t placement = static_cast<int32_t>(options.schedule_placement);
  if (placement < 0 || placement > static_cast<int32_t>(SchedulePlacement::kAttentionKernel)) {
    return Status::invalid_argument(std::string(entry) + ": argument 'options.schedule_placement' must be 0 " +
                                    "(automatic), 1 (schedule kernel) or 2 (attention kernel): got " +
                                    std::to_string(placement));
  }
  if (options.schedule_placement == SchedulePlacement::kAttentionKernel && options.batch_invariant) {
    return refuse_attention_kernel_schedule(entry, "the batch-invariant mode");
  }
  if (options.batch_invariant) {
    if (options.max_parts != 0 || options.min_parts != 0 || options.min_part_cost != 0 || options.cluster_split > 1) {
      return Status::invalid_argument(
          std::string(entry) + ": argument 'options' asks for batch_invariant with a fixed split: got max_parts = " +
          std::to_string(options.max_parts) + ", min_parts = " + std::to_string(options.min_parts) +
          ", min_part_cost = " + std::to_string(options.min_part_cost) + ", cluster_split = " +
          std::to_string(options.cluster_split) +
          ", expected 0 (automatic) for each (cluster_split 1 is allowed) when batch_invariant is set");
    }
    if (options.chunk_blocks < 0) {
      return Status::invalid_argument(std::string(entry) + ": argument 'options.chunk_blocks' must be >= 0: got " +
                                      std::to_string(options.chunk_blocks) + " (0 = automatic)");
    }
  } else if (options.chunk_blocks != 0) {
    return Status::invalid_argument(std::string(entry) + ": argument 'options.chunk_blocks' applies to " +
                                    "batch_invariant plans only: got " + std::to_string(options.chunk_blocks) +
                                    " with batch_invariant = false, expected 0");
  }
  return Status::ok();
}

// The part count of a batch-invariant plan must fit a grid dimension.
Status validate_batch_invariant(const char* entry, const DecodePlan& plan, const PlanOptions& options) {
  if (!options.batch_invariant) return Status::ok();
  const int chunk_blocks = batch_invariant_chunk_size(plan, options);
  const int64_t parts = batch_invariant_parts(plan, chunk_blocks);
  if (parts > kMaxBatchInvariantParts) {
    return Status::not_supported(
        std::string(entry) + ": argument 'options.batch_invariant' needs one part per possible chunk: got " +
        std::to_string(plan.num_items) + " items x " + std::to_string(parts / plan.num_items) +
        " chunks of " + std::to_string(chunk_blocks) + " blocks = " + std::to_string(parts) +
        " parts, expected at most " + std::to_string(kMaxBatchInvariantParts) +
        " (raise options.chunk_blocks or lower the maximum length)");
  }
  // Every part may hold a partial piece: O, LSE (and, for sparse prefill, max) per row.
  const double partial_bytes = double(parts) * double(plan.rows_per_item) * double(plan.d_v + 2) * sizeof(float);
  if (partial_bytes > double(kMaxBatchInvariantWorkspaceBytes)) {
    return Status::not_supported(
        std::string(entry) + ": argument 'options.batch_invariant' needs " +
        std::to_string(int64_t(partial_bytes / double(1 << 20))) + " MiB of partial accumulators (" +
        std::to_string(parts) + " parts x " + std::to_string(plan.rows_per_item) + " rows), expected at most " +
        std::to_string(kMaxBatchInvariantWorkspaceBytes >> 20) +
        " MiB (raise options.chunk_blocks, or lower the batch or the maximum length)");
  }
  return Status::ok();
}

}  // namespace

const char* decode_kernel_name(DecodeKernel kernel) {
  switch (kernel) {
    case DecodeKernel::kNone: return "none";
    case DecodeKernel::kDenseColumnSplit: return "dense_column_split";
    case DecodeKernel::kDenseColumnSplitCluster: return "dense_column_split_cluster";
    case DecodeKernel::kDenseAlternateBlocks: return "dense_alternate_blocks";
    case DecodeKernel::kSparseHeadsOnN: return "sparse_heads_on_n";
    case DecodeKernel::kSparseHeadsOnM: return "sparse_heads_on_m";
    case DecodeKernel::kSparseHeadsOnMCtaPair: return "sparse_heads_on_m_cta_pair";
    case DecodeKernel::kSparsePrefillAlternateBlocks: return "sparse_prefill_alternate_blocks";
  }
  return "unknown";
}

// NOTE: the alternate-blocks kernel loads whole 64-token blocks (pages must
// hold whole blocks). It also takes one query tile per KV head: beside the column
// split (H200, docs/performance.md "Session 36") b = 128 h_q = 16 s_q = 4 s_k = 1024
// ran 7 % faster and the other one-tile shapes within the noise (+-0.7 %). The
// column split keeps smaller pages, d_qk 512, FP8 and the cluster split.
DecodeKernel choose_dense_kernel(const DenseDecodeShape& shape, int cluster_size) {
  if (shape.kv_dtype == DType::kFP8E4M3) return DecodeKernel::kDenseColumnSplit;  // the one FP8 kernel
  if (cluster_size > 1) return DecodeKernel::kDenseColumnSplitCluster;
  if (shape.d_qk == kHeadDimQK && shape.page_size % kKvBlockTokens == 0) {
    return DecodeKernel::kDenseAlternateBlocks;
  }
  return DecodeKernel::kDenseColumnSplit;
}

DecodeKernel choose_sparse_kernel(const SparseDecodeShape& shape) {
  if (shape.h_q <= kSparseHeadsOnNMaxHeads) return DecodeKernel::kSparseHeadsOnN;
  return shape.h_q == kSparseHeadsOnMHeadsPerCta ? DecodeKernel::kSparseHeadsOnM
                                                 : DecodeKernel::kSparseHeadsOnMCtaPair;
}

// FP8-cache mode: the sparse decode kernel for this head count (one token per request).
DecodeKernel choose_sparse_prefill_kernel(const SparsePrefillShape& shape) {
  if (shape.fp8_kv_cache) {
    SparseDecodeShape decode;
    decode.h_q = shape.h_q;
    return choose_sparse_kernel(decode);
  }
  return DecodeKernel::kSparsePrefillAlternateBlocks;
}

Status plan_dense_decode(const DenseDecodeShape& shape, const DeviceInfo& device, DecodePlan* plan,
                         const PlanOptions& options) {
  constexpr const char* kEntry = "plan_dense_decode";
  if (plan == nullptr) return Status::invalid_argument("plan_dense_decode: argument 'plan' is null: expected a DecodePlan*");
  OPENMLA_RETURN_IF_ERROR(detail::validate_device_info(kEntry, device));
  OPENMLA_RETURN_IF_ERROR(detail::validate_dense_decode_shape(kEntry, shape));
  OPENMLA_RETURN_IF_ERROR(validate_options(kEntry, options));

  if (shape.kv_dtype == DType::kFP8E4M3 && options.cluster_split > 1) {
    return Status::invalid_argument(std::string(kEntry) + ": argument 'options.cluster_split' = " +
                                    std::to_string(options.cluster_split) +
                                    " has no fp8_e4m3 kernel: expected 0 (automatic) or 1 (never) for kv_dtype fp8_e4m3");
  }

  DecodePlan result;
  result.family = PlanFamily::kDenseDecode;
  result.num_items = shape.batch;
  result.q_tokens_per_item = shape.s_q;
  result.rows_per_item = shape.s_q * shape.h_q;
  result.num_q_groups = dense_q_groups(shape);
  result.d_v = shape.d_v;
  result.lengths = ItemLengths{nullptr, 1, 0, int32_t(int64_t(shape.max_pages_per_seq) * shape.page_size)};
  OPENMLA_RETURN_IF_ERROR(validate_batch_invariant(kEntry, result, options));
  finish_plan(&result, device, options);
  // NOTE: the FP8 kernel has no cluster merge (its shared memory is laid out differently).
  const int cluster_split = shape.kv_dtype == DType::kFP8E4M3
                                ? 0
                                : choose_cluster_split(result, device, options);
  result.cluster_size = cluster_split > 1 ? cluster_split : 1;
  result.kernel = choose_dense_kernel(shape, result.cluster_size);
  result.schedule_in_kernel = choose_schedule_in_kernel(result);
  result.fingerprint = decode_plan_fingerprint(result);
  *plan = result;
  return Status::ok();
}

Status plan_sparse_decode(const SparseDecodeShape& shape, const DeviceInfo& device, DecodePlan* plan,
                          const PlanOptions& options) {
  constexpr const char* kEntry = "plan_sparse_decode";
  if (plan == nullptr) return Status::invalid_argument("plan_sparse_decode: argument 'plan' is null: expected a DecodePlan*");
  OPENMLA_RETURN_IF_ERROR(detail::validate_device_info(kEntry, device));
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_decode_shape(kEntry, shape));
  OPENMLA_RETURN_IF_ERROR(validate_options(kEntry, options));

  DecodePlan result;
  result.family = PlanFamily::kSparseDecode;
  // One item per (request, query token): each token has its own index list.
  result.num_items = shape.batch * shape.s_q;
  result.q_tokens_per_item = 1;
  result.rows_per_item = shape.h_q;
  // h_q >= 64: independent 64-head CTAs per part (no clusters).
  result.num_q_groups = sparse_q_groups(shape.h_q);
  result.d_v = shape.d_v;
  result.lengths = ItemLengths{nullptr, shape.s_q, shape.topk, shape.topk};
  OPENMLA_RETURN_IF_ERROR(validate_batch_invariant(kEntry, result, options));
  finish_plan(&result, device, options);
  result.kernel = choose_sparse_kernel(shape);
  result.schedule_in_kernel = choose_schedule_in_kernel(result);
  result.fingerprint = decode_plan_fingerprint(result);
  *plan = result;
  return Status::ok();
}

Status plan_sparse_prefill(const SparsePrefillShape& shape, const DeviceInfo& device, DecodePlan* plan,
                           const PlanOptions& options) {
  constexpr const char* kEntry = "plan_sparse_prefill";
  if (plan == nullptr) {
    return Status::invalid_argument("plan_sparse_prefill: argument 'plan' is null: expected a DecodePlan*");
  }
  OPENMLA_RETURN_IF_ERROR(detail::validate_device_info(kEntry, device));
  OPENMLA_RETURN_IF_ERROR(detail::validate_sparse_prefill_shape(kEntry, shape));
  OPENMLA_RETURN_IF_ERROR(validate_options(kEntry, options));
  if (options.schedule_placement == SchedulePlacement::kAttentionKernel) {
    return refuse_attention_kernel_schedule(kEntry, "sparse prefill (up to 131072 items)");
  }

  DecodePlan result;
  result.family = PlanFamily::kSparsePrefill;
  // One item per query token: each has its own index list (topk_length[s] positions).
  result.num_items = shape.s_q;
  result.q_tokens_per_item = 1;
  result.rows_per_item = shape.h_q;
  // FP8-cache mode runs the sparse FP8 decode kernels (their q-groups).
  result.num_q_groups = shape.fp8_kv_cache ? sparse_q_groups(shape.h_q) : sparse_prefill_q_groups(shape.h_q);
  result.d_v = shape.d_v;
  result.lengths = ItemLengths{nullptr, 1, shape.topk, shape.topk};
  OPENMLA_RETURN_IF_ERROR(validate_batch_invariant(kEntry, result, options));
  finish_plan(&result, device, options);
  result.kernel = choose_sparse_prefill_kernel(shape);
  result.fingerprint = decode_plan_fingerprint(result);
  *plan = result;
  return Status::ok();
}

Status build_schedule_host(const DecodePlan& plan, const ItemLengths& lengths, HostSchedule* out) {
  if (out == nullptr) return Status::invalid_argument("build_schedule_host: argument 'out' is null: expected a HostSchedule*");
  if (plan.num_items < 1 || plan.num_parts < 1) {
    return Status::invalid_argument("build_schedule_host: argument 'plan' is not planned: got num_items = " +
                                    std::to_string(plan.num_items) + ", num_parts = " +
                                    std::to_string(plan.num_parts) + ", expected both >= 1");
  }
  // A hand-made plan must not divide by zero or overflow the packed slot prefix.
  if (plan.min_part_cost < 1 || plan.chunk_blocks < 0 ||
      plan.num_parts > (plan.chunk_blocks > 0 ? kMaxBatchInvariantParts : kMaxParts)) {
    return Status::invalid_argument(
        "build_schedule_host: argument 'plan' has fields no planner makes: got min_part_cost = " +
        std::to_string(plan.min_part_cost) + ", num_parts = " + std::to_string(plan.num_parts) +
        ", expected min_part_cost >= 1 and num_parts <= " + std::to_string(kMaxParts) +
        " (a plan from plan_dense_decode / plan_sparse_decode / plan_sparse_prefill)");
  }
  // The batch-invariant schedule has a part per chunk and sorts the items' last chunks in
  // part_slots (num_parts + 1 entries), with 16-bit counts (plan/chunk_partition.h).
  if (plan.chunk_blocks > 0 && plan.num_parts < plan.num_items) {
    return Status::invalid_argument(
        "build_schedule_host: argument 'plan' has fields no planner makes: got chunk_blocks = " +
        std::to_string(plan.chunk_blocks) + " with num_parts = " + std::to_string(plan.num_parts) + " < num_items = " +
        std::to_string(plan.num_items) +
        ", expected num_parts >= num_items (a batch-invariant plan has a part per possible chunk)");
  }
  if (lengths.items_per_length < 1) {
    return Status::invalid_argument("build_schedule_host: argument 'lengths.items_per_length' must be >= 1: got " +
                                    std::to_string(lengths.items_per_length));
  }
  std::vector<int64_t> item_prefix(size_t(plan.num_items) + 1);
  std::vector<plan_detail::Bound> part_bounds(size_t(plan.num_parts) + 1);
  std::vector<int32_t> part_slots(size_t(plan.num_parts) + 1);
  out->parts.assign(size_t(plan.num_parts), PartWork{});
  out->combine.assign(size_t(plan.num_parts), CombineEntry{});
  const plan_detail::ScheduleBuffers buffers{out->parts.data(), out->combine.data(), item_prefix.data(),
                                             part_bounds.data(), part_slots.data()};
  if (plan.chunk_blocks > 0) {
    plan_detail::build_chunk_schedule(plan.num_items, plan.num_parts, plan.chunk_blocks, lengths, buffers,
                                      /*thread=*/0, /*num_threads=*/1);
  } else {
    plan_detail::build_schedule(plan.num_items, plan.num_parts, plan.min_part_cost, plan_detail::item_cuts(plan), lengths,
                                buffers, /*lane=*/0, /*num_lanes=*/1);
  }
  return Status::ok();
}

}  // namespace openmla

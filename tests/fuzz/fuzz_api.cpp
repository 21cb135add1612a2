// Hostile-input fuzz of the host API (issue 28): thousands of random shapes
// and argument mutations per family, fixed seeds, a time budget per family.
//
// Each case starts from valid random inputs (test_util/mla_inputs.h: NaN in
// every slot no request owns), applies 0-3 mutations and calls the entries.
// Every outcome must be one of:
//   - a clean error: kInvalidArgument or kNotSupported whose message reads
//     "<entry>: argument '<name>' ...: got ..." with the called entry;
//   - a result that equals the same call through the split path (plan,
//     host schedule, split reference, combine), with no NaN read from poison.
// A mutation marked `rejected` must give the clean error. A crash ends the
// process, so CTest (one test for the whole binary) fails; ASan/UBSan builds
// (scripts/sanitize_host.sh) catch out-of-bounds reads the checks miss.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "validate/validate.h"
#include "openmla/openmla.h"
#include "openmla/reference.h"
#include "plan/plan_identity.h"
#include "test_util/mla_inputs.h"

namespace openmla {
namespace {

using test::HostVector;
using test::Rng;

constexpr int32_t kIntMax = std::numeric_limits<int32_t>::max();
constexpr int32_t kIntMin = std::numeric_limits<int32_t>::min();
constexpr int64_t kHugeStride = std::numeric_limits<int64_t>::max() / 2;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kSecondsPerFamily = 6.0;  // x5 families; x3 or so under ASan

// ---- outcome bookkeeping -----------------------------------------------------------
struct Tally {
  int cases = 0, ok = 0, rejected = 0, failures = 0;
};
Tally g_total;

void fail(const std::string& where, const std::string& what) {
  ++g_total.failures;
  if (g_total.failures <= 50) std::fprintf(stderr, "FUZZ FAILURE %s: %s\n", where.c_str(), what.c_str());
}

// A clean error names an argument of the entry that was called.
bool clean_error(const Status& status, const char* entry) {
  if (status.code() != StatusCode::kInvalidArgument && status.code() != StatusCode::kNotSupported) return false;
  const std::string& m = status.message();
  const std::string head = std::string(entry) + ": argument '";
  if (m.rfind(head, 0) != 0) return false;
  const size_t close = m.find('\'', head.size());
  return close != std::string::npos && close > head.size() && m.find(": got ", close) != std::string::npos;
}

// ok, or a clean error; returns status.is_ok().
bool check_outcome(const std::string& where, const char* entry, const Status& status, bool must_reject) {
  if (status.is_ok()) {
    if (must_reject) fail(where, std::string(entry) + " accepted a mutation that must be rejected");
    return true;
  }
  if (!clean_error(status, entry)) {
    fail(where, std::string(entry) + " gave an unclear error: [" + status_code_name(status.code()) + "] " +
                    status.message());
  }
  return false;
}

bool close_values(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    const float a = got[i], b = want[i];
    if (std::isnan(a) || std::isnan(b)) return false;
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) return false;
      continue;
    }
    if (std::fabs(double(a) - double(b)) > rel * std::fabs(double(b)) + abs) return false;
  }
  return true;
}

// One mutation: a label and a change; `rejected` when every checker must refuse it.
template <class Case>
struct Mutation {
  const char* label;
  bool rejected;
  std::function<void(Case&, Rng&)> apply;
};

template <class Case>
std::string apply_mutations(const std::vector<Mutation<Case>>& mutations, Case& c, Rng& rng, bool* must_reject) {
  std::string labels;
  const int count = rng.uniform_int(0, 3);
  std::vector<size_t> chosen;  // distinct: a second misalignment could realign
  for (int i = 0; i < count; ++i) {
    const size_t index = size_t(rng.uniform_int(0, int(mutations.size()) - 1));
    if (std::find(chosen.begin(), chosen.end(), index) != chosen.end()) continue;
    chosen.push_back(index);
    const Mutation<Case>& m = mutations[index];
    m.apply(c, rng);
    *must_reject = *must_reject || m.rejected;
    labels += std::string(labels.empty() ? "" : "+") + m.label;
  }
  return labels.empty() ? "none" : labels;
}

int pick(Rng& rng, std::initializer_list<int> values) {
  return values.begin()[rng.uniform_int(0, int(values.size()) - 1)];
}

// Combine the split pieces into out/lse, as the run does.
template <class Params>
Status combine_split(const Params& p, const DecodePlan& plan, const HostSchedule& schedule, DType out_dtype,
                     const float* attn_sink, const std::vector<float>& partial_o,
                     const std::vector<float>& partial_lse) {
  if (plan.num_slots == 0) return Status::ok();
  CombineParams c;
  c.batch = p.shape.batch, c.s_q = p.shape.s_q, c.h_q = p.shape.h_q, c.d_v = plan.d_v;
  c.q_tokens_per_item = plan.q_tokens_per_item;
  c.num_entries = plan.num_parts, c.num_slots = plan.num_slots;
  c.entries = schedule.combine.data(), c.partial_o = partial_o.data(), c.partial_lse = partial_lse.data();
  c.attn_sink = attn_sink;
  c.out = p.out, c.out_dtype = out_dtype;
  c.out_stride_b = p.out_stride_b, c.out_stride_s = p.out_stride_s, c.out_stride_h = p.out_stride_h;
  c.lse = p.lse, c.lse_stride_b = p.lse_stride_b, c.lse_stride_h = p.lse_stride_h;
  return reference_combine(c);
}

// ---------------------------------------------------------------------------
// Dense decode
// ---------------------------------------------------------------------------
struct DenseCase {
  test::DenseDecodeInputs in;
  DenseDecodeParams p;
  float bad_scale = 0.0f;
};

std::vector<Mutation<DenseCase>> dense_mutations() {
  using M = Mutation<DenseCase>;
  using C = DenseCase;
  return {
      {"batch", true, [](C& c, Rng& r) { c.p.shape.batch = pick(r, {0, -1, kIntMin, (1 << 24) + 1, kIntMax}); }},
      {"s_q", true, [](C& c, Rng& r) { c.p.shape.s_q = pick(r, {0, -3, 1025, kIntMax}); }},
      {"h_q", true, [](C& c, Rng& r) { c.p.shape.h_q = pick(r, {0, -1, 129, kIntMax}); }},
      {"h_kv", true, [](C& c, Rng& r) { c.p.shape.h_kv = pick(r, {0, -1, 9, kIntMax}); }},
      {"d_qk", true, [](C& c, Rng& r) { c.p.shape.d_qk = pick(r, {0, -1, 511, 577, kIntMax}); }},
      {"d_v", true, [](C& c, Rng& r) { c.p.shape.d_v = pick(r, {0, -1, 256, 576, kIntMax}); }},
      {"page_size", true, [](C& c, Rng& r) { c.p.shape.page_size = pick(r, {0, -1, (1 << 20) + 1, kIntMax}); }},
      {"num_pages", true, [](C& c, Rng& r) { c.p.shape.num_pages = pick(r, {0, -1, kIntMin}); }},
      {"max_pages_per_seq", true, [](C& c, Rng& r) { c.p.shape.max_pages_per_seq = pick(r, {0, -1, kIntMin}); }},
      {"capacity", true,
       [](C& c, Rng&) { c.p.shape.page_size = 65536, c.p.shape.max_pages_per_seq = 32769; }},
      {"token_space", true, [](C& c, Rng&) { c.p.shape.num_pages = kIntMax, c.p.shape.page_size = 64; }},
      {"q_dtype", true, [](C& c, Rng& r) { c.p.shape.q_dtype = DType(pick(r, {3, 4, 77, -1})); }},
      {"kv_dtype", true,
       [](C& c, Rng&) { c.p.shape.kv_dtype = c.p.shape.q_dtype == DType::kBF16 ? DType::kFP16 : DType::kBF16; }},
      {"out_dtype", true, [](C& c, Rng&) { c.p.shape.out_dtype = DType::kFP32; }},
      {"null_pointer", true,
       [](C& c, Rng& r) {
         switch (r.uniform_int(0, 5)) {
           case 0: c.p.q = nullptr; break;
           case 1: c.p.kv_cache = nullptr; break;
           case 2: c.p.block_table = nullptr; break;
           case 3: c.p.seqlens = nullptr; break;
           case 4: c.p.out = nullptr; break;
           default: c.p.lse = nullptr; break;
         }
       }},
      {"misaligned_q", true, [](C& c, Rng&) { c.p.q = static_cast<const char*>(c.p.q) + 2; }},
      {"misaligned_out", true, [](C& c, Rng&) { c.p.out = static_cast<char*>(c.p.out) + 8; }},
      {"negative_stride", true,
       [](C& c, Rng& r) {
         int64_t* strides[] = {&c.p.q_stride_b, &c.p.q_stride_s, &c.p.q_stride_h, &c.p.kv_stride_page,
                               &c.p.kv_stride_token, &c.p.kv_stride_head, &c.p.block_table_stride_b,
                               &c.p.out_stride_b, &c.p.out_stride_s, &c.p.out_stride_h, &c.p.lse_stride_b,
                               &c.p.lse_stride_h};
         *strides[r.uniform_int(0, 11)] = pick(r, {-1, -16, kIntMin});
       }},
      {"overlapping_rows", true,
       [](C& c, Rng&) {
         c.p.shape.h_q = std::max(c.p.shape.h_q, 2 * c.p.shape.h_kv);  // two heads, so their rows overlap
         c.p.q_stride_h = c.p.shape.d_qk - 8;
       }},
      {"huge_stride", false,
       [](C& c, Rng& r) {
         int64_t* strides[] = {&c.p.q_stride_b, &c.p.kv_stride_page, &c.p.out_stride_b, &c.p.lse_stride_b};
         *strides[r.uniform_int(0, 3)] = kHugeStride;
       }},
      {"softmax_scale", true, [](C& c, Rng& r) { c.p.softmax_scale = std::array{kNan, kInf, -kInf, 0.0f, -1.0f}[r.uniform_int(0, 4)]; }},
      {"scale_with_bf16", true,
       [](C& c, Rng&) {
         if (c.p.shape.q_dtype == DType::kFP8E4M3) {
           c.p.kv_scale = nullptr;  // fp8 without its scale
         } else {
           c.p.q_scale = c.in.q_scale.data();
         }
       }},
      {"bad_fp8_scale_value", false,  // can_implement cannot read it; the reference must refuse it
       [](C& c, Rng& r) {
         c.bad_scale = std::array{kNan, kInf, 0.0f, -2.0f}[r.uniform_int(0, 3)];
       }},
      {"seqlens", false,
       [](C& c, Rng& r) {
         c.in.seqlens[size_t(r.uniform_int(0, c.in.shape.batch - 1))] = pick(r, {-1, kIntMin, kIntMax, 0, 1});
       }},
      {"block_table", false,
       [](C& c, Rng& r) {
         const size_t i = size_t(r.uniform_int(0, int(c.in.block_table.size()) - 1));
         c.in.block_table[i] = pick(r, {-1, kIntMin, kIntMax, c.in.shape.num_pages});
       }},
      {"causal", false, [](C& c, Rng&) { c.p.causal = !c.p.causal; }},
  };
}

void fuzz_dense(uint64_t seed) {
  Rng rng(seed);
  test::DenseDecodeConfig config;
  config.batch = rng.uniform_int(1, 4);
  config.s_q = rng.uniform_int(1, 3);
  config.h_kv = pick(rng, {1, 1, 2});
  config.h_q = config.h_kv * pick(rng, {1, 3, 8});
  config.d_qk = pick(rng, {kHeadDimQK, kHeadDimLatent});
  config.page_size = pick(rng, {1, 16, 64});
  config.dtype = DType(pick(rng, {0, 1, 2}));
  config.causal = rng.bernoulli(0.5);
  config.max_seqlen = rng.uniform_int(0, 130);
  config.stride_pad_bytes = pick(rng, {0, 16, 32});
  DenseCase c{test::make_dense_decode_inputs(config, seed), {}};
  c.p = c.in.params();
  static const std::vector<Mutation<DenseCase>> mutations = dense_mutations();
  bool must_reject = false;
  const std::string labels = apply_mutations(mutations, c, rng, &must_reject);
  const bool bad_scale_used = c.bad_scale != 0.0f && c.p.shape.q_dtype == DType::kFP8E4M3 && c.p.q_scale;
  if (bad_scale_used) c.in.q_scale[0] = c.bad_scale;
  const std::string where = "dense seed " + std::to_string(seed) + " [" + labels + "]";

  check_outcome(where, "dense_decode_can_implement", dense_decode_can_implement(c.p), must_reject);
  DecodePlan plan;
  const bool planned =
      check_outcome(where, "plan_dense_decode", plan_dense_decode(c.p.shape, DeviceInfo{}, &plan), false);
  const bool ran = check_outcome(where, "reference_dense_decode", reference_dense_decode(c.p),
                                 must_reject || bad_scale_used);
  ++g_total.cases;
  if (!ran) {
    ++g_total.rejected;
    return;
  }
  ++g_total.ok;
  if (!planned) return fail(where, "the reference ran a shape the planner refuses");
  const std::vector<float> out = c.in.out_values(), lse = c.in.lse_values();

  // The split path over the same (possibly mutated) lengths must agree.
  HostSchedule schedule;
  ItemLengths lengths = plan.lengths;
  lengths.lengths = c.p.seqlens;
  if (!build_schedule_host(plan, lengths, &schedule).is_ok()) return fail(where, "build_schedule_host failed");
  const Status checked = check_plan(plan, lengths, schedule);
  if (!checked.is_ok()) return fail(where, checked.message());
  std::vector<float> partial_o(size_t(plan.num_slots) * plan.rows_per_item * plan.d_v);
  std::vector<float> partial_lse(size_t(plan.num_slots) * plan.rows_per_item);
  c.in.poison_outputs();
  if (!reference_dense_decode_split(c.p, plan, schedule, partial_o.data(), partial_lse.data()).is_ok() ||
      !combine_split(c.p, plan, schedule, c.p.shape.out_dtype, nullptr, partial_o, partial_lse).is_ok()) {
    return fail(where, "the split path refused what the direct path ran");
  }
  if (!close_values(c.in.out_values(), out, 2e-2, 2e-2) || !close_values(c.in.lse_values(), lse, 1e-4, 1e-3)) {
    fail(where, "split and direct results differ (or NaN was read)");
  }
}

// ---------------------------------------------------------------------------
// Sparse decode
// ---------------------------------------------------------------------------
struct SparseCase {
  test::SparseDecodeInputs in;
  SparseDecodeParams p;
  HostVector<int32_t> lengths;  // a topk_length the generator did not poison past
};

std::vector<Mutation<SparseCase>> sparse_mutations() {
  using C = SparseCase;
  return {
      {"batch", true, [](C& c, Rng& r) { c.p.shape.batch = pick(r, {0, -1, (1 << 24) + 1, kIntMax}); }},
      {"s_q", true, [](C& c, Rng& r) { c.p.shape.s_q = pick(r, {0, -1, 5, kIntMax}); }},
      {"h_q", true, [](C& c, Rng& r) { c.p.shape.h_q = pick(r, {0, -8, 7, 48, 256, kIntMax}); }},
      {"d_qk", true, [](C& c, Rng& r) { c.p.shape.d_qk = pick(r, {0, 512, 577}); }},
      {"d_v", true, [](C& c, Rng& r) { c.p.shape.d_v = pick(r, {0, 511, kIntMax}); }},
      {"topk", true, [](C& c, Rng& r) { c.p.shape.topk = pick(r, {0, -64, 63, 65, 16384 + 64, kIntMax}); }},
      {"page_size", true, [](C& c, Rng& r) { c.p.shape.page_size = pick(r, {0, -1}); }},
      {"num_pages", true, [](C& c, Rng& r) { c.p.shape.num_pages = pick(r, {0, -1, kIntMax}); }},
      {"null_pointer", true,
       [](C& c, Rng& r) {
         switch (r.uniform_int(0, 4)) {
           case 0: c.p.q = nullptr; break;
           case 1: c.p.kv_cache = nullptr; break;
           case 2: c.p.indices = nullptr; break;
           case 3: c.p.out = nullptr; break;
           default: c.p.lse = nullptr; break;
         }
       }},
      {"misaligned_kv", true, [](C& c, Rng&) { c.p.kv_cache += 1; }},
      {"misaligned_topk_length", true,
       [](C& c, Rng&) {
         c.p.topk_length = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(c.lengths.data()) + 2);
       }},
      {"page_stride", true,
       [](C& c, Rng& r) { c.p.kv_stride_page_bytes = pick(r, {-1, 0, 655, 657}); }},
      {"negative_stride", true,
       [](C& c, Rng& r) {
         int64_t* strides[] = {&c.p.q_stride_b, &c.p.q_stride_s, &c.p.q_stride_h, &c.p.indices_stride_b,
                               &c.p.indices_stride_s, &c.p.out_stride_h, &c.p.lse_stride_h};
         *strides[r.uniform_int(0, 6)] = -16;
       }},
      {"softmax_scale", true, [](C& c, Rng& r) { c.p.softmax_scale = std::array{kNan, kInf, 0.0f, -1.0f}[r.uniform_int(0, 3)]; }},
      {"indices", false,
       [](C& c, Rng& r) {
         const size_t i = size_t(r.uniform_int(0, int(c.in.indices.size()) - 1));
         c.in.indices[i] = pick(r, {-1, kIntMin, kIntMax, c.in.shape.num_pages * c.in.shape.page_size});
       }},
      {"topk_length", false,
       [](C& c, Rng& r) {
         for (int32_t& n : c.lengths) n = pick(r, {-1, kIntMin, kIntMax, 0, c.in.shape.topk, 1});
         if (c.p.topk_length == nullptr || c.p.topk_length == c.in.topk_length.data()) c.p.topk_length = c.lengths.data();
       }},
  };
}

void fuzz_sparse(uint64_t seed) {
  Rng rng(seed);
  test::SparseDecodeConfig config;
  config.batch = rng.uniform_int(1, 3);
  config.s_q = rng.uniform_int(1, 2);
  config.h_q = pick(rng, {8, 16, 32, 64});
  config.topk = 64 * rng.uniform_int(1, 2);
  config.page_size = pick(rng, {16, 64});
  config.num_pages = rng.uniform_int(2, 5);
  config.use_attn_sink = rng.bernoulli(0.3);
  config.stride_pad_bytes = pick(rng, {0, 16});
  SparseCase c{test::make_sparse_decode_inputs(config, seed), {}, {}};
  c.lengths.assign(size_t(config.batch), config.topk);
  c.p = c.in.params();
  static const std::vector<Mutation<SparseCase>> mutations = sparse_mutations();
  bool must_reject = false;
  const std::string labels = apply_mutations(mutations, c, rng, &must_reject);
  const std::string where = "sparse seed " + std::to_string(seed) + " [" + labels + "]";

  check_outcome(where, "sparse_decode_can_implement", sparse_decode_can_implement(c.p), must_reject);
  DecodePlan plan;
  const bool planned =
      check_outcome(where, "plan_sparse_decode", plan_sparse_decode(c.p.shape, DeviceInfo{}, &plan), false);
  const bool ran = check_outcome(where, "reference_sparse_decode", reference_sparse_decode(c.p), must_reject);
  ++g_total.cases;
  if (!ran) {
    ++g_total.rejected;
    return;
  }
  ++g_total.ok;
  if (!planned) return fail(where, "the reference ran a shape the planner refuses");
  const std::vector<float> out = c.in.out_values(), lse = c.in.lse_values();

  HostSchedule schedule;
  ItemLengths lengths = plan.lengths;
  lengths.lengths = c.p.topk_length;
  if (!build_schedule_host(plan, lengths, &schedule).is_ok()) return fail(where, "build_schedule_host failed");
  const Status checked = check_plan(plan, lengths, schedule);
  if (!checked.is_ok()) return fail(where, checked.message());
  std::vector<float> partial_o(size_t(plan.num_slots) * plan.rows_per_item * plan.d_v);
  std::vector<float> partial_lse(size_t(plan.num_slots) * plan.rows_per_item);
  c.in.poison_outputs();
  if (!reference_sparse_decode_split(c.p, plan, schedule, partial_o.data(), partial_lse.data()).is_ok() ||
      !combine_split(c.p, plan, schedule, DType::kBF16, c.p.attn_sink, partial_o, partial_lse).is_ok()) {
    return fail(where, "the split path refused what the direct path ran");
  }
  if (!close_values(c.in.out_values(), out, 2e-2, 2e-2) || !close_values(c.in.lse_values(), lse, 1e-4, 1e-3)) {
    fail(where, "split and direct results differ (or NaN was read)");
  }
}

// ---------------------------------------------------------------------------
// Sparse prefill
// ---------------------------------------------------------------------------
struct PrefillCase {
  test::SparsePrefillInputs in;
  SparsePrefillParams p;
  HostVector<int32_t> lengths;
};

std::vector<Mutation<PrefillCase>> prefill_mutations() {
  using C = PrefillCase;
  return {
      {"s_q", true, [](C& c, Rng& r) { c.p.shape.s_q = pick(r, {0, -1, kIntMin}); }},
      {"h_q", true, [](C& c, Rng& r) { c.p.shape.h_q = pick(r, {0, -1, 129, kIntMax}); }},
      {"s_kv", true, [](C& c, Rng& r) { c.p.shape.s_kv = pick(r, {0, -1}); }},
      {"d_qk", true, [](C& c, Rng& r) { c.p.shape.d_qk = pick(r, {0, 575, kIntMax}); }},
      {"d_v", true, [](C& c, Rng& r) { c.p.shape.d_v = pick(r, {0, -1, 513}); }},
      {"topk", true, [](C& c, Rng& r) { c.p.shape.topk = pick(r, {0, -1, 16385, kIntMax}); }},
      {"null_pointer", true,
       [](C& c, Rng& r) {
         switch (r.uniform_int(0, 5)) {
           case 0: c.p.q = nullptr; break;
           case 1:  // the K/V source the call reads
             if (c.p.shape.fp8_kv_cache) {
               c.p.kv_cache = nullptr;
             } else {
               c.p.kv = nullptr;
             }
             break;
           case 2: c.p.indices = nullptr; break;
           case 3: c.p.out = nullptr; break;
           case 4: c.p.max_logits = nullptr; break;
           default: c.p.lse = nullptr; break;
         }
       }},
      {"negative_stride", true,
       [](C& c, Rng& r) {
         int64_t* kv_stride = c.p.shape.fp8_kv_cache ? &c.p.kv_stride_page_bytes : &c.p.kv_stride_s;
         int64_t* strides[] = {&c.p.q_stride_s, &c.p.q_stride_h, kv_stride, &c.p.indices_stride_s,
                               &c.p.out_stride_s, &c.p.out_stride_h};
         *strides[r.uniform_int(0, 5)] = -8;
       }},
      {"softmax_scale", true, [](C& c, Rng& r) { c.p.softmax_scale = std::array{kNan, -kInf, 0.0f}[r.uniform_int(0, 2)]; }},
      // FP8-cache mode: both K/V sources, page fields that disagree with s_kv or with the mode.
      {"second_kv_source", true,
       [](C& c, Rng&) {
         if (c.p.shape.fp8_kv_cache) {
           c.p.kv = c.p.q;
         } else {
           c.p.kv_cache = static_cast<const uint8_t*>(c.p.kv);
         }
       }},
      {"page_fields", true,
       [](C& c, Rng& r) {
         if (c.p.shape.fp8_kv_cache) {
           c.p.shape.num_pages += pick(r, {1, -1});
         } else {
           c.p.shape.page_size = pick(r, {1, 64, -1});
         }
       }},
      {"kv_stride_alignment", true,  // rows (pages) no longer 16-byte aligned
       [](C& c, Rng& r) {
         if (c.p.shape.fp8_kv_cache) {
           c.p.kv_stride_page_bytes += pick(r, {8, 1});
         } else {
           c.p.kv_stride_s += 1;
         }
       }},
      {"indices", false,
       [](C& c, Rng& r) {
         const size_t i = size_t(r.uniform_int(0, int(c.in.indices.size()) - 1));
         c.in.indices[i] = pick(r, {-1, kIntMin, kIntMax, c.in.shape.s_kv});
       }},
      {"topk_length", false,
       [](C& c, Rng& r) {
         for (int32_t& n : c.lengths) n = pick(r, {-1, kIntMin, kIntMax, 0, c.in.shape.topk});
         c.p.topk_length = c.lengths.data();
       }},
  };
}

void fuzz_prefill(uint64_t seed) {
  Rng rng(seed);
  test::SparsePrefillConfig config;
  config.s_q = rng.uniform_int(1, 4);
  config.h_q = pick(rng, {1, 8, 16, 20});
  config.s_kv = rng.uniform_int(1, 150);
  config.d_qk = pick(rng, {kHeadDimQK, kHeadDimLatent});
  config.topk = rng.uniform_int(1, 80);
  config.use_attn_sink = rng.bernoulli(0.3);
  if (rng.bernoulli(0.3)) {  // FP8-cache mode: whole pages of the 656-byte cache, d_qk 576
    const int page_size = pick(rng, {1, 3, 64});
    config.fp8_cache_page_size = page_size;
    config.s_kv = page_size * rng.uniform_int(1, std::max(1, 150 / page_size));
    config.d_qk = kHeadDimQK;
  }
  PrefillCase c{test::make_sparse_prefill_inputs(config, seed), {}, {}};
  c.lengths.assign(size_t(config.s_q), config.topk);
  c.p = c.in.params();
  static const std::vector<Mutation<PrefillCase>> mutations = prefill_mutations();
  bool must_reject = false;
  const std::string labels = apply_mutations(mutations, c, rng, &must_reject);
  const std::string where = "prefill seed " + std::to_string(seed) + " [" + labels + "]";
  // can_implement: the argument checks plus the GPU capability table, which takes every
  // BF16 call the checks accept (FP8-cache mode: the decode kernels' head counts and topk).
  const Status checked = sparse_prefill_can_implement(c.p);
  check_outcome(where, "sparse_prefill_can_implement", checked, must_reject);
  if (!checked.is_ok() && !c.p.shape.fp8_kv_cache &&
      detail::validate_sparse_prefill("sparse_prefill_can_implement", c.p).is_ok()) {
    return fail(where, "sparse_prefill_can_implement refused a BF16 call the checks accept: " + checked.message());
  }
  const bool ran = check_outcome(where, "reference_sparse_prefill", reference_sparse_prefill(c.p), must_reject);
  ++g_total.cases;
  if (!ran) {
    ++g_total.rejected;
    return;
  }
  ++g_total.ok;
  for (const float v : c.in.out_values()) {
    if (std::isnan(v)) return fail(where, "NaN in out (a poisoned kv row was read)");
  }
}

// ---------------------------------------------------------------------------
// Combine with hostile entries
// ---------------------------------------------------------------------------
void fuzz_combine(uint64_t seed) {
  Rng rng(seed);
  const int batch = rng.uniform_int(1, 3), s_q = rng.uniform_int(1, 2), h_q = rng.uniform_int(1, 4);
  const int num_slots = rng.uniform_int(0, 6), num_entries = rng.uniform_int(1, 4);
  const int rows = s_q * h_q;
  HostVector<float> partial_o(size_t(std::max(num_slots, 1)) * rows * kHeadDimV, 0.5f);
  HostVector<float> partial_lse(size_t(std::max(num_slots, 1)) * rows, 0.0f);
  HostVector<uint16_t> out(size_t(batch) * rows * kHeadDimV, 0);
  HostVector<float> lse(size_t(batch) * rows, 0.0f);
  HostVector<CombineEntry> entries(static_cast<size_t>(num_entries), CombineEntry{});
  for (CombineEntry& e : entries) {
    e.item = pick(rng, {-1, 0, 1, 2, batch, kIntMax, kIntMin});
    e.first_slot = pick(rng, {-1, 0, 1, 3, num_slots, kIntMax, kIntMin});
    e.num_pieces = pick(rng, {0, 1, 2, 3, num_slots, kIntMax, kIntMin});
  }
  CombineParams p;
  p.batch = batch, p.s_q = s_q, p.h_q = h_q, p.d_v = kHeadDimV, p.q_tokens_per_item = s_q;
  p.num_entries = num_entries, p.num_slots = num_slots;
  p.entries = entries.data(), p.partial_o = partial_o.data(), p.partial_lse = partial_lse.data();
  p.out = out.data(), p.out_dtype = DType::kBF16;
  p.out_stride_h = kHeadDimV, p.out_stride_s = int64_t(h_q) * kHeadDimV, p.out_stride_b = int64_t(rows) * kHeadDimV;
  p.lse = lse.data(), p.lse_stride_h = s_q, p.lse_stride_b = rows;
  const std::string where = "combine seed " + std::to_string(seed);
  ++g_total.cases;
  if (check_outcome(where, "reference_combine", reference_combine(p), false)) ++g_total.ok; else ++g_total.rejected;
}

// ---------------------------------------------------------------------------
// Planner, schedule and plan identity
// ---------------------------------------------------------------------------
void fuzz_plan(uint64_t seed) {
  Rng rng(seed);
  const bool dense = rng.bernoulli(0.5);
  DeviceInfo device;
  device.num_sms = pick(rng, {132, 132, 1, 0, -1, 78, 1024, 1025});
  PlanOptions options;
  if (rng.bernoulli(0.5)) {
    options.max_parts = pick(rng, {0, 1, 3, -1, 5000});
    options.min_parts = pick(rng, {0, 2, 7, -1, 4097});
    options.min_part_cost = pick(rng, {0, 1, 4, -1});
    options.cluster_split = pick(rng, {0, 1, 2, 3, 8, 16});
  }
  const std::string where = std::string(dense ? "plan dense" : "plan sparse") + " seed " + std::to_string(seed);
  DecodePlan plan;
  Status planned;
  DenseDecodeShape ds;
  SparseDecodeShape ss;
  if (dense) {
    ds.batch = pick(rng, {1, 2, 7, 64, 0, -1, 1 << 20});
    ds.s_q = pick(rng, {1, 2, 4, 67, 0});
    ds.h_kv = pick(rng, {1, 1, 2, 0});
    ds.h_q = ds.h_kv * pick(rng, {1, 16, 64, 128, 0});
    ds.page_size = pick(rng, {1, 64, 65536});
    ds.num_pages = pick(rng, {1, 100, kIntMax});
    ds.max_pages_per_seq = pick(rng, {1, 16, 32769, kIntMax});
    planned = plan_dense_decode(ds, device, &plan, options);
    check_outcome(where, "plan_dense_decode", planned, false);
  } else {
    ss.batch = pick(rng, {1, 3, 128, 0});
    ss.s_q = pick(rng, {1, 2, 4, 5});
    ss.h_q = pick(rng, {16, 64, 128, 0, 24});
    ss.topk = pick(rng, {64, 2048, 100, 0});
    ss.num_pages = pick(rng, {1, 64, kIntMax});
    planned = plan_sparse_decode(ss, device, &plan, options);
    check_outcome(where, "plan_sparse_decode", planned, false);
  }
  ++g_total.cases;
  if (!planned.is_ok()) {
    ++g_total.rejected;
    return;
  }
  ++g_total.ok;
  if (plan.num_items > 4096) return;  // keep the host schedule small

  // Random lengths, including negative and huge ones: the schedule clamps them.
  std::vector<int32_t> lengths(size_t(plan.num_items / plan.lengths.items_per_length) + 1);
  for (int32_t& n : lengths) n = pick(rng, {0, 1, 64, 65, 1000, -1, kIntMax, kIntMin});
  ItemLengths item_lengths = plan.lengths;
  item_lengths.lengths = lengths.data();
  HostSchedule schedule;
  if (!build_schedule_host(plan, item_lengths, &schedule).is_ok()) return fail(where, "build_schedule_host failed");
  const Status checked = check_plan(plan, item_lengths, schedule);
  if (!checked.is_ok()) return fail(where, checked.message());

  // The planner's own plan passes; any field changed afterwards is named.
  const char* entry = dense ? "dense_decode_run" : "sparse_decode_run";
  const auto identity = [&](const DecodePlan& p) {
    return dense ? check_dense_decode_plan(entry, ds, p) : check_sparse_decode_plan(entry, ss, p);
  };
  if (!identity(plan).is_ok()) return fail(where, "the planner's own plan was refused: " + identity(plan).message());
  DecodePlan tampered = plan;
  const int tamper = rng.uniform_int(0, 9);
  switch (tamper) {
    case 0: tampered.num_parts += 1; break;
    case 1: tampered.num_slots += 2; break;
    case 2: tampered.min_part_cost = 0; break;
    case 3: tampered.whole_item_parts = !tampered.whole_item_parts; break;
    case 4: tampered.cluster_size = tampered.cluster_size == 8 ? 1 : 8; break;
    case 5: tampered.lengths.max_length ^= 1; break;
    case 6: tampered.workspace.total_bytes -= 1; break;
    case 7: tampered.device.num_sms = tampered.device.num_sms == 132 ? 66 : 132; break;
    case 8: tampered.family = dense ? PlanFamily::kSparseDecode : PlanFamily::kDenseDecode; break;
    default: tampered.fingerprint ^= 1; break;
  }
  const Status refused = identity(tampered);
  if (refused.is_ok() || !clean_error(refused, entry) || refused.message().find("argument 'plan'") == std::string::npos) {
    fail(where, "a tampered plan (" + std::to_string(tamper) + ") was not refused cleanly: " + refused.message());
  }
}

// ---------------------------------------------------------------------------
// Driver: each family runs seeds 1, 2, ... until its case or time budget ends.
// ---------------------------------------------------------------------------
void run_family(const char* name, void (*one)(uint64_t), int max_cases, uint64_t seed_base) {
  const auto start = std::chrono::steady_clock::now();
  const Tally before = g_total;
  int n = 0;
  for (; n < max_cases; ++n) {
    one(seed_base + uint64_t(n));
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed.count() > kSecondsPerFamily) {
      ++n;
      break;
    }
  }
  std::printf("%-8s %5d cases: %5d ran, %5d rejected cleanly, %d failures\n", name, n, g_total.ok - before.ok,
              g_total.rejected - before.rejected, g_total.failures - before.failures);
}

}  // namespace
}  // namespace openmla

int main() {
  using namespace openmla;
  run_family("dense", fuzz_dense, 3000, 1000000);
  run_family("sparse", fuzz_sparse, 3000, 2000000);
  run_family("prefill", fuzz_prefill, 3000, 3000000);
  run_family("combine", fuzz_combine, 20000, 4000000);
  run_family("plan", fuzz_plan, 20000, 5000000);
  std::printf("fuzz: %d cases, %d failures\n", g_total.cases, g_total.failures);
  return g_total.failures == 0 ? 0 : 1;
}

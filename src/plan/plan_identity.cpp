// Plan identity: fingerprint and field-by-field comparison; see plan_identity.h.
#include "plan/plan_identity.h"

#include <cinttypes>
#include <cstdio>
#include <string>
#include <type_traits>

#include "validate/checks.h"

namespace openmla {

const char* plan_family_name(PlanFamily family) {
  switch (family) {
    case PlanFamily::kDenseDecode: return "dense_decode";
    case PlanFamily::kSparseDecode: return "sparse_decode";
    case PlanFamily::kSparsePrefill: return "sparse_prefill";
    case PlanFamily::kNone: break;
  }
  return "none (not made by a planner)";
}

namespace detail {
namespace {

// NOTE: a new DecodePlan field changes this size: add it to
// OPENMLA_DECODE_PLAN_FIELDS (plan_identity.h), then update the number.
static_assert(sizeof(DecodePlan) == 272, "add the new DecodePlan field to OPENMLA_DECODE_PLAN_FIELDS");

// Each field as 64 bits, for the hash.
template <class T>
uint64_t bits_of(const T& value) {
  if constexpr (std::is_pointer_v<T>) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(value));
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<uint64_t>(static_cast<std::underlying_type_t<T>>(value));
  } else {
    return static_cast<uint64_t>(value);
  }
}

// Each field as text, for the message.
template <class T>
std::string text_of(const T& value) {
  if constexpr (std::is_same_v<T, PlanFamily>) {
    return plan_family_name(value);
  } else if constexpr (std::is_pointer_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(value));
    return value == nullptr ? std::string("null") : std::string(buf);
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    return std::to_string(static_cast<int64_t>(value));
  } else {
    return std::to_string(value);
  }
}

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void hash_bits(uint64_t* hash, uint64_t bits) {
  for (int byte = 0; byte < 8; ++byte) {
    *hash ^= (bits >> (8 * byte)) & 0xffu;
    *hash *= kFnvPrime;
  }
}

const char* planner_of(PlanFamily family) {
  switch (family) {
    case PlanFamily::kSparseDecode: return "plan_sparse_decode";
    case PlanFamily::kSparsePrefill: return "plan_sparse_prefill";
    default: return "plan_dense_decode";
  }
}

Status field_differs(const char* entry, const DecodePlan& expected, const char* field, const std::string& got,
                     const std::string& want) {
  const std::string name = std::string("plan.") + field;
  return argument_error(StatusCode::kInvalidArgument, entry, "plan",
                        std::string("was not made by ") + planner_of(expected.family) + " for these shapes",
                        name + " = " + got,
                        name + " = " + want + " (what " + planner_of(expected.family) +
                            " gives for these shapes, plan.device and plan.options; make the plan from "
                            "the same shapes as the tensors)");
}

// A plan whose recorded planner inputs the planner itself rejects.
Status inputs_rejected(const char* entry, const Status& planned) {
  return argument_error(StatusCode::kInvalidArgument, entry, "plan",
                        "records planner inputs that do not plan these shapes", planned.message(),
                        "a plan made by the planner for these shapes");
}

}  // namespace

}  // namespace detail

uint64_t decode_plan_fingerprint(const DecodePlan& plan) {
  uint64_t hash = detail::kFnvOffset;
#define OPENMLA_HASH_FIELD(field) detail::hash_bits(&hash, detail::bits_of(plan.field));
  OPENMLA_DECODE_PLAN_FIELDS(OPENMLA_HASH_FIELD)
#undef OPENMLA_HASH_FIELD
  return hash;
}

Status compare_decode_plans(const char* entry, const DecodePlan& given, const DecodePlan& expected) {
  if (given.family != expected.family) {
    return detail::argument_error(
        StatusCode::kInvalidArgument, entry, "plan",
        std::string("was made for ") + plan_family_name(given.family),
        "plan.family = " + std::string(plan_family_name(given.family)),
        "plan.family = " + std::string(plan_family_name(expected.family)) + " (a plan from " +
            detail::planner_of(expected.family) + ")");
  }
#define OPENMLA_COMPARE_FIELD(field)                                                             \
  if (!(given.field == expected.field)) {                                                        \
    return detail::field_differs(entry, expected, #field, detail::text_of(given.field),          \
                                 detail::text_of(expected.field));                                  \
  }
  OPENMLA_DECODE_PLAN_FIELDS(OPENMLA_COMPARE_FIELD)
#undef OPENMLA_COMPARE_FIELD
  if (given.fingerprint != expected.fingerprint) {
    return detail::field_differs(entry, expected, "fingerprint", detail::text_of(given.fingerprint),
                                 detail::text_of(expected.fingerprint));
  }
  return Status::ok();
}

namespace {

// Re-plans `shape` with the plan's recorded device and options (`planner`)
// and compares; a plan of another family is named as such.
template <class Shape>
Status check_plan_of(const char* entry, PlanFamily family,
                     Status (*planner)(const Shape&, const DeviceInfo&, DecodePlan*, const PlanOptions&),
                     const Shape& shape, const DecodePlan& plan) {
  DecodePlan expected;
  expected.family = family;
  if (plan.family != family) return compare_decode_plans(entry, plan, expected);
  const Status planned = planner(shape, plan.device, &expected, plan.options);
  if (!planned) return detail::inputs_rejected(entry, planned);
  return compare_decode_plans(entry, plan, expected);
}

}  // namespace

Status check_dense_decode_plan(const char* entry, const DenseDecodeShape& shape, const DecodePlan& plan) {
  return check_plan_of(entry, PlanFamily::kDenseDecode, &plan_dense_decode, shape, plan);
}

Status check_sparse_decode_plan(const char* entry, const SparseDecodeShape& shape, const DecodePlan& plan) {
  return check_plan_of(entry, PlanFamily::kSparseDecode, &plan_sparse_decode, shape, plan);
}

Status check_sparse_prefill_plan(const char* entry, const SparsePrefillShape& shape, const DecodePlan& plan) {
  return check_plan_of(entry, PlanFamily::kSparsePrefill, &plan_sparse_prefill, shape, plan);
}

}  // namespace openmla

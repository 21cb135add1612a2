// Shared checks for argument validation; see checks.h.
#include "validate/checks.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <vector>

namespace openmla {

// ---- message (openmla/errors.h) ------------------------------------------------
Status argument_error(StatusCode code, const char* entry, std::string_view name,
                      std::string_view problem, std::string_view got, std::string_view expected) {
  std::string message(entry ? entry : "openmla");
  message += ": argument '";
  message += name;
  message += "' ";
  message += problem;
  message += ": got ";
  message += got;
  message += ", expected ";
  message += expected;
  return Status(code, std::move(message));
}

std::string show(std::string_view name, int64_t value) {
  return std::string(name) + " = " + std::to_string(value);
}

std::string show(std::string_view name, std::string_view value) {
  return std::string(name) + " = " + std::string(value);
}

}  // namespace openmla

namespace openmla::detail {

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr size_t kVectorBytes = 16;  // 16-byte vector and TMA loads

std::string join(std::string_view a, std::string_view b) {
  std::string s(a);
  s += b;
  return s;
}

}  // namespace

// ---- message pieces ------------------------------------------------------------
std::string show_float(std::string_view name, double value) {
  // %g prints "nan"/"inf"; normalise the sign of NaN so messages are stable.
  if (std::isnan(value)) return join(name, " = nan");
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return join(name, " = ") + buf;
}

std::string show_pointer(std::string_view name, const void* pointer) {
  if (pointer == nullptr) return join(name, " = null");
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(pointer));
  return join(name, " = ") + buf;
}


// ---- scalars -------------------------------------------------------------------
Status check_range(const char* entry, std::string_view name, int64_t value, int64_t lo, int64_t hi,
                   StatusCode below_code, StatusCode above_code) {
  if (value >= lo && value <= hi) return Status::ok();
  const bool below = value < lo;
  const StatusCode code = below ? below_code : above_code;
  const char* problem =
      code == StatusCode::kNotSupported ? "is outside the supported range" : "is out of range";
  std::string expected =
      std::to_string(lo) + " <= " + std::string(name) + " <= " + std::to_string(hi);
  return argument_error(code, entry, name, problem, show(name, value), expected);
}

Status check_at_least(const char* entry, std::string_view name, int64_t value, int64_t lo) {
  if (value >= lo) return Status::ok();
  return argument_error(StatusCode::kInvalidArgument, entry, name, "is too small",
                        show(name, value), std::string(name) + " >= " + std::to_string(lo));
}

Status check_one_of(const char* entry, std::string_view name, int64_t value,
                    std::initializer_list<int64_t> allowed) {
  for (int64_t a : allowed) {
    if (value == a) return Status::ok();
  }
  std::string expected;
  if (allowed.size() == 1) {
    expected = std::string(name) + " == " + std::to_string(*allowed.begin());
  } else {
    expected = "one of {";
    bool first = true;
    for (int64_t a : allowed) {
      if (!first) expected += ", ";
      expected += std::to_string(a);
      first = false;
    }
    expected += "}";
  }
  return argument_error(StatusCode::kNotSupported, entry, name, "is not supported",
                        show(name, value), expected);
}

Status check_softmax_scale(const char* entry, float softmax_scale) {
  if (std::isfinite(softmax_scale) && softmax_scale > 0.0f) return Status::ok();
  return argument_error(
      StatusCode::kInvalidArgument, entry, "softmax_scale", "must be finite and positive",
      show_float("softmax_scale", static_cast<double>(softmax_scale)), "0 < softmax_scale < inf");
}

Status check_dequant_scale(const char* entry, std::string_view name, float scale) {
  if (std::isfinite(scale) && scale > 0.0f) return Status::ok();
  return argument_error(StatusCode::kInvalidArgument, entry, name, "must be finite and positive",
                        show_float(name, static_cast<double>(scale)), "0 < " + std::string(name) + " < inf");
}

bool mul_fits_int64(int64_t a, int64_t b, int64_t* product) {
  if (a < 0 || b < 0) return false;
  if (a != 0 && b > kInt64Max / a) return false;
  *product = a * b;
  return true;
}

// ---- pointers ------------------------------------------------------------------
Status check_not_null(const char* entry, std::string_view name, const void* pointer) {
  if (pointer != nullptr) return Status::ok();
  return argument_error(StatusCode::kInvalidArgument, entry, name, "must not be null",
                        show_pointer(name, pointer), "a non-null pointer");
}

Status check_aligned(const char* entry, std::string_view name, const void* pointer,
                     size_t alignment) {
  if (reinterpret_cast<uintptr_t>(pointer) % alignment == 0) return Status::ok();
  const std::string bytes = std::to_string(alignment);
  return argument_error(StatusCode::kInvalidArgument, entry, name,
                        "must be " + bytes + "-byte aligned", show_pointer(name, pointer),
                        "an address that is a multiple of " + bytes);
}

Status check_pointer(const char* entry, std::string_view name, const void* pointer,
                     size_t alignment) {
  OPENMLA_RETURN_IF_ERROR(check_not_null(entry, name, pointer));
  return check_aligned(entry, name, pointer, alignment);
}

// ---- strided tensors -------------------------------------------------------------
namespace {

// No two elements alias in some order of the dimensions: the contiguous row
// innermost, then the dimensions of extent > 1 by increasing stride, each
// stride at least the span of everything inside it. The kernels address every
// dimension through its own stride, so any such order is valid.
bool non_overlapping_in_some_order(const TensorLayout& layout, std::initializer_list<StridedDim> dims) {
  std::vector<StridedDim> used;
  for (const StridedDim& d : dims) {
    if (d.extent > 1) used.push_back(d);
  }
  std::sort(used.begin(), used.end(), [](const StridedDim& a, const StridedDim& b) { return a.stride < b.stride; });
  int64_t span = layout.inner_extent;  // one past the largest offset inside the current slice
  for (const StridedDim& d : used) {
    int64_t reach = 0;
    if (d.stride < span || !mul_fits_int64(d.extent - 1, d.stride, &reach) || reach > kInt64Max - span) return false;
    span += reach;
  }
  return true;
}

}  // namespace

Status check_layout(const char* entry, const TensorLayout& layout,
                    std::initializer_list<StridedDim> dims) {
  for (const StridedDim& d : dims) {
    if (d.stride < 0) {
      return argument_error(StatusCode::kInvalidArgument, entry, d.stride_name,
                            "must not be negative", show(d.stride_name, d.stride),
                            std::string(d.stride_name) + " >= 0");
    }
  }

  // Elements per stride step that make 16 bytes; strides must be multiples of it.
  const int64_t elem = static_cast<int64_t>(layout.element_bytes);
  const int64_t stride_quantum =
      static_cast<int64_t>(kVectorBytes) / std::gcd(static_cast<int64_t>(kVectorBytes), elem);

  // `span` bounds the elements one slice at the current level covers, in the
  // declared (row-major) order; an overlap in that order is only an error
  // when no other order of the dimensions avoids it either.
  const bool reorderable = non_overlapping_in_some_order(layout, dims);
  int64_t span = layout.inner_extent;
  std::string span_expr = layout.inner_name;
  bool innermost = true;
  for (const StridedDim& d : dims) {
    const bool used = innermost || d.extent > 1;
    innermost = false;
    if (!used) continue;

    if (d.stride < span && !reorderable) {
      return argument_error(
          StatusCode::kInvalidArgument, entry, d.stride_name,
          "is too small, so elements would overlap", show(d.stride_name, d.stride),
          std::string(d.stride_name) + " >= " + span_expr + " = " + std::to_string(span) +
              " (or any order of " + layout.tensor + "'s dimensions in which no two elements overlap)");
    }
    if (layout.strides_16_bytes && d.stride % stride_quantum != 0) {
      return argument_error(
          StatusCode::kInvalidArgument, entry, d.stride_name, "must be a multiple of 16 bytes",
          show(d.stride_name, d.stride),
          elem == 1 ? std::string(d.stride_name) + " % 16 == 0"
                    : std::string(d.stride_name) + " * " + std::to_string(elem) + " % 16 == 0");
    }

    int64_t next = 0;
    int64_t bytes = 0;
    if (!mul_fits_int64(d.extent, d.stride, &next) || !mul_fits_int64(next, elem, &bytes)) {
      return argument_error(
          StatusCode::kInvalidArgument, entry, layout.tensor, "is too large to address",
          show(d.extent_name, d.extent) + ", " + show(d.stride_name, d.stride),
          std::string(d.extent_name) + " * " + d.stride_name +
              (elem == 1 ? std::string() : " * " + std::to_string(elem)) + " <= INT64_MAX bytes");
    }
    span = std::max(span, next);
    span_expr = std::string(d.extent_name) + " * " + d.stride_name;
  }
  return Status::ok();
}

}  // namespace openmla::detail

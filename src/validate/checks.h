// Building blocks for src/validate/validate.cpp: one message builder and the
// range, pointer, alignment and stride checks every family repeats.
//
// Every failure reads
//   "<entry>: argument '<name>' <what is wrong>: got <value>, expected <what>"
// so callers (and tests) can rely on one shape.
//
// Which code a failure carries:
//   kInvalidArgument  the arguments are malformed: a size below 1, a null or
//                     misaligned pointer, overlapping or negative strides, an
//                     inconsistent relation (h_q % h_kv), a non-finite scale,
//                     sizes whose byte extent overflows int64.
//   kNotSupported     well-formed, but outside what the kernels implement: upper
//                     limits, head dims other than MLA's, dtype combinations,
//                     head counts outside a kernel's set. Another backend could
//                     run these unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "openmla/errors.h"
#include "openmla/status.h"

namespace openmla::detail {

// ---- message -----------------------------------------------------------------
// argument_error and show (openmla/errors.h) build every message.
using openmla::argument_error;
using openmla::show;

// "name = value" pieces for the `got` part of a message.
std::string show_float(std::string_view name, double value);
std::string show_pointer(std::string_view name, const void* pointer);

// ---- scalars -------------------------------------------------------------------
// lo <= value <= hi; the two codes say which side is malformed and which merely
// unsupported.
Status check_range(const char* entry, std::string_view name, int64_t value, int64_t lo, int64_t hi,
                   StatusCode below_code, StatusCode above_code);

// value >= lo (kInvalidArgument).
Status check_at_least(const char* entry, std::string_view name, int64_t value, int64_t lo);

// value is one of `allowed` (kNotSupported); the message lists them.
Status check_one_of(const char* entry, std::string_view name, int64_t value,
                    std::initializer_list<int64_t> allowed);

// Finite and > 0.
Status check_softmax_scale(const char* entry, float softmax_scale);

// An FP8 dequant scale: finite and > 0.
Status check_dequant_scale(const char* entry, std::string_view name, float scale);

// a * b with overflow detection; both must be >= 0.
bool mul_fits_int64(int64_t a, int64_t b, int64_t* product);

// ---- pointers ------------------------------------------------------------------
Status check_not_null(const char* entry, std::string_view name, const void* pointer);
// Null passes: optional pointers are checked for alignment only when given.
Status check_aligned(const char* entry, std::string_view name, const void* pointer,
                     size_t alignment);
// Both of the above.
Status check_pointer(const char* entry, std::string_view name, const void* pointer,
                     size_t alignment);

// ---- strided tensors -------------------------------------------------------------
// One strided dimension of a tensor; strides are in elements.
struct StridedDim {
  const char* extent_name;  // e.g. "h_q"
  int64_t extent;
  const char* stride_name;  // e.g. "q_stride_h"
  int64_t stride;
};

struct TensorLayout {
  const char* tensor;  // e.g. "q", named when the tensor is too large to address
  size_t element_bytes;
  const char* inner_name;  // the contiguous innermost extent, e.g. "d_qk"
  int64_t inner_extent;
  bool strides_16_bytes;  // every checked stride a multiple of 16 bytes (vector/TMA loads)
};

// `dims` run from the innermost strided dimension outward. Rules:
//   - no stride is negative;
//   - the innermost strided dimension always has stride >= inner extent;
//   - an outer dimension with extent > 1 has stride >= the span of one slice
//     inside it (extent * stride of the next dimension that has extent > 1),
//     so no two elements alias; a stride over a single element is never used
//     and is not checked further;
//   - the whole tensor's byte span fits in int64.
Status check_layout(const char* entry, const TensorLayout& layout,
                    std::initializer_list<StridedDim> dims);

}  // namespace openmla::detail

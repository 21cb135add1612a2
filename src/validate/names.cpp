// Printable names for enums that appear in error messages.
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotSupported: return "not_supported";
    case StatusCode::kCudaError: return "cuda_error";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kFP32: return "fp32";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16: return 2;
    case DType::kFP8E4M3: return 1;
    case DType::kFP32:
    case DType::kInt32: return 4;
  }
  return 0;
}

}  // namespace openmla

// Status: the error type every public OpenMLA entry returns.
// A failed Status names the argument, what it got and what was expected.
#pragma once

#include <string>
#include <utility>

namespace openmla {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a shape, dtype, stride, pointer or value is wrong
  kNotSupported,     // valid, but this build/device has no kernel for it
  kCudaError,        // the CUDA runtime reported an error
  kInternal,         // an invariant of the library itself failed
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status invalid_argument(std::string message) {
    return {StatusCode::kInvalidArgument, std::move(message)};
  }
  static Status not_supported(std::string message) {
    return {StatusCode::kNotSupported, std::move(message)};
  }
  static Status cuda_error(std::string message) {
    return {StatusCode::kCudaError, std::move(message)};
  }
  static Status internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* status_code_name(StatusCode code);

}  // namespace openmla

// Propagate a failed Status to the caller.
#define OPENMLA_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::openmla::Status openmla_status_ = (expr);    \
    if (!openmla_status_.is_ok()) return openmla_status_; \
  } while (0)

// Aligned host buffers for tests that fill params structs with host pointers
// (validation, capability and fuzz tests never dereference most of them).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace openmla::test {

inline constexpr size_t kHostBufferAlignment = 256;  // the workspace alignment; covers every tensor's

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<void, FreeDeleter>;

inline HostBuffer make_host_buffer(size_t bytes) {
  // aligned_alloc wants a non-zero size that is a multiple of the alignment.
  const size_t rounded = (bytes + kHostBufferAlignment - 1) / kHostBufferAlignment * kHostBufferAlignment;
  return HostBuffer(std::aligned_alloc(kHostBufferAlignment, rounded == 0 ? kHostBufferAlignment : rounded));
}

}  // namespace openmla::test

// Plans a DeepSeek-V3 decode step through the installed package.
#include <openmla/openmla.h>

#include <cstdio>

int main() {
  openmla::DenseDecodeShape shape;
  shape.batch = 128;
  shape.h_q = 128;
  shape.num_pages = 4096;
  shape.max_pages_per_seq = 64;
  openmla::DecodePlan plan;
  const openmla::Status status = openmla::plan_dense_decode(shape, openmla::DeviceInfo{}, &plan);
  if (!status) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return 1;
  }
  std::printf("consumer: %d parts, workspace %zu bytes\n", plan.num_parts, plan.workspace.total_bytes);
  return plan.num_parts >= 1 ? 0 : 1;
}

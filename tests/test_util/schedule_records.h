// The workspace records (parts, combine entries) an attention kernel leaves
// when it builds its own schedule (DecodePlan::schedule_in_kernel), in device
// buffers poisoned with 0xff, and their check against the host schedule.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "openmla/openmla.h"
#include "openmla/plan.h"
#include "openmla/schedule.h"
#include "plan/partition.h"
#include "test_util/device_buffer.h"

namespace openmla::test {

struct ScheduleRecords {
  DeviceBuffer<PartWork> parts;         // [num_parts]
  DeviceBuffer<CombineEntry> combine;   // [num_parts]

  explicit ScheduleRecords(const DecodePlan& plan) : parts(size_t(plan.num_parts)), combine(size_t(plan.num_parts)) {
    poison(parts);
    poison(combine);
  }
  // Where the kernel writes them (it keeps its scratch in shared memory).
  plan_detail::ScheduleBuffers buffers() const { return {parts.ptr, combine.ptr, nullptr, nullptr, nullptr}; }

  // Byte for byte the host schedule's records for the same plan and lengths.
  void expect_equal(const HostSchedule& host) const {
    const std::vector<uint8_t> got_parts = download_bytes(parts);
    const std::vector<uint8_t> got_combine = download_bytes(combine);
    ASSERT_EQ(got_parts.size(), host.parts.size() * sizeof(PartWork));
    ASSERT_EQ(got_combine.size(), host.combine.size() * sizeof(CombineEntry));
    EXPECT_EQ(std::memcmp(got_parts.data(), host.parts.data(), got_parts.size()), 0) << "parts differ from the host's";
    EXPECT_EQ(std::memcmp(got_combine.data(), host.combine.data(), got_combine.size()), 0)
        << "combine entries differ from the host's";
  }
};

// The records a run left in its workspace (`device_workspace`, laid out by
// plan.workspace) are the host schedule's for the same lengths (`host_lengths`:
// the run's lengths on the host, null when the run had none).
inline void expect_workspace_schedule(const DecodePlan& plan, const uint8_t* device_workspace,
                                      const int32_t* host_lengths) {
  ItemLengths lengths = plan.lengths;
  lengths.lengths = host_lengths;
  HostSchedule host;
  ASSERT_TRUE(build_schedule_host(plan, lengths, &host).is_ok());
  std::vector<PartWork> parts(size_t(plan.num_parts));
  std::vector<CombineEntry> combine(size_t(plan.num_parts));
  ASSERT_EQ(cudaMemcpy(parts.data(), device_workspace + plan.workspace.parts.offset, parts.size() * sizeof(PartWork),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(combine.data(), device_workspace + plan.workspace.combine.offset,
                       combine.size() * sizeof(CombineEntry), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(parts.data(), host.parts.data(), parts.size() * sizeof(PartWork)), 0)
      << "the workspace's parts differ from the host schedule's";
  EXPECT_EQ(std::memcmp(combine.data(), host.combine.data(), combine.size() * sizeof(CombineEntry)), 0)
      << "the workspace's combine entries differ from the host schedule's";
}

}  // namespace openmla::test

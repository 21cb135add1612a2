// Checks of device-resident split-KV schedule records (parts, combine entries)
// against the host schedule: the schedule kernel's, and those an attention
// kernel writes when it builds its own schedule (DecodePlan::schedule_in_kernel).
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

// Device-resident schedule records (`parts`, `combine`: [host.parts.size()] each)
// are byte for byte the host schedule's.
inline void expect_records_equal(const PartWork* parts, const CombineEntry* combine, const HostSchedule& host) {
  std::vector<PartWork> got_parts(host.parts.size());
  std::vector<CombineEntry> got_combine(host.combine.size());
  ASSERT_EQ(cudaMemcpy(got_parts.data(), parts, got_parts.size() * sizeof(PartWork), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got_combine.data(), combine, got_combine.size() * sizeof(CombineEntry), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(got_parts.data(), host.parts.data(), got_parts.size() * sizeof(PartWork)), 0)
      << "parts differ from the host schedule's";
  EXPECT_EQ(std::memcmp(got_combine.data(), host.combine.data(), got_combine.size() * sizeof(CombineEntry)), 0)
      << "combine entries differ from the host schedule's";
}

// The records in a workspace laid out by plan.workspace.
inline void expect_workspace_records(const DecodePlan& plan, const uint8_t* device_workspace,
                                     const HostSchedule& host) {
  expect_records_equal(reinterpret_cast<const PartWork*>(device_workspace + plan.workspace.parts.offset),
                       reinterpret_cast<const CombineEntry*>(device_workspace + plan.workspace.combine.offset), host);
}

// The records a run left in its workspace are the host schedule's for the same
// lengths (`host_lengths`: the run's lengths on the host, null when it had none).
inline void expect_workspace_schedule(const DecodePlan& plan, const uint8_t* device_workspace,
                                      const int32_t* host_lengths) {
  ItemLengths lengths = plan.lengths;
  lengths.lengths = host_lengths;
  HostSchedule host;
  ASSERT_TRUE(build_schedule_host(plan, lengths, &host).is_ok());
  expect_workspace_records(plan, device_workspace, host);
}

// The records an attention kernel writes when it builds its own schedule
// (DecodePlan::schedule_in_kernel), in buffers of their own poisoned with 0xff.
struct ScheduleRecords {
  DeviceBuffer<PartWork> parts;        // [num_parts]
  DeviceBuffer<CombineEntry> combine;  // [num_parts]

  explicit ScheduleRecords(const DecodePlan& plan) : parts(size_t(plan.num_parts)), combine(size_t(plan.num_parts)) {
    poison(parts);
    poison(combine);
  }
  // Where the kernel writes them (it keeps its scratch in shared memory).
  plan_detail::ScheduleBuffers buffers() const { return {parts.ptr, combine.ptr, nullptr, nullptr, nullptr}; }
  void expect_equal(const HostSchedule& host) const {
    ASSERT_EQ(parts.count, host.parts.size());
    expect_records_equal(parts.ptr, combine.ptr, host);
  }
};

}  // namespace openmla::test

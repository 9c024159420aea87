// SPDX-License-Identifier: MIT
// GPU conditions through NVML (lib/nvml.hpp) on the CPU: a fake NVML (an injected function table) for what it
// answers, and a library that cannot be loaded for the absent path. Only queries are made: the fake has no
// setter to call.

#include "nvml.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace nvml = launchfit::detail::nvml;

namespace {

// What the fake GPU reports.
struct fake_gpu {
  std::string uuid = "GPU-11111111-2222-3333-4444-555555555555";
  std::vector<unsigned> pids;
  unsigned sm_mhz = 1980, max_sm_mhz = 1980;
  unsigned long long throttle = 0;
  std::vector<nvml::process_utilization_sample> samples;
  nvml::result samples_result = nvml::success;
  unsigned long long samples_since = 0;
  int init_calls = 0;
  nvml::result init_result = nvml::success;
};
fake_gpu gpu;
int device_token = 0;

nvml::result fake_init() {
  ++gpu.init_calls;
  return gpu.init_result;
}
nvml::result fake_by_uuid(const char* uuid, nvml::device* d) {
  if (gpu.uuid != uuid) return 13;  // NVML_ERROR_NOT_FOUND
  *d = &device_token;
  return nvml::success;
}
nvml::result fake_processes_v3(nvml::device d, unsigned* count, nvml::process_info_v3* info) {
  if (d != &device_token) return 2;
  if (*count < gpu.pids.size()) {
    *count = static_cast<unsigned>(gpu.pids.size());
    return nvml::insufficient_size;
  }
  for (std::size_t i = 0; i < gpu.pids.size(); ++i) info[i] = {gpu.pids[i], 1u << 20, 0, 0, 0};
  *count = static_cast<unsigned>(gpu.pids.size());
  return nvml::success;
}
nvml::result fake_processes_v2(nvml::device d, unsigned* count, nvml::process_info_v2* info) {
  if (d != &device_token) return 2;
  for (std::size_t i = 0; i < gpu.pids.size() && i < *count; ++i) info[i] = {gpu.pids[i], 1u << 20, 0, 0};
  *count = static_cast<unsigned>(gpu.pids.size());
  return nvml::success;
}
nvml::result fake_clock(nvml::device, unsigned type, unsigned* mhz) {
  if (type != nvml::clock_sm) return 2;
  *mhz = gpu.sm_mhz;
  return nvml::success;
}
nvml::result fake_max_clock(nvml::device, unsigned type, unsigned* mhz) {
  if (type != nvml::clock_sm) return 2;
  *mhz = gpu.max_sm_mhz;
  return nvml::success;
}
nvml::result fake_throttle(nvml::device, unsigned long long* reasons) {
  *reasons = gpu.throttle;
  return nvml::success;
}

nvml::result fake_utilization(nvml::device, nvml::process_utilization_sample* out, unsigned* count,
                              unsigned long long since) {
  gpu.samples_since = since;
  if (gpu.samples_result != nvml::success) return gpu.samples_result;
  for (std::size_t i = 0; i < gpu.samples.size() && i < *count; ++i) out[i] = gpu.samples[i];
  *count = static_cast<unsigned>(gpu.samples.size());
  return nvml::success;
}

nvml::function_table full_table() {
  nvml::function_table t;
  t.init = fake_init;
  t.handle_by_uuid = fake_by_uuid;
  t.compute_processes_v3 = fake_processes_v3;
  t.clock = fake_clock;
  t.max_clock = fake_max_clock;
  t.throttle_reasons = fake_throttle;
  return t;
}

class Nvml : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu = fake_gpu{};
    table_ = full_table();
    nvml::set_table_for_tests(&table_);
  }
  void TearDown() override { nvml::set_library_for_tests(nullptr); }
  nvml::function_table table_;
};

const unsigned self = static_cast<unsigned>(getpid());

}  // namespace

TEST_F(Nvml, ThisProcessAloneIsNoContention) {
  gpu.pids = {self};
  const nvml::gpu_conditions c = nvml::read(gpu.uuid, 0);
  ASSERT_TRUE(c.known) << c.unknown;
  EXPECT_EQ(c.other_processes, 0);
  EXPECT_EQ(c.sm_clock_mhz, 1980u);
  EXPECT_EQ(c.max_sm_clock_mhz, 1980u);
  EXPECT_EQ(nvml::contention(c), "");
  EXPECT_EQ(nvml::describe(c), "0 other processes; SM 1980/1980 MHz; throttle 0x0");
}

TEST_F(Nvml, AnotherComputeProcessIsContention) {
  gpu.pids = {self, self + 1, self + 2};
  const nvml::gpu_conditions c = nvml::read(gpu.uuid, 0);
  EXPECT_EQ(c.other_processes, 2);
  EXPECT_EQ(nvml::contention(c), "2 other processes busy on the GPU");  // no samples: all count
}

// In a PID namespace NVML lists host PIDs: one entry is this process's own.
TEST_F(Nvml, ThisProcessUnderAnotherPidCountsOnce) {
  gpu.pids = {self + 100};
  EXPECT_EQ(nvml::read(gpu.uuid, 0).other_processes, 0);
  gpu.pids = {self + 100, self + 101};
  EXPECT_EQ(nvml::read(gpu.uuid, 0).other_processes, 1);
}

TEST_F(Nvml, MoreProcessesThanTheBufferAreCountedNotRead) {
  for (unsigned i = 0; i < 300; ++i) gpu.pids.push_back(self + 1 + i);
  EXPECT_EQ(nvml::read(gpu.uuid, 0).other_processes, 299);
}

// Other processes that only hold a context (a rank waiting for a plan) do not contend; one that keeps the
// SMs busy in a sample since the reading's time stamp does.
TEST_F(Nvml, OnlyBusyProcessesContend) {
  table_.process_utilization = fake_utilization;
  nvml::set_table_for_tests(&table_);
  gpu.pids = {self, self + 1, self + 2, self + 3};
  gpu.samples = {{self, 1, 95, 0, 0, 0}, {self + 1, 2, 0, 0, 0, 0}, {self + 2, 3, 3, 0, 0, 0}};
  nvml::gpu_conditions c = nvml::read(gpu.uuid, 1234);
  EXPECT_EQ(gpu.samples_since, 1234u);
  EXPECT_EQ(c.other_processes, 3);
  EXPECT_EQ(c.busy_processes, 0);
  EXPECT_EQ(nvml::contention(c), "");
  EXPECT_EQ(nvml::describe(c), "3 other processes (0 busy); SM 1980/1980 MHz; throttle 0x0");
  gpu.samples.push_back({self + 3, 4, nvml::busy_sm_percent, 0, 0, 0});
  gpu.samples.push_back({self + 3, 5, 80, 0, 0, 0});  // one process, two samples
  c = nvml::read(gpu.uuid, 0);
  EXPECT_EQ(c.busy_processes, 1);
  EXPECT_EQ(nvml::contention(c), "1 other process busy on the GPU");
  gpu.samples_result = 6;  // NVML_ERROR_NOT_FOUND: nothing ran since then
  EXPECT_EQ(nvml::read(gpu.uuid, 0).busy_processes, 0);
  gpu.samples_result = 3;  // NVML_ERROR_NOT_SUPPORTED: every other process counts
  c = nvml::read(gpu.uuid, 0);
  EXPECT_EQ(c.busy_processes, -1);
  EXPECT_EQ(nvml::contention(c), "3 other processes busy on the GPU");
}

// In a PID namespace NVML's samples carry host PIDs too: one busy process is this one (its own trials).
TEST_F(Nvml, ThisProcessBusyUnderAnotherPidCountsOnce) {
  table_.process_utilization = fake_utilization;
  nvml::set_table_for_tests(&table_);
  gpu.pids = {self + 100, self + 101};
  gpu.samples = {{self + 100, 1, 90, 0, 0, 0}};  // this process's trials, under its host PID
  EXPECT_EQ(nvml::read(gpu.uuid, 0).busy_processes, 0);
  gpu.samples.push_back({self + 101, 2, 70, 0, 0, 0});  // and another process keeping the GPU busy
  EXPECT_EQ(nvml::read(gpu.uuid, 0).busy_processes, 1);
  gpu.pids = {self, self + 101};  // this PID listed: nothing is taken as this one
  gpu.samples = {{self + 101, 2, 70, 0, 0, 0}};
  EXPECT_EQ(nvml::read(gpu.uuid, 0).busy_processes, 1);
}

TEST_F(Nvml, TheV2EntryPointServesWithoutV3) {
  table_.compute_processes_v3 = nullptr;
  table_.compute_processes_v2 = fake_processes_v2;
  nvml::set_table_for_tests(&table_);
  gpu.pids = {self, self + 7};
  EXPECT_EQ(nvml::read(gpu.uuid, 0).other_processes, 1);
}

TEST_F(Nvml, SlowdownReasonsAreContentionPowerCapIsNot) {
  gpu.pids = {self};
  gpu.throttle = 0x4;  // software power cap: normal operation
  EXPECT_EQ(nvml::contention(nvml::read(gpu.uuid, 0)), "");
  gpu.throttle = 0x4 | 0x40;  // hardware thermal slowdown
  gpu.sm_mhz = 1200;
  const nvml::gpu_conditions c = nvml::read(gpu.uuid, 0);
  EXPECT_EQ(nvml::contention(c), "the GPU slowed itself down (throttle reasons 0x40)");
  EXPECT_EQ(nvml::describe(c), "0 other processes; SM 1200/1980 MHz; throttle 0x44");
}

TEST_F(Nvml, InitIsCalledOnceForManyReads) {
  for (int i = 0; i < 5; ++i) (void)nvml::read(gpu.uuid, 0);
  EXPECT_EQ(gpu.init_calls, 1);
}

// A tuning loads NVML before its budget starts: the reads after it do not initialise it again.
TEST_F(Nvml, LoadNowInitialisesOnceAndReadsReuseIt) {
  nvml::load_now();
  EXPECT_EQ(gpu.init_calls, 1);
  nvml::load_now();
  gpu.pids = {self};
  EXPECT_TRUE(nvml::read(gpu.uuid, 0).known);
  EXPECT_EQ(gpu.init_calls, 1);
}

TEST_F(Nvml, AnUnknownDeviceIsUnknownConditions) {
  const nvml::gpu_conditions c = nvml::read("GPU-00000000-0000-0000-0000-000000000000", 0);
  EXPECT_FALSE(c.known);
  EXPECT_EQ(c.unknown, "NVML has no device GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(nvml::contention(c), "");  // unknown is not contention
  EXPECT_EQ(c.other_processes, -1);
}

TEST_F(Nvml, AFailedInitIsUnknownConditions) {
  gpu.init_result = 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  const nvml::gpu_conditions c = nvml::read(gpu.uuid, 0);
  EXPECT_FALSE(c.known);
  EXPECT_EQ(c.unknown, "nvmlInit_v2 failed (NVML error 9)");
}

TEST_F(Nvml, AMissingProcessQueryIsUnknownProcessesNotNone) {
  table_.compute_processes_v3 = nullptr;
  nvml::set_table_for_tests(&table_);
  const nvml::gpu_conditions c = nvml::read(gpu.uuid, 0);
  ASSERT_TRUE(c.known);
  EXPECT_EQ(c.other_processes, -1);
  EXPECT_EQ(nvml::describe(c).rfind("other processes unknown", 0), 0u) << nvml::describe(c);
}

TEST_F(Nvml, AnAbsentLibraryIsUnknownConditions) {
  nvml::set_library_for_tests("libnvidia-ml-absent-for-launchfit-tests.so.1");
  const nvml::gpu_conditions c = nvml::read(gpu.uuid, 0);
  EXPECT_FALSE(c.known);
  EXPECT_EQ(
      c.unknown,
      "libnvidia-ml-absent-for-launchfit-tests.so.1 could not be loaded (no NVIDIA driver's NVML here)");
  EXPECT_EQ(nvml::describe(c).rfind("GPU conditions unknown: ", 0), 0u);
}

TEST(NvmlNotice, UnknownConditionsAreSaidOnce) {
  int said = 0;
  for (int i = 0; i < 3; ++i) said += nvml::first_unknown_notice() ? 1 : 0;
  EXPECT_EQ(said, 1);
}

// SPDX-License-Identifier: MIT
#pragma once
// The query the CPU tests plan for, shared as spdlog's tests share test_sink.h: an H200 from launchfit's
// table and one kernel, with no occupancy oracle (the offline calculator answers) and no work hint, so a
// test sets only what it is about.

#include <cstddef>

#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/policy.hpp"

namespace launchfit_test {

// The kernel every such query describes; tests that check a message for the kernel compare with these.
inline constexpr const char* h200_kernel_name = "reduce";
inline constexpr const char* h200_kernel_demangled = "void reduce<float>(float const*, int)";

// An H200 query for a kernel of `regs` registers per thread and `dynamic_smem_bytes` of dynamic shared
// memory per block.
inline launchfit::query h200_query(int regs = 32, std::size_t dynamic_smem_bytes = 0) {
  launchfit::query q;
  q.device = launchfit::device_limits::for_arch("H200");
  q.kernel = launchfit::kernel_resources::manual(regs, 0, 1024, h200_kernel_name);
  q.kernel.demangled = h200_kernel_demangled;
  q.dynamic_smem_bytes = dynamic_smem_bytes;
  return q;
}

// The same query with a work hint (the shape and size a policy such as autotune plans for).
inline launchfit::query h200_query(const launchfit::work& hint) {
  launchfit::query q = h200_query();
  q.work_hint = hint;
  return q;
}

}  // namespace launchfit_test

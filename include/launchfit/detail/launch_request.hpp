#pragma once
// Internal: what launch() and plan_for() hand to the compiled library (one launch, everything but the
// kernel's argument values). Not part of the public API.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {
class policy;
}

namespace launchfit::detail {

using resolve_fn = CUfunction (*)(const void* stub);

struct launch_request {
  std::uintptr_t kernel_id = 0;
  const void* stub = nullptr;       // runtime kernels
  resolve_fn resolve = nullptr;     // runtime kernels
  const launchfit::kernel* driver_kernel = nullptr;
  const launchfit::policy* policy = nullptr;
  std::uint64_t policy_hash = 0;
  std::uint64_t bucket = 0;
  std::size_t smem_bytes = 0;
  const smem_per_block_fn* smem_fn = nullptr;
  std::uint64_t smem_rule = 0;
  work shape{};
  CUstream stream = nullptr;
  dims cluster{};             // required by the launch (1x1x1: none); a policy never changes it
  bool cooperative = false;   // required by the launch: cooperative() or .cooperative(); never dropped
  void** args = nullptr;
  const std::size_t* arg_sizes = nullptr;
  std::size_t arg_count = 0;
  bool rerunnable = false;
  bool back_to_back = false;  // rerunnable() was given: trials may repeat the launch between resets
  const std::function<void()>* reset = nullptr;
  bool has_arguments = false;  // set by launch(): plan_for() has none, so it never offers tuning trials
};

// The cached plan for this request (computing, validating and logging it on a miss).
const plan& plan_for(const launch_request& r);
// Plan lookup + grid arithmetic + cuLaunchKernelEx.
void launch(const launch_request& r);

}  // namespace launchfit::detail

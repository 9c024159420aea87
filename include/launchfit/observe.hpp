// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup logging
/// \brief Plan listeners (metrics, export) and NVTX ranges: what launchfit decided, for tools beside the log.
///
// launchfit::observe — what launchfit decided, for tools beside the log: a listener called on every new
// plan and tuning result (metrics, export), and NVTX ranges that show in Nsight Systems what each launch ran
// with and why.

#include <cstdint>
#include <functional>
#include <string>

#include "launchfit/export.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

// What a plan listener is told about a new plan.
struct plan_event {
  // Why the listener is called.
  enum class kind : std::uint8_t {
    new_plan,  // a plan was made (computed, or read from the cache file) for a kernel, policy and device
    tuned,     // the same, by a tuning policy that timed candidates (plan.trials > 0, plan.tuning_ms)
  };
  kind what = kind::new_plan;  // a new plan, or a tuning result
  std::string kernel;       // demangled
  std::string device;       // "NVIDIA H200"
  std::string device_uuid;  // "GPU-..."
  int device_ordinal = -1;  // CUdevice ordinal
  const launchfit::plan* plan = nullptr;  // valid during the call only: copy what you keep
  work first_work;                        // the work of the launch that made it
  std::string override_glob;              // the LAUNCHFIT_POLICY entry that chose the policy, if any
};

// A listener on new plans (add_plan_listener).
using plan_listener = std::function<void(const plan_event&)>;

// Calls `f` for every new plan from now on, on the thread that made it, with none of launchfit's locks held
// (f may launch; a launch of the same kernel from f is planned for that call only). An exception from f is
// caught and reported, with its what(), in one warning per listener; the launch goes on. Returns an id for
// remove_plan_listener().
LAUNCHFIT_API std::uint64_t add_plan_listener(plan_listener f);
// Stops calling the listener: once this returns, no thread calls it again (calls in progress on other threads
// are waited for; one on this thread, a listener removing itself, finishes). False for an unknown id.
LAUNCHFIT_API bool remove_plan_listener(std::uint64_t id);

// NVTX: every launch is a range in the "launchfit" domain, named by the kernel and carrying its plan (policy,
// block, grid rule, occupancy, limiter; the payload is the launch's grid size in blocks). Made only when a
// tool is attached (Nsight Systems or Nsight Compute set NVTX_INJECTION64_PATH when they start the program);
// without one a launch pays one predictable branch. On unless LAUNCHFIT_NVTX=0 at first use, or
// set_nvtx(false); compiled out with the CMake option LAUNCHFIT_NVTX=OFF, or with NVTX_DISABLE defined
// when launchfit is built, as CUB honours it (then nvtx_enabled() is false).
LAUNCHFIT_API void set_nvtx(bool on);
// Whether launches are NVTX ranges now (false when compiled out).
LAUNCHFIT_API bool nvtx_enabled() noexcept;

}  // namespace launchfit

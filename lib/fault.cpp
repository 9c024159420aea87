// SPDX-License-Identifier: MIT
#include "fault.hpp"

#include <atomic>
#include <string>

#include "driver.hpp"

namespace launchfit::detail {

std::atomic<const kept_plan*> last_launched{nullptr};

namespace {

std::string sticky_note() {
  std::string note = "; the context is unusable after an earlier kernel faulted";
  if (const kept_plan* last = last_launched.load(std::memory_order_acquire))
    note += " (last launched: " + display_name(*last) + " with " + last->plan.to_string() + ")";
  return note;
}

}  // namespace


bool is_sticky(CUresult r) noexcept { return is_sticky_cuda_result(static_cast<int>(r)); }

error with_fault_note(const error& e) {
  if (!e.is_sticky()) return e;
  return error(e.cuda_result(), e.call(), e.message() + sticky_note(), e.kernel(), e.config());
}

void throw_launch_error(CUresult r, const plan_entry& e, dims grid) {
  std::string message = error_string(r);
  if (is_sticky(r)) message += sticky_note();
  throw error(r, "cuLaunchKernelEx", message, display_name(e.kernel),
              "launch grid " + grid.to_string() + ", " + e.plan.to_string());
}

}  // namespace launchfit::detail

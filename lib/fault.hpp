// SPDX-License-Identifier: MIT
#pragma once
// Internal: naming the kernel behind an asynchronous fault. A kernel that faults is reported by whatever
// CUDA call comes next, often another kernel's launch: the error then names the last kernel launched.

#include <cuda.h>

#include <atomic>

#include "launchfit/error.hpp"
#include "launchfit/plan.hpp"
#include "plan_cache.hpp"

namespace launchfit::detail {

// The most recently launched plan and kernel: named when a later call reports a sticky (asynchronous) fault.
// A kept plan, never freed (the entry it came from may be).
extern std::atomic<const kept_plan*> last_launched;

// Records the plan and kernel just launched (on the hit path: inline, a store only when it changes, so that
// threads launching the same plans read a shared line instead of taking it).
inline void note_launched(const kept_plan& launched) noexcept {
  if (last_launched.load(std::memory_order_relaxed) != &launched)
    last_launched.store(&launched, std::memory_order_release);
}

// Whether r leaves the context unusable (every later call returns it).
bool is_sticky(CUresult r) noexcept;

// e unchanged, or, for a sticky error, with the note that an earlier kernel faulted and which kernel was
// launched last.
error with_fault_note(const error& e);

// The launch failed: throws the driver's error with the kernel, the grid and the plan.
[[noreturn]] void throw_launch_error(CUresult r, const plan_entry& e, dims grid);

}  // namespace launchfit::detail

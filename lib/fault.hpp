// SPDX-License-Identifier: MIT
#pragma once
// Internal: naming the kernel behind an asynchronous fault. A kernel that faults is reported by whatever
// CUDA call comes next, often another kernel's launch: the error then names the last kernel launched.

#include <cuda.h>

#include "launchfit/error.hpp"
#include "launchfit/plan.hpp"
#include "plan_cache.hpp"

namespace launchfit::detail {

// Records the plan and kernel just launched (one release store on the hit path): a kept plan, valid after its
// entry is freed.
void note_launched(const kept_plan& launched) noexcept;

// Whether r leaves the context unusable (every later call returns it).
bool is_sticky(CUresult r) noexcept;

// e unchanged, or, for a sticky error, with the note that an earlier kernel faulted and which kernel was
// launched last.
error with_fault_note(const error& e);

// The launch failed: throws the driver's error with the kernel, the grid and the plan.
[[noreturn]] void throw_launch_error(CUresult r, const plan_entry& e, dims grid);

}  // namespace launchfit::detail

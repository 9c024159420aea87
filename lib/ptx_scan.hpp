// SPDX-License-Identifier: MIT
#pragma once
// Internal: what launchfit reads from a module's PTX text. Today one fact: which kernels never execute
// griddepcontrol.wait (cudaGridDependencySynchronize), so a programmatic dependent launch of one (.pdl())
// is said to start before its predecessor ends with nothing to wait for.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace launchfit::detail {

// Whether `image` is PTX text (a NUL-terminated text whose first directive is .version, after comments and
// white space) rather than a cubin or fatbin.
bool looks_like_ptx(std::string_view image) noexcept;

// The .entry names of `ptx` that never execute griddepcontrol.wait: the wait is not in the entry's body, and
// the body calls no function of the module that has one (a call through a pointer, or any call when a .func
// holds the wait, counts as waiting: never a false report). Linear in the text; text that is not PTX has
// no entries.
std::set<std::string> entries_without_wait(std::string_view ptx);

// The process's record of kernels loaded from PTX without a wait (module::get() notes them, unloading
// forgets them). nullopt: launchfit has not seen the kernel's PTX.
void note_kernel_wait(std::uintptr_t kernel_id, bool waits);
void forget_kernel_wait(std::uintptr_t kernel_id);
std::optional<bool> kernel_waits(std::uintptr_t kernel_id);

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: listeners and NVTX, as the planner and the launch path use them.

#include <string>

#include "launchfit/observe.hpp"

namespace launchfit::detail {

// Whether any listener is registered (one relaxed load: a miss builds an event only for listeners).
bool listeners_active() noexcept;
// Calls every listener (no lock held while they run); never throws.
void notify_plan(const plan_event& ev) noexcept;

// The registered NVTX name of a plan's launches (made once per plan), or nullptr when NVTX is off.
const void* nvtx_name_for(const std::string& kernel, const plan& p, const std::string& grid_rule_text) noexcept;
void nvtx_push(const void* name, unsigned long long blocks) noexcept;
void nvtx_pop() noexcept;
// NVTX switched on and a tool attached (NVTX_INJECTION64_PATH set at start): ranges are made.
bool nvtx_on() noexcept;

}  // namespace launchfit::detail

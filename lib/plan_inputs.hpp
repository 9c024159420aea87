// SPDX-License-Identifier: MIT
#pragma once
// Internal: the process-wide inputs a plan depends on beyond its key, as one generation number.
//
// A plan is made from its key (context, kernel, policy, smem rule, bucket, launch options, shape) and from
// inputs that no key field holds: LAUNCHFIT_POLICY overrides, the bytes-in-flight defaults and stored
// calibrations, the policy registry (a policy or plugin registered or removed), the plan store's
// configuration and the contents it has served (a file opened, closed or changed by another process; a
// remote store configured). Each owner of such an input registers it once (register_plan_input) and calls
// plan_input_changed() when it changes; every change makes a new generation, which is part of every plan
// key (plan_key::inputs), so a plan made under other inputs is never found again. No call site flushes the
// plan cache by hand, and each change names its input in one trace line (`plan_inputs_changed`).
//
// The registry is a fixed table of max_plan_inputs names, constant-initialised: registering allocates
// nothing, and neither a change nor reading the generation ever takes a lock.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hot_words.hpp"

namespace launchfit::detail {

// The names the table holds; one more registration than that shares the last entry ("other plan inputs").
inline constexpr std::size_t max_plan_inputs = 32;
// Bytes of a name kept (a longer one is cut).
inline constexpr std::size_t plan_input_name_bytes = 47;

// One registered input: an index into the table.
struct plan_input {
  std::uint8_t index = 0;
};

// The input named `name` ("policy overrides"), registered at its first call; the same name gives the same
// input. Thread-safe; never throws, never allocates.
plan_input register_plan_input(std::string_view name) noexcept;

// Records that `input` changed: a new generation, its own count, and a trace line naming it.
void plan_input_changed(plan_input input) noexcept;

// The current generation (starts at 1; only grows). One atomic load, inline: every launch reads it.
inline std::uint64_t plan_inputs_generation() noexcept { return hot.inputs_generation.load(std::memory_order_acquire); }

// How many times `input` changed, and its name (for reports and tests).
std::uint64_t plan_input_changes(plan_input input) noexcept;
std::string_view plan_input_name(plan_input input) noexcept;

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: the process-wide inputs a plan depends on beyond its key, as one generation number.
//
// A plan is made from its key (context, kernel, policy, smem rule, bucket, launch options, shape) and from
// inputs that no key field holds: LAUNCHFIT_POLICY overrides, the bytes-in-flight defaults and stored
// calibrations, the plan store's configuration and the contents it has served (a file opened, closed or
// changed by another process; a remote store configured), and the set of loaded plugins. Every module that
// owns one of those inputs calls plan_inputs_changed() when it changes; the generation is part of every
// plan key (plan_key::inputs), so a plan made under other inputs is never found again. No call site flushes
// the plan cache by hand.

#include <cstdint>

namespace launchfit::detail {

// The current generation (starts at 1; only grows). One relaxed atomic load: cheap enough for the hit path.
std::uint64_t plan_inputs_generation() noexcept;

// Records that an input changed. `what` names it for the trace log ("policy overrides", "calibration").
void plan_inputs_changed(const char* what) noexcept;

}  // namespace launchfit::detail

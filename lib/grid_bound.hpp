// SPDX-License-Identifier: MIT
#pragma once
// Internal: the grid a launch bounds (an SM budget, a waves cap) and a policy's fixed grid within it: one rule
// for validate_plan() (the plan refused when made) and grid_for() (a plan made elsewhere, at launch).

#include <string>

#include "launchfit/plan.hpp"
#include "launchfit/work.hpp"

namespace launchfit::detail {

// "" where `p`'s fixed grid (if any) is within what work `w` and the plan's options bound it to; else why not,
// naming the grid and the bound.
std::string fixed_grid_past_bound(const plan& p, const work& w);

}  // namespace launchfit::detail

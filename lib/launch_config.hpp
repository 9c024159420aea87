// SPDX-License-Identifier: MIT
#pragma once
// Internal: a plan and a grid as a CUlaunchConfig, for real launches and tuning trials alike.

#include <cuda.h>

#include <array>

#include "launchfit/launch_options.hpp"
#include "launchfit/plan.hpp"

namespace launchfit::detail {

using launch_attributes = std::array<CUlaunchAttribute, 3>;

// The one marshal step into the driver's struct, for real launches and tuning trials alike: block and dynamic
// smem from the plan, every launch attribute (cooperative, cluster, PDL) from the launch's options alone, so
// no plan from any source can add or drop one. `attrs` must outlive the launch that uses `cfg`.
void fill_launch_config(CUlaunchConfig& cfg, launch_attributes& attrs, const plan& p, const launch_options& o,
                        dims grid, CUstream stream);

}  // namespace launchfit::detail

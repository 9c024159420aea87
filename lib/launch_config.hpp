#pragma once
// Internal: a plan and a grid as a CUlaunchConfig, for real launches and tuning trials alike.

#include <cuda.h>

#include <array>

#include "launchfit/plan.hpp"

namespace launchfit::detail {

using launch_attributes = std::array<CUlaunchAttribute, 3>;

// Every launch attribute goes through here (cooperative, cluster): what the plan says, nothing else.
// `attrs` must outlive the launch that uses `cfg`.
void fill_launch_config(CUlaunchConfig& cfg, launch_attributes& attrs, const plan& p, dims grid, CUstream stream);

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: a plan and a grid as a CUlaunchConfig, for real launches and tuning trials alike.

#include <cuda.h>

#include <array>

#include "launchfit/launch_options.hpp"
#include "launchfit/plan.hpp"

namespace launchfit::detail {

using launch_attributes = std::array<CUlaunchAttribute, 3>;

// The one marshal step into the driver's struct, for real launches, tuning trials, occupancy probes and graph
// nodes alike: block and dynamic smem from the plan, every launch attribute (cooperative, cluster, PDL) from
// the plan's launch options (plan::options: the launch's own, given to every plan from any source where it is
// made, and checked equal to the launch's before it is cached). `attrs` must outlive the launch that uses
// `cfg`.
void fill_launch_config(CUlaunchConfig& cfg, launch_attributes& attrs, const plan& p, dims grid, CUstream stream);
// The attributes alone, in the same order: how many of `attrs` the options use (0 to 3).
unsigned fill_launch_attributes(launch_attributes& attrs, const launch_options& o) noexcept;

// A kernel node's parameters (CUDA_KERNEL_NODE_PARAMS or its _v3 in CUgraphNodeParams) for what `cfg`
// launches: the function, grid, block, dynamic smem and arguments, from the one marshal step above; the
// attributes stay in `cfg` (set on the node, or as programmatic edges, by the caller).
template <class NodeParams>
NodeParams kernel_node_params(const CUlaunchConfig& cfg, CUfunction f, void** args) {
  NodeParams k{};
  k.func = f;
  k.gridDimX = cfg.gridDimX;
  k.gridDimY = cfg.gridDimY;
  k.gridDimZ = cfg.gridDimZ;
  k.blockDimX = cfg.blockDimX;
  k.blockDimY = cfg.blockDimY;
  k.blockDimZ = cfg.blockDimZ;
  k.sharedMemBytes = cfg.sharedMemBytes;
  k.kernelParams = args;
  return k;
}

}  // namespace launchfit::detail

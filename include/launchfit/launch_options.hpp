// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief launchfit::launch_options: what a launch requires whatever policy decides (cooperative, cluster,
/// PDL, SM budget, dynamic smem), as one value.
///
// launchfit::launch_options — what a launch requires whatever policy decides, as one value: made once from
// the spec, part of the plan's identity, applied to the plan once and marshalled once into the driver's
// CUlaunchConfig (its attributes, its dynamic smem, its grid). No policy, override, plugin, stored or remote
// plan may add or drop any of it.

#include <cstddef>
#include <cstdint>

#include "launchfit/work.hpp"

namespace launchfit {

// What a launch requires beyond its plan's block and grid: kept through every policy, override and plugin.
struct launch_options {
  bool cooperative = false;           // cooperative() or .cooperative(): co-resident grid, cooperative attribute
  dims cluster{};                     // thread-block cluster dims (1x1x1: none)
  bool cluster_from_kernel = false;   // the dims are the kernel's __cluster_dims__ (no launch attribute is set)
  bool non_portable_cluster = false;  // cluster sizes above 8 allowed (sets the kernel's non-portable attribute)
  bool programmatic = false;          // programmatic dependent launch (sm_90+)
  int sm_budget = 0;                  // resident grids sized for this many SMs (0: all of the context's)
  // Dynamic shared memory: fixed bytes per block, or (smem_rule != 0) a rule of the block size whose
  // identity is its type and key (the spec carries the rule's function; each launch checks rule(block)).
  std::size_t smem_bytes = 0;
  std::uint64_t smem_rule = 0;       // the rule's identity; 0: fixed bytes (smem_bytes)
  std::uint32_t waves = 0;            // grid_stride work: at most this many waves of resident blocks (0: the policy's)

  // A cluster of more than one block.
  bool has_cluster() const noexcept { return cluster.count() > 1; }
  // The smem rule as the plan key holds it: the fixed bytes, or the rule's identity (top bit set).
  std::uint64_t smem_identity() const noexcept { return smem_rule != 0 ? smem_rule : smem_bytes; }

  friend bool operator==(const launch_options& a, const launch_options& b) noexcept {
    return a.cooperative == b.cooperative && a.cluster == b.cluster && a.cluster_from_kernel == b.cluster_from_kernel &&
           a.non_portable_cluster == b.non_portable_cluster && a.programmatic == b.programmatic &&
           a.sm_budget == b.sm_budget && a.smem_bytes == b.smem_bytes && a.smem_rule == b.smem_rule &&
           a.waves == b.waves;
  }
  friend bool operator!=(const launch_options& a, const launch_options& b) noexcept { return !(a == b); }
};

}  // namespace launchfit

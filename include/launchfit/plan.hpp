// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup plans
/// \brief launchfit::plan, what a policy decided for one kernel in one device context, and grid_for(), the
/// grid a launch with it runs.
///
// launchfit::plan — what a policy decided for one (device, kernel, policy, smem rule, launch options, size
// bucket), and the work shape that turns a plan into a grid at launch time.
//
// The rule: plan_for(k, spec) answers exactly what launch(k, spec, ...) runs, for every spec launch()
// accepts, and a spec without work runs one full wave of its plan's resident blocks under every policy.
//
// planned(p) launches a plan verbatim. A plan depends on the work only through its policy's size bucket
// (policy::work_bucket; e.g. small work fills the SMs with smaller blocks) and the work's rank; the grid is
// computed per launch. So the same spec with work may run another block than without it where the policy
// decides by the work (policy::depends_on_work(): max_occupancy() and bytes_in_flight() do; max_occupancy(0),
// fixed, cooperative and planned never do). "Plan without the work, then launch with it" stays safe: such a
// plan says plan::without_work, grid_for() refuses to size items(n) or grid_stride(n) with it
// (errc::missing_work; the grid of the plan's own wave, or a caller's grid(g) made from it, is fine), and a
// launch with work whose block differs from that plan's logs a warning once. Plan with the launch's work, or
// launch the plan verbatim with planned(p). A launch tuned on its first run has no plan before it: plan_for()
// then refuses with errc::not_planned_yet. An operator's LAUNCHFIT_POLICY override never turns a launch or a
// plan_for() that works into an exception: where its plan cannot serve the launch, the spec's own policy
// decides, with one warning naming the kernel, the override and why.

#include <cstddef>
#include <cstdint>
#include <string>

#include "launchfit/export.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/work.hpp"

namespace launchfit {

// What a policy decided for one (device, kernel, policy, smem rule, launch options, size bucket); the grid of
// each launch is computed from it and the work (grid_for).
struct LAUNCHFIT_API plan {
  dims block;             // block dimensions
  int block_threads = 0;  // block.count()
  int blocks_per_sm = 0;  // resident blocks per SM this plan runs with (caps grid_stride grids)
  int sm_count = 0;       // SMs the plan is sized for: the context's, or the launch's SM budget (sms(k))
  std::size_t dynamic_smem_bytes = 0;  // dynamic shared memory per block
  dims grid{0, 1, 1};                  // fixed grids only (grid.x == 0: computed from the work)
  // What the launch requires whatever the policy decided, as one value: cooperative (the grid checked for
  // co-residency), the cluster (options.cluster; cluster_from_kernel: the kernel's __cluster_dims__, no launch
  // attribute is set), programmatic dependent launch (sm_90+), the SM budget, the smem rule, the waves cap.
  // The launch's own options, set once where the plan is made: a policy, override or plugin that adds one is
  // refused, one that leaves one out gets the launch's, a stored plan that differs is ignored. The driver's
  // CUlaunchConfig attributes are made from it. The bytes of dynamic smem launched are dynamic_smem_bytes
  // (options.smem_bytes is the spec's fixed size, 0 under an smem rule). A plan read back from a plan file
  // (the file keeps the options in the entry's key) has only cooperative, cluster and programmatic set.
  launch_options options;
  // Clusters co-resident on sm_count SMs (cuOccupancyMaxActiveClusters); 0: no cluster.
  int resident_clusters = 0;
  bool full_grid = false;  // grid_stride work launches one thread per item unless the spec gives waves(k);
                           // set only by a plan that timed it (autotune), never by a static policy
  // Planned for a spec without work by a policy that chooses the block by the work
  // (policy::depends_on_work()): the same spec with items(n) or grid_stride(n) may run another block, so
  // grid_for() sizes no such work with this plan (give plan_for() the launch's work, or launch this plan
  // verbatim with planned(p)).
  bool without_work = false;
  std::string blocks;          // the launch's block rule when it has one: "power of two", "multiple of 64"
  block_shape shape_rule;      // the launch's block shape (block_y, per_thread_y): grid y follows it
  occupancy_result occupancy;  // at block_threads and dynamic_smem_bytes
  std::string policy;          // "bytes_in_flight(per_thread=32,target_per_sm=32768)"
  std::string reason;          // why the policy chose this, one sentence
  std::string warning;         // set when the policy could not meet its goal (logged once as a warning)
  // computed | cache-file | cache-file-same-model | cache-file-other-bucket |
  // cache-file-same-model-other-bucket | remote (the remote plan store: another GPU of this model) | fallback
  std::string match = "computed";
  int trials = 0;        // candidate plans timed (autotune)
  double tuning_ms = 0;  // time spent timing them

  // Resident-block cap: the co-resident clusters' blocks for a cluster launch, else blocks_per_sm x sm_count.
  long long resident_blocks() const noexcept {
    const long long per_sm = static_cast<long long>(blocks_per_sm) * sm_count;
    if (resident_clusters <= 0) return per_sm;
    // Whole clusters, and no more than the residency the policy chose (cooperative(k), bytes_in_flight).
    const auto size = static_cast<long long>(options.cluster.count());
    const long long clusters = static_cast<long long>(resident_clusters) * size;
    const long long chosen = per_sm / size * size;
    return clusters < chosen ? clusters : chosen;
  }
  // Waves of resident blocks a grid takes (Nsight Compute's launch__waves_per_multiprocessor): 1.0 is one
  // full wave, 1.05 a full wave and a tail of 5%.
  double waves(dims grid_dims) const noexcept {
    const long long r = resident_blocks();
    return r > 0 ? static_cast<double>(grid_dims.count()) / static_cast<double>(r) : 0.0;
  }
  // "block=256 blocks_per_sm=8 sm_count=132 dynamic_smem_bytes=0 occupancy=100% limiters=warps
  // policy=max_occupancy()": the fields as every printer of a plan names them (log lines, NVTX, the plan file).
  std::string to_string() const;
};

// Grid for this plan and work, integer arithmetic only: ceil per dimension (y over block y x the shape's
// per_thread_y; with a block shape, 1-D work along block x), rounded up to whole clusters.
// Throws launchfit::error when the grid would exceed max_grid_x (e.g. a size_t n too large for the chosen
// block) or 65535 in y or z, a caller's grid is not made of whole clusters, or a cooperative grid would not
// co-reside.
LAUNCHFIT_API dims grid_for(const plan& p, const work& w, long long max_grid_x = 2147483647LL);

}  // namespace launchfit

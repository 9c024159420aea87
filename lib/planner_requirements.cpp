// SPDX-License-Identifier: MIT
// What the launch requires, whatever the plan's source: its options (cooperative, cluster dims, PDL) applied
// to a plan and checked, and what the function must allow for it (a non-portable cluster size, its
// dynamic-smem limit raised to the plan's).

#include <algorithm>
#include <mutex>
#include <string>

#include "driver.hpp"
#include "launch_config.hpp"
#include "planner_steps.hpp"
#include "text.hpp"

namespace launchfit::detail {

namespace planning {
namespace {

// cuOccupancyMaxPotentialClusterSize for `f` with blocks of `block` threads and `smem` bytes of dynamic smem, asked
// through the one marshal step with one cluster's grid and no attribute; 0 where the driver does not answer.
int most_blocks_per_cluster(CUfunction f, dims block, std::size_t smem, dims cluster) {
  plan probe;
  probe.block = block;
  probe.dynamic_smem_bytes = smem;
  CUlaunchConfig cfg;
  launch_attributes attrs;
  fill_launch_config(cfg, attrs, probe, cluster, nullptr);
  int most = 0;
  return driver().cuOccupancyMaxPotentialClusterSize(&most, f, &cfg) == CUDA_SUCCESS ? most : 0;
}

}  // namespace

// Cluster sizes: above 8 blocks only when the launch allows non-portable sizes (which sets the kernel's
// attribute, before any residency is asked), and never above what cuOccupancyMaxPotentialClusterSize says
// co-schedules for the chosen block.
void allow_cluster_size(const launch_requirements& need, const plan_entry& e, const family_members& fam) {
  const unsigned long long size = need.cluster.count();
  if (size <= 8) return;
  if (!need.non_portable_cluster) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "cluster " + need.cluster.to_string() + " (" + std::to_string(size) +
                    " blocks) is above the portable maximum of 8: allow it with cluster(dims, true)",
                display_name(e.kernel));
  }
  const driver_api& d = driver();
  auto allow = [&](CUfunction f) {
    check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
          "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", e.kernel);
  };
  if (fam.functions.empty()) {
    allow(e.function);
  } else {
    for (CUfunction f : fam.functions) allow(f);
  }
  // The device's own maximum (16 blocks on an H200), asked for the smallest block so that only the hardware
  // binds: above it no block size or smem co-schedules, and the message says the number, not "no plan".
  if (!d.cuOccupancyMaxPotentialClusterSize) return;
  const CUfunction f = fam.functions.empty() ? e.function : fam.functions.front();
  const int most = most_blocks_per_cluster(f, dims{32, 1, 1}, 0, need.cluster);
  if (most <= 0) return;
  if (size > static_cast<unsigned long long>(most)) {
    throw error(
        errc::cluster, "plan(cluster)",
        "cluster " + need.cluster.to_string() + " (" + std::to_string(size) +
            " blocks) is above the most this device co-schedules in one cluster: " + std::to_string(most) +
            " blocks (its non-portable maximum, cuOccupancyMaxPotentialClusterSize; 8 is portable)",
        display_name(e.kernel));
  }
}

void check_cluster_size(const launch_requirements& need, const plan_entry& e) {
  const unsigned long long size = need.cluster.count();
  if (size <= 1 || !driver().cuOccupancyMaxPotentialClusterSize) return;
  const int most = most_blocks_per_cluster(e.function, e.plan.block, e.plan.dynamic_smem_bytes, need.cluster);
  if (most > 0 && size > static_cast<unsigned long long>(most)) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "cluster " + need.cluster.to_string() + " (" + std::to_string(size) + " blocks of " +
                    std::to_string(e.plan.block_threads) + " threads, " +
                    std::to_string(e.plan.dynamic_smem_bytes) + " B dynamic smem): at most " +
                    std::to_string(most) + " co-schedule (cuOccupancyMaxPotentialClusterSize)",
                display_name(e.kernel), e.plan.to_string());
  }
}

// The function's dynamic-smem limit raised to `needed` (a launched plan or a tuning trial), never lowered (a
// user's higher setting stays). Returns the limit now in force.
std::size_t raise_function_smem_limit(CUfunction f, std::size_t needed, const kernel_resources& k,
                                      const plan& p) {
  static std::mutex& m = *new std::mutex();  // never destroyed, as every launchfit singleton
  const driver_api& d = driver();
  std::lock_guard<std::mutex> lock(m);
  int current = 0;
  check(d.cuFuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", k, p);
  if (static_cast<std::size_t>(current) >= needed) return static_cast<std::size_t>(current);
  check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(needed)),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", k, p);
  return needed;
}

// Raised to what the launched plan needs, never lowered (a user's higher setting stays), and checked with the
// driver afterwards: the plan's residency came from the calculator above the old limit.
void raise_smem_limit(const query& q, plan_entry& e) {
  if (e.plan.dynamic_smem_bytes <= e.kernel.max_dynamic_smem_bytes) return;
  e.kernel.max_dynamic_smem_bytes =
      raise_function_smem_limit(e.function, e.plan.dynamic_smem_bytes, e.kernel, e.plan);
  query checked = q;
  checked.kernel.max_dynamic_smem_bytes = e.kernel.max_dynamic_smem_bytes;
  checked.active_blocks = driver_oracle(e.function, q.device, checked.kernel, true);
  const std::string reason = e.plan.reason;
  try {
    validate_plan(checked, e.plan);
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
  e.plan.reason = reason;
}

}  // namespace planning

launch_requirements requirements_of(const launch_request& r) { return launch_options_of(r); }

void require_pdl_support(const launch_requirements& need, const kernel_resources& k) {
  if (!need.programmatic || k.ptx_version == 0 || k.ptx_version >= 90) return;
  // griddepcontrol.wait (cudaGridDependencySynchronize) exists from PTX for sm_90 on: code compiled for an
  // older virtual architecture has none (library kernels guard it with __CUDA_ARCH__ >= 900), also once the
  // driver JIT-compiles it for sm_90 (the binary version then reads 90, the PTX version stays). Launched
  // early, such a kernel reads its predecessor's output before it is written.
  throw error(
      errc::pdl_unsupported, "plan(pdl)",
      "the kernel was compiled from PTX for compute_" + std::to_string(k.ptx_version) + " (binary version " +
          std::to_string(k.binary_version) +
          "), which has no griddepcontrol.wait (cudaGridDependencySynchronize needs compute_90 or later): "
          "launched with .pdl() it could read the previous kernel's output before it is written. Build "
          "it for sm_90 (e.g. -gencode arch=compute_90,code=sm_90) or launch it without .pdl()",
      display_name(k));
}

void require_kernel_cluster(launch_requirements& need, const kernel_resources& k) {
  if (k.required_cluster[0] == 0) return;
  const dims compiled{k.required_cluster[0], std::max(k.required_cluster[1], 1u),
                      std::max(k.required_cluster[2], 1u)};
  if (compiled.count() <= 1) return;
  if (need.cluster.count() > 1 && need.cluster != compiled) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "the kernel's __cluster_dims__ are " + compiled.to_string() +
                    ", the launch asks for cluster " + need.cluster.to_string(),
                display_name(k));
  }
  need.cluster = compiled;
  need.cluster_from_kernel = true;
}

void apply_requirements(const query& q, plan& p, const launch_requirements& need) {
  // Options are the launch's, decided once from the spec: a policy, override or plugin that adds one (or
  // another cluster) is refused, never launched with it nor silently stripped of it.
  const launch_options chose = p.options;
  if (chose.has_cluster() && chose.cluster != need.cluster) {
    throw error(errc::invalid_plan, "plan(cluster)",
                "policy " + escape_text(p.policy) + " chose cluster " + chose.cluster.to_string() +
                    " but the launch " +
                    (need.has_cluster() ? "requires cluster " + need.cluster.to_string()
                                        : std::string("asked for no cluster")),
                q.kernel.demangled, p.to_string());
  }
  if (chose.programmatic && !need.programmatic) {
    throw error(
        errc::invalid_plan, "plan(pdl)",
        "policy " + escape_text(p.policy) +
            " chose a programmatic dependent launch (PDL) but the launch does not ask for one (.pdl())",
        q.kernel.demangled, p.to_string());
  }
  if (chose.cooperative && !need.cooperative) {
    throw error(errc::invalid_plan, "plan(cooperative)",
                "policy " + escape_text(p.policy) +
                    " chose a cooperative launch but the launch does not require one (cooperative() or "
                    ".cooperative())",
                q.kernel.demangled, p.to_string());
  }
  // What the plan's residency and co-residency were checked with changes where the launch adds a cluster,
  // PDL or a cooperative grid to what the policy chose.
  const bool made_cooperative = need.cooperative && !chose.cooperative;
  bool changed = (need.has_cluster() && (chose.cluster != need.cluster || p.resident_clusters == 0)) ||
                 chose.programmatic != need.programmatic;
  p.options = need;  // the launch's options, as one value: what every launch of this plan is marshalled with
  // A cooperative grid co-resides: never the full grid (a tuner may offer it to any grid_stride launch).
  if (need.cooperative) p.full_grid = false;
  const dims before = p.block;
  shape_block(q, p);
  // A block shape is checked (and carried, for the grid's rows per thread) on every plan, a trial's too.
  changed = changed || p.block != before || p.shape_rule != q.shape_rule;
  if (changed || made_cooperative)
    validate_plan(q, p);  // co-residency, resident clusters, the device's limits
  if (made_cooperative) p.reason += "; launched cooperatively, as the launch requires";
}

}  // namespace launchfit::detail

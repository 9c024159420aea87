// SPDX-License-Identifier: MIT
// What the launch requires, whatever the plan's source: its options (cooperative, cluster dims, PDL) applied
// to a plan and checked, and what the function must allow for it (a non-portable cluster size, its
// dynamic-smem limit raised to the plan's).

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver.hpp"
#include "launch_config.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
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

namespace {

// What launchfit asked of each function's dynamic-smem limit: the limit before it first raised it (the user's),
// the value it last set, the most any plan kept or any trial needed (never given back: a cached plan launches
// with it), and the needs of plans still being checked (given back when one is refused). One lock for all.
struct smem_limits {
  struct function_state {
    std::size_t before = 0;  // the limit as launchfit found it
    std::size_t set = 0;     // what launchfit last set (0: nothing yet)
    std::size_t kept = 0;    // the most a kept plan or a trial needs
    std::multiset<std::size_t> pending;  // plans raised for and not yet kept or refused
  };
  std::mutex m;
  std::unordered_map<CUfunction, function_state> by_function;
  std::atomic<bool> any{false};  // a function was noted: a plan's resolve asks the registry from then on
};
// Functions remembered at most: past this, those with no plan being checked are forgotten (a function's next
// raise reads its limit as it finds it, which holds what its kept plans needed).
constexpr std::size_t max_smem_functions = 1 << 12;
smem_limits& the_smem_limits() {
  static smem_limits& l = *[] {
    auto* made = new smem_limits;  // never destroyed, as every launchfit singleton
    lifecycle::on_fork({[] { the_smem_limits().m.lock(); }, [] { the_smem_limits().m.unlock(); },
                        [] {
                          lifecycle::abandoned_in_child(&the_smem_limits().m);
                          new (&the_smem_limits().m) std::mutex;
                        }});
    return made;
  }();
  return l;
}

}  // namespace

// The function's dynamic-smem limit raised to `needed` (a launched plan or a tuning trial), never lowered while
// a plan or trial needs it (a user's higher setting stays). Returns the limit now in force. `pending`: the need
// is given back by release_smem_need() if the plan is refused; otherwise it is kept for good.
std::size_t raise_function_smem_limit(CUfunction f, std::size_t needed, const kernel_resources& k, const plan& p,
                                      bool pending) {
  smem_limits& l = the_smem_limits();
  const driver_api& d = driver();
  std::lock_guard<std::mutex> lock(l.m);
  int current = 0;
  check(d.cuFuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", k, p);
  const auto now = static_cast<std::size_t>(current);
  if (now < needed) {
    check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(needed)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", k, p);
  }
  // Noted once the limit holds the need (a raise that failed leaves no need behind).
  if (l.by_function.size() >= max_smem_functions && !l.by_function.count(f)) {
    for (auto it = l.by_function.begin(); it != l.by_function.end();)
      it = it->second.pending.empty() ? l.by_function.erase(it) : std::next(it);
  }
  smem_limits::function_state& st = l.by_function[f];
  l.any.store(true, std::memory_order_release);
  if (st.set == 0 || now != st.set) st.before = now;  // first seen, or set by someone else since
  if (pending) {
    st.pending.insert(needed);
  } else {
    st.kept = std::max(st.kept, needed);
  }
  if (now >= needed) return now;
  st.set = needed;
  return needed;
}

void read_program_smem_limits(plan_entry& e, family_members& fam) {
  smem_limits& l = the_smem_limits();
  if (!l.any.load(std::memory_order_acquire)) return;  // launchfit has set no function's limit yet
  const auto read_one = [&l](CUfunction f, std::size_t& read) {
    if (!f) return;
    std::lock_guard<std::mutex> lock(l.m);
    const auto it = l.by_function.find(f);
    if (it == l.by_function.end()) return;  // launchfit never changed it: nothing of launchfit's can lower it
    int current = 0;
    if (driver().cuFuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f) != CUDA_SUCCESS)
      return;
    read = static_cast<std::size_t>(current);
    const smem_limits::function_state& st = it->second;
    // The plan is chosen at the limit the program left (what a fresh process plans at): a raise of launchfit's for
    // an earlier plan never changes what a later one is (after cache().clear(), another key of the kernel). Blocks
    // above it are judged as the first plan judged them, and the chosen one is checked with the driver once the
    // limit holds its smem (raise_smem_limit()). No give-back lowers a limit below the program's: nothing to hold.
    if (st.set != 0 && read == st.set && st.before < read) read = st.before;
  };
  if (fam.functions.empty()) {
    read_one(e.function, e.kernel.max_dynamic_smem_bytes);
    return;
  }
  for (std::size_t i = 0; i < fam.functions.size() && i < fam.kernels.size(); ++i) {
    read_one(fam.functions[i], fam.kernels[i].max_dynamic_smem_bytes);
    if (fam.functions[i] == e.function) e.kernel.max_dynamic_smem_bytes = fam.kernels[i].max_dynamic_smem_bytes;
  }
}

void smem_need::keep() noexcept {
  if (!f_) return;
  smem_limits& l = the_smem_limits();
  std::lock_guard<std::mutex> lock(l.m);
  smem_limits::function_state& st = l.by_function[f_];
  if (const auto it = st.pending.find(needed_); it != st.pending.end()) st.pending.erase(it);
  st.kept = std::max(st.kept, needed_);
  f_ = nullptr;
}

// A refused plan gives its need back: the limit goes down to the most any other plan, trial or the user still
// needs, where launchfit raised it and nobody has changed it since (a refusal leaves the function as it was).
smem_need::~smem_need() {
  if (!f_) return;
  smem_limits& l = the_smem_limits();
  std::lock_guard<std::mutex> lock(l.m);
  smem_limits::function_state& st = l.by_function[f_];
  if (const auto it = st.pending.find(needed_); it != st.pending.end()) st.pending.erase(it);
  std::size_t target = std::max(st.before, st.kept);
  if (!st.pending.empty()) target = std::max(target, *st.pending.rbegin());
  int current = 0;
  const driver_api& d = driver();
  if (st.set == 0 || d.cuFuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f_) != CUDA_SUCCESS)
    return;
  const auto now = static_cast<std::size_t>(current);
  if (now != st.set || now <= target) return;  // changed by someone else, or still needed
  if (d.cuFuncSetAttribute(f_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(target)) ==
      CUDA_SUCCESS)
    st.set = target;
}

// Raised to what the launched plan needs, never lowered (a user's higher setting stays), and checked with the
// driver afterwards: the plan's residency came from the calculator above the old limit, and its clusters (the
// driver counts none of blocks above a function's limit) from an estimate.
void raise_smem_limit(const query& q, plan_entry& e, smem_need& need) {
  // A plan within the smem every block may have without opting in, and within the function's limit as the
  // program left it, never needs the limit raised. Any other notes its need under the registry's lock even
  // where the limit read when its kernel was resolved already holds it: another plan may have raised it, and
  // may give it back if that plan is refused.
  const std::size_t without_opt_in = q.device.smem_per_block_bytes > 0 ? q.device.smem_per_block_bytes : 48 * 1024;
  if (e.plan.dynamic_smem_bytes + e.kernel.static_smem_bytes <= without_opt_in &&
      e.plan.dynamic_smem_bytes <= e.kernel.max_dynamic_smem_bytes)
    return;
  const std::size_t before = e.kernel.max_dynamic_smem_bytes;
  const std::size_t limit =
      raise_function_smem_limit(e.function, e.plan.dynamic_smem_bytes, e.kernel, e.plan, true);
  need.hold(e.function, e.plan.dynamic_smem_bytes);
  e.kernel.max_dynamic_smem_bytes = limit;
  if (e.plan.dynamic_smem_bytes <= before) return;  // planned with the limit as it is: nothing to ask again
  query checked = q;
  checked.kernel.max_dynamic_smem_bytes = e.kernel.max_dynamic_smem_bytes;
  checked.active_blocks = driver_oracle(e.function, q.device, checked.kernel, true);
  if (e.plan.options.cluster.count() > 1 && e.device) {
    if (auto clusters = cluster_oracle(e.function, e.plan.options, e.kernel.max_dynamic_smem_bytes,
                                       e.device->sm_count, q.device.sm_count))
      checked.active_clusters = std::move(clusters);
  }
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

void require_family_cluster(const std::vector<kernel_resources>& members) {
  if (members.size() < 2) return;
  const auto dims_of = [](const kernel_resources& k) {
    return k.required_cluster[0] == 0 ? std::string("none")
                                      : dims{k.required_cluster[0], std::max(k.required_cluster[1], 1u),
                                             std::max(k.required_cluster[2], 1u)}
                                            .to_string();
  };
  const std::string first = dims_of(members.front());
  for (const kernel_resources& m : members) {
    if (dims_of(m) == first) continue;
    std::string each;
    for (const kernel_resources& k : members) each += (each.empty() ? "" : ", ") + display_name(k) + ": " + dims_of(k);
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "the family's members are compiled with different __cluster_dims__ (" + each +
                    "): one launch's cluster cannot be what each member requires; give every member the same "
                    "__cluster_dims__, or launch a member alone",
                display_name(members.front()));
  }
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
  // A cooperative grid co-resides, and a grid within an SM budget leaves the other SMs to other kernels: never
  // the full grid (a tuner may offer it to any grid_stride launch, and times it on every SM).
  if (need.cooperative || need.sm_budget > 0) p.full_grid = false;
  const dims before = p.block;
  shape_block(q, p);
  // A block shape is checked (and carried, for the grid's rows per thread) on every plan, a trial's too.
  changed = changed || p.block != before || p.shape_rule != q.shape_rule;
  // A fixed grid is checked against the grid the launch bounds (its SM budget, its waves cap).
  changed = changed || (p.grid.x != 0 && (need.sm_budget > 0 || q.work_hint.waves != 0));
  if (changed || made_cooperative)
    validate_plan(q, p);  // co-residency, resident clusters, the device's limits
  if (made_cooperative) p.reason += "; launched cooperatively, as the launch requires";
}

void refuse_rows_for_one_dimensional_work(const launch_request& r, const plan& p, const std::string& kernel) {
  // 1-D work runs one thread per item over the block's threads: an override's block with rows (fixed({16, 16})
  // matching 1-D kernels too) would leave the items of every row but the first undone in a kernel that indexes
  // by threadIdx.x. The spec's own such block is the author's (a kernel that indexes the whole block).
  const work& w = r.shape;
  const bool one_dimensional = (w.kind == work::shape::items || w.kind == work::shape::grid_stride) && w.rank <= 1;
  if (!one_dimensional || !r.shape_rule.is_default() || (p.block.y <= 1 && p.block.z <= 1)) return;
  throw error(errc::invalid_plan, "plan(block)",
              "policy " + escape_text(p.policy) + " chose block " + p.block.to_string() + " for 1-D work (" +
                  (w.kind == work::shape::items ? items_text(w) : "grid_stride(" + std::to_string(w.n) + ")") +
                  "), which launches one thread per item over the block's threads: a kernel that indexes by "
                  "threadIdx.x alone would leave the rows after the first undone",
              kernel, p.to_string());
}

}  // namespace launchfit::detail

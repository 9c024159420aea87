// SPDX-License-Identifier: MIT
// The policy interface (launchfit/policy.hpp): a policy's hash and text, the query's residency questions,
// plan validation (block, smem, grid, co-residency) and the block a launch shapes. Pure logic: the occupancy
// oracle in the query is the driver on a GPU and the offline calculator in tests.

#include "launchfit/policy.hpp"

#include <algorithm>
#include <string>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/error.hpp"
#include "grid_bound.hpp"

namespace launchfit {

namespace detail {

std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t v) noexcept { return mix_hash(seed, v); }

std::uint64_t hash_string(std::string_view s) noexcept { return hash_text(s.data(), s.size()); }  // FNV-1a

}  // namespace detail

std::string policy::to_string() const {
  // Built in the parameters' string: one allocation where its capacity holds the name too (a miss makes
  // this string for every plan).
  std::string s = params();
  const std::string n = name();
  s.reserve(n.size() + s.size() + 2);
  s.insert(s.begin(), '(');
  s.insert(0, n);
  s += ')';
  return s;
}

namespace {

error plan_error(const query& q, const plan& p, const std::string& check, const std::string& what) {
  return error(errc::invalid_plan, "validate(" + check + ")", what, q.kernel.demangled, p.to_string());
}

}  // namespace

bool policy::depends_on_work() const {
  const std::uint64_t none = work_bucket(work{});
  for (const work::shape kind : {work::shape::items, work::shape::grid_stride}) {
    for (const std::uint64_t n :
         {1ull, 100ull, 4096ull, 1ull << 14, 1ull << 17, 1ull << 20, 1ull << 26, 1ull << 34}) {
      work w;
      w.kind = kind;
      w.n = n;
      if (work_bucket(w) != none) return true;
    }
  }
  return false;
}

int query::active_blocks_for(int block_threads) const {
  if (!allows(block_threads)) return 0;
  const std::size_t smem = smem_for(block_threads);
  if (active_blocks) return active_blocks(block_threads, smem);
  try {
    return occupancy(device, kernel, block_threads, smem).active_blocks_per_sm;
  } catch (const error&) {
    return 0;  // impossible configuration: nothing fits
  }
}

int query::active_clusters_for(int block_threads, dims c) const {
  const unsigned long long size = c.count();
  if (size <= 1 || !allows(block_threads)) return 0;
  if (active_clusters && c == cluster) return active_clusters(block_threads, smem_for(block_threads));
  // No oracle (offline): every SM's resident blocks grouped into clusters, an upper bound (the hardware
  // places a cluster within one GPC, so a GPU may fit fewer).
  const long long blocks = static_cast<long long>(active_blocks_for(block_threads)) * device.sm_count;
  return static_cast<int>(blocks / static_cast<long long>(size));
}

int query::max_block_threads() const noexcept {
  int m = device.max_threads_per_block > 0 ? device.max_threads_per_block : 1024;
  if (kernel.max_threads_per_block > 0) m = std::min(m, kernel.max_threads_per_block);
  return m;
}

void validate_plan(const query& q, plan& p) {
  p.block_threads = static_cast<int>(p.block.count());
  p.sm_count = q.device.sm_count;
  if (p.block.x == 0 || p.block.y == 0 || p.block.z == 0) {
    throw plan_error(q, p, "block", "block of 0 threads");
  }
  for (int i = 0; i < 3; ++i) {
    const unsigned v = i == 0 ? p.block.x : i == 1 ? p.block.y : p.block.z;
    if (q.device.max_block_dim[i] > 0 && v > static_cast<unsigned>(q.device.max_block_dim[i])) {
      throw plan_error(q, p, "block",
                       "block dimension " + std::string(1, "xyz"[i]) + "=" + std::to_string(v) +
                           " exceeds the device maximum " + std::to_string(q.device.max_block_dim[i]));
    }
  }
  if (p.block.count() > static_cast<unsigned long long>(q.device.max_threads_per_block)) {
    throw plan_error(q, p, "block",
                     "block of " + std::to_string(p.block.count()) + " threads exceeds the device maximum " +
                         std::to_string(q.device.max_threads_per_block));
  }
  if (p.block_threads > q.kernel.max_threads_per_block) {
    throw plan_error(
        q, p, "block",
        "block of " + std::to_string(p.block_threads) + " threads exceeds the kernel's maxThreadsPerBlock " +
            std::to_string(q.kernel.max_threads_per_block) + " (its __launch_bounds__ or register use)");
  }
  const block_shape& shape = q.shape_rule;
  if (shape.invalid) {
    throw plan_error(q, p, "shape",
                     "the launch's block shape " + shape.to_string() +
                         " has no block: y and the x multiple must be at most 1024, z at most 64");
  }
  if (!q.allows(p.block_threads)) {
    std::string why;
    if (!q.blocks.allows(p.block_threads)) {
      why = "the launch's block rule is " + q.blocks.to_string();
    } else if (!shape.is_default()) {
      why = "the launch's block shape " + shape.to_string() + " needs a multiple of " +
            std::to_string(shape.thread_step()) + " threads";
    } else {
      why = "multi-dimensional work needs rows of 32 threads";
    }
    throw plan_error(q, p, "block",
                     "block of " + std::to_string(p.block_threads) + " threads is not allowed: " + why);
  }
  if (!shape.is_default() && !shape.fits(p.block)) {
    throw plan_error(q, p, "block",
                     "block " + p.block.to_string() + " does not have the launch's block shape " +
                         shape.to_string() + " (x a multiple of " + std::to_string(shape.x_step()) +
                         (shape.y ? ", y " + std::to_string(shape.y) : std::string()) + ", z " +
                         std::to_string(shape.z) + ")");
  }
  p.blocks = q.blocks.is_any() ? std::string() : q.blocks.to_string();
  p.shape_rule = shape;
  p.dynamic_smem_bytes = q.smem_for(p.block_threads);
  const std::size_t total_smem = p.dynamic_smem_bytes + q.kernel.static_smem_bytes;
  if (total_smem > q.device.smem_per_block_optin_bytes) {
    throw plan_error(q, p, "smem",
                     "shared memory " + std::to_string(total_smem) + " B (" +
                         std::to_string(q.kernel.static_smem_bytes) + " static + " +
                         std::to_string(p.dynamic_smem_bytes) + " dynamic) exceeds the opt-in maximum " +
                         std::to_string(q.device.smem_per_block_optin_bytes) + " B per block");
  }
  if (p.options.cooperative && !q.device.cooperative_launch) {
    throw plan_error(q, p, "cooperative", "device " + q.device.name + " does not support cooperative launch");
  }
  if (p.options.cluster.count() > 1 && !q.device.cluster_launch) {
    throw plan_error(q, p, "cluster", "device " + q.device.name + " does not support thread-block clusters");
  }
  if (p.options.programmatic && q.device.cc_major < 9) {
    throw plan_error(q, p, "pdl",
                     "programmatic dependent launch needs sm_90 or newer; device " + q.device.name + " is " +
                         q.device.arch());
  }
  const int active = q.active_blocks_for(p.block_threads);
  if (active <= 0) {
    std::string why;
    try {
      const occupancy_result r = occupancy(q.device, q.kernel, p.block_threads, p.dynamic_smem_bytes);
      why =
          ", limited by " + limiter_names(r.limiters) + (r.why_no_block.empty() ? "" : ": " + r.why_no_block);
    } catch (const error& e) {
      why = ": " + e.message();
    }
    throw plan_error(q, p, "occupancy",
                     "no block of " + std::to_string(p.block_threads) + " threads with " +
                         std::to_string(p.dynamic_smem_bytes) + " B dynamic smem fits on an SM" + why);
  }
  p.resident_clusters = 0;
  if (p.options.cluster.count() > 1) {
    p.resident_clusters = q.active_clusters_for(p.block_threads, p.options.cluster);
    if (p.resident_clusters <= 0) {
      throw plan_error(q, p, "cluster",
                       "no cluster of " + std::to_string(p.options.cluster.count()) + " blocks of " +
                           std::to_string(p.block_threads) + " threads with " +
                           std::to_string(p.dynamic_smem_bytes) +
                           " B dynamic smem co-resides (cuOccupancyMaxActiveClusters: 0)");
    }
  }
  if (p.blocks_per_sm <= 0) p.blocks_per_sm = active;
  if (p.blocks_per_sm > active) {
    if (p.options.cooperative) {
      throw plan_error(q, p, "cooperative",
                       "blocks_per_sm " + std::to_string(p.blocks_per_sm) + " exceeds the " +
                           std::to_string(active) + " blocks per SM that co-reside");
    }
    p.blocks_per_sm = active;  // a residency cap above what fits is simply what fits
  }
  // A cluster launch's grid is whole clusters of the plan's residency: one that holds no cluster (a low
  // residency the policy chose on a few SMs, sms(k)) would launch no block at all, or part of a cluster.
  // A residency the policy chose as a cap is raised to one cluster where that fits; a cooperative one is the
  // caller's and is refused.
  if (p.options.cluster.count() > 1 && p.resident_blocks() < static_cast<long long>(p.options.cluster.count())) {
    const long long size = static_cast<long long>(p.options.cluster.count());
    const long long sms = std::max(p.sm_count, 1);
    const long long needed = (size + sms - 1) / sms;
    if (p.options.cooperative || needed > active) {
      throw plan_error(q, p, "cluster",
                       "a cluster of " + std::to_string(size) + " blocks does not fit the plan's residency: " +
                           std::to_string(p.blocks_per_sm) + " blocks per SM on " + std::to_string(sms) +
                           " SMs" + (p.options.sm_budget > 0 ? " (the launch's SM budget)" : "") +
                           " hold " + std::to_string(p.resident_blocks()) + "; give " +
                           std::to_string(needed) + " blocks per SM or more SMs");
    }
    p.reason += (p.reason.empty() ? "" : "; ") + std::string("blocks_per_sm raised to ") +
                std::to_string(needed) + " so that a cluster of " + std::to_string(size) + " blocks fits on " +
                std::to_string(sms) + " SMs";
    p.blocks_per_sm = static_cast<int>(needed);
  }
  if (p.grid.x != 0) {
    for (int i = 0; i < 3; ++i) {
      const unsigned v = i == 0 ? p.grid.x : i == 1 ? p.grid.y : p.grid.z;
      if (v == 0 || (q.device.max_grid_dim[i] > 0 && v > static_cast<unsigned>(q.device.max_grid_dim[i]))) {
        throw plan_error(q, p, "grid",
                         "grid dimension " + std::string(1, "xyz"[i]) + "=" + std::to_string(v) +
                             " outside 1.." + std::to_string(q.device.max_grid_dim[i]));
      }
    }
    if (p.options.cluster.count() > 1 &&
        (p.grid.x % p.options.cluster.x != 0 || p.grid.y % p.options.cluster.y != 0 || p.grid.z % p.options.cluster.z != 0)) {
      throw plan_error(
          q, p, "cluster",
          "grid " + p.grid.to_string() + " is not made of whole clusters of " + p.options.cluster.to_string());
    }
    if (p.options.cooperative && static_cast<long long>(p.grid.count()) > p.resident_blocks()) {
      throw plan_error(q, p, "cooperative",
                       "cooperative grid of " + std::to_string(p.grid.count()) + " blocks exceeds the " +
                           std::to_string(p.resident_blocks()) + " that co-reside");
    }
    // Where the launch bounds its grid (an SM budget, a waves cap), a fixed grid within it: refused here, once,
    // rather than at every launch (grid_for() holds a plan made elsewhere to the same rule).
    if (std::string why = detail::fixed_grid_past_bound(p, q.work_hint); !why.empty())
      throw plan_error(q, p, "grid", why);
  }
  try {
    p.occupancy = occupancy(q.device, q.kernel, p.block_threads, p.dynamic_smem_bytes);
  } catch (const error&) {
    p.occupancy = occupancy_result{};
    p.occupancy.block_threads = p.block_threads;
    p.occupancy.dynamic_smem_bytes = p.dynamic_smem_bytes;
  }
  // The oracle (the driver on a GPU) is the truth for what is resident; the calculator explains why.
  if (p.occupancy.active_blocks_per_sm != active) {
    p.occupancy.active_blocks_per_sm = active;
    p.occupancy.active_threads_per_sm = active * p.block_threads;
    p.occupancy.active_warps_per_sm =
        active * ((p.block_threads + q.device.warp_size - 1) / q.device.warp_size);
    if (q.device.max_warps_per_sm > 0)
      p.occupancy.occupancy =
          static_cast<double>(p.occupancy.active_warps_per_sm) / q.device.max_warps_per_sm;
  }
}

void shape_block(const query& q, plan& p) {
  if (!q.shape_rule.is_default()) {
    // A policy's own 2-D or 3-D block is kept (validation checks it has the shape); a total the shape cannot
    // make is left for validation to name.
    if (p.block.y != 1 || p.block.z != 1 || !q.shape_rule.allows(static_cast<int>(p.block.x))) return;
    p.block = q.shape_rule.block_for(static_cast<int>(p.block.x));
    return;
  }
  // A fixed grid was sized for the policy's own block: shaped, the grid would cover other items.
  if (q.work_hint.rank <= 1 || p.grid.x != 0 || p.block.y != 1 || p.block.z != 1 || p.block.x <= 32 ||
      p.block.x % 32 != 0)
    return;
  p.block = dims{32, p.block.x / 32, 1};
}

bool block_shape_free(const query& q) noexcept {
  const block_shape& s = q.shape_rule;
  return q.work_hint.rank >= 2 && s.free_x && s.y == 0 && s.z == 1 && !s.invalid;
}

bool free_block_shape(const query& q, const dims& block) noexcept {
  const auto within = [&](unsigned v, int i) {
    return q.device.max_block_dim[i] <= 0 || v <= static_cast<unsigned>(q.device.max_block_dim[i]);
  };
  return block.x > 0 && block.x % q.shape_rule.x_step() == 0 && block.y >= 2 && block.z == 1 &&
         within(block.x, 0) && within(block.y, 1);
}

dims launch_block(const query& q, unsigned long long threads) {
  plan shaped;
  shaped.block = dims{static_cast<unsigned>(std::clamp<unsigned long long>(threads, 1, 1u << 20)), 1, 1};
  shape_block(q, shaped);
  return shaped.block;
}

bool launch_makes_block(const query& q, const dims& block) {
  return block == launch_block(q, block.count()) || (block_shape_free(q) && free_block_shape(q, block));
}

plan policy_base::choose(const query& q) const {
  if (q.device.sm_count <= 0 || q.device.max_threads_per_block <= 0) {
    throw error(errc::invalid_query, "policy::choose", "device limits are empty", q.kernel.demangled);
  }
  plan p = choose_impl(q);
  p.policy = to_string();
  shape_block(q, p);
  validate_plan(q, p);
  return p;
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// Built-in policies, plan validation and the grid arithmetic. Pure logic: the occupancy oracle in the query
// is the driver on a GPU and the offline calculator in tests.

#include <cuda.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"
#include "policy_string.hpp"

namespace launchfit {

namespace detail {

std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t v) noexcept {
  // splitmix64 finaliser on the combined value: cheap and well mixed.
  std::uint64_t x = seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t hash_string(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace detail

std::string dims::to_string() const {
  if (y == 1 && z == 1) return std::to_string(x);
  if (z == 1) return std::to_string(x) + "x" + std::to_string(y);
  return std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z);
}

double launched::waves() const noexcept { return plan_ptr ? plan_ptr->waves(grid) : 0.0; }

std::string policy::to_string() const {
  std::string s = name();
  s += '(';
  s += params();
  s += ')';
  return s;
}

std::string plan::to_string() const {
  std::string s = "block=" + block.to_string();
  s += grid.x ? " grid=" + grid.to_string() : std::string(" grid=from-work");
  s += " blocks/SM=" + std::to_string(blocks_per_sm) + " SMs=" + std::to_string(sm_count);
  s += " smem=" + std::to_string(dynamic_smem_bytes);
  if (cooperative) s += " cooperative";
  if (full_grid) s += " full-grid";
  if (programmatic) s += " pdl";
  if (cluster.count() > 1) s += " cluster=" + cluster.to_string();
  if (shape_rule.is_set()) s += " shape=" + shape_rule.to_string();
  if (!policy.empty()) s += " policy=" + policy;
  return s;
}

namespace {

error plan_error(const query& q, const plan& p, const std::string& check, const std::string& what) {
  return error(errc::invalid_plan, "validate(" + check + ")", what, q.kernel.demangled, p.to_string());
}

}  // namespace

namespace {

std::uint64_t ceil_div(std::uint64_t n, std::uint64_t d) noexcept {
  // 32-bit when both fit (a 64-bit divide costs several times more on common x86 cores).
  if (((n | d) >> 32) == 0) {
    const auto n32 = static_cast<std::uint32_t>(n), d32 = static_cast<std::uint32_t>(d);
    return n32 / d32 + (n32 % d32 != 0);
  }
  return n / d + (n % d != 0);
}

std::uint64_t round_up(std::uint64_t v, unsigned multiple) noexcept {
  return multiple > 1 ? ceil_div(v, multiple) * multiple : v;
}

constexpr std::uint64_t max_grid_yz = 65535;  // every CUDA device

// In the driver's terms (what cuLaunchKernelEx would return) where the driver has one, else launchfit's.
[[noreturn]] void grid_error(const plan& p, CUresult code, const std::string& what) {
  throw error(code, "grid_for", what, {}, p.to_string());
}
[[noreturn]] void grid_error(const plan& p, errc code, const std::string& what) {
  throw error(code, "grid_for", what, {}, p.to_string());
}

std::string items_text(const work& w) {
  if (w.rank <= 1) return "items(" + std::to_string(w.n) + ")";
  std::string s = "items({" + std::to_string(w.n) + ", " + std::to_string(w.ny);
  if (w.rank == 3) s += ", " + std::to_string(w.nz);
  return s + "})";
}

// A caller's grid: every dimension within the device's limits and made of whole clusters.
dims caller_grid(const plan& p, const work& w, long long max_grid_x) {
  const dims g = w.grid;
  if (g.x == 0 || g.y == 0 || g.z == 0) return dims{0, 1, 0};
  if (g.x > static_cast<unsigned long long>(max_grid_x) || g.y > max_grid_yz || g.z > max_grid_yz) {
    grid_error(p, CUDA_ERROR_INVALID_VALUE,
               "grid " + g.to_string() + " exceeds the device's grid limits (" + std::to_string(max_grid_x) +
                   " x 65535 x 65535)");
  }
  if (p.cluster.count() > 1 && (g.x % p.cluster.x || g.y % p.cluster.y || g.z % p.cluster.z)) {
    grid_error(p, CUDA_ERROR_INVALID_CLUSTER_SIZE,
               "grid " + g.to_string() + " is not made of whole clusters of " + p.cluster.to_string());
  }
  return g;
}

}  // namespace

dims grid_for(const plan& p, const work& w, long long max_grid_x) {
  // items(0) / grid_stride(0): nothing to do, whatever the plan (a fixed grid too). A documented no-op.
  if (w.kind == work::shape::items || w.kind == work::shape::grid_stride) {
    if (w.n == 0 || w.ny == 0 || w.nz == 0) return dims{0, 1, 0};
  }
  const long long resident = p.resident_blocks();
  dims g;
  if (w.kind == work::shape::grid) {
    g = caller_grid(p, w, max_grid_x);
  } else if (p.grid.x != 0) {
    return p.grid;  // a policy's fixed grid, validated when the plan was made
  } else if (p.block_threads <= 0) {
    grid_error(p, errc::invalid_plan, "plan without a block");
  } else if (w.kind == work::shape::none) {
    g = dims{static_cast<unsigned>(resident), 1, 1};  // whole clusters: resident is a multiple of the cluster
  } else {
    // With a block shape the block's x covers x (1-D work too); without, a 1-D work's block is its threads.
    const bool shaped = !p.shape_rule.is_default();
    const unsigned bx = w.rank <= 1 && !shaped ? static_cast<unsigned>(p.block_threads) : p.block.x;
    const std::uint64_t per_block = static_cast<std::uint64_t>(bx) * std::max<std::uint32_t>(w.per_thread, 1);
    const std::uint64_t rows =
        static_cast<std::uint64_t>(p.block.y) * std::max<std::uint32_t>(p.shape_rule.per_thread_y, 1);
    std::uint64_t gx = round_up(ceil_div(w.n, per_block), p.cluster.x);
    std::uint64_t gy = w.rank >= 2 ? round_up(ceil_div(w.ny, rows), p.cluster.y) : 1;
    std::uint64_t gz = w.rank >= 3 ? round_up(ceil_div(w.nz, p.block.z), p.cluster.z) : 1;
    if (w.kind == work::shape::grid_stride && (!p.full_grid || w.waves != 0)) {
      const std::uint64_t cap = static_cast<std::uint64_t>(resident) * std::max<std::uint32_t>(w.waves, 1);
      gx = std::max<std::uint64_t>(std::min<std::uint64_t>(gx, cap), 1);
    } else if (w.kind == work::shape::grid_stride) {
      gx = std::min<std::uint64_t>(gx, static_cast<std::uint64_t>(max_grid_x));  // full grid: the loop covers the rest
    }
    if ((gy % p.cluster.y) != 0 || (gz % p.cluster.z) != 0) {
      grid_error(p, CUDA_ERROR_INVALID_CLUSTER_SIZE,
                 "cluster " + p.cluster.to_string() + " needs a grid whose y and z are multiples of " +
                     std::to_string(p.cluster.y) + " and " + std::to_string(p.cluster.z) +
                     ": give the work in " + (p.cluster.z > 1 ? "3" : "2") + " dimensions, items({nx, ny" +
                     (p.cluster.z > 1 ? ", nz" : "") + "})");
    }
    if (gx > static_cast<std::uint64_t>(max_grid_x)) {
      grid_error(p, CUDA_ERROR_INVALID_VALUE,
                 items_text(w) + " with " + std::to_string(per_block) + " items per block needs " +
                     std::to_string(gx) + " blocks, above the grid limit " + std::to_string(max_grid_x) +
                     "; use grid_stride() or per_thread()");
    }
    if (gy > max_grid_yz || gz > max_grid_yz) {
      grid_error(p, CUDA_ERROR_INVALID_VALUE,
                 items_text(w) + " with block " + p.block.to_string() + " needs " + std::to_string(gy) +
                     " x " + std::to_string(gz) + " blocks in y and z, above the grid limit 65535");
    }
    g = dims{static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)};
  }
  if (p.cooperative && static_cast<long long>(g.count()) > resident) {
    grid_error(
        p, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        (w.kind == work::shape::grid ? "grid " + g.to_string() : items_text(w)) + " needs " +
            std::to_string(g.count()) + " blocks but only " + std::to_string(resident) + " co-reside" +
            (w.kind == work::shape::grid ? std::string() : "; use grid_stride() or more items per thread"));
  }
  return g;
}

std::uint64_t block_rule::hash() const noexcept {
  if (is_any()) return 0;
  std::uint64_t h = detail::hash_combine(0x6c66626c6f636bULL, static_cast<std::uint64_t>(k));
  h = detail::hash_combine(h, multiple + (invalid ? 0x10000u : 0u));
  for (int i = 0; i < count; ++i) h = detail::hash_combine(h, values[i]);
  return h | 1;
}

std::uint64_t block_shape::hash() const noexcept {
  if (!is_set()) return 0;
  std::uint64_t h = detail::hash_combine(0x6c66736861706500ULL, y);
  h = detail::hash_combine(h, z);
  h = detail::hash_combine(h, x_step());
  h = detail::hash_combine(h, std::max<std::uint32_t>(per_thread_y, 1));
  h = detail::hash_combine(h, free_x ? 1 : 0);
  return detail::hash_combine(h, invalid ? 1 : 0) | 1;
}

std::string block_shape::to_string() const {
  std::string s = "x=" + std::to_string(x_step()) + "n";
  if (y) s += ",y=" + std::to_string(y);
  if (z != 1) s += ",z=" + std::to_string(z);
  if (per_thread_y > 1) s += ",per_thread_y=" + std::to_string(per_thread_y);
  if (free_x) s += ",free_x";
  return invalid ? "invalid(" + s + ")" : s;
}

std::string block_rule::to_string() const {
  switch (k) {
    case kind::any: return "any";
    case kind::multiple_of:
      if (invalid) return "multiple of (a number outside 1..1024)";
      return multiple <= 1 ? "any" : "multiple of " + std::to_string(multiple);
    case kind::power_of_two: return "power of two";
    case kind::one_of: {
      if (invalid) return "one of (a size outside 1..1024, or more than 16 sizes)";
      std::string s = "one of ";
      for (int i = 0; i < count; ++i) s += (i ? "," : "") + std::to_string(values[i]);
      return s;
    }
  }
  return "any";
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
      throw plan_error(q, p, "block", "block dimension " + std::string(1, "xyz"[i]) + "=" + std::to_string(v) +
                                          " exceeds the device maximum " + std::to_string(q.device.max_block_dim[i]));
    }
  }
  if (p.block.count() > static_cast<unsigned long long>(q.device.max_threads_per_block)) {
    throw plan_error(q, p, "block", "block of " + std::to_string(p.block.count()) +
                                        " threads exceeds the device maximum " +
                                        std::to_string(q.device.max_threads_per_block));
  }
  if (p.block_threads > q.kernel.max_threads_per_block) {
    throw plan_error(q, p, "block", "block of " + std::to_string(p.block_threads) +
                                        " threads exceeds the kernel's maxThreadsPerBlock " +
                                        std::to_string(q.kernel.max_threads_per_block) +
                                        " (its __launch_bounds__ or register use)");
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
    throw plan_error(q, p, "smem", "shared memory " + std::to_string(total_smem) + " B (" +
                                       std::to_string(q.kernel.static_smem_bytes) + " static + " +
                                       std::to_string(p.dynamic_smem_bytes) +
                                       " dynamic) exceeds the opt-in maximum " +
                                       std::to_string(q.device.smem_per_block_optin_bytes) + " B per block");
  }
  if (p.cooperative && !q.device.cooperative_launch) {
    throw plan_error(q, p, "cooperative", "device " + q.device.name + " does not support cooperative launch");
  }
  if (p.cluster.count() > 1 && !q.device.cluster_launch) {
    throw plan_error(q, p, "cluster", "device " + q.device.name + " does not support thread-block clusters");
  }
  if (p.programmatic && q.device.cc_major < 9) {
    throw plan_error(q, p, "pdl", "programmatic dependent launch needs sm_90 or newer; device " + q.device.name +
                                      " is " + q.device.arch());
  }
  const int active = q.active_blocks_for(p.block_threads);
  if (active <= 0) {
    std::string why;
    try {
      const occupancy_result r = occupancy(q.device, q.kernel, p.block_threads, p.dynamic_smem_bytes);
      why = ", limited by " + limiter_names(r.limiters) + (r.why_no_block.empty() ? "" : ": " + r.why_no_block);
    } catch (const error& e) {
      why = ": " + e.message();
    }
    throw plan_error(q, p, "occupancy", "no block of " + std::to_string(p.block_threads) + " threads with " +
                                            std::to_string(p.dynamic_smem_bytes) + " B dynamic smem fits on an SM" + why);
  }
  p.resident_clusters = 0;
  if (p.cluster.count() > 1) {
    p.resident_clusters = q.active_clusters_for(p.block_threads, p.cluster);
    if (p.resident_clusters <= 0) {
      throw plan_error(q, p, "cluster", "no cluster of " + std::to_string(p.cluster.count()) + " blocks of " +
                                            std::to_string(p.block_threads) + " threads with " +
                                            std::to_string(p.dynamic_smem_bytes) +
                                            " B dynamic smem co-resides (cuOccupancyMaxActiveClusters: 0)");
    }
  }
  if (p.blocks_per_sm <= 0) p.blocks_per_sm = active;
  if (p.blocks_per_sm > active) {
    if (p.cooperative) {
      throw plan_error(q, p, "cooperative", "blocks_per_sm " + std::to_string(p.blocks_per_sm) +
                                                " exceeds the " + std::to_string(active) +
                                                " blocks per SM that co-reside");
    }
    p.blocks_per_sm = active;  // a residency cap above what fits is simply what fits
  }
  if (p.grid.x != 0) {
    for (int i = 0; i < 3; ++i) {
      const unsigned v = i == 0 ? p.grid.x : i == 1 ? p.grid.y : p.grid.z;
      if (v == 0 || (q.device.max_grid_dim[i] > 0 && v > static_cast<unsigned>(q.device.max_grid_dim[i]))) {
        throw plan_error(q, p, "grid", "grid dimension " + std::string(1, "xyz"[i]) + "=" + std::to_string(v) +
                                           " outside 1.." + std::to_string(q.device.max_grid_dim[i]));
      }
    }
    if (p.cluster.count() > 1 &&
        (p.grid.x % p.cluster.x != 0 || p.grid.y % p.cluster.y != 0 || p.grid.z % p.cluster.z != 0)) {
      throw plan_error(q, p, "cluster", "grid " + p.grid.to_string() + " is not made of whole clusters of " +
                                            p.cluster.to_string());
    }
    if (p.cooperative && static_cast<long long>(p.grid.count()) > p.resident_blocks()) {
      throw plan_error(q, p, "cooperative", "cooperative grid of " + std::to_string(p.grid.count()) +
                                                " blocks exceeds the " + std::to_string(p.resident_blocks()) +
                                                " that co-reside");
    }
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
    p.occupancy.active_warps_per_sm = active * ((p.block_threads + q.device.warp_size - 1) / q.device.warp_size);
    if (q.device.max_warps_per_sm > 0)
      p.occupancy.occupancy = static_cast<double>(p.occupancy.active_warps_per_sm) / q.device.max_warps_per_sm;
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
  if (q.work_hint.rank <= 1 || p.block.y != 1 || p.block.z != 1 || p.block.x <= 32 || p.block.x % 32 != 0) return;
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

namespace {

// The block with the most resident threads, ties to the block nearest prefer_block (0: the largest). Without
// a block rule or a cluster, exactly cuOccupancyMaxPotentialBlockSize's search with the query's oracle (the
// driver on a GPU); with a rule, over the sizes it allows; with a cluster, counting the threads of the
// clusters that co-reside (cuOccupancyMaxActiveClusters), not of blocks per SM.
detail::potential_block max_occupancy_block(const query& q, int prefer_block, int block_limit = 0) {
  const int limit = block_limit > 0 ? std::min(block_limit, q.max_block_threads()) : q.max_block_threads();
  auto fits = [&q](int block) {
    return q.smem_for(block) + q.kernel.static_smem_bytes <= q.device.smem_per_block_optin_bytes;
  };
  const bool any_block = q.blocks.is_any() && q.shape_rule.is_default();
  if (any_block && q.cluster.count() <= 1) {
    return detail::search_potential_block(
        limit, q.device.warp_size, q.device.max_threads_per_sm,
        [&](int block) { return fits(block) ? q.active_blocks_for(block) : 0; }, prefer_block);
  }
  const int warp = q.device.warp_size > 0 ? q.device.warp_size : 32;
  detail::potential_block best;
  long long best_threads = 0;
  for (int block = 1; block <= limit; ++block) {
    // Any size the rule allows; without a rule (a cluster launch) the sizes cuOccupancyMaxPotentialBlockSize tries.
    if (any_block ? (block % warp != 0 && block != limit) : !q.allows(block)) continue;
    if (!fits(block)) continue;
    const int per_sm = q.active_blocks_for(block);
    if (per_sm <= 0) continue;
    const long long threads = q.cluster.count() > 1
                                  ? static_cast<long long>(q.active_clusters_for(block)) *
                                        static_cast<long long>(q.cluster.count()) * block
                                  : static_cast<long long>(per_sm) * block;
    if (threads <= 0) continue;
    bool better = threads > best_threads;
    if (threads == best_threads) {
      if (prefer_block <= 0) {
        better = block > best.block_threads;
      } else {
        const int d = std::abs(block - prefer_block), bd = std::abs(best.block_threads - prefer_block);
        better = d < bd || (d == bd && block < best.block_threads);
      }
    }
    if (better) {
      best_threads = threads;
      best = detail::potential_block{block, per_sm};
    }
  }
  return best;
}

// Parameters where 0 means "the default" (prefer_block, block_limit, target_per_sm, blocks_per_sm, a
// cooperative block): a negative one is refused, never taken as the default.
void require_non_negative(const query& q, const char* name, int value, const char* zero_means) {
  if (value < 0) {
    throw error(errc::invalid_policy, "policy::choose",
                std::string(name) + " must be >= 0 (0: " + zero_means + "), got " + std::to_string(value),
                q.kernel.demangled);
  }
}

// "32 KB" or "8.5 KB" (one decimal, rounded), without printf: a miss formats a few of these.
std::string kb(std::size_t bytes) {
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + " KB";
  const std::size_t tenths = (bytes * 10 + 512) / 1024;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " KB";
}

// Calibrated targets by compute capability; never destroyed, as every launchfit singleton.
std::mutex& bif_mutex() {
  static std::mutex& m = *new std::mutex();
  return m;
}
std::map<int, std::size_t>& bif_overrides() {
  static std::map<int, std::size_t>& m = *new std::map<int, std::size_t>();
  return m;
}

// Small work: per power of two of the threads it needs, below 2^18 (a few waves of any block on any GPU).
std::uint64_t small_work_bucket(const work& w) {
  if (w.kind != work::shape::items && w.kind != work::shape::grid_stride) return 0;
  if (w.rank > 1) return 0;
  const std::uint64_t threads = w.n / std::max<std::uint32_t>(w.per_thread, 1) + (w.n % std::max<std::uint32_t>(w.per_thread, 1) != 0);
  if (threads == 0 || threads >= (1u << 18)) return 0;
  std::uint64_t bucket = 1;
  for (std::uint64_t t = threads; t > 1; t >>= 1) ++bucket;
  return bucket;  // floor(log2(threads)) + 1
}

// Fills the SMs before maximising occupancy: when the work's blocks (counted from the smallest size of its
// bucket, so every size in it gets the same plan) leave more than 5% of the SMs idle, the largest allowed
// block that does not; work of fewer than two warps per SM is left alone. Returns false when the plan is
// left alone.
bool fill_the_sms(const query& q, plan& p, std::uint64_t bucket) {
  // A block shape: how many blocks 1-D work makes depends on the shape's rows, not on the threads alone.
  if (bucket == 0 || p.block.count() <= 32 || !q.shape_rule.is_default()) return false;
  const std::uint64_t threads = std::uint64_t{1} << (bucket - 1);
  const int sms = q.device.sm_count;
  const std::uint64_t wanted = (static_cast<std::uint64_t>(sms) * 95 + 99) / 100;
  const unsigned chosen = static_cast<unsigned>(p.block.count());
  if ((threads + chosen - 1) / chosen >= wanted) return false;
  // Work of fewer than two warps per SM is launch-bound: more, smaller blocks only cost (saxpy of 4,096
  // items ran 12% slower in 32-thread blocks on the H200 than in 256-thread ones).
  if (threads < 64ull * static_cast<unsigned>(std::max(sms, 1))) return false;
  const int warp = q.device.warp_size > 0 ? q.device.warp_size : 32;
  int best = 0;
  for (int block = static_cast<int>(chosen) - 1; block >= 1; --block) {
    if (block % warp != 0 && !(q.blocks.k == block_rule::kind::one_of)) continue;
    if (q.active_blocks_for(block) <= 0) continue;
    best = block;  // the smallest so far; stop at the first that fills the SMs
    if ((threads + static_cast<unsigned>(block) - 1) / static_cast<unsigned>(block) >= wanted) break;
  }
  if (best == 0) return false;
  p.reason = fmt::format("small work ({}+ threads): {}-thread blocks give {} blocks for {} SMs ({} would give {}); ",
                         threads, best, (threads + best - 1) / best, sms, chosen, (threads + chosen - 1) / chosen) +
             p.reason;
  p.block = dims{static_cast<unsigned>(best), 1, 1};
  p.blocks_per_sm = 0;  // as many as fit: fewer blocks than SMs, residency does not bind
  return true;
}

}  // namespace

bool policy::depends_on_work() const {
  const std::uint64_t none = work_bucket(work{});
  for (const work::shape kind : {work::shape::items, work::shape::grid_stride}) {
    for (const std::uint64_t n : {1ull, 100ull, 4096ull, 1ull << 14, 1ull << 17, 1ull << 20, 1ull << 26, 1ull << 34}) {
      work w;
      w.kind = kind;
      w.n = n;
      if (work_bucket(w) != none) return true;
    }
  }
  return false;
}

std::uint64_t max_occupancy_policy::work_bucket(const work& w) const {
  return params_.prefer_block == 0 ? 0 : small_work_bucket(w);  // 0: exactly the driver's block, for any work
}
std::uint64_t bytes_in_flight_policy::work_bucket(const work& w) const { return small_work_bucket(w); }

plan max_occupancy_policy::choose_impl(const query& q) const {
  require_non_negative(q, "prefer_block", params_.prefer_block, "the largest block");
  require_non_negative(q, "block_limit", params_.block_limit, "no limit");
  const detail::potential_block b = max_occupancy_block(q, params_.prefer_block, params_.block_limit);
  plan p;
  if (b.block_threads == 0) {
    p.block = dims{static_cast<unsigned>(std::min(q.max_block_threads(), 32)), 1, 1};
    p.reason = "no block size fits (validation reports the binding limit)";
    return p;
  }
  p.block = dims{static_cast<unsigned>(b.block_threads), 1, 1};
  p.blocks_per_sm = b.blocks_per_sm;
  p.reason = params_.prefer_block > 0
                 ? fmt::format("the block nearest {} with the most resident threads: {} x {} threads per SM",
                               params_.prefer_block, b.blocks_per_sm, b.block_threads)
                 : fmt::format("the largest block with the most resident threads: {} x {} threads per SM",
                               b.blocks_per_sm, b.block_threads);
  fill_the_sms(q, p, work_bucket(q.work_hint));
  return p;
}

plan bytes_in_flight_policy::choose_impl(const query& q) const {
  require_non_negative(q, "target_per_sm", params_.target_per_sm, "the device default");
  const std::size_t target = params_.target_per_sm > 0 ? static_cast<std::size_t>(params_.target_per_sm)
                             : q.bytes_in_flight_per_sm > 0 ? q.bytes_in_flight_per_sm
                                                            : default_bytes_in_flight_per_sm(q.device);
  if (params_.per_thread <= 0) {
    throw error(errc::invalid_policy, "bytes_in_flight",
                "per_thread must be > 0 bytes (got " + std::to_string(params_.per_thread) + ")",
                q.kernel.demangled);
  }
  const int warp = q.device.warp_size > 0 ? q.device.warp_size : 32;
  const std::size_t per_warp = static_cast<std::size_t>(warp) * static_cast<std::size_t>(params_.per_thread);
  const int warps_needed = std::max(1, static_cast<int>((target + per_warp - 1) / per_warp));  // a 0 target: 1 warp

  require_non_negative(q, "prefer_block", params_.prefer_block, "the largest block");

  // Fewest resident warps that reach the target; ties go to the block nearest prefer_block (0: the largest).
  int best_warps = 0, best_threads = 0, best_bps = 0;
  for (detail::candidate_block_order order(q.max_block_threads(), warp, params_.prefer_block);
       const int block = order.next();) {
    if (block % warp != 0) continue;  // a partial warp holds no more in flight than a full one costs
    if (q.smem_for(block) + q.kernel.static_smem_bytes > q.device.smem_per_block_optin_bytes) continue;
    const int warps_per_block = block / warp;
    const int bps = (warps_needed + warps_per_block - 1) / warps_per_block;
    const int warps = bps * warps_per_block;
    if (best_threads != 0 && warps >= best_warps) continue;  // cannot beat the best: skip the oracle call
    const int active = q.active_blocks_for(block);
    if (active <= 0 || active < bps) continue;  // nothing of this size fits, or not enough of it
    best_warps = warps;
    best_threads = block;
    best_bps = bps;
    if (warps == warps_needed) break;  // exactly the target: nothing can use fewer warps
  }
  plan p;
  // grid_stride work keeps the one-wave cap whatever the width (see grid_for): a static policy cannot see a
  // per-block epilogue, and only the cap bounds what one costs.
  if (best_threads != 0) {
    p.block = dims{static_cast<unsigned>(best_threads), 1, 1};
    p.blocks_per_sm = best_bps;
    p.reason =
        fmt::format("{} warps/SM x {} x {} B = {} in flight per SM reaches the {} target", best_warps, warp,
                    params_.per_thread, kb(static_cast<std::size_t>(best_warps) * per_warp), kb(target));
    fill_the_sms(q, p, small_work_bucket(q.work_hint));
    return p;
  }
  // Unreachable even at full occupancy: run at max occupancy and say what to change.
  const detail::potential_block b = max_occupancy_block(q, params_.prefer_block);
  p.block = dims{static_cast<unsigned>(b.block_threads ? b.block_threads : warp), 1, 1};
  p.blocks_per_sm = b.blocks_per_sm;
  const int warps = b.blocks_per_sm * (b.block_threads / warp);
  const std::size_t reached = static_cast<std::size_t>(warps) * per_warp;
  p.reason = "target " + kb(target) + "/SM unreachable; max occupancy (" + std::to_string(warps) + " warps/SM, " +
             kb(reached) + " in flight)";
  const std::string advice = "keep more independent loads in flight per thread (need " +
                             std::to_string((target + static_cast<std::size_t>(std::max(warps, 1)) * warp - 1) /
                                            (static_cast<std::size_t>(std::max(warps, 1)) * warp)) +
                             " B/thread, have " + std::to_string(params_.per_thread) + ")";
  if (params_.per_thread > 4) {
    p.warning = "bytes in flight " + kb(reached) + "/SM at max occupancy is below the " + kb(target) + " target; " + advice;
  } else {
    // One narrow load per thread: max occupancy is the most any launch can hold; advice, not a warning.
    p.reason += "; to reach it, " + advice;
  }
  fill_the_sms(q, p, small_work_bucket(q.work_hint));
  return p;
}

plan cooperative_policy::choose_impl(const query& q) const {
  require_non_negative(q, "block", params_.block, "the max-occupancy block");
  require_non_negative(q, "blocks_per_sm", params_.blocks_per_sm, "as many as co-reside");
  plan p;
  p.cooperative = true;
  int block = params_.block;
  if (block <= 0) {
    // The largest max-occupancy block: the fewest blocks for grid-wide synchronisation to wait on.
    const detail::potential_block b = max_occupancy_block(q, 0);
    block = b.block_threads ? b.block_threads : std::min(q.max_block_threads(), 32);
  }
  p.block = dims{static_cast<unsigned>(block), 1, 1};
  const int active = q.active_blocks_for(block);
  p.blocks_per_sm = params_.blocks_per_sm > 0 ? params_.blocks_per_sm : active;
  p.reason = fmt::format("co-resident grid: {} blocks/SM x {} SMs ({} fit per SM)", p.blocks_per_sm,
                         q.device.sm_count, active);
  return p;
}

plan fixed_dims_policy::choose_impl(const query& q) const {
  const fixed_dims_params& f = params_;
  for (int v : {f.bx, f.by, f.bz}) {
    if (v <= 0)
      throw error(errc::invalid_policy, "fixed", "block dimensions must be > 0", q.kernel.demangled);
  }
  if (f.gx < 0 || f.gy <= 0 || f.gz <= 0) {
    throw error(errc::invalid_policy, "fixed", "grid must be gx >= 0 (0: from the work), gy and gz >= 1",
                q.kernel.demangled);
  }
  plan p;
  p.block = dims{static_cast<unsigned>(f.bx), static_cast<unsigned>(f.by), static_cast<unsigned>(f.bz)};
  p.grid = f.gx == 0 ? dims{0, 1, 1}
                     : dims{static_cast<unsigned>(f.gx), static_cast<unsigned>(f.gy), static_cast<unsigned>(f.gz)};
  p.reason = "fixed by the caller";
  return p;
}

plan planned_policy::choose_impl(const query& q) const {
  const planned_params& f = params_;
  for (int v : {f.bx, f.by, f.bz, f.gy, f.gz}) {
    if (v <= 0)
      throw error(errc::invalid_policy, "planned", "a planned block and grid need every dimension > 0", q.kernel.demangled);
  }
  if (f.gx < 0 || f.blocks_per_sm < 0 || (f.full_grid != 0 && f.full_grid != 1)) {
    throw error(errc::invalid_policy, "planned", "gx and blocks_per_sm must be >= 0, full_grid 0 or 1",
                q.kernel.demangled);
  }
  plan p;
  p.block = dims{static_cast<unsigned>(f.bx), static_cast<unsigned>(f.by), static_cast<unsigned>(f.bz)};
  p.grid = f.gx == 0 ? dims{0, 1, 1}
                     : dims{static_cast<unsigned>(f.gx), static_cast<unsigned>(f.gy), static_cast<unsigned>(f.gz)};
  p.blocks_per_sm = f.blocks_per_sm;
  p.full_grid = f.full_grid != 0;
  p.reason = "launched as planned";
  return p;
}

plan fixed_policy::choose_impl(const query& q) const {
  (void)q;
  plan p;
  if (params_.block <= 0) {
    p.block = dims{0, 1, 1};  // validation names the error
  } else {
    p.block = dims{static_cast<unsigned>(params_.block), 1, 1};
  }
  if (params_.grid < 0) {
    throw error(errc::invalid_policy, "fixed", "grid must be >= 0 (0: from the work)", q.kernel.demangled);
  }
  p.grid = dims{static_cast<unsigned>(params_.grid), 1, 1};
  if (params_.grid == 0) p.grid = dims{0, 1, 1};
  p.reason = "fixed by the caller";
  return p;
}

bool detail::is_builtin_policy(const policy& p) noexcept {
  return dynamic_cast<const max_occupancy_policy*>(&p) || dynamic_cast<const bytes_in_flight_policy*>(&p) ||
         dynamic_cast<const fixed_policy*>(&p) || dynamic_cast<const cooperative_policy*>(&p) ||
         dynamic_cast<const fixed_dims_policy*>(&p) || dynamic_cast<const planned_policy*>(&p);
}

std::size_t default_bytes_in_flight_per_sm(const device_limits& device) {
  {
    std::lock_guard<std::mutex> lock(bif_mutex());
    auto it = bif_overrides().find(device.cc());
    if (it != bif_overrides().end()) return it->second;
  }
  // CUB's targets are 12 KB (<= V100), 16 KB (A100), 48 KB (H100/H200), 64 KB (B200). On an H200 we
  // measured ~97% of peak read bandwidth at 32 KB/SM, so sm_90 uses 32 KB.
  const int cc = device.cc();
  if (cc < 80) return 12 * 1024;
  if (cc < 90) return 16 * 1024;
  if (cc < 100) return 32 * 1024;
  return 64 * 1024;
}

bool detail::bytes_in_flight_overridden(int cc) {
  std::lock_guard<std::mutex> lock(bif_mutex());
  return bif_overrides().count(cc) != 0;
}

void set_bytes_in_flight_per_sm(int cc, std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(bif_mutex());
    bif_overrides()[cc] = bytes;
  }
  detail::plan_inputs_changed("bytes-in-flight default");  // plans made under the old target are not reused
}

}  // namespace launchfit

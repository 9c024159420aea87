// Built-in policies, plan validation and the grid arithmetic. Pure logic: the occupancy oracle in the query
// is the driver on a GPU and the offline calculator in tests.

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
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

std::string plan::to_string() const {
  std::string s = "block=" + block.to_string();
  s += grid.x ? " grid=" + grid.to_string() : std::string(" grid=from-work");
  s += " blocks/SM=" + std::to_string(blocks_per_sm) + " SMs=" + std::to_string(sm_count);
  s += " smem=" + std::to_string(dynamic_smem_bytes);
  if (cooperative) s += " cooperative";
  if (cluster.count() > 1) s += " cluster=" + cluster.to_string();
  if (!policy.empty()) s += " policy=" + policy;
  return s;
}

namespace {

error plan_error(const query& q, const plan& p, const std::string& check, const std::string& what) {
  return error("validate(" + check + ")", "LAUNCHFIT_INVALID_PLAN", what, q.kernel.demangled, p.to_string());
}

}  // namespace

dims grid_for(const plan& p, const work& w, long long max_grid_x) {
  // items(0) / grid_stride(0): nothing to do, whatever the plan (a fixed grid too). A documented no-op.
  if (w.kind != work::shape::none && w.n == 0) return dims{0, 1, 0};
  if (p.grid.x != 0) return p.grid;
  if (p.block_threads <= 0) throw error("grid_for", "LAUNCHFIT_INVALID_PLAN", "plan without a block", {}, p.to_string());
  const long long resident = p.resident_blocks();
  if (w.kind == work::shape::none) return dims{static_cast<unsigned>(resident), 1, 1};
  const std::uint64_t per_block =
      static_cast<std::uint64_t>(p.block_threads) * std::max<std::uint32_t>(w.per_thread, 1);
  // Ceiling division; 32-bit when both fit (a 64-bit divide costs several times more on common x86 cores).
  std::uint64_t needed;
  if (((w.n | per_block) >> 32) == 0) {
    const auto n32 = static_cast<std::uint32_t>(w.n), b32 = static_cast<std::uint32_t>(per_block);
    needed = n32 / b32 + (n32 % b32 != 0);
  } else {
    needed = w.n / per_block + (w.n % per_block != 0);
  }
  if (w.kind == work::shape::grid_stride) {
    const std::uint64_t g = std::min<std::uint64_t>(needed, static_cast<std::uint64_t>(resident));
    return dims{static_cast<unsigned>(std::max<std::uint64_t>(g, 1)), 1, 1};
  }
  if (p.cooperative && needed > static_cast<std::uint64_t>(resident)) {
    throw error("grid_for", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
                "items(" + std::to_string(w.n) + ") needs " + std::to_string(needed) +
                    " blocks but only " + std::to_string(resident) +
                    " co-reside; use grid_stride() or more items per thread",
                {}, p.to_string());
  }
  if (needed > static_cast<std::uint64_t>(max_grid_x)) {
    throw error("grid_for", "CUDA_ERROR_INVALID_VALUE",
                "items(" + std::to_string(w.n) + ") with " + std::to_string(per_block) +
                    " items per block needs " + std::to_string(needed) + " blocks, above the grid limit " +
                    std::to_string(max_grid_x) + "; use grid_stride() or per_thread()",
                {}, p.to_string());
  }
  return dims{static_cast<unsigned>(needed), 1, 1};
}

int query::active_blocks_for(int block_threads) const {
  const std::size_t smem = smem_for(block_threads);
  if (active_blocks) return active_blocks(block_threads, smem);
  try {
    return occupancy(device, kernel, block_threads, smem).active_blocks_per_sm;
  } catch (const error&) {
    return 0;  // impossible configuration: nothing fits
  }
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
  const int active = q.active_blocks_for(p.block_threads);
  if (active <= 0) {
    std::string why;
    try {
      why = ", limited by " + limiter_names(occupancy(q.device, q.kernel, p.block_threads, p.dynamic_smem_bytes).limiters);
    } catch (const error& e) {
      why = ": " + e.message();
    }
    throw plan_error(q, p, "occupancy", "no block of " + std::to_string(p.block_threads) + " threads with " +
                                            std::to_string(p.dynamic_smem_bytes) + " B dynamic smem fits on an SM" + why);
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

plan policy_base::choose(const query& q) const {
  if (q.device.sm_count <= 0 || q.device.max_threads_per_block <= 0) {
    throw error("policy::choose", "LAUNCHFIT_INVALID_QUERY", "device limits are empty", q.kernel.demangled);
  }
  plan p = choose_impl(q);
  p.policy = to_string();
  validate_plan(q, p);
  return p;
}

namespace {

// cuOccupancyMaxPotentialBlockSize's search with the query's oracle (the driver on a GPU).
detail::potential_block max_occupancy_block(const query& q, int prefer_block, int block_limit = 0) {
  const int limit = block_limit > 0 ? std::min(block_limit, q.max_block_threads()) : q.max_block_threads();
  return detail::search_potential_block(
      limit, q.device.warp_size, q.device.max_threads_per_sm,
      [&q](int block) {
        if (q.smem_for(block) + q.kernel.static_smem_bytes > q.device.smem_per_block_optin_bytes) return 0;
        return q.active_blocks_for(block);
      },
      prefer_block);
}

// Parameters where 0 means "the default" (prefer_block, block_limit, target_per_sm, blocks_per_sm, a
// cooperative block): a negative one is refused, never taken as the default.
void require_non_negative(const query& q, const char* name, int value, const char* zero_means) {
  if (value < 0) {
    throw error("policy::choose", "LAUNCHFIT_INVALID_POLICY",
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

}  // namespace

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
  return p;
}

plan bytes_in_flight_policy::choose_impl(const query& q) const {
  require_non_negative(q, "target_per_sm", params_.target_per_sm, "the device default");
  const std::size_t target = params_.target_per_sm > 0 ? static_cast<std::size_t>(params_.target_per_sm)
                             : q.bytes_in_flight_per_sm > 0 ? q.bytes_in_flight_per_sm
                                                            : default_bytes_in_flight_per_sm(q.device);
  if (params_.per_thread <= 0) {
    throw error("bytes_in_flight", "LAUNCHFIT_INVALID_POLICY",
                "per_thread must be > 0 bytes (got " + std::to_string(params_.per_thread) + ")", q.kernel.demangled);
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
  if (best_threads != 0) {
    p.block = dims{static_cast<unsigned>(best_threads), 1, 1};
    p.blocks_per_sm = best_bps;
    p.reason =
        fmt::format("{} warps/SM x {} x {} B = {} in flight per SM reaches the {} target", best_warps, warp,
                    params_.per_thread, kb(static_cast<std::size_t>(best_warps) * per_warp), kb(target));
    return p;
  }
  // Unreachable even at full occupancy: run at max occupancy and say what to change.
  const detail::potential_block b = max_occupancy_block(q, params_.prefer_block);
  p.block = dims{static_cast<unsigned>(b.block_threads ? b.block_threads : warp), 1, 1};
  p.blocks_per_sm = b.blocks_per_sm;
  const int warps = b.blocks_per_sm * (b.block_threads / warp);
  const std::size_t reached = static_cast<std::size_t>(warps) * per_warp;
  p.reason = "target " + kb(target) + "/SM unreachable; max occupancy (" + std::to_string(warps) + " warps/SM)";
  p.warning = "bytes in flight " + kb(reached) + "/SM at max occupancy is below the " + kb(target) +
              " target; keep more independent loads in flight per thread (need " +
              std::to_string((target + static_cast<std::size_t>(std::max(warps, 1)) * warp - 1) /
                             (static_cast<std::size_t>(std::max(warps, 1)) * warp)) +
              " B/thread, have " + std::to_string(params_.per_thread) + ")";
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

plan fixed_policy::choose_impl(const query& q) const {
  (void)q;
  plan p;
  if (params_.block <= 0) {
    p.block = dims{0, 1, 1};  // validation names the error
  } else {
    p.block = dims{static_cast<unsigned>(params_.block), 1, 1};
  }
  if (params_.grid < 0) {
    throw error("fixed", "LAUNCHFIT_INVALID_POLICY", "grid must be >= 0 (0: from the work)", q.kernel.demangled);
  }
  p.grid = dims{static_cast<unsigned>(params_.grid), 1, 1};
  if (params_.grid == 0) p.grid = dims{0, 1, 1};
  p.reason = "fixed by the caller";
  return p;
}

bool detail::is_builtin_policy(const policy& p) noexcept {
  return dynamic_cast<const max_occupancy_policy*>(&p) || dynamic_cast<const bytes_in_flight_policy*>(&p) ||
         dynamic_cast<const fixed_policy*>(&p) || dynamic_cast<const cooperative_policy*>(&p);
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

void set_bytes_in_flight_per_sm(int cc, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(bif_mutex());
  bif_overrides()[cc] = bytes;
}

}  // namespace launchfit

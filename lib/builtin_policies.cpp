// SPDX-License-Identifier: MIT
// The built-in policies (launchfit/builtin_policies.hpp): max occupancy, bytes in flight, cooperative, fixed
// and planned; their size buckets and the calibrated bytes-in-flight targets.

#include "launchfit/builtin_policies.hpp"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <typeinfo>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "lifecycle.hpp"
#include "plan_inputs.hpp"
#include "policy_string.hpp"

namespace launchfit {

namespace {

// The block with the most resident threads, ties to the block nearest prefer_block (0: the largest). Without
// a block rule or a cluster, exactly cuOccupancyMaxPotentialBlockSize's search with the query's oracle (the
// driver on a GPU); with a rule, over the sizes it allows; with a cluster, counting the threads of the
// clusters that co-reside (cuOccupancyMaxActiveClusters), not of blocks per SM. `blocks_cap` (0: none): a grid of
// exactly that many blocks per SM (a cooperative one): only blocks that reach it count, each at that many per SM
// (with a cluster, at most that many blocks per SM in all), so the block with the most threads in such a grid.
detail::potential_block max_occupancy_block(const query& q, int prefer_block, int block_limit = 0,
                                            int blocks_cap = 0) {
  const auto capped = [blocks_cap](int per_sm) {
    return blocks_cap <= 0 ? per_sm : per_sm >= blocks_cap ? blocks_cap : 0;
  };
  const int limit = block_limit > 0 ? std::min(block_limit, q.max_block_threads()) : q.max_block_threads();
  auto fits = [&q](int block) {
    return q.smem_for(block) + q.kernel.static_smem_bytes <= q.device.smem_per_block_optin_bytes;
  };
  const bool any_block = q.blocks.is_any() && q.shape_rule.is_default();
  if (any_block && q.cluster.count() <= 1) {
    return detail::search_potential_block(
        limit, q.device.warp_size, q.device.max_threads_per_sm,
        [&](int block) { return fits(block) ? capped(q.active_blocks_for(block)) : 0; }, prefer_block);
  }
  const int warp = q.device.warp_size > 0 ? q.device.warp_size : 32;
  detail::potential_block best;
  long long best_threads = 0;
  for (int block = 1; block <= limit; ++block) {
    // Any size the rule allows; without a rule (a cluster launch) the sizes cuOccupancyMaxPotentialBlockSize
    // tries.
    if (any_block ? (block % warp != 0 && block != limit) : !q.allows(block)) continue;
    if (!fits(block)) continue;
    const int per_sm = capped(q.active_blocks_for(block));
    if (per_sm <= 0) continue;
    long long threads = static_cast<long long>(per_sm) * block;
    if (q.cluster.count() > 1) {
      long long blocks = static_cast<long long>(q.active_clusters_for(block)) * q.cluster.count();
      if (blocks_cap > 0) {
        // Whole clusters of at most the cap's blocks, as the grid is made; where the cap holds no whole cluster,
        // the cap's blocks (validation then names the cluster that does not fit the residency).
        const long long size = q.cluster.count();
        const long long capped_blocks = static_cast<long long>(blocks_cap) * q.device.sm_count;
        const long long whole = capped_blocks / size * size;
        blocks = std::min<long long>(blocks, whole > 0 ? whole : capped_blocks);
      }
      threads = blocks * block;
    }
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
// A leaf (nothing is locked under it): constant-initialised and registered at load time: a fork never meets its registration half done (and trivially destroyed).
std::mutex bif_m;
std::mutex& bif_mutex() noexcept { return bif_m; }
const bool bif_fork = detail::lifecycle::on_fork_leaf_mutex<bif_mutex>();
std::map<int, std::size_t>& bif_overrides() {
  static std::map<int, std::size_t>& m = *new std::map<int, std::size_t>();
  return m;
}
// Set (under bif_mutex) once any target is overridden: until then a miss reads the defaults without the lock.
std::atomic<bool> bif_overridden{false};

using detail::small_work_bucket;

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
  p.reason =
      fmt::format("small work ({}+ threads): {}-thread blocks give {} blocks for {} SMs ({} would give {}); ",
                  threads, best, (threads + best - 1) / best, sms, chosen, (threads + chosen - 1) / chosen) +
      p.reason;
  p.block = dims{static_cast<unsigned>(best), 1, 1};
  p.blocks_per_sm = 0;  // as many as fit: fewer blocks than SMs, residency does not bind
  return true;
}

// The caller's block and grid, checked positive already (a grid x of 0: from the work); `F` is
// fixed_dims_params or planned_params.
template <class F>
void set_block_and_grid(plan& p, const F& f) {
  p.block = dims{static_cast<unsigned>(f.bx), static_cast<unsigned>(f.by), static_cast<unsigned>(f.bz)};
  p.grid = f.gx == 0
               ? dims{0, 1, 1}
               : dims{static_cast<unsigned>(f.gx), static_cast<unsigned>(f.gy), static_cast<unsigned>(f.gz)};
}

}  // namespace


std::uint64_t max_occupancy_policy::work_bucket(const work& w) const { return bucket_of(params_, w); }
std::uint64_t bytes_in_flight_policy::work_bucket(const work& w) const { return bucket_of(params_, w); }

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
  // Appended into one allocation: the default policy's reason is made on most misses (fmt's parse of the
  // format string cost more than the rest of this function).
  std::string& why = p.reason;
  why.reserve(96);
  if (params_.prefer_block > 0) {
    why += "the block nearest ";
    why += std::to_string(params_.prefer_block);
    why += " with the most resident threads: ";
  } else {
    why += "the largest block with the most resident threads: ";
  }
  why += std::to_string(b.blocks_per_sm);
  why += " x ";
  why += std::to_string(b.block_threads);
  why += " threads per SM";
  fill_the_sms(q, p, work_bucket(q.work_hint));
  return p;
}

plan bytes_in_flight_policy::choose_impl(const query& q) const {
  require_non_negative(q, "target_per_sm", params_.target_per_sm, "the device default");
  const std::size_t target = params_.target_per_sm > 0      ? static_cast<std::size_t>(params_.target_per_sm)
                             : q.bytes_in_flight_per_sm > 0 ? q.bytes_in_flight_per_sm
                                                            : default_bytes_in_flight_per_sm(q.device);
  if (params_.per_thread <= 0) {
    throw error(errc::invalid_policy, "bytes_in_flight",
                "per_thread must be > 0 bytes (got " + std::to_string(params_.per_thread) + ")",
                q.kernel.demangled);
  }
  const int warp = q.device.warp_size > 0 ? q.device.warp_size : 32;
  const std::size_t per_warp = static_cast<std::size_t>(warp) * static_cast<std::size_t>(params_.per_thread);
  // A 0 target: 1 warp.
  const int warps_needed = std::max(1, static_cast<int>((target + per_warp - 1) / per_warp));

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
  p.reason = "target " + kb(target) + "/SM unreachable; max occupancy (" + std::to_string(warps) +
             " warps/SM, " + kb(reached) + " in flight)";
  const std::string advice =
      "keep more independent loads in flight per thread (need " +
      std::to_string((target + static_cast<std::size_t>(std::max(warps, 1)) * warp - 1) /
                     (static_cast<std::size_t>(std::max(warps, 1)) * warp)) +
      " B/thread, have " + std::to_string(params_.per_thread) + ")";
  if (params_.per_thread > 4) {
    p.warning = "bytes in flight " + kb(reached) + "/SM at max occupancy is below the " + kb(target) +
                " target; " + advice;
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
  p.options.cooperative = true;
  int block = params_.block;
  if (block <= 0) {
    // The largest max-occupancy block: the fewest blocks for grid-wide synchronisation to wait on. With
    // blocks_per_sm given, the largest block with the most threads resident at that many per SM
    // (cooperative(1): the largest block that fits, not the max-occupancy block once).
    const detail::potential_block b = max_occupancy_block(q, 0, 0, params_.blocks_per_sm);
    if (b.block_threads == 0 && params_.blocks_per_sm > 0) {
      // No block the launch allows reaches the cap: said as such, not as whatever a stand-in block breaks.
      const detail::potential_block most = max_occupancy_block(q, 0);
      throw error(errc::invalid_plan, "validate(cooperative)",
                  "blocks_per_sm " + std::to_string(params_.blocks_per_sm) +
                      " co-reside for no block size the launch allows" +
                      (most.block_threads > 0 ? " (the max-occupancy block, " + std::to_string(most.block_threads) +
                                                    " threads, fits " + std::to_string(most.blocks_per_sm) + " per SM)"
                                              : std::string()),
                  q.kernel.demangled);
    }
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
  set_block_and_grid(p, f);
  p.reason = "fixed by the caller";
  return p;
}

plan planned_policy::choose_impl(const query& q) const {
  const planned_params& f = params_;
  for (int v : {f.bx, f.by, f.bz, f.gy, f.gz}) {
    if (v <= 0)
      throw error(errc::invalid_policy, "planned", "a planned block and grid need every dimension > 0",
                  q.kernel.demangled);
  }
  if (f.gx < 0 || f.blocks_per_sm < 0 || (f.full_grid != 0 && f.full_grid != 1)) {
    throw error(errc::invalid_policy, "planned", "gx and blocks_per_sm must be >= 0, full_grid 0 or 1",
                q.kernel.demangled);
  }
  plan p;
  set_block_and_grid(p, f);
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

std::size_t default_bytes_in_flight_per_sm(const device_limits& device) {
  if (bif_overridden.load(std::memory_order_acquire)) {
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

bool detail::reads_bytes_in_flight_target(const policy& p) noexcept {
  return !p.builtin() || typeid(p) == typeid(bytes_in_flight_policy);  // final: its exact type
}

bool detail::bytes_in_flight_overridden(int cc) {
  if (!bif_overridden.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(bif_mutex());
  return bif_overrides().count(cc) != 0;
}

void set_bytes_in_flight_per_sm(int cc, std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(bif_mutex());
    bif_overrides()[cc] = bytes;
    bif_overridden.store(true, std::memory_order_release);
  }
  static const detail::plan_input target_input = detail::register_plan_input("bytes-in-flight default");
  detail::plan_input_changed(target_input);  // plans made under the old target are not reused
}

}  // namespace launchfit

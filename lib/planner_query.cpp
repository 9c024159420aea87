// SPDX-License-Identifier: MIT
// Steps 1 and 3 of the miss path: the kernel resolved in this context, and the query a policy answers with
// its occupancy oracles (the offline calculator while it agrees with the driver, the driver after).

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "driver.hpp"
#include "launch_config.hpp"
#include "launchfit/log.hpp"
#include "log_internal.hpp"
#include "kernel_arguments.hpp"
#include "planner_steps.hpp"
#include "policy_string.hpp"

namespace launchfit::detail {

std::atomic<int> calculator_skew_for_tests{0};

namespace {

// Whether the offline calculator has agreed with the driver on every plan checked in this process. A policy
// asks the residency of tens of candidate blocks per plan, and a driver call for each made most of a first
// launch's planning time; the calculator answers them, and the chosen block's residency is then asked of the
// driver (calculator_agrees). The first disagreement is said in a warning and the driver answers every
// candidate from then on, so a calculator that is wrong for some GPU costs time, never a wrong plan.
std::atomic<bool> calculator_trusted{true};

int calculated_blocks(const device_limits& dev, const kernel_resources& k, int block, std::size_t smem) {
  try {
    const int n = occupancy(dev, k, block, smem).active_blocks_per_sm;
    return n > 0 ? n + calculator_skew_for_tests.load(std::memory_order_relaxed) : n;
  } catch (const error&) {
    return 0;  // impossible configuration
  }
}

}  // namespace

bool calculator_trusted_now() noexcept { return calculator_trusted.load(std::memory_order_relaxed); }

namespace planning {

// Above the function's current dynamic-smem limit the driver counts nothing: the query then estimates (and
// raise_smem_limit() asks again once the limit is raised).
std::function<int(int, std::size_t)> cluster_oracle(CUfunction f, const launch_requirements& need,
                                                    std::size_t smem_limit, int device_sms, int budget_sms) {
  if (!driver().cuOccupancyMaxActiveClusters) return {};
  launch_options asked = need;
  asked.programmatic = false;  // no bearing on residency
  return [f, asked, smem_limit, device_sms, budget_sms](int block, std::size_t smem) {
    if (smem > smem_limit) return -1;
    // Asked as it will launch (fill_launch_config(), as launches and trials are): a grid of one cluster, its
    // dims and, for a cooperative launch, the cooperative attribute (a cooperative cluster launch may
    // co-reside fewer clusters; a driver that does not take the attribute here is asked without it).
    plan probe;
    probe.block = dims{static_cast<unsigned>(block), 1, 1};
    probe.dynamic_smem_bytes = smem;
    probe.options = asked;
    CUlaunchConfig cfg;
    launch_attributes attrs;
    fill_launch_config(cfg, attrs, probe, asked.cluster, nullptr);
    int n = 0;
    if (driver().cuOccupancyMaxActiveClusters(&n, f, &cfg) != CUDA_SUCCESS) {
      if (!asked.cooperative) return 0;
      probe.options.cooperative = false;
      fill_launch_config(cfg, attrs, probe, asked.cluster, nullptr);
      if (driver().cuOccupancyMaxActiveClusters(&n, f, &cfg) != CUDA_SUCCESS) return 0;
    }
    if (budget_sms < device_sms && device_sms > 0)
      n = static_cast<int>(static_cast<long long>(n) * budget_sms / device_sms);
    return n;
  };
}

void resolve_kernel(const launch_request& r, plan_entry& e, family_members& fam) {
  if (r.family) {
    // Planned with the member of the largest block (the query's launch bounds cover every member); the
    // chosen member replaces it in choose_member().
    std::size_t widest = 0;
    for (std::size_t i = 0; i < r.family_size; ++i) {
      fam.blocks.push_back(r.family[i].block);
      fam.functions.push_back(r.resolve(r.family[i].stub));
      fam.kernels.push_back(query_resources(fam.functions.back(), false));
      if (r.family[i].block > r.family[widest].block) widest = i;
    }
    e.function = fam.functions[widest];
    e.kernel = fam.kernels[widest];
    return;
  }
  e.function = r.resolve ? r.resolve(r.stub) : r.driver_kernel->function();
  e.kernel = query_resources(e.function, false);  // the readable name only where it is shown
  if (!r.driver_kernel) return;
  e.param_sizes = query_param_sizes(e.function);
  // Refused here, before a tuning policy's trials would launch the kernel with them (a missing argument is the
  // array's terminating null there).
  if (r.arg_sizes && e.param_sizes && !arguments_match(r.arg_sizes, r.arg_count, *e.param_sizes))
    refuse_arguments(r.arg_sizes, r.arg_count, *e.param_sizes, display_name(e.kernel), {});
}

// The occupancy oracle: the calculator while it is trusted (see above), else the driver, which counts nothing
// as resident above the function's current dynamic-smem limit. Candidates above that limit are answered by
// the calculator (it agrees with the driver once the limit is raised): probing never changes the user's
// function attributes; only the launched plan's smem is set, in raise_smem_limit(). `driver_only`: never the
// calculator below the limit (the check after the limit is raised).
std::function<int(int, std::size_t)> driver_oracle(CUfunction f, const device_limits& dev,
                                                   const kernel_resources& k, bool driver_only) {
  // The oracle is its own state, in the one allocation std::function makes for it: the kernel's numbers without
  // its names (two more copies per miss), and its last answer, which a plan asks again at least once (the
  // policy's search, its plan, validation). The answer is one word, read and written without a lock (a plugin
  // may call the oracle from several threads): valid bit, whether the driver gave it, block, smem and answer.
  struct oracle {
    CUfunction f;
    const device_limits* dev;  // valid while the query lives (limits_for()'s: the process)
    kernel_resources k;        // numbers only: the names are not needed to count residency
    bool driver_only;
    mutable std::atomic<std::uint64_t> last{0};

    oracle(CUfunction fn, const device_limits* d, const kernel_resources& from, bool only)
        : f(fn), dev(d), driver_only(only) {
      k.regs_per_thread = from.regs_per_thread;
      k.static_smem_bytes = from.static_smem_bytes;
      k.local_bytes_per_thread = from.local_bytes_per_thread;
      k.const_bytes = from.const_bytes;
      k.max_threads_per_block = from.max_threads_per_block;
      k.ptx_version = from.ptx_version;
      k.binary_version = from.binary_version;
      k.max_dynamic_smem_bytes = from.max_dynamic_smem_bytes;
      std::copy(std::begin(from.required_cluster), std::end(from.required_cluster), std::begin(k.required_cluster));
    }
    oracle(const oracle& o)
        : f(o.f), dev(o.dev), k(o.k), driver_only(o.driver_only), last(o.last.load(std::memory_order_relaxed)) {}

    // valid (bit 63) | from the driver (62) | block (51..61) | answer (39..50) | smem (0..38); 0: none.
    static std::uint64_t word(bool from_driver, int block, std::size_t smem, int n) noexcept {
      return std::uint64_t{1} << 63 | std::uint64_t{from_driver} << 62 | static_cast<std::uint64_t>(block) << 51 |
             static_cast<std::uint64_t>(n) << 39 | static_cast<std::uint64_t>(smem);
    }
    static bool fits(int block, std::size_t smem, int n) noexcept {
      return block >= 0 && block < (1 << 11) && n >= 0 && n < (1 << 12) && smem < (std::uint64_t{1} << 39);
    }

    int operator()(int block, std::size_t smem) const {
      const bool from_driver =
          smem <= k.max_dynamic_smem_bytes && (driver_only || !calculator_trusted.load(std::memory_order_relaxed));
      const std::uint64_t seen = last.load(std::memory_order_relaxed);
      const std::uint64_t asked = ~(std::uint64_t{0xfff} << 39);  // every bit but the answer's
      if (seen != 0 && fits(block, smem, 0) && (seen & asked) == word(from_driver, block, smem, 0))
        return static_cast<int>(seen >> 39 & 0xfff);
      int n = 0;
      if (!from_driver) {
        n = calculated_blocks(*dev, k, block, smem);
      } else if (driver().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block, smem,
                                                                               CU_OCCUPANCY_DEFAULT) != CUDA_SUCCESS) {
        return 0;
      }
      if (fits(block, smem, n)) last.store(word(from_driver, block, smem, n), std::memory_order_relaxed);
      return n;
    }
  };
  return oracle(f, &dev, k, driver_only);
}

// The plan's residency (what its validation was answered, by the calculator or the driver) asked of the
// driver for its block: false when they differ (the calculator is then no longer trusted, said once in a
// warning). Whatever the trust was while the policy ran (another thread may have withdrawn it meanwhile),
// no plan is kept with a residency the driver did not confirm. True where the driver cannot be asked yet
// (above the function's smem limit: raise_smem_limit() validates with the driver once it is raised).
bool driver_confirms(CUfunction f, const device_limits& dev, const kernel_resources& k, const plan& p) {
  const int block = p.block_threads;
  const std::size_t smem = p.dynamic_smem_bytes;
  if (block <= 0 || smem > k.max_dynamic_smem_bytes) return true;
  int n = 0;
  if (driver().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block, smem,
                                                                    CU_OCCUPANCY_DEFAULT) != CUDA_SUCCESS)
    return true;  // the launch reports what the driver refuses
  if (n == p.occupancy.active_blocks_per_sm) return true;
  if (calculator_trusted.exchange(false)) {
    logger()->warn(
        "occupancy calculator disagrees with the driver for {} (block {}, {} B dynamic smem: driver {} "
        "blocks/SM, calculator {}); the driver answers every candidate block from now on",
        display_name(k), block, smem, n, calculated_blocks(dev, k, block, smem));
  }
  return false;
}
query make_query(const launch_request& r, const plan_entry& e, const device_limits& dev,
                 const launch_requirements& need, const family_members& fam, const policy& chosen) {
  query q;
  q.device = dev;
  if (r.options.sm_budget > 0 && r.options.sm_budget < dev.sm_count) q.device.sm_count = r.options.sm_budget;
  q.kernel = e.kernel;
  q.dynamic_smem_bytes = r.options.smem_bytes;
  if (r.smem_fn) q.smem_per_block = *r.smem_fn;
  q.work_hint = r.shape;
  q.blocks = r.blocks;
  q.shape_rule = r.shape_rule;
  q.cluster = need.cluster;
  q.bytes_in_flight_per_sm = default_bytes_in_flight_per_sm(dev);
  if (reads_bytes_in_flight_target(chosen) && cache_file_open() && !bytes_in_flight_overridden(dev.cc())) {
    if (const auto measured = find_calibration(dev, driver().version)) q.bytes_in_flight_per_sm = *measured;
  }
  if (fam.blocks.empty()) {
    q.active_blocks = driver_oracle(e.function, dev, e.kernel);  // dev lives as long as the process
    if (need.cluster.count() > 1) {
      auto clusters =
          cluster_oracle(e.function, need, e.kernel.max_dynamic_smem_bytes, dev.sm_count, q.device.sm_count);
      if (clusters) {
        // Estimated (from the blocks per SM) where the driver cannot answer yet: above the smem limit.
        q.active_clusters = [clusters, est = q](int block, std::size_t smem) mutable {
          const int n = clusters(block, smem);
          if (n >= 0) return n;
          est.active_clusters = nullptr;
          return est.active_clusters_for(block);
        };
      }
    }
    return q;
  }
  // A family: each block is its member's, asked of that member; other blocks are not allowed.
  block_rule members = block_rule::one_of({});
  members.invalid = false;
  for (int b : fam.blocks)
    if (r.blocks.allows(b) && (r.shape_rule.is_default() || r.shape_rule.allows(b)) && members.count < 16)
      members.values[members.count++] = static_cast<std::uint16_t>(b);
  if (members.count == 0) {
    throw error(
        errc::invalid_policy, "launchfit::family",
        "no member of the family has a block the launch's block rule (" + r.blocks.to_string() + ") allows",
        display_name(e.kernel));
  }
  q.blocks = members;
  std::vector<std::function<int(int, std::size_t)>> oracles;
  std::vector<std::function<int(int, std::size_t)>> cluster_oracles;
  for (std::size_t i = 0; i < fam.blocks.size(); ++i) {
    oracles.push_back(driver_oracle(fam.functions[i], dev, fam.kernels[i], true));
    if (need.cluster.count() > 1)
      cluster_oracles.push_back(cluster_oracle(fam.functions[i], need, fam.kernels[i].max_dynamic_smem_bytes,
                                               dev.sm_count, q.device.sm_count));
  }
  q.active_blocks = [oracles, blocks = fam.blocks](int block, std::size_t smem) {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i] == block) return oracles[i](block, smem);
    return 0;
  };
  if (need.cluster.count() > 1) {
    // Estimated from the family's residency, as for one kernel, where a member's driver cannot answer (above
    // its smem limit, or no cuOccupancyMaxActiveClusters): never read as "no cluster co-resides".
    query est = q;
    est.active_clusters = nullptr;
    q.active_clusters = [cluster_oracles, blocks = fam.blocks, est](int block, std::size_t smem) {
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i] != block) continue;
        const int n = cluster_oracles[i] ? cluster_oracles[i](block, smem) : -1;
        return n >= 0 ? n : est.active_clusters_for(block);
      }
      return 0;
    };
  }
  return q;
}

// The member the policy chose: its function and resources replace the planning stand-in, and the plan is
// validated against that member's own limits.
void choose_member(query& q, plan_entry& e, const family_members& fam) {
  if (fam.blocks.empty()) return;
  const int i = fam.index_of(e.plan.block_threads);
  if (i < 0) {
    throw error(errc::invalid_plan, "launchfit::family",
                "the plan's block " + std::to_string(e.plan.block_threads) + " is no member's",
                display_name(e.kernel), e.plan.to_string());
  }
  e.function = fam.functions[static_cast<std::size_t>(i)];
  e.kernel = fam.kernels[static_cast<std::size_t>(i)];
  q.kernel = e.kernel;
  const std::string reason = e.plan.reason;
  try {
    validate_plan(q, e.plan);
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
  std::string list;
  for (int b : fam.blocks) list += (list.empty() ? "" : ",") + std::to_string(b);
  e.plan.reason = reason + "; the family's member for block " + std::to_string(e.plan.block_threads) +
                  " (of " + list + ")";
}

}  // namespace planning
}  // namespace launchfit::detail

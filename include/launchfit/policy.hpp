// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup policies
/// \brief The query a policy answers, validate_plan(), the policy registry, policy strings and
/// LAUNCHFIT_POLICY overrides.
///
// launchfit::policy — the extension point that turns a query into a plan, the built-in policies, and the
// registry that makes policies selectable by name at run time. Light to include: the machinery that hashes,
// prints and parses policy parameters (Boost.PFR) is in launchfit/param_policy.hpp, for policy authors. The
// policy classes themselves are in launchfit/builtin_policies.hpp (what launching needs).

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/export.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

// Everything a policy may look at. The occupancy oracle is the driver on a GPU and the offline calculator
// in tests, so policies are pure logic.
struct LAUNCHFIT_API query {
  device_limits device;                // the device of the launch's context
  kernel_resources kernel;             // the kernel's resources
  std::size_t dynamic_smem_bytes = 0;  // used when smem_per_block is empty
  smem_per_block_fn smem_per_block;    // block threads -> dynamic smem bytes
  work work_hint;                      // the work of the launch that missed the cache
  block_rule blocks;                   // block sizes the kernel can run with: active_blocks_for() is 0 for others
  block_shape shape_rule;              // block shape: active_blocks_for() is 0 for totals it cannot make
  dims cluster;                        // cluster dims of the launch (1x1x1: none)
  // Clusters co-resident on the device for (block threads, dynamic smem) (cuOccupancyMaxActiveClusters); set
  // for cluster launches only. Empty: estimated from active_blocks.
  std::function<int(int, std::size_t)> active_clusters;
  std::size_t bytes_in_flight_per_sm = 0;  // device default target (per-arch table or calibration)
  // Active blocks per SM for (block threads, dynamic smem). Empty: the offline calculator is used.
  std::function<int(int, std::size_t)> active_blocks;
  // Times one candidate plan on the real arguments in ms; empty unless the launch allows re-running.
  std::function<double(const plan&)> time_plan;
  // Milliseconds time_plan's calls have spent so far on launchfit's own one-off work rather than on trials
  // (the fleet's tuning lease, the GPU's conditions, the trials' stream gate; all in the first call): a
  // policy's time budget should not count them. May be empty (where no trial can run).
  std::function<double()> setup_ms;
  // Why time_plan answers no trial although the spec allows re-running (the launch is being captured into a
  // CUDA graph: a capture runs nothing); empty otherwise. A tuning policy that declines says it.
  std::string no_trials;

  // Dynamic smem per block for a block of this many threads, under the launch's smem rule.
  std::size_t smem_for(int block_threads) const {
    return smem_per_block ? smem_per_block(block_threads) : dynamic_smem_bytes;
  }
  // Resident blocks per SM: the oracle, or the calculator when there is none; 0 for a block the launch's
  // block rule (or a multi-dimensional work's 32-thread rows) does not allow.
  int active_blocks_for(int block_threads) const;
  // Whether the launch can run blocks of this many threads (block rule; the block shape, or rows of 32 for
  // 2-D and 3-D work).
  bool allows(int block_threads) const noexcept {
    if (!blocks.allows(block_threads)) return false;
    if (!shape_rule.is_default()) return shape_rule.allows(block_threads);
    return work_hint.rank <= 1 || block_threads % 32 == 0;
  }
  // Co-resident clusters of the launch's cluster dims (the oracle, or an estimate); 0 without a cluster.
  int active_clusters_for(int block_threads) const { return active_clusters_for(block_threads, cluster); }
  // The same for cluster dims `c` (the oracle answers for the launch's own dims only; others are estimated).
  int active_clusters_for(int block_threads, dims c) const;
  // Largest legal block for this kernel on this device (min of launch bounds and device max).
  int max_block_threads() const noexcept;
};

// Not inline: for the built-ins (extern templates in launchfit/builtin_policies.hpp) these are compiled into the
// library only. Here, where std::string is complete, and not in builtin_policies.hpp, which only declares it.
template <class Derived, class Params>
std::string param_policy<Derived, Params>::name() const {
  // An "incomplete type" error on these three lines: include param_policy.hpp where the policy is defined.
  return detail::param_policy_members<Derived, Params>::name();  // include param_policy.hpp
}
template <class Derived, class Params>
std::string param_policy<Derived, Params>::params() const {
  return detail::param_policy_members<Derived, Params>::params(params_);  // include param_policy.hpp
}
template <class Derived, class Params>
std::uint64_t param_policy<Derived, Params>::hash() const {
  return detail::param_policy_members<Derived, Params>::hash(params_);  // include param_policy.hpp
}

// Throws launchfit::error naming the kernel, the plan and the violated limit, or completes the plan
// (block_threads, sm_count, occupancy, dynamic smem, resident clusters). Every plan from any source passes
// through here.
LAUNCHFIT_API void validate_plan(const query& q, plan& p);

// Gives a 1-D block the shape the launch needs: its block shape (query::shape_rule, block_shape::block_for),
// or for multi-dimensional work {32, threads / 32, 1} (rows of one warp, so a row of the work is read
// coalesced). Plans with a 2-D or 3-D block, and 1-D work without a block shape, are left alone.
LAUNCHFIT_API void shape_block(const query& q, plan& p);

// Whether a policy may widen the block along x itself: 2-D or 3-D work whose launch said so (spec
// block_x_free(), block_shape::free_x) with y free and z 1. Its own block then keeps x a multiple of
// block_x_multiple (32 by default), y at least 2 and z 1 (free_block_shape); a 1-D block is shaped by
// shape_block.
LAUNCHFIT_API bool block_shape_free(const query& q) noexcept;

// Whether `block` is one a policy may choose where block_shape_free(q): x a multiple of the launch's
// block_x_multiple (32 by default), y >= 2, z 1, within the device's per-dimension limits.
LAUNCHFIT_API bool free_block_shape(const query& q, const dims& block) noexcept;

// The block this launch makes of `threads` threads (shape_block of a 1-D block; threads clamped to 1..2^20).
LAUNCHFIT_API dims launch_block(const query& q, unsigned long long threads);

// Whether a tuning policy's, a plugin's or a stored tuned plan's block is one this launch may run: the block it
// makes of that many threads (launch_block), or a wider one where block_shape_free(q) (free_block_shape).
LAUNCHFIT_API bool launch_makes_block(const query& q, const dims& block);

namespace detail {
LAUNCHFIT_API std::uint64_t hash_string(std::string_view s) noexcept;
}  // namespace detail

// Default bytes-in-flight target per SM for a device (per-arch table; calibrate() may override).
LAUNCHFIT_API std::size_t default_bytes_in_flight_per_sm(const device_limits& device);
// Override the default for one architecture (cc, e.g. 90) with a measured value; drops every cached plan
// (no plan key holds the default target).
LAUNCHFIT_API void set_bytes_in_flight_per_sm(int cc, std::size_t bytes);

// ---- registry: policies by name ----------------------------------------------------------------------

using policy_factory =
    std::function<std::shared_ptr<const policy>(const std::map<std::string, std::string>& params)>;

// Thread-safe; throws launchfit::error on a duplicate name. Built-ins and loaded plugins are registered.
LAUNCHFIT_API void register_policy(const std::string& name, policy_factory factory);
// Removes a registered policy; false when there is none of that name.
LAUNCHFIT_API bool unregister_policy(const std::string& name);
// The names of every registered policy.
LAUNCHFIT_API std::vector<std::string> registered_policies();
// Creates a registered policy; throws launchfit::error for an unknown name or a bad parameter.
LAUNCHFIT_API std::shared_ptr<const policy> make_policy(const std::string& name,
                                          const std::map<std::string, std::string>& params = {});

// Registers a param_policy subclass under its policy_name; parameters are parsed by field name via PFR.
template <class P>
void register_policy();

// Parses "bytes_in_flight(per_thread=32)" (also "fixed(block=256,grid=80)", "max_occupancy", "max_occupancy()").
// Errors name the offending character: "policy string 'x(' col 3: expected ')'".
LAUNCHFIT_API std::shared_ptr<const policy> policy_from_string(std::string_view text);

// Per-kernel overrides, "reduce*=bytes_in_flight(per_thread=32);saxpy=fixed(block=256)", read from
// LAUNCHFIT_POLICY on first use (or set here). Globs match the demangled kernel name without its
// parameter list; the first matching entry wins. Bad entries throw launchfit::error pointing at the column.
LAUNCHFIT_API void set_policy_overrides(std::string_view spec);
// The override for a kernel, or nullptr. `matched` receives the glob that matched.
LAUNCHFIT_API std::shared_ptr<const policy> policy_override_for(std::string_view demangled_kernel,
                                                  std::string* matched = nullptr);

}  // namespace launchfit

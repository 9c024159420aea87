// SPDX-License-Identifier: MIT
#pragma once
// Internal: the miss path. A plan is made for exactly what is launched: the context (by identity), the
// kernel, the policy that decides (the spec's, or a LAUNCHFIT_POLICY override) with its size bucket, the smem
// rule (checked by value on every launch) and what the launch requires (cooperative, cluster dims), which no
// policy, override, plugin or stored plan may drop.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "device_query.hpp"
#include "launchfit/detail/launch_request.hpp"
#include "launch_options.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"

namespace launchfit::detail {

// What the launch requires (launch_options.hpp): one value from the spec to CUlaunchConfig.
using launch_requirements = launch_options;

// The requirements in a plan key: one function owns the encoding (launch_options.hpp).
// The offline calculator answers a policy's candidate blocks while it has agreed with the driver on every
// chosen block in this process (see planner.cpp); false after the first disagreement.
bool calculator_trusted_now() noexcept;
// Tests: added to each residency the calculator answers, so that it disagrees with the driver.
extern std::atomic<int> calculator_skew_for_tests;

inline std::uint64_t launch_bits(const launch_request& r) noexcept { return key_bits(launch_options_of(r)); }
// Set in the key of a plan made by an override (under its own policy hash and bucket).
inline constexpr std::uint64_t overridden_bit = 1ULL << 63;

// What shapes the block and the resident grid beyond the policy: the block rule, the block shape (block_y,
// x multiple, rows per thread), multi-dimensional work (its blocks are shaped in rows of 32), the SM budget
// and a grid_stride launch's waves cap (a tuning policy times its candidates under it). 0 when none is given.
inline std::uint64_t shape_bits(const launch_request& r) noexcept {
  const std::uint64_t rule = r.blocks.k == block_rule::kind::any ? 0 : r.blocks.hash();
  const std::uint64_t shape = r.shape_rule.hash();
  const std::uint64_t waves = r.shape.kind == work::shape::grid_stride ? r.options.waves : 0;
  const std::uint64_t extra = (r.shape.rank >= 2 ? 2u : 0u) |
                              (static_cast<std::uint64_t>(r.options.sm_budget & 0xffffff) << 8) | (waves << 32);
  if ((rule | extra | shape) == 0) return 0;
  const std::uint64_t h = hash_combine(rule, extra);
  return (shape ? hash_combine(h, shape) : h) | 1;
}

// Everything a plan depends on: the request's own fields and the generation of the process-wide inputs
// (plan_inputs.hpp), so no call site ever flushes the cache by hand.
inline plan_key base_key(const launch_request& r, const context_ref& ctx) noexcept {
  return plan_key{ctx.id,         r.kernel_id,  r.policy_hash, r.options.smem_identity(), r.bucket, launch_bits(r),
                  shape_bits(r), plan_inputs_generation()};
}

// The key of a request missed: plans it (or waits for the thread that does). A request asked again from
// inside its own planning (a reset callback launching the same kernel) is planned without tuning into
// `local`, not cached.
const plan_entry& plan_miss(const launch_request& r, const context_ref& ctx, const plan_key& key,
                            std::optional<plan_entry>& local);
// The entry of an overridden request only routes: the override's plan, under the override's own key.
const plan_entry& follow_route(const launch_request& r, const context_ref& ctx, const plan_entry& route,
                               std::optional<plan_entry>& local);
// The cached plan's dynamic smem is not what this launch's smem_per_block rule gives for its block (a rule of
// the same type with other captured values): plans again, keyed by the rule's answer.
const plan_entry& replan_for_smem_rule(const launch_request& r, const context_ref& ctx, const plan_entry& stale,
                                       std::optional<plan_entry>& local);

// ---- pure steps, tested on the CPU ----------------------------------------------------------------------

// The plan contract: plan_for(k, spec) answers with exactly what launch(k, spec) runs. A spec without work
// whose policy decides by the work (policy::depends_on_work()) has no answer a later launch with work would
// keep: refused with errc::missing_work, naming the kernel and the policy, before any plan is made.
void require_work_for_plan(const launch_request& r);

// What the launch requires: the request's options (decided in make_request()).
launch_requirements requirements_of(const launch_request& r);
// Refuses (errc::pdl_unsupported) a programmatic launch of a kernel compiled from PTX below compute_90: its
// binary has no griddepcontrol.wait, so it would not wait for the kernel it overlaps.
void require_pdl_support(const launch_requirements& need, const kernel_resources& k);
// Adds the kernel's compile-time __cluster_dims__ to what the launch requires; throws when the launch asks
// for other cluster dims.
void require_kernel_cluster(launch_requirements& need, const kernel_resources& k);

// Makes p launch as the launch requires: cooperative when required, with exactly the required cluster dims
// (then re-validated: co-residency, resident clusters), programmatic when asked, and its block shaped for
// multi-dimensional work. Throws launchfit::error when p cannot (a policy that chose other cluster dims,
// blocks that do not co-reside).
void apply_requirements(const query& q, plan& p, const launch_requirements& need);

// Whether two plans launch the same way (block, grid rule, residency, smem, cooperative, cluster).
bool same_launch(const plan& a, const plan& b) noexcept;

// Checks a plan read from the cache file against this launch (it is untrusted input). `computed` is what a
// deterministic built-in policy chooses now (nullptr for tuning policies and plugins). Returns an empty
// string and completes `stored` when it may be used, or why not.
// `differs_only` (when given) is set when the entry is valid but is not what `computed` is: another process's
// view (another bytes-in-flight target, another version), not a broken entry.
std::string check_stored_plan(const query& q, plan& stored, const launch_requirements& need,
                              const plan* computed, bool* differs_only = nullptr);


}  // namespace launchfit::detail

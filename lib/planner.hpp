// SPDX-License-Identifier: MIT
#pragma once
// Internal: the miss path. A plan is made for exactly what is launched: the context (by identity), the
// kernel, the policy that decides (the spec's, or a LAUNCHFIT_POLICY override) with its size bucket, the smem
// rule (checked by value on every launch) and what the launch requires (cooperative, cluster dims), which no
// policy, override, plugin or stored plan may drop.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device_query.hpp"
#include "launch_options.hpp"
#include "launchfit/detail/launch_request.hpp"
#include "launchfit/detail/plan_key_bits.hpp"
#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"

namespace launchfit::detail {

// What the launch requires (launch_options.hpp): one value from the spec to CUlaunchConfig.
using launch_requirements = launch_options;

// The requirements in a plan key: one function owns the encoding (launch_options.hpp).
// The offline calculator answers a policy's candidate blocks while it has agreed with the driver on every
// chosen block in this process (see planner_query.cpp); false after the first disagreement.
bool calculator_trusted_now() noexcept;
// Tests: added to each residency the calculator answers, so that it disagrees with the driver.
extern std::atomic<int> calculator_skew_for_tests;

// key_bits() reads neither the dims of a cluster of one block nor cluster_from_kernel, which is all that
// launch_options_of() changes: the request's options give the same bits without the copy.
inline std::uint64_t launch_bits(const launch_request& r) noexcept { return key_bits(r.options); }
// Set in the key of a plan made by an override (under its own policy hash and bucket).
inline constexpr std::uint64_t overridden_bit = 1ULL << 63;
// Set in the key of the spec's own plan made where an override cannot serve the launch (follow_route()).
inline constexpr std::uint64_t own_policy_bit = 1ULL << 62;
// Set in the key of the plan a family's sizes share once it holds max_buckets_per_family buckets (plan_cache.hpp;
// the key's bucket is 0): made for the first such size, with a warning naming the policy.
inline constexpr std::uint64_t shared_bucket_bit = 1ULL << 61;

// shape_bits() and key_bits(): launchfit/detail/plan_key_bits.hpp (a launch computes them where its spec is
// written).
inline std::uint64_t shape_bits(const launch_request& r, const work& w) noexcept {
  return shape_bits(r.blocks, r.shape_rule, r.options, w);
}
inline std::uint64_t shape_bits(const launch_request& r) noexcept { return shape_bits(r, r.shape); }

// Everything a plan depends on: the request's own fields and the generation of the process-wide inputs
// (plan_inputs.hpp), so no call site ever flushes the cache by hand.
inline plan_key base_key(const launch_request& r, const context_ref& ctx) noexcept {
  return plan_key{ctx.id,   r.kernel_id,    r.policy_hash, r.options.smem_identity(),
                  r.bucket, launch_bits(r), shape_bits(r), plan_inputs_generation()};
}
// The same key for a launch_probe, whose parts make_probe() computed where the spec is written, by the same
// functions: the key make_request()'s request of the same spec has.
inline plan_key base_key(const launch_probe& p, const context_ref& ctx) noexcept {
  return plan_key{ctx.id,   p.kernel_id,   p.policy_hash, p.smem_identity,
                  p.bucket, p.launch_bits, p.shape_bits,  plan_inputs_generation()};
}
// The key of a request missed: plans it (or waits for the thread that does). A request asked again from
// inside its own planning (a reset callback launching the same kernel) is planned without tuning into
// `local`, not cached.
const plan_entry& plan_miss(const launch_request& r, const context_ref& ctx, const plan_key& key,
                            local_entry& local);
// The key of an override's plan for a request keyed `base`: the override's hash and size bucket combined with
// the spec's, since where the override cannot serve the launch the spec's own policy decides under this key.
plan_key override_key(const plan_key& base, std::uint64_t override_hash,
                      std::uint64_t override_bucket) noexcept;
// follow_route(), serve_work() and replan_for_smem_rule() key by ctx.id alone: ctx.handle may be null there (a
// launch the hit path handed over read the identity only); plan_miss() needs both.
// The entry of an overridden request only routes: the override's plan (override_key()), or the spec's own
// where the override cannot serve the launch (a bad parameter, a plan outside the launch's limits, a plugin's
// failure, a first-run tuning plan_for() cannot wait for), made once with one warning naming the override and
// why.
const plan_entry& follow_route(const launch_request& r, const context_ref& ctx, const plan_entry& route,
                               local_entry& local);
// An override's entry whose plan cannot serve this launch's work (its grid would exceed the device's limits
// or co-residency, or its fixed grid would leave items undone): the spec's own plan instead, made once with
// one warning naming the kernel, the override and why. Any other entry is returned as it is.
const plan_entry& serve_work(const launch_request& r, const context_ref& ctx, const plan_entry& e,
                             local_entry& local);
// The cached plan's dynamic smem is not what this launch's smem_per_block rule gives for its block (a rule of
// the same type with other captured values): plans again, keyed by the rule's answer.
const plan_entry& replan_for_smem_rule(const launch_request& r, const context_ref& ctx,
                                       const plan_entry& stale, local_entry& local);

// ---- pure steps, tested on the CPU ----------------------------------------------------------------------

// Whether an error says that a policy's plan cannot serve this launch (a bad parameter, a plan outside the
// kernel's, device's or launch's limits, a plugin's failure, a first-run tuning that plan_for() cannot wait
// for), rather than a failure of the device, the driver or launchfit itself (those are thrown as they are).
// An override that cannot serve a launch gives way to the spec's own policy.
bool cannot_serve(const error& e) noexcept;

// Why an override's plan cannot serve this work (an empty string: it can): the grid it gives is refused
// (grid_for(): above the device's limits, not co-resident), or its fixed grid covers fewer blocks than
// items(n) needs (one thread per item: the rest would be left undone). Other errors are thrown.
std::string override_work_refusal(const plan& p, const work& w, long long max_grid_x = 2147483647LL);

// What the launch requires: the request's options (decided in make_request()).
launch_requirements requirements_of(const launch_request& r);
// Refuses (errc::pdl_unsupported) a programmatic launch of a kernel compiled from PTX below compute_90: its
// binary has no griddepcontrol.wait, so it would not wait for the kernel it overlaps.
void require_pdl_support(const launch_requirements& need, const kernel_resources& k);
// Adds the kernel's compile-time __cluster_dims__ to what the launch requires; throws when the launch asks
// for other cluster dims.
void require_kernel_cluster(launch_requirements& need, const kernel_resources& k);
// Throws where a family's members are compiled with different __cluster_dims__ (or some with and some without).
void require_family_cluster(const std::vector<kernel_resources>& members);

// Makes p launch as the launch requires: cooperative when required, with exactly the required cluster dims
// (then re-validated: co-residency, resident clusters), programmatic when asked, and its block shaped for
// multi-dimensional work. Throws launchfit::error when p cannot (a policy that chose other cluster dims,
// blocks that do not co-reside).
void apply_requirements(const query& q, plan& p, const launch_requirements& need);
// An override's plan whose block has rows (y or z above 1) for 1-D work without a block shape: refused
// (invalid_plan, naming `kernel`), so that the spec's own policy decides (build_entry()).
void refuse_rows_for_one_dimensional_work(const launch_request& r, const plan& p, const std::string& kernel);

// Whether a plan stored for this policy (cache file, remote store) is checked against the policy's own answer
// before it is used: for the built-ins (policy::builtin(): cheap, deterministic). A plugin's or a tuning
// policy's stored plan is validated only (it may have been timed).
bool cross_checks_stored_plans(const policy& chosen) noexcept;

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

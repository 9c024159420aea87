// SPDX-License-Identifier: MIT
// Step 5 of the miss path: a plan from the plan store's layers (the cache file, the remote store), checked
// against this launch before it is used, or the policy's own choice, stored for the next process.

#include <atomic>
#include <optional>
#include <string>

#include "cache_file.hpp"
#include "driver.hpp"
#include "launchfit/log.hpp"
#include "log_internal.hpp"
#include "plan_match.hpp"
#include "planner_steps.hpp"
#include "plugin_internal.hpp"
#include "remote_store.hpp"
#include "text.hpp"
#include "tuning_lease.hpp"

namespace launchfit::detail {

namespace planning {

namespace {

std::string smem_rule_text(const launch_request& r, const plan_key& key) {
  if (r.smem_fn) return "fn=" + std::to_string(key.smem_rule);
  return "bytes=" + std::to_string(r.options.smem_bytes);
}

// `calculated`: the query's oracle is the calculator's (not a family's, whose members the driver answers).
plan choose(const policy& chosen, const query& q, plan_entry& e, bool calculated) {
  try {
    plan p = chosen.choose(q);
    if (calculated && e.function && !driver_confirms(e.function, q.device, q.kernel, p))
      p = chosen.choose(q);  // again, with the driver answering every candidate
    return p;
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
}

// The policy's plan with the launch's requirements applied (apply_requirements()). A plugin's plan they refuse
// (a cooperative plan for a launch that is not, which the plugin cannot see) takes the plugin's fallback path,
// as any invalid plan of a plugin does.
plan chosen_plan(const policy& chosen, const query& q, plan_entry& e, bool calculated,
                 const launch_requirements& need) {
  plan p = choose(chosen, q, e, calculated);
  try {
    try {
      apply_requirements(q, p, need);
    } catch (const error& refused) {
      if (refused.code() != errc::invalid_plan || !plugin_internal::is_plugin_policy(chosen)) throw;
      p = plugin_internal::plugin_fallback(chosen, q, refused);
      apply_requirements(q, p, need);
    }
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));  // a built-in's miss has not demangled the name
  }
  return p;
}

// What, besides the policy, decides the plan: part of the cache file's key.
std::string decided_by_text(const std::string& policy_text, const launch_request& r, const query& q,
                            const launch_requirements& need, const family_members& fam) {
  std::string s = policy_text + key_text(need);
  if (!r.blocks.is_any()) s += " blocks=" + r.blocks.to_string();
  if (r.shape.rank >= 2) s += " rows=32";
  if (r.shape_rule.is_set()) s += " shape=" + r.shape_rule.to_string();
  if (q.device.sm_count > 0 && r.options.sm_budget > 0 && r.options.sm_budget <= q.device.sm_count)
    s += " sms=" + std::to_string(q.device.sm_count);
  // The work's kind, as the in-memory key has it (shape_bits()), in every key: an entry written before keys
  // named it (items, grid-stride and no work alike) is found by no launch and is tuned again.
  s += " work=";
  s += work_kind_word(r.shape.kind);
  if (r.options.waves != 0 && r.shape.kind == work::shape::grid_stride)
    s += " waves=" + std::to_string(r.options.waves);
  if (!fam.blocks.empty()) {
    s += " family=";
    for (std::size_t i = 0; i < fam.blocks.size(); ++i)
      s += (i ? "," : "") + std::to_string(fam.blocks[i]) + ":" + kernel_fingerprint(fam.kernels[i]);
  }
  return s;
}

// First in the reason, where a reason that runs long is cut: how the candidates were timed decides what
// they ranked.
void say_graph_timed(const tuning_record& record, plan& p) {
  if (record.graph_timed()) p.reason = "timed as graph replays: " + p.reason;
}

}  // namespace

// How a tuned plan was measured (none for a plan no trial timed). A measurement that is not clean is kept in
// the local file only (store_plan), and the plan's line says why; conditions NVML could not read are said
// once per process.
namespace {
std::optional<plan_measurement> measured(tuning_record& record, plan& p) {
  if (!record.tuned()) return std::nullopt;
  std::optional<plan_measurement> m = record.measure(p);
  if (!m) return m;
  p.reason += "; measured with " + record.conditions_text();
  say_graph_timed(record, p);
  if (!m->clean) {
    p.reason += "; " + tuning_record::provisional_note(*m);
  } else if (!m->conditions.empty() && nvml::first_unknown_notice()) {
    logger()->info("tuning measurements are shared on their spread alone: {}", escape_text(m->conditions));
  }
  return m;
}

// The launch's plan while another process holds the key's tuning lease: what the policy chose without trials
// (a tuning plugin, whose every trial was refused, declines, and its fallback decides), never stored, its
// match plan_match::waiting (which plan_for() refuses), and the key watched until the tuned plan is published.
plan while_tuned_elsewhere(tuning_lease& lease, plan p) {
  // A decline's own words ("declined by autotune (autotune: none of the 16 candidate plans could run ...));
  // max_occupancy: ...") are about trials that failed: these were not run, and the launch waits instead.
  std::string static_reason = p.reason;
  const std::size_t end_of_decline = static_reason.find("); ");
  if (p.match == plan_match::fallback && static_reason.rfind("declined by ", 0) == 0 &&
      end_of_decline != std::string::npos)
    static_reason = static_reason.substr(end_of_decline + 3);
  p.reason = "tuning leased to another process (" + escape_text(lease.holder()) +
             (lease.remaining_ms() >= 0 ? ", " + std::to_string(lease.remaining_ms()) + " ms left" : "") +
             "): the static plan until its tuned plan is published; " + static_reason;
  p.match = plan_match::waiting;
  lease.watch();
  return p;
}
}  // namespace

// `may_store`: the plan is the one a launch caches (not one made for this call only, nor one a plan_for()
// that was asked for a trial will refuse): only such a plan is written to the store's layers, where the first
// writer wins for the whole fleet.
void plan_to_store::commit() {
  if (key_) store_plan(*key_, plan_, std::move(measured_));
  key_.reset();
  if (lease_) lease_->publish_and_release();  // the others adopt what the store holds
  lease_.reset();
}

plan stored_or_chosen(const launch_request& r, const plan_key& key, std::uint64_t bucket,
                      const policy& chosen, const query& q, const launch_requirements& need, plan_entry& e,
                      const device_limits& dev, const family_members& fam, bool may_store,
                      const std::atomic<bool>& asked, tuning_record& record, plan_to_store& pending) {
  // The plan store's layers (the local file, the remote store) are asked only when one is in use.
  if (!cache_file_open() && !remote_layer()) {
    record.skip_conditions();  // nothing is stored or shared: the GPU's conditions are not read
    if (plugin_internal::is_plugin_policy(chosen)) record.prepare_trials();  // real trials offered: the gate
    plan p = chosen_plan(chosen, q, e, fam.blocks.empty(), need);
    say_graph_timed(record, p);
    return p;
  }
  // The cache file's key strings are built only when one is in use (a miss stays cheap without).
  const std::string policy_text = chosen.to_string();
  const stored_key sk =
      stored_key_for(dev, driver().version, e.kernel, decided_by_text(policy_text, r, q, need, fam),
                     smem_rule_text(r, key), bucket);
  std::optional<plan> stored = find_stored_plan(sk, true);
  // A plan another process tuned while this one waited for it (tuning_lease.hpp).
  if (!stored) stored = adopted_plan(sk);
  // A plan for another size bucket beats a guess when this launch may not be tuned (not rerunnable). A
  // built-in's own answer is no guess: its plan for another bucket would only be refused by the cross-check
  // below (with a warning, and this bucket's plan then never stored).
  if (!stored && bucket != 0 && !q.time_plan && !cross_checks_stored_plans(chosen))
    stored = find_stored_plan(sk, false);
  // One tuner per plan: a launch whose policy asks for a trial takes the key's lease first (at that first
  // trial: a policy that times nothing takes none); where another process holds it, no trial runs here and
  // this launch runs the static plan until that process publishes its tuned one.
  std::optional<tuning_lease> lease;
  struct gate_reset {
    tuning_record& r;
    ~gate_reset() { r.set_trial_gate(nullptr); }
  } reset_gate{record};
  if (!stored && q.time_plan && r.has_arguments && may_store) {
    record.set_trial_gate([&lease, &sk] {
      lease.emplace(tuning_lease::take(sk));
      // Holding it, the plan may have been published since this process last read the store: then no trial.
      return lease->what() == tuning_lease::turn::alone ||
             (lease->what() == tuning_lease::turn::tune && !lease->adopt_if_published());
    });
  }
  // A built-in policy is cheap and deterministic to ask: its answer checks the stored plan.
  std::optional<plan> computed;
  if (!stored || cross_checks_stored_plans(chosen)) {
    // A policy that may time trials: NVML is loaded (once per process) before its time budget starts, and for
    // a plugin's (autotune) the trials' stream gate is made then too. Only where trials can run.
    if (!stored && q.time_plan && r.has_arguments && !chosen.builtin()) {
      nvml::load_now();
      if (plugin_internal::is_plugin_policy(chosen)) record.prepare_trials();
    }
    computed = chosen_plan(chosen, q, e, fam.blocks.empty(), need);
    if (record.trials_refused() && lease) {
      if (lease->what() == tuning_lease::turn::wait) return while_tuned_elsewhere(*lease, *computed);
      // Published before this process took the lease: the plan is checked as a stored one (not against the
      // untimed choice, which a tuning policy's plan need not match).
      stored = adopted_plan(sk);
      if (stored) computed.reset();
    }
  }
  if (stored) {
    // The match level the reader found (never text from the file): this GPU or its model, this bucket or not.
    const std::string match = stored->match;
    std::string problem;
    bool differs_only = false;
    try {
      // A stored plan is validated against the driver's residency (the query's oracle may be the calculator,
      // and no policy's choice passed through driver_confirms() here).
      query checked = q;
      if (fam.blocks.empty() && e.function)
        checked.active_blocks = driver_oracle(e.function, q.device, q.kernel, true);
      problem = check_stored_plan(checked, *stored, need, computed ? &*computed : nullptr, &differs_only);
    } catch (const error& bad) {
      problem = bad.message();
    }
    if (problem.empty()) {
      stored->policy = policy_text;  // who decided is the key's policy, never the file's text
      stored->match = match;
      return *stored;
    }
    logger()->warn("{} entry for {} ignored ({}); computing a new plan",
                   plan_match::from_remote_store(match) ? "remote plan store" : "plan cache file",
                   display_name(e.kernel), escape_text(problem));
    if (!computed) computed = chosen_plan(chosen, q, e, fam.blocks.empty(), need);
    // A broken entry is replaced; a valid one that another process's view chose is not: processes that
    // disagree on it (another bytes-in-flight target, another version) would otherwise overwrite each other's
    // entry and make each other plan again, forever.
    if (differs_only) return *computed;
  }
  // A plan made inside a capture is the static one the capture forced: never stored as the policy's. Stored
  // and published by plan_with() once every later step accepted it (pending.commit()).
  if (may_store && !asked.load(std::memory_order_relaxed) && !record.trials_captured()) {
    pending.measured_ = measured(record, *computed);
    pending.key_ = sk;
    pending.plan_ = *computed;
  }
  if (lease) {
    pending.lease_.emplace(std::move(*lease));
    lease.reset();
  }
  return *computed;
}

}  // namespace planning

bool cross_checks_stored_plans(const policy& chosen) noexcept { return chosen.builtin(); }

bool same_launch(const plan& a, const plan& b) noexcept {
  return a.block == b.block && a.grid == b.grid && a.blocks_per_sm == b.blocks_per_sm &&
         a.shape_rule == b.shape_rule && a.dynamic_smem_bytes == b.dynamic_smem_bytes &&
         a.options == b.options &&
         a.sm_count == b.sm_count && a.full_grid == b.full_grid;
}

std::string check_stored_plan(const query& q, plan& stored, const launch_requirements& need,
                              const plan* computed, bool* differs_only) {
  if (stored.options.cooperative != need.cooperative) {
    return std::string("the stored plan is ") + (stored.options.cooperative ? "" : "not ") +
           "cooperative, the launch " + (need.cooperative ? "is" : "is not");
  }
  if (stored.options.cluster != need.cluster && !(stored.options.cluster.count() <= 1 && need.cluster.count() <= 1)) {
    return "the stored plan has cluster " + stored.options.cluster.to_string() + ", the launch " +
           (need.cluster.count() > 1 ? "requires " + need.cluster.to_string() : std::string("has none"));
  }
  if (stored.options.programmatic != need.programmatic) {
    return std::string("the stored plan is ") + (stored.options.programmatic ? "" : "not ") +
           "a programmatic dependent launch, the launch " + (need.programmatic ? "is" : "is not");
  }
  if (!computed) {
    // Tuning policies and plugins size 1-D blocks (shaped in rows of 32 for multi-dimensional work), or their
    // own 2-D block where the launch leaves the shape free, and grids from the work; a fixed grid or another
    // block shape from a file could leave most of the work undone.
    if (stored.grid.x != 0 || !launch_makes_block(q, stored.block)) {
      return "the stored plan has a fixed grid or a block shape this launch does not make (" +
             stored.to_string() + ")";
    }
  }
  stored.options = need;  // checked above where the launch sees them; the rest (SM budget, smem rule) is the key's
  const std::size_t stored_smem = stored.dynamic_smem_bytes;
  validate_plan(q, stored);  // throws: block, smem, grid or co-residency out of bounds
  if (stored.dynamic_smem_bytes != stored_smem) {
    return "the stored plan has " + std::to_string(stored_smem) +
           " B of dynamic smem where the launch's rule gives " + std::to_string(stored.dynamic_smem_bytes) +
           " B";
  }
  if (computed && !same_launch(stored, *computed)) {
    if (differs_only) *differs_only = true;
    return "the stored plan (" + stored.to_string() + ") is not what " + escape_text(computed->policy) +
           " chooses now (" + computed->to_string() + ")";
  }
  const bool remote = plan_match::from_remote_store(stored.match);
  stored.reason = (remote ? "stored in the remote plan store: " : "stored in the plan-cache file: ") +
                  escape_text(stored.reason);
  // Said as the store's, not as launchfit's own: a file or a peer may write any sentence there.
  if (!stored.warning.empty())
    stored.warning = (remote ? "the remote plan store says: " : "the plan-cache file says: ") + escape_text(stored.warning);
  return {};
}

}  // namespace launchfit::detail

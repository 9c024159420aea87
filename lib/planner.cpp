// SPDX-License-Identifier: MIT
// The miss path, as steps: resolve the kernel -> the policy that decides -> the query -> a stored or
// chosen plan -> what the launch requires -> the function's smem limit -> report. Each step is a function;
// build_entry() reads them top to bottom; the steps live in the files planner_steps.hpp names.

#include "planner.hpp"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>

#include "fault.hpp"
#include "graph_capture.hpp"
#include "log_internal.hpp"
#include "plan_match.hpp"
#include "planner_steps.hpp"
#include "policy_string.hpp"
#include "text.hpp"

namespace launchfit::detail {

namespace {

using planning::add_launch_notes;
using planning::add_warning;
using planning::allow_cluster_size;
using planning::check_cluster_size;
using planning::choose_member;
using planning::family_members;
using planning::make_query;
using planning::observe;
using planning::offer_tuning;
using planning::raise_smem_limit;
using planning::report;
using planning::resolve_kernel;
using planning::stored_or_chosen;
using planning::note_planned_without_work;
using planning::warn_if_planned_without_work;

// The launch's work as a plan's warning names it: "items(4096)", "items({640, 480})", "grid_stride(n)".
std::string work_text(const plan& p, const work& w) {
  return w.kind == work::shape::items ? items_text(w) : grid_rule_text(p, w);
}

void describe_device(const device_limits& dev, plan_entry& e) {
  e.device = &dev;  // limits_for()'s: never freed
  e.max_grid_x = dev.max_grid_dim[0] > 0 ? dev.max_grid_dim[0] : 2147483647;
}

// ---- step 2: the policy that decides ---------------------------------------------------------------------

// An operator's LAUNCHFIT_POLICY override wins over the code's. The kernel's name is demangled only where it
// is used: overrides match it, the log line shows it, a plugin or registered policy may read it.
std::shared_ptr<const policy> override_for(plan_entry& e, std::string& glob) {
  if (!policy_overrides_configured()) return nullptr;
  return policy_override_for(name_kernel(e.kernel), &glob);
}

// Steps 3-6 for the policy that decides: the query, tuning trials, a stored or chosen plan, the family
// member, the cluster size and the function's smem limit. `bucket`: the deciding policy's own size bucket.
void plan_with(const policy& chosen, std::uint64_t bucket, const launch_request& r, const plan_key& key,
               plan_entry& e, const device_limits& dev, const launch_requirements& need,
               const family_members& fam, bool may_tune) {
  query q = make_query(r, e, dev, need, fam, chosen);
  // What a tuning asked and measured. Shared with the query's trial callbacks where trials are offered (a
  // spec that may re-run its kernel); otherwise nothing outlives this call, and both stay on the stack (two
  // allocations fewer on most misses).
  std::shared_ptr<std::atomic<bool>> asked_shared;
  std::shared_ptr<tuning_record> record_shared;
  std::atomic<bool> asked_here{false};
  std::optional<tuning_record> record_here;
  if (may_tune && r.rerunnable) {
    asked_shared = std::make_shared<std::atomic<bool>>(false);
    record_shared = std::make_shared<tuning_record>(gpu_conditions_reader(dev));
    offer_tuning(q, r, e, need, fam, asked_shared, record_shared);
  } else {
    record_here.emplace(gpu_conditions_reader(dev));
  }
  std::atomic<bool>& asked = asked_shared ? *asked_shared : asked_here;
  tuning_record& record = record_shared ? *record_shared : *record_here;
  planning::plan_to_store pending;  // written and published once every step below accepted the plan
  e.plan = stored_or_chosen(r, key, bucket, chosen, q, need, e, dev, fam, may_tune, asked, record, pending);
  // A launch inside a stream capture whose policy asked for trials is planned again with them outside the
  // capture, and its launches inside captures are remembered for tune_graph(); so are those of a spec that
  // does not allow re-running under a policy that is not a built-in (reported, never tuned).
  e.tuning_deferred = record.trials_captured();
  e.untimed = !r.rerunnable && e.plan.match == plan_match::fallback;
  if (e.tuning_deferred ||
      (!r.node && !r.rerunnable && !chosen.builtin() && stream_capture(r.stream) == capture_state::active))
    e.captured.start();
  if (e.tuning_deferred && e.plan.reason.find(planning::capture_prevents_trials) == std::string::npos)
    e.plan.reason += "; " + std::string(planning::capture_prevents_trials);
  if (asked.load(std::memory_order_relaxed)) {
    // The plan contract: plan_for() answers only with what the launch will run, and this launch is tuned on
    // its first run (nothing stored for it yet). Nothing is cached: the first launch tunes.
    throw error(
        errc::not_planned_yet, "launchfit::plan_for",
        "policy " + escape_text(chosen.to_string()) +
            " times candidate plans on the first launch of this rerunnable spec, and no tuned plan is stored "
            "for it yet: launch it first (then plan_for() answers with the tuned plan), or compute "
            "block-dependent arguments with from_plan()",
        display_name(e.kernel));
  }
  if (e.plan.options != need) {  // every source's plan is given the launch's (apply_requirements, check_stored_plan)
    throw error(errc::internal, "launchfit::launch", "the plan's launch options differ from the launch's",
                display_name(e.kernel), e.plan.to_string());
  }
  choose_member(q, e, fam);
  add_launch_notes(e, r, q, dev, need);
  planning::smem_need smem;  // a refusal below gives the raised limit back
  raise_smem_limit(q, e, smem);
  // After the limit is raised: the driver counts no cluster of blocks asking more dynamic smem than the
  // function's current limit, and a check asked before would pass a cluster that cannot co-schedule.
  check_cluster_size(need, e);
  pending.commit();  // may throw (a store that cannot take the plan): the limit is then given back
  smem.keep();
}

// The steps, top to bottom. `decided_by` is an override's policy when building under its route (an override
// that cannot serve the launch gives way to the spec's own policy here); null: the spec's policy, or an
// override found now (then the entry only routes). A key with own_policy_bit is the spec's own plan where the
// override's plan cannot serve the launch's work (serve_work()); `refused` says which override and why.
plan_entry build_entry(const launch_request& r, const context_ref& ctx, const plan_key& key,
                       std::shared_ptr<const policy> decided_by, const std::string& glob, bool may_tune,
                       const std::string& refused) {
  // A policy, plugin or reset callback that launches its own kernel plans again inside this build: bounded.
  thread_local int depth = 0;
  struct nested {
    int& d;
    ~nested() { --d; }
  } nesting{++depth};
  if (depth > 4) {
    throw error(
        errc::invalid_policy, "launchfit::launch",
        "planning recursed more than 4 levels deep (a policy, plugin or reset callback that launches while "
        "it is planning)");
  }
  plan_entry e;
  e.key = key;
  family_members fam;
  resolve_kernel(r, e, fam);
  planning::read_program_smem_limits(e, fam);
  const device_limits& dev = limits_for(ctx);
  describe_device(dev, e);

  const bool own = (key.launch & own_policy_bit) != 0;
  e.override_glob = own ? std::string() : glob;
  // A plan launched verbatim (planned(p)) was made under the overrides already: none replaces it.
  if (!decided_by && !own && typeid(*r.policy) != typeid(planned_policy)) {  // final: its exact type
    std::shared_ptr<const policy> over = override_for(e, e.override_glob);
    if (over && over->hash() != r.policy_hash) {
      e.route = std::move(over);  // planned under the override's own key and size bucket: follow_route()
      e.route_hash = e.route->hash();
      return e;
    }
  }
  e.overriding = decided_by;
  if (!e.override_glob.empty() || !r.policy->builtin() || (decided_by && !decided_by->builtin()))
    name_kernel(e.kernel);

  launch_requirements need = requirements_of(r);
  require_pdl_support(need, e.kernel);
  for (const kernel_resources& member : fam.kernels) require_pdl_support(need, member);
  try {
    require_family_cluster(fam.kernels);  // the widest member's dims stand for every member's
    require_kernel_cluster(need, e.kernel);
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
  allow_cluster_size(need, e, fam);
  const policy* chosen = decided_by ? decided_by.get() : r.policy;
  std::string why_not;  // why the override cannot serve this launch
  if (decided_by) {
    const plan_entry before = e;  // a family's member, once chosen, replaces the kernel planned with
    try {
      plan_with(*decided_by, plan_bucket(decided_by->work_bucket(r.shape), r.shape, r.shape_rule), r, key, e,
                dev, need, fam, may_tune);
      refuse_rows_for_one_dimensional_work(r, e.plan, display_name(e.kernel));
    } catch (const error& bad) {
      if (!cannot_serve(bad)) throw;
      why_not = "the LAUNCHFIT_POLICY override " + quote_text(glob, 256, '\'') + " = " +
                escape_text(decided_by->to_string()) + " cannot serve this launch (" +
                escape_text(bad.message()) + ")";
      e = before;
    }
  } else if (own) {
    why_not = refused;
  }
  if (!why_not.empty() && chosen != r.policy) {
    // An operator's override never breaks a launch that works: the spec's own policy decides, and the plan's
    // line says which override did not and why, once (the spec's own error is thrown if it cannot serve
    // either).
    chosen = r.policy;
    plan_with(*chosen, r.bucket, r, key, e, dev, need, fam, may_tune);
  } else if (!decided_by) {
    plan_with(*chosen, r.bucket, r, key, e, dev, need, fam, may_tune);
  }
  if (!why_not.empty()) {
    add_warning(e.plan, why_not + "; the spec's own policy " + escape_text(chosen->to_string()) + " decides");
    e.override_refused = why_not;
  }
  if ((key.launch & shared_bucket_bit) != 0) {
    add_warning(e.plan, "the policy " + escape_text(chosen->to_string()) + " gave this kernel more than " +
                            std::to_string(max_buckets_per_family) +
                            " size buckets (a work_bucket() that answers a new value for nearly every size?): "
                            "this plan, made for " + work_text(e.plan, r.shape) +
                            ", is launched for each later new size, and those launches are not cached ones");
  }
  if (r.shape.kind == work::shape::none && chosen->depends_on_work()) {
    e.plan.without_work = true;
    note_planned_without_work();
  }
  warn_if_planned_without_work(r, key, *chosen, e.plan);
  report(e, dev, r, fam);
  observe(e, dev, r);
  return e;
}

// Builds under key once across threads; a request asked again from inside its own build is planned
// without tuning into `local`.
const plan_entry& plan_once(const launch_request& r, const context_ref& ctx, const plan_key& key,
                            const std::shared_ptr<const policy>& decided_by, const std::string& glob,
                            const std::string& refused, local_entry& local) {
  try {
    if (const plan_entry* e =
            find_or_build(key, [&] { return build_entry(r, ctx, key, decided_by, glob, true, refused); }))
      return *e;
    local.emplace(build_entry(r, ctx, key, decided_by, glob, false, refused));
    return *local;
  } catch (const error& e) {
    throw with_fault_note(e);
  }
}

// A new plan's key within its family's bound of size buckets (plan_cache.hpp): `key` itself, or the key the
// family's later sizes share.
plan_key bounded_key(const plan_key& key) {
  // A family's shared key itself (an override's key made from it holds the bit too, with a bucket of its own).
  if (((key.launch & shared_bucket_bit) != 0 && key.bucket == 0) || bucket_admitted(key)) return key;
  plan_key shared = key;
  shared.bucket = 0;
  shared.launch |= shared_bucket_bit;
  return shared;
}

// The spec's own plan where an override's plan cannot serve the launch's work (`why`), under the spec's own
// key
// (`base`) with own_policy_bit: made once, with one warning naming the kernel, the override and why.
const plan_entry& own_policy_entry(const launch_request& r, const context_ref& ctx, plan_key base,
                                   const std::string& why, local_entry& local) {
  base.launch |= own_policy_bit;
  if (const plan_entry* hit = find(base)) return *hit;
  base = bounded_key(base);
  if (const plan_entry* hit = find(base)) return *hit;
  const std::string refused = why;  // `why` may live in `local`, rebuilt below
  return plan_once(r, ctx, base, nullptr, {}, refused, local);
}


}  // namespace

// ---- the miss path ---------------------------------------------------------------------------------------

const plan_entry& plan_miss(const launch_request& r, const context_ref& ctx, const plan_key& key,
                            local_entry& local) {
  note_context(ctx);
  const plan_key k = bounded_key(key);
  if (k == key) return plan_once(r, ctx, k, nullptr, {}, {}, local);
  const plan_entry* shared = find(k);
  if (!shared) shared = &plan_once(r, ctx, k, nullptr, {}, {}, local);
  // The shared plan was made for another size: a fixed grid of it that leaves this launch's items undone is
  // never launched for them (this launch is planned for itself, uncached).
  if (shared->route || override_work_refusal(shared->plan, r.shape, shared->max_grid_x).empty()) return *shared;
  local.reset();
  local.emplace(build_entry(r, ctx, key, nullptr, {}, false, {}));
  return *local;
}

plan_key override_key(const plan_key& base, std::uint64_t override_hash,
                      std::uint64_t override_bucket) noexcept {
  plan_key key = base;
  key.policy = hash_combine(override_hash, base.policy);
  key.bucket = hash_combine(override_bucket, base.bucket);
  key.launch |= overridden_bit;
  return key;
}

const plan_entry& follow_route(const launch_request& r, const context_ref& ctx, const plan_entry& route,
                               local_entry& local) {
  plan_key key = override_key(route.key, route.route_hash,
                              plan_bucket(route.route->work_bucket(r.shape), r.shape, r.shape_rule));
  if (const plan_entry* hit = find(key)) return *hit;
  key = bounded_key(key);
  if (const plan_entry* hit = find(key)) return *hit;
  const std::shared_ptr<const policy> decided_by = route.route;  // `route` may be `local`, rebuilt below
  const std::string glob = route.override_glob;
  return plan_once(r, ctx, key, decided_by, glob, {}, local);
}

std::string override_work_refusal(const plan& p, const work& w, long long max_grid_x) {
  try {
    const dims g = grid_for(p, w, max_grid_x);
    if (p.grid.x == 0 || w.kind != work::shape::items || g.count() == 0) return {};
    // A fixed grid for items(n): one thread per item, so a grid smaller than the work's leaves items undone.
    plan from_work = p;
    from_work.grid = dims{0, 1, 1};
    const dims needed = grid_for(from_work, w, max_grid_x);
    if (g.x >= needed.x && g.y >= needed.y && g.z >= needed.z) return {};
    return "its fixed grid " + g.to_string() + " is smaller than the grid of " + needed.to_string() +
           " blocks that " + items_text(w) + " needs in blocks of " + p.block.to_string() +
           ": items would be left undone";
  } catch (const error& e) {
    if (!cannot_serve(e)) throw;
    return e.message();
  }
}

const plan_entry& serve_work(const launch_request& r, const context_ref& ctx, const plan_entry& e,
                             local_entry& local) {
  if (!e.overriding || !e.override_refused.empty()) return e;  // the override did not decide this plan
  const std::string refused = override_work_refusal(e.plan, r.shape, e.max_grid_x);
  if (refused.empty()) return e;
  const std::string why = "the LAUNCHFIT_POLICY override " + quote_text(e.override_glob, 256, '\'') + " = " +
                          escape_text(e.overriding->to_string()) + " cannot serve " +
                          work_text(e.plan, r.shape) +
                          " (" + escape_text(refused) + ")";
  plan_key base = base_key(r, ctx);
  base.smem_rule = e.key.smem_rule;  // as replan_for_smem_rule() keyed the override's plan, if it did
  const plan_entry* own = &own_policy_entry(r, ctx, base, why, local);
  if (r.smem_fn && (*r.smem_fn)(own->plan.block_threads) != own->plan.dynamic_smem_bytes)
    own = &replan_for_smem_rule(r, ctx, *own, local);
  return *own;
}

const plan_entry& replan_for_smem_rule(const launch_request& r, const context_ref& ctx,
                                       const plan_entry& stale, local_entry& local) {
  const std::shared_ptr<const policy> decided_by = stale.overriding;
  const std::string glob = stale.override_glob;
  const std::string refused =
      (stale.key.launch & own_policy_bit) != 0 ? stale.override_refused : std::string();
  plan_key key = stale.key;
  int block = stale.plan.block_threads;
  // Keyed by the rule's answer at the block the previous plan chose; a few steps settle any set of rules that
  // differ by captured values. A rule that answers differently on every call never settles: planned per
  // launch.
  constexpr int max_steps = 4;
  for (int step = 0; step < max_steps; ++step) {
    key.smem_rule = hash_combine(key.smem_rule, (*r.smem_fn)(block) + 1);
    const plan_entry* e = find(key);
    if (!e) e = &plan_once(r, ctx, key, decided_by, glob, refused, local);
    if (e->route) e = &follow_route(r, ctx, *e, local);  // overrides changed meanwhile
    if ((*r.smem_fn)(e->plan.block_threads) == e->plan.dynamic_smem_bytes) return *e;
    if (local.has_value() && e == &*local) break;  // planned for this call only, and the rule moved again
    block = e->plan.block_threads;
  }
  try {
    local.emplace(build_entry(r, ctx, key, decided_by, glob, false, refused));
  } catch (const error& e) {
    throw with_fault_note(e);
  }
  const std::size_t again = (*r.smem_fn)(local->plan.block_threads);
  if (again != local->plan.dynamic_smem_bytes) {
    throw error(errc::invalid_plan, "smem_per_block",
                "the smem_per_block rule gave " + std::to_string(local->plan.dynamic_smem_bytes) +
                    " B and then " + std::to_string(again) + " B for a block of " +
                    std::to_string(local->plan.block_threads) +
                    " threads: a rule must give the same bytes for the same block",
                display_name(local->kernel), local->plan.to_string());
  }
  return *local;
}

// ---- pure steps ------------------------------------------------------------------------------------------

bool cannot_serve(const error& e) noexcept {
  if (e.is_sticky()) return false;
  switch (e.code()) {
    case errc::invalid_policy:
    case errc::bad_policy_parameter:
    case errc::invalid_plan:
    case errc::cooperative_too_large:
    case errc::cluster:
    case errc::plugin:
    case errc::not_planned_yet:
    case errc::invalid_query:
    case errc::invalid_config:
    case errc::invalid_argument:
      return true;
    default:
      return false;
  }
}

}  // namespace launchfit::detail

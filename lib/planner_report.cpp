// SPDX-License-Identifier: MIT
// Steps 7 and 8 of the miss path: what is said about a new plan. Its warnings (added while it is made, logged
// once with it), its log line, the NVTX range name and the plan listeners.

#include <atomic>
#include <string>

#include "log_internal.hpp"
#include "observe_internal.hpp"
#include "plan_cache.hpp"
#include "planner_steps.hpp"
#include "ptx_scan.hpp"
#include "text.hpp"

namespace launchfit::detail::planning {

namespace {

// Whether this process made a plan without work: set before that plan's entry is published, never cleared (a
// plan of a cleared cache may be made again).
std::atomic<bool> planned_without_work{false};

// The override glob that decided the plan, for its report: none where the override could not serve the
// launch.
std::string decided_by_glob(const plan_entry& e) {
  return e.override_refused.empty() ? e.override_glob : std::string();
}

}  // namespace

void note_planned_without_work() noexcept { planned_without_work.store(true, std::memory_order_release); }

void add_warning(plan& p, const std::string& sentence) {
  if (!p.warning.empty()) p.warning += "; ";
  p.warning += sentence;
}

void add_launch_notes(plan_entry& e, const launch_request& r, const query& q, const device_limits& dev,
                      const launch_requirements& need) {
  if (need.programmatic && kernel_waits(r.kernel_id) == false) {
    // Logged once, with the plan: the kernel may be meant to overlap without reading its predecessor's
    // output.
    add_warning(
        e.plan,
        "launched with .pdl() but its PTX never executes griddepcontrol.wait "
        "(cudaGridDependencySynchronize): "
        "it starts before the previous kernel in the stream ends and nothing makes it wait for that kernel's "
        "output");
  }
  if (q.device.sm_count < dev.sm_count)
    e.plan.reason += "; sized for an SM budget of " + std::to_string(q.device.sm_count) + " of " +
                     std::to_string(dev.sm_count) + " SMs";
  if (e.plan.resident_clusters > 0)
    e.plan.reason += "; " + std::to_string(e.plan.resident_clusters) + " clusters of " +
                     std::to_string(e.plan.options.cluster.count()) + " co-reside";
}

// The plan made for this spec without work, where one is cached under `key`'s kernel, policy and launch: a
// launch of 1-D work whose plan has another block is told so once, since "plan without the work, compute
// block-dependent arguments, launch with the work" then hands the kernel arguments made for another block.
// (Under an override, whose keys hold both policies, nothing is said.)
void warn_if_planned_without_work(const launch_request& r, const plan_key& key, const policy& chosen,
                                  plan& p) {
  if (r.shape.kind != work::shape::items && r.shape.kind != work::shape::grid_stride) return;
  // Until a plan is made without work (most programs never make one) there is nothing to look up.
  if (!planned_without_work.load(std::memory_order_acquire)) return;
  if ((key.launch & (overridden_bit | own_policy_bit)) != 0) return;
  if (r.shape.rank > 1 || !chosen.depends_on_work()) return;
  plan_key none = key;
  none.bucket = plan_bucket(chosen.work_bucket(work{}), work{}, r.shape_rule);
  none.shape = shape_bits(r, work{});
  if (none.bucket == key.bucket && none.shape == key.shape) return;
  const plan_entry* planned = find(none);
  if (!planned || planned->route || !planned->plan.without_work || planned->plan.block == p.block) return;
  add_warning(
      p, "this launch of " + grid_rule_text(p, r.shape) + " runs block " + p.block.to_string() +
             ", and the same spec without work was planned with block " + planned->plan.block.to_string() +
             " (" + escape_text(chosen.to_string()) +
             " chooses the block by the work): arguments computed from that plan do not fit this launch. "
             "Give plan_for() the launch's work, or launch that plan with planned(p)");
}

// ---- step 7: report --------------------------------------------------------------------------------------

// Only when something will be logged (info, or a warning). The report points at the plan as callers keep it
// (the entry's kept plan, made here rather than when the entry is cached: the last step that changes the
// plan is done) and at the device's limits: the launching thread copies neither.
void report(plan_entry& e, const device_limits& dev, const launch_request& r, const family_members& fam) {
  const spdlog::logger& l = logger_fast();
  const bool warns = !e.plan.warning.empty() || e.kernel.local_bytes_per_thread > 0;
  if (!l.should_log(spdlog::level::info) && !(warns && l.should_log(spdlog::level::warn))) return;
  // Else the new plan's line demangles the name where it is made. NVTX and the plan listeners name the kernel
  // in the next step: named here, the kept plan is the one the cache would keep after that step.
  if (warns || nvtx_on() || listeners_active()) name_kernel(e.kernel);
  e.kept = &keep_plan(e.plan, e.kernel);
  log_new_plan(plan_report{e.kept, &dev, r.shape, decided_by_glob(e), static_cast<int>(fam.blocks.size())});
}

// ---- step 8: listeners and NVTX ---------------------------------------------------------------------------

void observe(plan_entry& e, const device_limits& dev, const launch_request& r) {
  if (nvtx_on()) e.nvtx = nvtx_name_for(name_kernel(e.kernel), e.plan, grid_rule_text(e.plan, r.shape));
  if (!listeners_active()) return;
  plan_event ev;
  ev.what = e.plan.trials > 0 ? plan_event::kind::tuned : plan_event::kind::new_plan;
  ev.kernel = name_kernel(e.kernel);
  ev.device = dev.name;
  ev.device_uuid = dev.uuid;
  ev.device_ordinal = dev.ordinal;
  ev.plan = &e.plan;
  ev.first_work = r.shape;
  ev.override_glob = decided_by_glob(e);
  notify_plan(ev);
}

}  // namespace launchfit::detail::planning

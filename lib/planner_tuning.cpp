// SPDX-License-Identifier: MIT
// Step 4 of the miss path: the query's time_plan, which runs tuning trials of the kernel (lib/tuning.cpp
// times one) for a re-runnable spec with real arguments.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "driver.hpp"
#include "graph_capture.hpp"
#include "planner_steps.hpp"
#include "tuning.hpp"

namespace launchfit::detail::planning {

// Trials re-run the kernel: only when the spec allows it, with real arguments, outside a stream capture.
// Every trial launches as the launch requires (a grid.sync() kernel is never timed non-cooperatively).
// plan_for() has no arguments to time with: a policy that asks for a trial there is told no and `asked` is
// set, so the caller refuses instead of answering with a plan the first launch would not run.
void offer_tuning(query& q, const launch_request& r, const plan_entry& e, const launch_requirements& need,
                  const family_members& fam, const std::shared_ptr<std::atomic<bool>>& asked,
                  const std::shared_ptr<tuning_record>& record) {
  if (!r.rerunnable) return;  // plan_with() calls it only for a rerunnable spec: kept for any other caller
  // Any doubt (no entry point, an error such as the legacy stream while another stream captures, a capture
  // invalidated) is a no.
  const capture_state capturing = stream_capture(r.stream);
  if (capturing != capture_state::none) {
    // A capture records the kernel, it runs nothing: a policy that asks for a trial is answered "cannot run",
    // its static plan is launched inside the capture (or made a node: add_kernel_node() on a stream being
    // captured) and never stored, and the launch is tuned later (tune_graph() on the instantiated graph, or
    // the first launch outside a capture). A capture the driver invalidated, or a state it could not tell
    // (the legacy stream while another stream captures), is no better: the plan is deferred the same way,
    // never kept as if its policy had declined.
    q.no_trials = std::string(capture_prevents_trials);
    q.time_plan = [record](const plan&) {
      record->refuse_captured();
      return -1.0;
    };
    return;
  }
  // Trials launch what they are validated for: the driver answers their residency (a trial costs far more
  // than its calls), not the calculator.
  if (fam.blocks.empty() && e.function) q.active_blocks = driver_oracle(e.function, q.device, q.kernel, true);
  if (!r.has_arguments) {
    q.time_plan = [asked](const plan&) -> double {
      asked->store(true, std::memory_order_relaxed);
      throw error(errc::not_planned_yet, "time_plan",
                  "plan_for() has no kernel arguments to time a trial with");
    };
    return;
  }
  // One stream gate per tuning (a pinned word and a watchdog thread), made before the policy is asked
  // (tuning_record::prepare_trials(): outside its time budget) or else by the first trial. The trials share
  // the launch's stream: a plugin that times from several threads is served one trial at a time.
  // What the trials spend on launchfit's own one-off work (the lease, the GPU's conditions, the gate) is
  // counted apart, for the policy's budget (query::setup_ms): nanoseconds, read from any thread.
  struct tuning {
    std::mutex m;
    std::optional<stream_gate> gate;
    trial_mode mode{graph_trials::active()};  // graph replays where tune_graph() offers this tuning
    std::atomic<std::int64_t> setup_ns{0};
    void count_setup(std::chrono::steady_clock::time_point since) {
      setup_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                              since)
                             .count(),
                         std::memory_order_relaxed);
    }
  };
  const auto t = std::make_shared<tuning>();
  record->set_trial_setup([t] {
    std::lock_guard<std::mutex> lock(t->m);
    if (!t->gate) t->gate.emplace();
  });
  q.setup_ms = [t] { return static_cast<double>(t->setup_ns.load(std::memory_order_relaxed)) / 1e6; };
  q.time_plan = [f = e.function, &r, max_grid_x = e.max_grid_x, need, q_for_checks = q, fam, t,
                 record](const plan& candidate) {
    plan p = candidate;
    apply_requirements(q_for_checks, p, need);  // throws: this candidate cannot run as required
    CUfunction run = f;
    kernel_resources k = q_for_checks.kernel;
    if (!fam.blocks.empty()) {  // a family: the member written for this block
      const int i = fam.index_of(p.block_threads);
      if (i < 0)
        throw error(errc::invalid_plan, "time_plan", "no family member for this block", {}, p.to_string());
      run = fam.functions[static_cast<std::size_t>(i)];
      k = fam.kernels[static_cast<std::size_t>(i)];
    }
    raise_function_smem_limit(run, p.dynamic_smem_bytes, k, p);  // as its real launch would
    // One tuner per plan: the first trial takes the key's lease (tuning_lease.hpp); where another process
    // holds it no candidate runs here, the policy declines, and the launch runs the static plan.
    // Counted by the call that does it (another thread of a plugin that times from several threads waits for
    // the lease inside allow_trial(): that wait overlaps it and is not counted again).
    auto since = std::chrono::steady_clock::now();
    bool asked = false;
    const bool allowed = record->allow_trial(&asked);
    if (asked) t->count_setup(since);
    if (!allowed) return -1.0;
    since = std::chrono::steady_clock::now();
    if (record->before_trial()) t->count_setup(since);  // the GPU's conditions, before the first trial only
    std::lock_guard<std::mutex> lock(t->m);  // another thread's trial is no setup: counted after the wait
    if (!t->gate) {
      since = std::chrono::steady_clock::now();
      t->gate.emplace();
      t->count_setup(since);
    }
    if (r.bind) r.bind(r.bind_self, p);  // from_plan() arguments for this candidate
    sample_wait wait;
    const double ms = time_candidate(run, r, p, max_grid_x, *t->gate, &wait, &t->mode);
    record->add(p, ms);
    record->add_wait(wait.gpu_ms, wait.excess_ms, wait.samples, wait.as_graph);
    return ms;
  };
}

}  // namespace launchfit::detail::planning

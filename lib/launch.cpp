// SPDX-License-Identifier: MIT
// The hit path: the context's identity, a thread-local plan lookup, the entry's ready launch configuration,
// integer grid arithmetic and one cuLaunchKernelEx; launch_in_full() for what a ready entry does not say (an
// smem rule checked by value, routes, captures, NVTX, trace lines). Planning, tuning and reporting are the miss
// path in planner.cpp.

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "device_query.hpp"
#include "driver.hpp"
#include "fault.hpp"
#include "graph_capture.hpp"
#include "hot_words.hpp"
#include "kernel_arguments.hpp"
#include "launch_config.hpp"
#include "launchfit/launch.hpp"
#include "log_internal.hpp"
#include "observe_internal.hpp"
#include "plan_cache.hpp"
#include "plan_match.hpp"
#include "planner.hpp"
#include "plugin_loader.hpp"
#include "policy_string.hpp"
#include "remote_store.hpp"
#include "text.hpp"
#include "tuning_lease.hpp"

namespace launchfit::detail {

hot_words hot;

namespace {

// What the hit path read and found before it handed a launch over to the full path: the calling thread's current
// context's identity (ctx.id 0 where not read; ctx.handle is never read there, one driver call fewer per launch)
// and, where `looked`, the entry its key found in the cache (null: missed), so that the full path neither asks the
// driver nor looks the key up again where that entry launches as it is. Valid while the caller's plan_reader is
// held.
struct looked_up {
  context_ref ctx;
  plan_key key;
  const plan_entry* entry = nullptr;
  bool looked = false;
};

// Inputs read from the environment at first use (LAUNCHFIT_PLUGINS, LAUNCHFIT_POLICY, LAUNCHFIT_CACHE,
// LAUNCHFIT_REMOTE) are loaded before the first plan key is made: loading one may register policies, and a
// generation bumped inside the first miss would make the next launch plan (and tune) again.
void load_environment_inputs() {
  if (hot.environment_loaded.load(std::memory_order_acquire)) return;
  load_env_plugins();
  (void)policy_overrides_configured();  // a bad LAUNCHFIT_POLICY throws here, as the miss would
  (void)cache_file_open();
  (void)remote_layer();
  hot.environment_loaded.store(true, std::memory_order_release);
}

// The readable name of a request's kernel (a family's first member), for a refusal made before it is planned:
// function_name()'s, "kernel@<handle>" where the driver cannot tell it; empty where the kernel cannot be resolved
// (the refusal stands without it).
std::string kernel_name_of(const launch_request& r) noexcept {
  try {
    const void* stub = r.family && r.family_size > 0 ? r.family[0].stub : r.stub;
    const CUfunction f = r.resolve ? r.resolve(stub) : r.driver_kernel ? r.driver_kernel->function() : nullptr;
    if (f) return demangle(function_name(driver(), f));
  } catch (...) {  // the kernel is what cannot be had: the refusal stands
  }
  return {};
}

// The entry this request launches with. `local` holds a plan made for this call only (a request asked
// again from inside its own planning, or an smem rule that never settles).
// `known`: what the hit path read and found before handing the launch over, else null.
const plan_entry& entry_or_miss(const launch_request& r, local_entry& local, const looked_up* known = nullptr) {
  if (!r.policy) throw error(errc::invalid_policy, "launchfit::launch", "no policy");
  if (r.kernel_id == 0 || (r.driver_kernel && !r.driver_kernel->valid())) {
    throw error(CUDA_ERROR_INVALID_HANDLE, "launchfit::launch", "null or empty kernel");
  }
  const dims& cluster = r.options.cluster;
  if ((cluster.x | cluster.y | cluster.z) > 0xffffu) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "launchfit::launch",
                "cluster " + cluster.to_string() + " has a dimension above 65535", kernel_name_of(r));
  }
  if (cluster.x == 0 || cluster.y == 0 || cluster.z == 0) {  // never "no cluster": the kernel may use one
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "launchfit::launch",
                "cluster " + cluster.to_string() + " has a dimension of 0 (1x1x1 is no cluster)", kernel_name_of(r));
  }
  load_environment_inputs();
  context_ref ctx = known && known->ctx.id != 0 ? known->ctx : current_context(r);
  const plan_key key = base_key(r, ctx);
  // The hit path's lookup of this very key (the inputs' generation may have moved since: then look again).
  const bool looked = known && known->looked && known->key == key;
  const plan_entry* e = looked ? known->entry : find(key);
  // A miss needs the context's handle too (plan_miss() notes it: a handle seen with a new identity drops the old
  // context's plans); routes, overrides and smem rules key by the identity alone. The hit path read the identity
  // only: the handle is asked now, on the same thread (nothing since made another context current here). Where
  // no context is current any more, the one resolving the kernel makes current is planned for, under its key.
  if (!ctx.handle && !e) {
    const context_ref full = current_context(r, ctx.id);
    if (full.id != ctx.id) return entry_or_miss(r, local);
    ctx = full;
  }
  if (!e) e = &plan_miss(r, ctx, key, local);
  if (e->route) e = &follow_route(r, ctx, *e, local);
  // A kernel never receives dynamic smem other than rule(block): the key tells rules apart by type only.
  if (r.smem_fn && (*r.smem_fn)(e->plan.block_threads) != e->plan.dynamic_smem_bytes)
    e = &replan_for_smem_rule(r, ctx, *e, local);
  if (e->overriding) e = &serve_work(r, ctx, *e, local);  // an override never breaks a launch that works
  return *e;
}

// A driver-API kernel's arguments against the sizes of its parameters, where the driver reports them (checked
// when planned too, before a tuning's trials run the kernel with them).
template <class R>
void check_arguments(const R& r, const plan_entry& e) {
  if (!r.arg_sizes || !e.param_sizes) return;
  if (__builtin_expect(!arguments_match(r.arg_sizes, r.arg_count, *e.param_sizes), 0))
    refuse_arguments(r.arg_sizes, r.arg_count, *e.param_sizes, display_name(e.kernel), e.plan.to_string());
}

}  // namespace

namespace {
// entry_for(), with what the hit path found (`known`, else null).
const plan_entry& entry_for(const launch_request& r, local_entry& local, const looked_up* known) {
  const plan_entry& e = entry_or_miss(r, local, known);
  // A plan a stream capture kept from its trials: the first launch that may time them outside a capture
  // plans again (once: the new entry is the tuned plan, or a stored one). A fallback made for a launch that
  // may not re-run: the first rerunnable launch plans again (and tunes, or keeps its trials for tune_graph()
  // inside a capture).
  if (!(e.tuning_deferred || e.untimed) || !r.rerunnable || !r.has_arguments) return e;
  if (!e.untimed && stream_capture(r.stream) != capture_state::none) return e;
  (void)forget_entry(e.key, &e);  // false: another thread planned it again first
  local.reset();
  return entry_or_miss(r, local);
}
}  // namespace

const plan_entry& entry_for(const launch_request& r, local_entry& local) { return entry_for(r, local, nullptr); }

const plan& plan_for(const launch_request& r) {
  local_entry local;
  const plan_reader reading;  // no entry is freed while this call uses it
  const plan_entry& e = entry_for(r, local);
  // The plan contract: a static plan launched while another process tunes the key is not what launches will
  // run once its tuned plan is adopted (tuning_lease.hpp).
  if (e.untimed && r.rerunnable) {
    throw error(errc::not_planned_yet, "launchfit::plan_for",
                "this plan is its policy's fallback, made for a launch that may not re-run the kernel: the first "
                "launch of this rerunnable spec plans again and may tune, then plan_for() answers with its plan",
                display_name(e.kernel));
  }
  if (e.tuning_deferred) {
    throw error(errc::not_planned_yet, "launchfit::plan_for",
                "this plan was made inside a stream capture, which kept its policy from timing candidates: the "
                "first launch outside a capture (or tune_graph() on the graph) tunes it, then plan_for() "
                "answers with the tuned plan",
                display_name(e.kernel));
  }
  if (e.plan.match == plan_match::waiting) {
    throw error(errc::not_planned_yet, "launchfit::plan_for",
                "another process of the fleet is tuning this plan, and its tuned plan is not published yet: "
                "launches run the static plan until it is (then plan_for() answers with the tuned plan)",
                display_name(e.kernel));
  }
  return kept_of(e).plan;
}

namespace {

// Every launch that does not hit a ready entry, and every launch that needs more than a configuration and
// a grid: planning, routes, overrides, smem rules, plans made inside a capture, arguments from the plan,
// graph nodes, NVTX ranges and trace lines.
// `known`: as entry_or_miss()'s.
__attribute__((noinline)) launched launch_in_full(const launch_request& r, const looked_up* known = nullptr) {
  const plan_reader reading;  // no entry is freed while this launch uses it
  local_entry local;
  const plan_entry& e = entry_for(r, local, known);
  check_arguments(r, e);
  const kept_plan& kept = kept_of(e);
  const plan& p = kept.plan;
  dims grid;
  try {
    grid = grid_for(e.plan, r.shape, e.max_grid_x);
  } catch (const error& err) {
    throw err.with_kernel(display_name(e.kernel), e.plan.to_string());
  }
  launched done{grid, e.plan.block, e.plan.dynamic_smem_bytes, &p};
  if (grid.count() == 0) return done;  // items(0) / grid_stride(0): nothing to do
  if (r.bind) r.bind(r.bind_self, e.plan);  // from_plan() arguments, for the plan launched
  CUlaunchConfig cfg;
  launch_attributes attrs;
  fill_launch_config(cfg, attrs, e.plan, grid, r.stream);
  spdlog::logger& lf_logger = logger_fast();
  if (lf_logger.should_log(spdlog::level::trace)) {
    lf_logger.trace("launch {} grid={} {}", display_name(e.kernel), grid.to_string(), e.plan.to_string());
  }
  if (r.node) {  // add_kernel_node(): a node of this plan instead of a launch
    add_planned_node(cfg, e.function, r.args, *r.node, e);
    if (e.tuning_deferred) note_planned_node(r, e, kept, grid);
    return done;
  }
  const void* mark = e.nvtx && nvtx_on() ? e.nvtx : nullptr;  // null: NVTX was off when this plan was made
  if (mark) nvtx_push(mark, grid.count());
  const CUresult st = driver().cuLaunchKernelEx(&cfg, e.function, r.args, nullptr);
  if (mark) nvtx_pop();
  if (st != CUDA_SUCCESS) throw_launch_error(st, e, grid);
  // A capture's node, for tune_graph(), while the plan's capture watch lasts. A plan whose trials a capture
  // kept is watched until it is tuned: launches of it that may not re-run (of the same key, outside captures)
  // do not end the watch, or a later capture of a rerunnable launch of it would be neither remembered nor
  // reported.
  if (e.captured.on()) e.captured.saw(note_captured_launch(r, e, kept, grid) || e.tuning_deferred);
  note_launched(kept);
  return done;
}

// What a request or a probe says beyond the key, or a cluster the key cannot hold: the full path.
bool hands_over(const launch_request& r) noexcept {
  return r.node || r.bind || r.smem_fn || !r.policy || !keyable_cluster(r.options.cluster);
}
bool hands_over(const launch_probe& p) noexcept { return p.in_full; }
bool rerunnable(const launch_request& r) noexcept { return r.rerunnable; }
bool rerunnable(const launch_probe& p) noexcept { return p.rerunnable; }
// The work as the grid rule sees it (with the options' waves cap).
const work& work_of(const launch_request& r, work&) noexcept { return r.shape; }
const work& work_of(const launch_probe& p, work& copy) noexcept {
  copy = *p.shape;
  copy.waves = p.waves;
  return copy;
}
const work& given_work(const launch_request& r) noexcept { return r.shape; }
const work& given_work(const launch_probe& p) noexcept { return *p.shape; }

// The probe's whole request: the spec's, with the probe's kernel and arguments.
launch_request request_of(const launch_probe& p) {
  launch_request r = p.make(p.spec, p.policy_hash, p.bucket);
  r.kernel_id = p.kernel_id;
  r.stub = p.stub;
  r.resolve = p.resolve;
  r.driver_kernel = p.driver_kernel;
  r.args = p.args;
  r.arg_sizes = p.arg_sizes;
  r.arg_count = p.arg_count;
  r.has_arguments = true;
  return r;
}
const launch_request& request_of(const launch_request& r) noexcept { return r; }

// launch_in_full() for a request or a probe: out of the hit path's way (a probe's request is made here).
// `context_id`: the current context's identity where the hit path read it (0 where not); `key` and `entry`: the
// key it looked up and the entry found (null: missed), where it looked.
std::atomic<std::uint64_t> handed_over{0};

template <class R>
__attribute__((noinline)) launched hand_over(const R& r, std::uint64_t context_id, const plan_key* key,
                                             const plan_entry* entry) {
  handed_over.fetch_add(1, std::memory_order_relaxed);
  looked_up seen;
  seen.ctx.id = context_id;
  if (key) {
    seen.key = *key;
    seen.entry = entry;
    seen.looked = true;
  }
  return launch_in_full(request_of(r), &seen);
}

// The hit path: the context's identity, the thread's front, the entry's ready configuration and one
// cuLaunchKernelEx. What it does not do itself it leaves whole to launch_in_full(), before anything is
// launched: an entry not published ready, routed, overridden, waiting for trials, watched for captures or with
// NVTX ranges, a rerunnable launch of a fallback plan, a request with something to compute from the plan, trace
// logging.
template <class R>
launched launch_hit_or_full(const R& r) {
  const plan_reader reading;  // no entry is freed while this launch uses it
  if (__builtin_expect(hands_over(r) || r.kernel_id == 0 || (r.driver_kernel && !r.driver_kernel->valid()) ||
                           !hot.environment_loaded.load(std::memory_order_acquire),
                       0))
    return hand_over(r, 0, nullptr, nullptr);
  const driver_api* d = loaded_driver();
  std::uint64_t context_id = 0;
  if (__builtin_expect(!d || !current_context_id_if_set(*d, context_id), 0)) return hand_over(r, 0, nullptr, nullptr);
  const plan_key key = base_key(r, context_ref{nullptr, context_id});
  const plan_entry* found = find(key);
  if (__builtin_expect(!found || !found->ready || found->captured.on() || (found->untimed && rerunnable(r)) ||
                           logger_fast().should_log(spdlog::level::trace),
                       0))
    return hand_over(r, context_id, &key, found);
  const plan_entry& e = *found;
  check_arguments(r, e);
  const work& w = given_work(r);
  dims grid;
  if (e.items_by_shift && w.kind == work::shape::items && w.rank <= 1 && w.per_thread <= 1 && w.n != 0 &&
      w.ny != 0 && w.nz != 0 && (w.n >> e.items_shift) < static_cast<std::uint64_t>(e.max_grid_x)) {
    const std::uint64_t mask = (std::uint64_t{1} << e.items_shift) - 1;
    grid = dims{static_cast<unsigned>((w.n >> e.items_shift) + ((w.n & mask) != 0)), 1, 1};
  } else {
    try {
      work copy;
      grid = grid_for(e.plan, work_of(r, copy), e.max_grid_x);
    } catch (const error& err) {
      throw err.with_kernel(display_name(e.kernel), e.plan.to_string());
    }
  }
  const kept_plan& kept = *e.kept;
  CUlaunchConfig cfg = e.ready_config;  // its attributes, where it has any, are the kept plan's
  launched done{grid, dims{cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ}, cfg.sharedMemBytes, &kept.plan};
  if (grid.count() == 0) return done;  // items(0) / grid_stride(0): nothing to do
  cfg.gridDimX = grid.x;
  cfg.gridDimY = grid.y;
  cfg.gridDimZ = grid.z;
  cfg.hStream = r.stream;
  const CUresult st = d->cuLaunchKernelEx(&cfg, e.function, r.args, nullptr);
  if (st != CUDA_SUCCESS) throw_launch_error(st, e, grid);
  note_launched(kept);
  return done;
}

}  // namespace


std::uint64_t handed_over_launches() noexcept { return handed_over.load(std::memory_order_relaxed); }

launched launch(const launch_request& r) { return launch_hit_or_full(r); }

launched launch(const launch_probe& p) { return launch_hit_or_full(p); }

}  // namespace launchfit::detail

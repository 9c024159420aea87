// SPDX-License-Identifier: MIT
#pragma once
// The in-memory plan cache. Hit path: a thread-local direct-mapped front (no lock, no CUDA call) validated
// by a global generation; misses go to a shared_mutex map whose per-key slots make concurrent first
// launches of one key compute exactly one plan.
//
// Entries are freed once no thread can reach them. An entry leaves the map when the plan inputs change
// (plan_inputs.hpp: found again by no key), or when its kernel or context goes, or at clear(); it is then
// retired, and freed when every thread that could have found it has left the launch (or plan_for) it was
// in. A thread holds a plan_reader for as long as it uses an entry (epoch-based reclamation: a reader
// announces the epoch it entered in; a retired entry is freed once no reader of its epoch or an older one
// is left, and the thread-local fronts are invalidated before). Nothing outside a reader holds an entry:
// callers keep its plan, and the fault report its plan and kernel, as keep_plan() made them, valid for the
// process's lifetime, one copy per distinct plan and kernel.

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "launch_config.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {
class policy;
}

namespace launchfit::detail {

struct driver_api;

// What outlives a plan entry: its plan (plan_for()'s reference, launched::plan()), its kernel's name (the
// fault report's "last launched") and what the plan's log line says of the kernel (a queued line reads the
// kept plan instead of a copy). Made by keep_plan(), never freed.
struct kept_plan {
  launchfit::plan plan;
  std::string kernel_name;       // kernel_resources::name
  std::string kernel_demangled;  // kernel_resources::demangled, where the miss demangled it
  int regs_per_thread = 0;       // kernel_resources' figures of the same names
  std::size_t static_smem_bytes = 0;
  std::size_t local_bytes_per_thread = 0;
  // The plan's launch attributes (fill_launch_attributes()), where a launch that hits points at them.
  launch_attributes attrs{};
  unsigned num_attrs = 0;
};

// How many more launches of a plan made inside a stream capture ask the driver whether their stream is being
// captured (graph_capture.hpp): each launch found outside a capture takes one, each launch inside one starts
// the count again. At zero a launch pays nothing for graphs: a spec launched capture_watch::launches times in a
// row outside any capture is no longer remembered in later captures (tune_graph() leaves such nodes untouched,
// as it leaves the nodes it reports). The one field of a published entry that changes; relaxed (a count).
class capture_watch {
 public:
  static constexpr std::uint32_t launches = 64;
  capture_watch() = default;
  capture_watch(const capture_watch& o) noexcept : left_(o.left_.load(std::memory_order_relaxed)) {}
  capture_watch& operator=(const capture_watch& o) noexcept {
    left_.store(o.left_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  void start() noexcept { left_.store(launches, std::memory_order_relaxed); }
  bool on() const noexcept { return left_.load(std::memory_order_relaxed) != 0; }
  // After a launch that asked: inside a capture the count starts again, outside one it takes one.
  void saw(bool inside_capture) const noexcept {
    if (inside_capture) {
      left_.store(launches, std::memory_order_relaxed);
      return;
    }
    std::uint32_t n = left_.load(std::memory_order_relaxed);
    while (n != 0 && !left_.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
  }

 private:
  mutable std::atomic<std::uint32_t> left_{0};
};

// Immutable once published (but for capture_watch's count). The fields a launch that hits reads come first, in
// the entry's first 120 bytes (not aligned to a cache line: its slot would outgrow the allocator's per-thread
// cache, see cache.cpp): a launch sits between driver calls that evict the caller's data, and every further line
// it touches is a miss there.
struct plan_entry {
  // ---- read by every launch that hits ----
  // The plan's launch configuration less its grid and stream (fill_launch_config()), made where the entry is
  // published (ready_for_hits()): a launch that hits copies it and sets the grid and the stream; its block and
  // dynamic smem are what it returns as launched. Its launch attributes (cooperative, cluster, PDL), where it has
  // any, are its kept plan's (kept here they would take the entry past the size the allocator keeps per thread,
  // see cache.cpp).
  CUlaunchConfig ready_config{};
  CUfunction function = nullptr;
  // `plan` and the kernel's name as callers keep them: set when the plan is logged or cached.
  const kept_plan* kept = nullptr;
  int max_grid_x = 2147483647;
  // Made while its stream was being captured into a CUDA graph, by a policy that is not a built-in: launches
  // of it inside a capture are remembered for tune_graph() (graph_capture.hpp) while the watch lasts.
  capture_watch captured;
  // The plan's 1-D items(n) grid is n divided by 2^items_shift, rounded up (a power-of-two block of a computed
  // grid, without cluster, co-residency or block shape): no call to grid_for().
  bool items_by_shift = false;
  std::uint8_t items_shift = 0;
  // Set where it is published (ready_for_hits()) for an entry a launch may launch from as it is: a plan of its
  // own (no route), decided by the spec's own policy (no override), not waiting for trials, without NVTX ranges.
  // False: every launch of the entry takes the full path.
  bool ready = false;
  // A plugin policy's fallback made for a launch that may not re-run its kernel (no trials offered): the
  // plan of such launches, never a rerunnable launch's, which plans again (and tunes) instead.
  bool untimed = false;
  // The policy asked for trials that the capture did not allow: its static plan is launched inside captures,
  // and the first launch outside one (or tune_graph()) plans again with trials.
  bool tuning_deferred = false;
  std::optional<std::vector<std::size_t>> param_sizes;  // driver kernels, where the driver reports them
  // ---- read on a miss, a route or a report ----
  const void* nvtx = nullptr;  // registered NVTX name of this plan's launches (null: NVTX off when planned)
  plan_key key;
  // Set when a LAUNCHFIT_POLICY override decides instead of the spec's policy: this entry only routes to the
  // override's own plan, keyed by the override and its size bucket (route_key() in planner.hpp).
  std::shared_ptr<const launchfit::policy> route;
  // The override that made this plan (null: the spec's policy), and the LAUNCHFIT_POLICY glob that chose it.
  std::shared_ptr<const launchfit::policy> overriding;
  launchfit::plan plan;
  std::uint64_t route_hash = 0;  // route->hash(), kept: hashing a policy's parameters costs on every launch
  std::string override_glob;
  // Why the override (override_glob, overriding) cannot serve this launch where the spec's own policy made
  // this plan instead: under the override's key, or under own_policy_bit (planner.hpp). Empty: the override
  // decided.
  std::string override_refused;
  kernel_resources kernel;
  // The device's limits, as limits_for() keeps them for the process's lifetime: its name, UUID and ordinal.
  const device_limits* device = nullptr;
};

// A plan made for one call only (a request asked again from inside its own planning, or an smem rule that
// never settles), where the call keeps it: empty on every launch that hits. Not std::optional<plan_entry>,
// whose construction zeroes the whole entry (about 900 bytes) on every launch.
class local_entry {
 public:
  plan_entry& emplace(plan_entry&& e) {
    entry_ = std::make_unique<plan_entry>(std::move(e));
    return *entry_;
  }
  void reset() noexcept { entry_.reset(); }
  bool has_value() const noexcept { return entry_ != nullptr; }
  plan_entry& operator*() const noexcept { return *entry_; }
  plan_entry* operator->() const noexcept { return entry_.get(); }

 private:
  std::unique_ptr<plan_entry> entry_;
};

std::uint64_t hash_key(const plan_key& k) noexcept;

// Makes a published entry ready for the hit path (ready_config, items_shift), where it is published. A route (no
// plan of its own), an override's plan, a plan waiting for trials and one with NVTX ranges are left not ready.
void ready_for_hits(plan_entry& e) noexcept;

// query_resources, demangling the name only when asked: a miss demangles only when the name is shown
// (a log line, an override, a policy other than the built-ins), as __cxa_demangle costs about as much as the
// rest of the miss's CPU work together.
kernel_resources query_resources(CUfunction f, bool demangle_name);
// A function's mangled name as the driver tells it (kernel_resources::name), or "kernel@<handle>" where it cannot
// (no cuFuncGetName, a failure, an empty name).
std::string function_name(const driver_api& d, CUfunction f);
// The kernel's readable name: `demangled`, or the name demangled now where the miss skipped it.
std::string display_name(const kernel_resources& k);
// The same for a kept plan's kernel.
std::string display_name(const kept_plan& k);
// Fills `demangled` where the miss skipped it, once; returns it.
const std::string& name_kernel(kernel_resources& k);
// check() naming the kernel, and the plan: their text is made only when r failed (a plan's text costs
// microseconds, many times the driver call it names).
void check(CUresult r, const char* call, const kernel_resources& k);
void check(CUresult r, const char* call, const kernel_resources& k, const plan& p);

// Held by a thread for as long as it uses plan entries (detail::launch() and detail::plan_for() hold one
// each): no entry this thread found is freed before the outermost plan_reader of the thread is gone.
// Nestable; cheap (on entry a plain store where the process is registered for an asymmetric fence, else one
// locked exchange; one store on exit). Not movable.
class plan_reader {
 public:
  plan_reader();
  ~plan_reader();
  plan_reader(const plan_reader&) = delete;
  plan_reader& operator=(const plan_reader&) = delete;
};

// Returns the entry for key, calling build exactly once per key across threads (build may throw; then
// the next caller retries). No lock is held while build runs (it runs policies, plugins and the user's
// reset callbacks): other threads asking for the key wait for it, and a build that asks for its own key again
// on the same thread (a reset callback launching the kernel) gets nullptr and must plan without caching.
// The returned pointer stays valid while the calling thread holds a plan_reader (without one: until the
// next change of the plan inputs or forget_*() in any thread). The entry's `kept` plan is set. The miss path
// calls it after find() missed: it takes the map's exclusive lock at once.
// A callable borrowed for one find_or_build() call (a std::function would box a lambda of the miss's several
// references on the heap, once per miss). Made from a named callable only: one made from a temporary would
// outlive it, and does not compile.
class entry_builder {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cv_t<F>, entry_builder>>>
  explicit entry_builder(F& f) noexcept
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* c) -> plan_entry { return (*static_cast<F*>(c))(); }) {}
  template <class F>
  entry_builder(const F&&) = delete;
  plan_entry operator()() const { return call_(callable_); }

 private:
  void* callable_;
  plan_entry (*call_)(void*);
};
const plan_entry* find_or_build_with(const plan_key& key, entry_builder build);
template <class F>
const plan_entry* find_or_build(const plan_key& key, F&& build) {
  return find_or_build_with(key, entry_builder(build));  // `build` is named here: it lives through the call
}
// Entry if present (front, then map); nullptr otherwise. Valid as find_or_build()'s.
const plan_entry* find(const plan_key& key) noexcept;

// Size buckets one family of keys (the same context, kernel, policy, smem rule, launch and shape: a key less
// its bucket) may hold. The built-in policies' buckets are octaves of the work (at most 64, times the row
// width's octaves for 2-D work whose block may widen); a policy whose work_bucket() answers a new value for
// every size would make a plan, an entry and a stored plan per size for the process's life.
inline constexpr std::uint32_t max_buckets_per_family = 1024;
// Whether a plan under `key` may be made: its key is cached already, or its family holds fewer than
// max_buckets_per_family buckets. The miss path plans a family's later buckets under one shared key instead
// (planner.cpp).
bool bucket_admitted(const plan_key& key);

// The plan and kernel name as callers keep them: one copy per distinct plan and kernel (every field
// compared), never freed, so they outlive the entry that made them. Bounded by the number of distinct plans
// the process makes, not by how often it plans again.
const kept_plan& keep_plan(const launchfit::plan& p, const kernel_resources& kernel);
// The entry's plan and kernel as the caller, the fault report and tune_graph() keep them: valid for the
// process's lifetime, also once the entry is freed (a plan made for one call only, by re-entrant planning or an
// smem rule that never settles, is kept the same way).
inline const kept_plan& kept_of(const plan_entry& e) { return e.kept ? *e.kept : keep_plan(e.plan, e.kernel); }

// Drops the entry under `key` if it is still `expected` (a plan made inside a stream capture, planned again
// with trials outside it); false when another thread replaced or dropped it first.
bool forget_entry(const plan_key& key, const plan_entry* expected);
// Drops every plan of one kernel (module unload).
void forget_kernel(std::uintptr_t kernel_id);
// Drops every plan made in one context (it was destroyed or reset).
void forget_context(std::uint64_t context_id);
// Drops every plan (policy overrides changed).
void forget_all_plans();

// Counters for tests and reports.
struct cache_stats {
  std::uint64_t builds = 0;
  std::uint64_t map_hits = 0;
  std::uint64_t retired = 0;     // entries out of the map and not freed yet (a reader may still use them)
  std::uint64_t freed = 0;       // retired entries freed since the process started
  std::uint64_t kept_plans = 0;  // distinct plans keep_plan() holds
  std::uint64_t fence_failures = 0;  // passes that freed nothing because the readers' fence failed (cache.cpp)
};
cache_stats stats() noexcept;
// Launches the hit path handed over to the full path since the process started (launch.cpp; counted there, off
// the hit path), for tests: a launch that leaves it unchanged launched from a ready entry.
std::uint64_t handed_over_launches() noexcept;

// Frees the retired entries no reader can reach any more (a miss after an input change and every forget_*()
// do it too); returns how many are left. For tests and for a process that wants its memory back now.
std::size_t free_retired_plans();

// Whether readers announce themselves with a plain store that the pass freeing entries fences (cache.cpp), rather
// than with a locked exchange.
bool readers_fenced() noexcept;
// For tests, while no thread holds a plan_reader: readers announce with a locked exchange (false) or, where the
// process is registered for the asymmetric fence, with a plain store (true). Returns readers_fenced() after.
bool fence_readers(bool on) noexcept;
// For tests: the freeing pass takes its fence of fenced readers as failed (as when membarrier(2) is refused).
void fail_reader_fence_for_test(bool fail);

}  // namespace launchfit::detail

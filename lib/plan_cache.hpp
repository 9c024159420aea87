// SPDX-License-Identifier: MIT
#pragma once
// The in-memory plan cache. Hit path: a thread-local direct-mapped front (no lock, no CUDA call) validated
// by a global generation; misses go to a shared_mutex map whose per-key slots make concurrent first
// launches of one key compute exactly one plan.

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {
class policy;
}

namespace launchfit::detail {

// Immutable once published.
struct plan_entry {
  plan_key key;
  CUfunction function = nullptr;
  // Set when a LAUNCHFIT_POLICY override decides instead of the spec's policy: this entry only routes to the
  // override's own plan, keyed by the override and its size bucket (route_key() in planner.hpp).
  std::shared_ptr<const launchfit::policy> route;
  std::uint64_t route_hash = 0;  // route->hash(), kept: hashing a policy's parameters costs on every launch
  // The override that made this plan (null: the spec's policy), and the LAUNCHFIT_POLICY glob that chose it.
  std::shared_ptr<const launchfit::policy> overriding;
  std::string override_glob;
  launchfit::plan plan;
  launch_options options;  // what the launch requires (the kernel's __cluster_dims__ included): its attributes
  kernel_resources kernel;
  std::string device_name;
  std::string device_uuid;
  int device_ordinal = -1;
  int max_grid_x = 2147483647;
  std::optional<std::vector<std::size_t>> param_sizes;  // driver kernels, where the driver reports them
  const void* nvtx = nullptr;  // registered NVTX name of this plan's launches (null: NVTX off when planned)
};

std::uint64_t hash_key(const plan_key& k) noexcept;

// query_resources, demangling the name only when asked: a miss demangles only when the name is shown
// (a log line, an override, a policy other than the built-ins), as __cxa_demangle costs about as much as the
// rest of the miss's CPU work together.
kernel_resources query_resources(CUfunction f, bool demangle_name);
// The kernel's readable name: `demangled`, or the name demangled now where the miss skipped it.
std::string display_name(const kernel_resources& k);
// Fills `demangled` where the miss skipped it, once; returns it.
const std::string& name_kernel(kernel_resources& k);

// Returns the entry for key, calling build exactly once per key across threads (build may throw; then
// the next caller retries). No lock is held while build runs (it runs policies, plugins and the user's
// reset callbacks): other threads asking for the key wait for it, and a build that asks for its own key again
// on the same thread (a reset callback launching the kernel) gets nullptr and must plan without caching.
// The returned pointer stays valid until process exit.
const plan_entry* find_or_build(const plan_key& key, const std::function<plan_entry()>& build);
// Entry if present (front, then map); nullptr otherwise.
const plan_entry* find(const plan_key& key) noexcept;

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
};
cache_stats stats() noexcept;

}  // namespace launchfit::detail

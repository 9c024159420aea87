// SPDX-License-Identifier: MIT
// The chain of plan-store layers (chain.hpp): one loop asks, validates, ranks, counts and fails open.

#include "chain.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "../lifecycle.hpp"
#include "../log_internal.hpp"
#include "../plan_file_format.hpp"
#include "../plan_inputs.hpp"
#include "../plan_match.hpp"
#include "../remote_store.hpp"
#include "../settings.hpp"
#include "../text.hpp"
#include "device_match.hpp"

namespace launchfit {
namespace detail {
namespace {

// What this file changes of every plan's inputs (plan_inputs.hpp), registered once.
const plan_input match_level_input = register_plan_input("plan match level");

// ---- the match level --------------------------------------------------------------------------------------

// Read from LAUNCHFIT_CACHE_MATCH at first use unless set_cache_match() came first.
// Its lock is a leaf: under it the level is read or set, and nothing else is locked (the settings' first
// read, which may happen there, takes no lock and logs nothing); constant-initialised and registered at load time: a fork never meets its registration half done.
std::mutex match_m;
std::mutex& match_mutex() noexcept { return match_m; }
const bool match_forks = lifecycle::on_fork_leaf_mutex<match_mutex>();

struct match_setting {
  std::mutex& m = match_m;
  std::atomic<int> value{-1};  // a cache_match, or -1 before the first use
};

match_setting& match_state() {
  static match_setting& s = *new match_setting;  // never destroyed
  return s;
}
// Made at load time, before any thread: a fork never meets its initialiser in progress.
const bool match_made = (match_state(), true);

}  // namespace

cache_match current_match() {
  match_setting& s = match_state();
  int v = s.value.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<cache_match>(v);
  std::lock_guard lock(s.m);
  v = s.value.load(std::memory_order_relaxed);
  if (v < 0) {
    // LAUNCHFIT_CACHE_MATCH: a typo there is `exact` (settings.hpp), never a wider match than was meant.
    v = static_cast<int>(current_settings().cache.match);
    s.value.store(v, std::memory_order_release);
  }
  return static_cast<cache_match>(v);
}

namespace {

struct chain_counts {
  std::atomic<std::uint64_t> lookups[2]{}, served[2]{}, refused[2]{}, backfilled{0};
  std::atomic<std::uint64_t> failures[2][5]{};
};

chain_counts& counts() {
  static chain_counts& c = *new chain_counts;
  return c;
}

// A remote entry is another GPU's by nature: one match level.
std::string level_name(const plan_store_layer& l) {
  return std::string(std::string_view(l.name()) == "file" ? std::string_view(plan_match::cache_file) : plan_match::remote);
}

}  // namespace

chain_layers store_chain() {
  chain_layers c;
  c.layers[c.count++] = &file_layer();
  if (plan_store_layer* remote = remote_layer()) c.layers[c.count++] = remote;
  return c;
}

chain_stats store_chain_statistics() {
  chain_counts& c = counts();
  chain_stats s;
  for (int i = 0; i < 2; ++i) {
    s.lookups[i] = c.lookups[i].load(std::memory_order_relaxed);
    s.served[i] = c.served[i].load(std::memory_order_relaxed);
    s.refused[i] = c.refused[i].load(std::memory_order_relaxed);
    for (int f = 0; f < 5; ++f) s.failures[i][f] = c.failures[i][f].load(std::memory_order_relaxed);
  }
  s.backfilled = c.backfilled.load(std::memory_order_relaxed);
  return s;
}

bool same_launch_key(const stored_key& a, const stored_key& b) {
  return a.kernel == b.kernel && a.policy == b.policy && a.smem_rule == b.smem_rule;
}

bool same_but_bucket(const stored_key& a, const stored_key& b) {
  return a.device_uuid == b.device_uuid && a.cc == b.cc && a.sm_count == b.sm_count &&
         a.driver_version == b.driver_version && same_launch_key(a, b);
}

std::optional<plan> best_stored_plan(const std::vector<stored_entry>& candidates, const stored_key& key,
                                     bool exact_bucket, bool model, const std::string& source,
                                     const stored_entry** chosen) {
  const auto all = [&](const auto& f) {
    for (const auto& e : candidates) f(e);
  };
  if (chosen) *chosen = nullptr;
  auto found = [&](const stored_entry* e, const char* level) -> std::optional<plan> {
    if (!e) return std::nullopt;
    if (chosen) *chosen = e;
    plan p = e->plan;
    p.match = source + level;
    return p;
  };
  for (const auto& e : candidates)
    if (e.key.bucket == key.bucket && same_but_bucket(e.key, key)) return found(&e, "");
  if (model) {
    const stored_entry* e = best_entry(all, key, [&](const stored_key& k) {
      return k.bucket == key.bucket && same_launch_key(k, key) && same_device_model(k, key);
    });
    if (e) return found(e, "-same-model");
  }
  if (exact_bucket) return std::nullopt;
  // Another size bucket of the same kernel and policy: the nearest bucket is the best guess.
  if (const stored_entry* e =
          best_entry(all, key, [&](const stored_key& k) { return same_but_bucket(k, key); }))
    return found(e, "-other-bucket");
  if (!model) return std::nullopt;
  return found(
      best_entry(all, key,
                 [&](const stored_key& k) { return same_launch_key(k, key) && same_device_model(k, key); }),
      "-same-model-other-bucket");
}

std::optional<plan> published_plan_for(const stored_entry& e, const stored_key& key) {
  if (!validate_stored_entry(e).empty()) return std::nullopt;
  const bool model = current_match() == cache_match::model;
  std::optional<plan> p = best_stored_plan({e}, key, true, model, std::string(plan_match::remote));
  if (p) p->match = std::string(plan_match::remote);  // as find_stored_plan() says a remote plan's level
  return p;
}

}  // namespace detail

void set_cache_match(cache_match m) {
  detail::match_setting& s = detail::match_state();
  bool changed = false;
  {
    std::lock_guard lock(s.m);
    changed = s.value.exchange(static_cast<int>(m), std::memory_order_acq_rel) != static_cast<int>(m);
  }
  // Which stored plans may serve a launch decides its plan: plans found under the other level are not reused.
  if (changed) detail::plan_input_changed(detail::match_level_input);
}

cache_match cache_file_match() { return detail::current_match(); }

std::optional<plan> find_stored_plan(const stored_key& key, bool exact_bucket) {
  const bool model = detail::current_match() == cache_match::model;
  const detail::chain_layers chain = detail::store_chain();
  detail::chain_counts& c = detail::counts();
  // A plan measured under contention (not clean) is this node's provisional choice: a layer below that
  // holds a plan measured clean serves that one instead (and backfills it over the provisional one).
  std::optional<plan> provisional;
  int provisional_layer = -1;
  for (int i = 0; i < chain.count; ++i) {
    detail::plan_store_layer& layer = *chain.layers[i];
    c.lookups[i].fetch_add(1, std::memory_order_relaxed);
    detail::layer_answer a = layer.get(key);
    if (a.failure != detail::layer_failure::none)
      c.failures[i][static_cast<int>(a.failure)].fetch_add(1, std::memory_order_relaxed);
    // Untrusted whatever the layer checked: held to the rule `launchfit-plans check` applies.
    const auto bad = std::remove_if(a.entries.begin(), a.entries.end(), [](const detail::stored_entry& e) {
      return !detail::validate_stored_entry(e).empty();
    });
    c.refused[i].fetch_add(static_cast<std::uint64_t>(a.entries.end() - bad), std::memory_order_relaxed);
    a.entries.erase(bad, a.entries.end());
    const std::string level = detail::level_name(layer);
    const detail::stored_entry* chosen = nullptr;
    std::optional<plan> p = detail::best_stored_plan(a.entries, key, exact_bucket, model, level, &chosen);
    if (!p) continue;  // fail open: the next layer, then a plan made here
    if (level == detail::plan_match::remote) p->match = detail::plan_match::remote;
    const bool clean = chosen && chosen->measurement && chosen->measurement->clean;
    if (!provisional && chosen && chosen->measurement && !clean && i + 1 < chain.count) {
      provisional = std::move(p);
      provisional_layer = i;
      continue;
    }
    if (provisional && !clean) break;  // nothing better below: the provisional plan
    c.served[i].fetch_add(1, std::memory_order_relaxed);
    if (i > 0 && chosen) {
      // Backfill: the file (the first layer) keeps what a layer below served, so that this node needs no
      // trial for it when that layer is down or restarted empty. Queued; nothing waits for the write.
      detail::stored_entry copy = *chosen;
      if (copy.origin.empty()) copy.origin = layer.name();
      // In place of this node's provisional plan (under its key, as clean replaces provisional), so that
      // the file then serves the clean plan without asking below again.
      if (provisional && copy.key.bucket == key.bucket && copy.key.driver_version == key.driver_version &&
          same_device_model(copy.key, key))
        copy.key = key;
      chain.layers[0]->put(copy);
      c.backfilled.fetch_add(1, std::memory_order_relaxed);
    }
    return p;
  }
  if (provisional) c.served[provisional_layer].fetch_add(1, std::memory_order_relaxed);
  return provisional;
}

void store_plan(const stored_key& key, const plan& p, std::optional<detail::plan_measurement> measured) {
  // A fallback plan (a plugin declined or failed) is not the policy's decision: stored, it would stop the
  // policy from being asked again in later runs (autotune declines launches it may not re-run).
  if (p.match == detail::plan_match::fallback) return;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  detail::stored_entry e;
  e.key = key;
  e.plan = p;
  e.stored_at_ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  e.plan.match = detail::plan_match::computed;
  if (measured) {
    measured->conditions = detail::sanitize_text(measured->conditions, detail::measurement_max_conditions);
    // Written, it would make the entry unreadable: the plan is kept, as an unmeasured one.
    if (detail::invalid_measurement(*measured).empty()) e.measurement = std::move(measured);
  }
  // A measurement taken under contention or with too much noise stays in this node's file: shared, it would
  // become every node's plan.
  const bool shared = !e.measurement || e.measurement->clean;
  const detail::chain_layers chain = detail::store_chain();
  if (chain.count == 0) return;
  // What every reader refuses is never written (a plugin's policy text past the key's bound, a number out of
  // a reader's range): it would be planned again in every run, and the file's check would fail on it. Said
  // once per process; the plan is launched, not stored.
  if (std::string why = detail::validate_stored_entry(e); !why.empty()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      detail::log_event(spdlog::level::warn, "plan_not_stored",
                        "a plan is not stored: no reader would take it back (later ones are not said)",
                        {{"policy", p.policy}, {"why", why}});
    return;
  }
  for (int i = chain.count - 1; i >= 0; --i) {
    if (i > 0 && !shared) continue;
    chain.layers[i]->put(e);  // each queues; none waits
  }
}

}  // namespace launchfit

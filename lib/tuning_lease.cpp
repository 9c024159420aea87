// SPDX-License-Identifier: MIT
// One tuner per plan across a fleet (tuning_lease.hpp): the lease around a tuning, and the background
// watcher that adopts what another process published.

#include "tuning_lease.hpp"

#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "background.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_inputs.hpp"
#include "store/chain.hpp"
#include "store/lease.hpp"
#include "store/layer_failure.hpp"

namespace launchfit::detail {
namespace {

// What this file changes of every plan's inputs (plan_inputs.hpp), registered once.
const plan_input tuned_elsewhere_input = register_plan_input("plan tuned elsewhere or its lease ended");

std::atomic<std::uint64_t> lease_ms_override{0};
std::atomic<std::uint64_t> lease_failures{0};  // take() answers of a failed store

// ---- the watcher ------------------------------------------------------------------------------------------

struct watched_key {
  stored_key key;
  plan_store_layer* layer = nullptr;  // valid for the process's life (remote_store.hpp)
  std::string holder;
  int failures = 0;  // polls in a row that failed
  background::clock::time_point deadline{};  // held past it: a broken lease (no time to live), decided here
};

// Polls of a key in a row that may fail (a store slow or restarting now and then) before this process stops
// waiting for it and decides the key alone: a failure is no end of the lease, and ending the watch plans every
// kernel again (the plan inputs change), which a store that fails every poll made a loop of.
constexpr int max_poll_failures = 3;

class lease_watcher final : public background::task {
 public:
  background::clock::time_point run() noexcept override {
    try {
      return poll();
    } catch (...) {  // out of memory: try again later
      return background::clock::now() + poll_interval;
    }
  }
  bool has_work() const noexcept override { return false; }  // polling is never work an exit waits for
  void drain_at_exit() noexcept override {}
  const char* name() const noexcept override { return "lease watcher"; }

  // Whether the key's polls kept failing: this process decides it alone (takes no lease for it).
  bool decides_alone(const std::string& lease_key, const plan_store_layer* layer) {
    std::lock_guard<std::mutex> lock(m);
    return alone.count({lease_key, layer}) != 0;
  }

  // The layer and holder of a key watched now (a miss of a watched key asks no store again).
  bool watching(const std::string& lease_key, plan_store_layer*& layer, std::string& holder) {
    std::lock_guard<std::mutex> lock(m);
    const auto it = watched.find(lease_key);
    if (it == watched.end()) return false;
    layer = it->second.layer;
    holder = it->second.holder;
    return true;
  }

  bool watch(const std::string& lease_key, const stored_key& key, plan_store_layer* layer,
             const std::string& holder) {
    {
      std::lock_guard<std::mutex> lock(m);
      if (watched.count(lease_key) == 0 && watched.size() >= max_watched_keys) return false;
      // A lease lives lease_ms at most: one held much longer has no time to live (a peer's SET without PX) or
      // is taken again and again, and waiting for it would keep this key untuned for the process's life.
      const auto bound = std::chrono::milliseconds(lease_ms() * 3 / 2 + 500);
      // A key watched already keeps its deadline and failures: each plan made again while it waits watches it
      // again, which would otherwise wait for a lease without a time to live for ever.
      const auto [it, made] = watched.try_emplace(lease_key, watched_key{key, layer, holder, 0, background::clock::now() + bound});
      if (!made && it->second.layer != layer) it->second = watched_key{key, layer, holder, 0, background::clock::now() + bound};
      adopted.erase(lease_key);
    }
    background::add(*this, background::exit_order::remote_store);
    background::wake(*this);
    return true;
  }

  // Adopts a plan published under the key (the watcher's poll, or a lease holder that found it published):
  // lookups find it, the file keeps it. No lock held on entry.
  // `p`: the plan `e` serves for the key (published_plan_for()).
  void adopt(const std::string& lease_key, stored_entry e, plan p, plan_store_layer* layer) {
    // The file keeps an adopted plan, as it keeps what a lookup of the remote store served (chain.cpp), so
    // that this node needs no trial when the store is down or restarted empty. Queued, never waited for; queued
    // before lookups find the plan, so that a flush after a lookup found it writes it.
    if (e.origin.empty()) e.origin = layer->name();
    file_layer().put(e);
    std::lock_guard<std::mutex> lock(m);
    if (adopted.size() < max_watched_keys || adopted.count(lease_key)) adopted[lease_key] = std::move(p);
    ++adopted_count;
  }

  std::mutex m;
  std::map<std::string, watched_key> watched;  // by lease key
  std::map<std::string, plan> adopted;         // by lease key: plans published elsewhere
  std::set<std::pair<std::string, const plan_store_layer*>> alone;  // keys whose polls kept failing on a
                                                                     // layer: decided here while it is the store
  std::uint64_t polls = 0, adopted_count = 0, expired = 0;

 private:
  background::clock::time_point poll() {
    std::vector<std::pair<std::string, stored_key>> items;
    plan_store_layer* layer = nullptr;
    {
      std::lock_guard<std::mutex> lock(m);
      if (watched.empty()) return background::never;
      // One layer holds leases (the remote store): its keys in one pipeline.
      layer = watched.begin()->second.layer;
      for (const auto& [lease, w] : watched)
        if (w.layer == layer) items.emplace_back(lease, w.key);
      ++polls;
    }
    const std::vector<lease_poll> found = layer->poll_leases(items);  // I/O, no lock held
    bool changed = false;
    struct published {
      std::string lease;
      stored_entry entry;
      plan serves;
    };
    std::vector<published> backfill;  // adopted
    {
      std::lock_guard<std::mutex> lock(m);
      for (std::size_t i = 0; i < items.size() && i < found.size(); ++i) {
        const lease_poll& p = found[i];
        const auto w = watched.find(items[i].first);
        if (w == watched.end()) continue;
        if (p.failure != layer_failure::none) {
          if (++w->second.failures < max_poll_failures) continue;  // polled again
          if (alone.size() < max_watched_keys) alone.insert({items[i].first, layer});
          ++expired;
        } else {
          w->second.failures = 0;
          // Served as a lookup would serve it: this bucket, and under the `exact` match level this GPU's.
          std::optional<plan> serves = p.published ? published_plan_for(*p.published, w->second.key) : std::nullopt;
          if (serves) {
            backfill.push_back({items[i].first, *p.published, std::move(*serves)});
          } else if (p.held && background::clock::now() < w->second.deadline) {
            continue;  // still tuned elsewhere
          } else if (p.held) {
            if (alone.size() < max_watched_keys) alone.insert({items[i].first, layer});  // held past any lease's life
            ++expired;
          } else {
            ++expired;  // the tuner died or kept its plan local: the next miss decides
          }
        }
        watched.erase(w);
        changed = true;
      }
    }
    for (published& b : backfill) adopt(b.lease, std::move(b.entry), std::move(b.serves), layer);
    // The next launch of an adopted key plans again and finds the plan; of an expired one, takes the lease.
    if (changed) plan_input_changed(tuned_elsewhere_input);
    std::lock_guard<std::mutex> lock(m);
    return watched.empty() ? background::never : background::clock::now() + poll_interval;
  }
};

lease_watcher& watcher() {
  static lease_watcher& w = *[] {
    auto* made = new lease_watcher;  // never destroyed: the background thread may run it at exit
    // The watcher's lock is held only around its tables: taken before fork, given back on both sides.
    lifecycle::on_fork(
        {[] { watcher().m.lock(); }, [] { watcher().m.unlock(); }, [] { watcher().m.unlock(); }});
    return made;
  }();
  return w;
}

// The key's lease: one per model-level key, the value the fleet shares; under the `exact` match level a GPU
// adopts only its own GPU's plans, so each GPU has a lease of its own (one tuner per GPU, none waiting for
// another GPU's plan it would not run).
std::string lease_key_of(const stored_key& key) {
  std::string lk = lease_key(key);
  if (!lk.empty() && current_match() == cache_match::exact) lk += "|gpu=" + key.device_uuid;
  return lk;
}

}  // namespace

std::string lease_owner() {
  static const std::uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  char host[64] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string h;
  for (const char* c = host; *c && h.size() < 48; ++c) h += (*c > 0x20 && *c < 0x7f && *c != ':') ? *c : '_';
  if (h.empty()) h = "host";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s:%ld:%016llx", h.c_str(), static_cast<long>(getpid()),
                static_cast<unsigned long long>(nonce));
  return buf;
}

std::uint64_t lease_ms() {
  const std::uint64_t v = lease_ms_override.load(std::memory_order_relaxed);
  return v ? v : default_lease_ms;
}

void set_lease_ms_for_tests(std::uint64_t ms) { lease_ms_override.store(ms, std::memory_order_relaxed); }

tuning_lease tuning_lease::take(const stored_key& key) {
  tuning_lease t;
  t.key_ = key;
  t.lease_key_ = lease_key_of(key);
  if (t.lease_key_.empty()) return t;  // a key without a device model is never shared
  if (watcher().watching(t.lease_key_, t.layer_, t.holder_)) {
    t.turn_ = turn::wait;  // still tuned elsewhere, as the watcher last read
    return t;
  }
  const chain_layers chain = store_chain();
  for (int i = 0; i < chain.count; ++i) {
    if (watcher().decides_alone(t.lease_key_, chain.layers[i])) return t;  // its polls kept failing there
    const lease_answer a = chain.layers[i]->take_lease(t.lease_key_, lease_owner(), lease_ms());
    if (a.status == lease_status::unsupported) continue;
    t.layer_ = chain.layers[i];
    if (a.status == lease_status::taken) {
      t.turn_ = turn::tune;
    } else if (a.status == lease_status::held) {
      t.turn_ = turn::wait;
      t.holder_ = a.holder.empty() ? std::string("another process") : a.holder;
      t.remaining_ms_ = a.remaining_ms;
    } else {
      // Failed (a refused AUTH, a value above the bounds, a store closing on us): alone, as without a store,
      // and said once per process.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        log_event(spdlog::level::warn, "tuning_lease_failed",
                  "the remote plan store gave no tuning lease: this process tunes without one, as others may",
                  {{"failure", failure_name(a.failure)}});
      }
      lease_failures.fetch_add(1, std::memory_order_relaxed);
    }
    break;
  }
  return t;
}

tuning_lease::tuning_lease(tuning_lease&& other) noexcept
    : turn_(other.turn_),
      layer_(other.layer_),
      key_(std::move(other.key_)),
      lease_key_(std::move(other.lease_key_)),
      holder_(std::move(other.holder_)),
      remaining_ms_(other.remaining_ms_) {
  other.turn_ = turn::alone;
}

tuning_lease::~tuning_lease() {
  if (turn_ != turn::tune || !layer_) return;
  try {
    (void)layer_->release_lease(lease_key_, lease_owner());
  } catch (...) {  // never from a destructor
  }
}

void tuning_lease::publish_and_release(unsigned max_wait_ms) {
  if (turn_ != turn::tune || !layer_) return;
  // The others adopt what the store holds: the plan is written before the lease ends (bounded: a plan still
  // queued when the lease ends may be tuned once more elsewhere, never lost).
  (void)layer_->flush(max_wait_ms);
  (void)layer_->release_lease(lease_key_, lease_owner());
  turn_ = turn::alone;
}

bool tuning_lease::adopt_if_published() {
  if (turn_ != turn::tune || !layer_) return false;
  const std::vector<lease_poll> polled = layer_->poll_leases({{lease_key_, key_}});
  if (polled.size() != 1 || !polled[0].published) return false;
  std::optional<plan> serves = published_plan_for(*polled[0].published, key_);
  if (!serves) return false;  // another GPU's under `exact`, another bucket: this process tunes its own
  watcher().adopt(lease_key_, *polled[0].published, std::move(*serves), layer_);
  (void)layer_->release_lease(lease_key_, lease_owner());
  turn_ = turn::alone;
  return true;
}

void tuning_lease::watch() {
  if (turn_ != turn::wait || !layer_) return;
  (void)watcher().watch(lease_key_, key_, layer_, holder_);
}

std::optional<plan> adopted_plan(const stored_key& key) {
  const std::string lk = lease_key_of(key);
  if (lk.empty()) return std::nullopt;
  lease_watcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.m);
  const auto it = w.adopted.find(lk);
  if (it == w.adopted.end()) return std::nullopt;
  return it->second;
}

lease_watch_stats lease_watch_statistics() {
  lease_watcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.m);
  return {w.polls, w.adopted_count, w.expired, w.watched.size(), lease_failures.load(std::memory_order_relaxed)};
}

}  // namespace launchfit::detail

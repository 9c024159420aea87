// SPDX-License-Identifier: MIT
#include <array>
#include <condition_variable>
#include <thread>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "launchfit/cache.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"

namespace launchfit {
namespace detail {
namespace {

struct key_hasher {
  std::size_t operator()(const plan_key& k) const noexcept { return static_cast<std::size_t>(hash_key(k)); }
};

// One slot per key. `ready` flips once, after `entry` is set. `m` guards `builder` only, never a build:
// the builder runs without it and the others wait on `done`.
struct slot {
  std::mutex m;
  std::condition_variable done;
  std::thread::id builder{};  // the thread building now; default: nobody
  std::atomic<bool> ready{false};
  std::shared_ptr<const plan_entry> entry;
};

struct store {
  std::shared_mutex mutex;
  std::unordered_map<plan_key, std::shared_ptr<slot>, key_hasher> slots;
  // Slots dropped by clear() stay alive: a builder may still be filling one, thread-local fronts and the
  // fault report (last launched plan) may still point into them. Only clear() (tests) grows this.
  std::vector<std::shared_ptr<slot>> retired;
  std::atomic<std::uint64_t> generation{1};
  // The plan-inputs generation the slots were last swept for: slots of older ones are never found again
  // (their keys hold the old generation) and are retired on the next miss.
  std::uint64_t swept_inputs = 0;
  std::atomic<std::uint64_t> builds{0};
  std::atomic<std::uint64_t> map_hits{0};
};

store& the_store() {
  static store* s = new store();  // never destroyed: launches may run during static destruction
  return *s;
}

struct front_line {
  plan_key key;
  std::uint64_t generation = 0;
  const plan_entry* entry = nullptr;
};
// A thread's front: 16 sets of 4 lines, so a few hot plans that share a set still hit without a lock (a
// direct-mapped front sent a pair of colliding plans to the shared map on every other launch).
constexpr std::size_t front_sets = 16, front_ways = 4;
struct front_set {
  std::array<front_line, front_ways> lines{};
  unsigned char next = 0;  // the line a new entry replaces (round robin)
};
thread_local std::array<front_set, front_sets> front{};

// The front's set for a key: one multiply (the policy hash is already mixed). The shared map uses hash_key.
inline front_set& front_set_of(const plan_key& k) noexcept {
  const std::uint64_t x =
      (k.kernel ^ (k.context << 40) ^ k.policy ^ (k.smem_rule << 1) ^ (k.bucket << 2) ^ (k.launch << 3) ^ (k.shape << 5) ^
       (k.inputs << 7)) *
      0x9e3779b97f4a7c15ULL;
  return front[static_cast<std::size_t>(x >> 60)];  // top 4 bits: 16 sets
}
static_assert(front_sets == 16, "front_set_of yields 4 bits");

}  // namespace

std::uint64_t hash_key(const plan_key& k) noexcept {
  std::uint64_t h = hash_combine(k.context, k.kernel);
  h = hash_combine(h, k.policy);
  h = hash_combine(h, k.smem_rule);
  h = hash_combine(h, k.launch);
  h = hash_combine(h, k.shape);
  h = hash_combine(h, k.inputs);
  return hash_combine(h, k.bucket);
}

const plan_entry* find(const plan_key& key) noexcept {
  store& s = the_store();
  const std::uint64_t gen = s.generation.load(std::memory_order_acquire);
  front_set& set = front_set_of(key);
  for (const front_line& line : set.lines)
    if (line.generation == gen && line.entry && line.key == key) return line.entry;
  std::shared_ptr<slot> sl;
  {
    std::shared_lock<std::shared_mutex> lock(s.mutex);
    auto it = s.slots.find(key);
    if (it == s.slots.end()) return nullptr;
    sl = it->second;
  }
  if (!sl->ready.load(std::memory_order_acquire)) return nullptr;
  s.map_hits.fetch_add(1, std::memory_order_relaxed);
  set.lines[set.next] = front_line{key, gen, sl->entry.get()};
  set.next = static_cast<unsigned char>((set.next + 1) % front_ways);
  return sl->entry.get();
}

const plan_entry* find_or_build(const plan_key& key, const std::function<plan_entry()>& build) {
  if (const plan_entry* e = find(key)) return e;
  store& s = the_store();
  std::shared_ptr<slot> sl;
  {
    std::unique_lock<std::shared_mutex> lock(s.mutex);
    if (key.inputs > s.swept_inputs) {
      // The inputs changed since the last sweep: plans of older generations can never be found again. Retired,
      // not destroyed (thread-local fronts and the fault report may still point into them).
      for (auto it = s.slots.begin(); it != s.slots.end();) {
        if (it->first.inputs < key.inputs && it->second->ready.load(std::memory_order_acquire)) {
          s.retired.push_back(std::move(it->second));
          it = s.slots.erase(it);
        } else {
          ++it;
        }
      }
      s.swept_inputs = key.inputs;
    }
    auto& ref = s.slots[key];
    if (!ref) ref = std::make_shared<slot>();
    sl = ref;
  }
  const std::thread::id me = std::this_thread::get_id();
  {
    std::unique_lock<std::mutex> lock(sl->m);
    for (;;) {
      if (sl->ready.load(std::memory_order_acquire)) return sl->entry.get();
      if (sl->builder == std::thread::id{}) break;  // nobody builds it: this thread will
      if (sl->builder == me) return nullptr;        // asked again from inside its own build
      sl->done.wait(lock);
    }
    sl->builder = me;
  }
  struct release {  // on every path: a build that throws lets the next caller retry
    slot& sl;
    ~release() {
      {
        std::lock_guard<std::mutex> lock(sl.m);
        sl.builder = std::thread::id{};
      }
      sl.done.notify_all();
    }
  } released{*sl};
  auto built = std::make_shared<const plan_entry>(build());
  {
    std::lock_guard<std::mutex> lock(sl->m);
    sl->entry = std::move(built);
    s.builds.fetch_add(1, std::memory_order_relaxed);
    sl->ready.store(true, std::memory_order_release);
  }
  return sl->entry.get();
}

namespace {
template <class Pred>
void forget_if(Pred drop) {
  store& s = the_store();
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  for (auto it = s.slots.begin(); it != s.slots.end();) {
    if (drop(it->first)) {
      s.retired.push_back(it->second);
      it = s.slots.erase(it);
    } else {
      ++it;
    }
  }
  s.generation.fetch_add(1, std::memory_order_acq_rel);
}
}  // namespace

void forget_kernel(std::uintptr_t kernel_id) {
  forget_if([kernel_id](const plan_key& k) { return k.kernel == kernel_id; });
}

void forget_context(std::uint64_t context_id) {
  forget_if([context_id](const plan_key& k) { return k.context == context_id; });
}

void forget_all_plans() {
  forget_if([](const plan_key&) { return true; });
}

cache_stats stats() noexcept {
  store& s = the_store();
  return {s.builds.load(), s.map_hits.load()};
}

}  // namespace detail

std::vector<cached_plan> plan_cache::plans() const {
  detail::store& s = detail::the_store();
  std::vector<cached_plan> out;
  std::shared_lock<std::shared_mutex> lock(s.mutex);
  const std::uint64_t inputs = detail::plan_inputs_generation();
  for (const auto& [key, sl] : s.slots) {
    if (!sl->ready.load(std::memory_order_acquire) || sl->entry->route) continue;  // a route has no plan
    if (key.inputs != inputs) continue;  // made under other inputs: never launched again
    const detail::plan_entry& e = *sl->entry;
    out.push_back(cached_plan{key, detail::display_name(e.kernel),
                              e.device_name + " #" + std::to_string(e.device_ordinal), e.device_uuid,
                              e.plan});
  }
  return out;
}

std::size_t plan_cache::size() const {
  detail::store& s = detail::the_store();
  std::shared_lock<std::shared_mutex> lock(s.mutex);
  const std::uint64_t inputs = detail::plan_inputs_generation();
  std::size_t n = 0;
  for (const auto& kv : s.slots)
    n += kv.first.inputs == inputs && kv.second->ready.load(std::memory_order_acquire) && !kv.second->entry->route;
  return n;
}

void plan_cache::clear() { detail::forget_all_plans(); }

plan_cache& cache() {
  static plan_cache& c = *new plan_cache();  // never destroyed, as every launchfit singleton
  return c;
}

}  // namespace launchfit

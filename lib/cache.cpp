// SPDX-License-Identifier: MIT
#include "launchfit/cache.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <boost/pfr.hpp>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "asymmetric_fence.hpp"
#include "hot_words.hpp"
#include "launchfit/policy.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"

namespace launchfit {
namespace detail {
namespace {

struct key_hasher {
  std::size_t operator()(const plan_key& k) const noexcept { return static_cast<std::size_t>(hash_key(k)); }
};

// A slot's entry, made in place from what its builder returns (no copy of the ~800-byte entry, and no
// allocation of its own: it lives in the slot).
struct built_entry {
  plan_entry e;
  explicit built_entry(const entry_builder& build) : e(build()) {}
};

// One slot per key. `ready` flips once, after `made` is set. `m` guards `builder` only, never a build:
// the builder runs without it and the others wait on `done`. Only the builder touches `made` before `ready`.
struct slot {
  std::mutex m;
  std::condition_variable done;
  std::thread::id builder{};  // the thread building now; default: nobody
  std::atomic<bool> ready{false};
  std::optional<built_entry> made;
  // The entry, once `ready`.
  const plan_entry* entry() const noexcept { return &made->e; }
};

// A slot with its shared_ptr's control block stays within the sizes glibc's allocator keeps per thread (at most
// 1032 bytes): a larger one is freed through the shared bins (unlink, consolidation), which took a first
// launch's miss from 2.5 to 3.2 us through the stub driver when the entry grew by 280 bytes.
#if defined(__GLIBC__) && defined(__LP64__) && !defined(_GLIBCXX_DEBUG)
static_assert(sizeof(slot) + 2 * sizeof(long) <= 1032, "a plan entry's slot outgrew the allocator's per-thread cache");
#endif

// A slot out of the map, waiting until no reader can reach it.
struct retired_slot {
  std::shared_ptr<slot> s;
  // The epoch it was retired in: readers that entered in it or before may hold its entry. 0: not tagged yet.
  std::uint64_t epoch = 0;
};

// The map's lock. A child of fork() gets a new one (glibc unlocks a write-locked rwlock only from the thread
// that locked it, and the child's thread has another id); the one it replaces stays reachable.
struct store_lock {
  std::shared_mutex m;
  store_lock* replaced = nullptr;
};

struct store {
  store_lock* lock = new store_lock;
  std::shared_mutex& mutex() noexcept { return lock->m; }
  std::unordered_map<plan_key, std::shared_ptr<slot>, key_hasher> slots;
  // Slots out of the map, freed by reclaim_locked() once no reader can reach them.
  std::vector<retired_slot> retired;
  // The plan-inputs generation the slots were last swept for: slots of older ones are never found again
  // (their keys hold the old generation) and are retired on the next miss.
  std::uint64_t swept_inputs = 0;
  std::atomic<std::uint64_t> builds{0};
  std::atomic<std::uint64_t> map_hits{0};
  std::atomic<std::uint64_t> retired_now{0};
  std::atomic<std::uint64_t> freed{0};
  std::atomic<std::uint64_t> fence_failures{0};  // passes that freed nothing: the readers' fence failed
  std::atomic<bool> fence_failure_logged{false};  // report_fence_failure() logged the first one
  // Slots per family of keys (a key less its size bucket), for bucket_admitted(): a policy whose
  // work_bucket() answers a new value for every size would otherwise make a plan per size, without bound.
  std::unordered_map<std::uint64_t, std::uint32_t> family_slots;
};

// The thread-local fronts' generation (hot.front_generation, hot_words.hpp: a launch that hits reads it without
// the store's pointer): bumped before a slot leaves the map, so no front returns it again.

store& the_store() {
  static store* s = new store();  // never destroyed: launches may run during static destruction
  return *s;
}

// The family a key belongs to: every field but the size bucket.
std::uint64_t family_of(plan_key k) noexcept {
  k.bucket = 0;
  return hash_key(k);
}

// Takes a slot out of the map (the caller retires it), keeping the family counts.
template <class It>
It erase_slot_locked(store& s, It it) {
  const auto f = s.family_slots.find(family_of(it->first));
  if (f != s.family_slots.end() && --f->second == 0) s.family_slots.erase(f);
  return s.slots.erase(it);
}

// ---- readers: epoch-based reclamation -----------------------------------------------------------------
//
// A reader publishes the epoch it entered in (`active`, 0 outside) before it reads the fronts' generation or the
// map. A pass retires slots (out of the map, the fronts' generation bumped), tags them with the epoch
// (hot.reader_epoch's value before its increment), then reads every reader's `active`. Either the pass sees a
// reader's entry or that reader sees the bumped generation and the emptied map (the store-buffering pattern): a
// reader the pass did not see cannot reach the retired slots. A slot tagged t is freed once every reader the pass
// sees entered after t.
// The pattern needs a full barrier on both sides. Where the process is registered for an asymmetric fence
// (asymmetric_fence.hpp: Linux's membarrier), hot.readers_fenced is set and a reader announces with a plain store
// and a compiler barrier (a launch pays no locked instruction), and the pass makes every running thread execute
// the barrier (asymmetric_fence::heavy()) before it reads the readers; a pass whose heavy fence fails frees
// nothing. Elsewhere (and under ThreadSanitizer) a reader announces with a sequentially consistent exchange.

struct reader_record {
  std::atomic<std::uint64_t> active{0};
  std::atomic<bool> taken{false};
  reader_record* next = nullptr;  // set before the record is published, never changed
};

std::atomic<reader_record*> readers{nullptr};  // push-only, never freed; records are reused by new threads
// The epoch is hot.reader_epoch (hot_words.hpp: every launch reads it).
// Trivially destructible: a static destructor that launches on the main thread still finds them.
thread_local reader_record* this_reader = nullptr;
thread_local int reader_depth = 0;

pthread_key_t reader_key;
pthread_once_t reader_key_once = PTHREAD_ONCE_INIT;

// At a thread's exit: its record goes back for another thread.
void give_back_reader(void* record) {
  auto* r = static_cast<reader_record*>(record);
  if (this_reader == r) this_reader = nullptr;  // a later destructor that launches takes a record again
  r->active.store(0, std::memory_order_release);
  r->taken.store(false, std::memory_order_release);
}

void make_reader_key() {
  if (pthread_key_create(&reader_key, give_back_reader) != 0) reader_key = pthread_key_t();
}

// Decided once, before the first reader announces (and before any fork: a child never inherits the decision
// half made): a reader that sees readers_fenced was registered for it.
bool decide_reader_fence() noexcept {
  const bool fenced = asymmetric_fence::register_process();
  if (fenced) hot.readers_fenced.store(true, std::memory_order_seq_cst);
  return fenced;
}
void reader_fence_decided() noexcept {
  static const bool decided = decide_reader_fence();
  (void)decided;
}

reader_record& reader_of_this_thread() {
  if (this_reader) return *this_reader;
  reader_fence_decided();
  reader_record* r = readers.load(std::memory_order_acquire);
  for (; r; r = r->next) {
    if (!r->taken.load(std::memory_order_relaxed) && !r->taken.exchange(true, std::memory_order_acquire))
      break;
  }
  if (!r) {
    r = new reader_record;  // never freed: a pass may read it at any time
    r->taken.store(true, std::memory_order_relaxed);
    r->next = readers.load(std::memory_order_relaxed);
    while (!readers.compare_exchange_weak(r->next, r, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }
  pthread_once(&reader_key_once, make_reader_key);
  (void)pthread_setspecific(reader_key, r);  // if it fails, the record is never reused (a thread's worth)
  this_reader = r;
  return *r;
}

// The oldest epoch a reader is in now (max: none).
std::uint64_t oldest_reader() noexcept {
  std::uint64_t oldest = std::numeric_limits<std::uint64_t>::max();
  for (const reader_record* r = readers.load(std::memory_order_seq_cst); r; r = r->next) {
    const std::uint64_t a = r->active.load(std::memory_order_seq_cst);
    if (a != 0 && a < oldest) oldest = a;
  }
  return oldest;
}

// In a child of fork() only the forking thread exists: the other threads' records are free again (one that
// was inside a launch at the fork would otherwise keep every later retired slot alive in the child).
void reader_records_after_fork() {
  for (reader_record* r = readers.load(std::memory_order_acquire); r; r = r->next) {
    if (r == this_reader) continue;
    r->active.store(0, std::memory_order_relaxed);
    r->taken.store(false, std::memory_order_relaxed);
  }
}

// The map is taken around a fork, so a child never inherits it half changed by another thread.
void lock_store_for_fork() {
  reader_fence_decided();
  the_store().mutex().lock();
}
void unlock_store_after_fork() { the_store().mutex().unlock(); }
// A slot another thread was building at the fork stays "being built" in the child, where no thread builds it:
// the child's first ask for its key would wait for ever. Such slots leave the map (the vanished builder's
// reference keeps each alive, never freed in the child): the child's next ask builds its key anew. A slot the
// forking thread itself is building (a fork from inside a build) stays; a ready one stays (asking for it takes
// no slot lock, which a vanished thread may have held).
void unbuilt_slots_in_child(store& s) {
  const std::thread::id me = std::this_thread::get_id();  // the forking thread's, in the child too
  for (auto it = s.slots.begin(); it != s.slots.end();) {
    slot& sl = *it->second;
    bool keep = sl.ready.load(std::memory_order_acquire);
    if (!keep) {
      // Held: by a thread that is gone (this one holds no slot's lock here). `builder` is read either way: while
      // this thread builds, only this thread writes it.
      const bool locked = sl.m.try_lock();
      keep = sl.builder == me;
      if (locked) sl.m.unlock();
      if (keep) {
        // This thread's own build goes on in the child: the lock a waiter that is gone held, and the waiters
        // its end would wake (a broadcast waits for waiters that never leave), are made anew.
        if (!locked) {
          lifecycle::abandoned_in_child(&sl.m);
          new (&sl.m) std::mutex;
        }
        new (&sl.done) std::condition_variable;
      }
    }
    it = keep ? std::next(it) : erase_slot_locked(s, it);
  }
}

void unlock_store_in_child() {
  reader_records_after_fork();
  store& s = the_store();
  unbuilt_slots_in_child(s);
  auto* fresh = new store_lock;
  fresh->replaced = s.lock;
  s.lock = fresh;
  lifecycle::abandoned_in_child(&fresh->replaced->m);
}
const bool fork_hooks_registered =
    lifecycle::on_fork({lock_store_for_fork, unlock_store_after_fork, unlock_store_in_child});

bool fence_fails_for_test = false;  // fail_reader_fence_for_test(); read under the store's exclusive lock

// Caller holds s.mutex() exclusively; `gone` receives the slots to destroy once the lock is released (an
// entry's policies may be a plugin's, whose code must not run under the lock).
void reclaim_locked(store& s, std::vector<std::shared_ptr<slot>>& gone) {
  if (s.retired.empty()) return;
  const std::uint64_t now = hot.reader_epoch.fetch_add(1, std::memory_order_seq_cst);
  std::uint64_t oldest = oldest_reader();
  std::uint64_t tagged_first = std::numeric_limits<std::uint64_t>::max();
  for (retired_slot& r : s.retired) {
    if (r.epoch == 0) r.epoch = now;
    tagged_first = std::min(tagged_first, r.epoch);
  }
  if (tagged_first >= oldest) return;  // a reader seen already keeps every one: no fence needed to free none
  // Readers that announce with a plain store are fenced here (a reader not seen yet only lowers `oldest`), or
  // nothing is freed in this pass.
  if (hot.readers_fenced.load(std::memory_order_seq_cst)) {
    if (fence_fails_for_test || !asymmetric_fence::heavy()) {
      s.fence_failures.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    oldest = oldest_reader();
  }
  std::size_t kept = 0;
  for (retired_slot& r : s.retired) {
    if (r.epoch < oldest) {
      gone.push_back(std::move(r.s));
      continue;
    }
    if (&s.retired[kept] != &r) s.retired[kept] = std::move(r);
    ++kept;
  }
  s.retired.resize(kept);
  s.freed.fetch_add(gone.size(), std::memory_order_relaxed);
  s.retired_now.store(s.retired.size(), std::memory_order_relaxed);
}

// The first freeing pass whose readers' fence failed is said once, as a warning, after the store's lock is
// released (a sandbox that refuses membarrier(2) after registration leaves retired plans in memory until a pass
// can fence; cache_stats::fence_failures counts every such pass).
void report_fence_failure(store& s) noexcept {
  if (s.fence_failures.load(std::memory_order_relaxed) == 0 ||
      s.fence_failure_logged.exchange(true, std::memory_order_relaxed))
    return;
  log_event(spdlog::level::warn, "plan_cache_fence_failed",
            "the plan cache could not fence its readers (membarrier(2) failed): retired plans stay in memory "
            "until a later pass can (cache_stats::fence_failures counts the passes that freed nothing)");
}

// Caller holds s.mutex() exclusively, has taken the slot out of the map, and bumps the fronts' generation
// before reclaim_locked() tags it, so that no front returns it again.
void retire_locked(store& s, std::shared_ptr<slot> sl) {
  s.retired.push_back(retired_slot{std::move(sl), 0});
  s.retired_now.store(s.retired.size(), std::memory_order_relaxed);
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
  const std::uint64_t x = (k.kernel ^ (k.context << 40) ^ k.policy ^ (k.smem_rule << 1) ^ (k.bucket << 2) ^
                           (k.launch << 3) ^ (k.shape << 5) ^ (k.inputs << 7)) *
                          0x9e3779b97f4a7c15ULL;
  return front[static_cast<std::size_t>(x >> 60)];  // top 4 bits: 16 sets
}
static_assert(front_sets == 16, "front_set_of yields 4 bits");

// ---- kept plans ----

// Bit for bit for floating point (a plan is kept as it was made), == for the rest, field by field for the
// plan and its occupancy: a field added to either is compared without a change here (PFR), and one of a
// type without == fails to compile instead of being skipped.
template <class T>
bool same_value(const T& a, const T& b) noexcept;

template <class T, std::size_t... I>
bool same_fields(const T& a, const T& b, std::index_sequence<I...>) noexcept {
  return (same_value(boost::pfr::get<I>(a), boost::pfr::get<I>(b)) && ...);
}

template <class T>
bool same_value(const T& a, const T& b) noexcept {
  if constexpr (std::is_same_v<T, plan> || std::is_same_v<T, occupancy_result>) {
    return same_fields(a, b, std::make_index_sequence<boost::pfr::tuple_size_v<T>>{});
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  } else {
    return a == b;
  }
}

// The plan's numbers and its texts' lengths, not the texts: with the kernel's name they spread the kept plans
// (hashing the policy and reason cost a miss more than comparing the rare plans they alone tell apart), and a
// plan tuned again (its reason carries that tuning's timings, its tuning_ms and trials differ) is another hash, so
// the plans of a kernel tuned many times never pile up on one.
std::uint64_t plan_hash(const plan& p) noexcept {
  std::uint64_t h = hash_combine(static_cast<std::uint64_t>(p.block_threads), p.dynamic_smem_bytes);
  h = hash_combine(
      h, static_cast<std::uint64_t>(p.blocks_per_sm) << 32 | static_cast<std::uint32_t>(p.sm_count));
  h = hash_combine(h, static_cast<std::uint64_t>(p.block.x) << 42 | static_cast<std::uint64_t>(p.block.y) << 21 |
                          static_cast<std::uint64_t>(p.block.z));
  static_assert(sizeof(p.tuning_ms) == sizeof(std::uint64_t), "tuning_ms is a 64-bit double");
  std::uint64_t tuning_bits = 0;
  std::memcpy(&tuning_bits, &p.tuning_ms, sizeof tuning_bits);
  h = hash_combine(h, tuning_bits ^ static_cast<std::uint64_t>(p.trials));
  return hash_combine(h, static_cast<std::uint64_t>(p.policy.size()) << 32 | p.reason.size());
}

// The kept plans' lock, a leaf (nothing is locked under it): constant-initialised and registered at load time: a fork never meets its registration half done.
std::mutex kept_plans_m;
std::mutex& kept_plans_mutex() noexcept { return kept_plans_m; }
const bool kept_plans_fork = lifecycle::on_fork_leaf_mutex<kept_plans_mutex>();

struct kept_plans {
  std::mutex& m = kept_plans_m;
  std::unordered_multimap<std::uint64_t, const kept_plan*> by_hash;  // never freed
};

kept_plans& the_kept_plans() {
  static kept_plans& k = *new kept_plans;  // never destroyed: a caller's plan lives as long as the process
  return k;
}
// Made at load time, before any thread: a fork never meets its initialiser in progress.
const bool kept_plans_made = (the_kept_plans(), true);

}  // namespace

plan_reader::plan_reader() {
  if (reader_depth++ > 0) return;
  try {
    reader_record& r = reader_of_this_thread();
    if (hot.readers_fenced.load(std::memory_order_acquire)) {
      r.active.store(hot.reader_epoch.load(std::memory_order_acquire), std::memory_order_relaxed);
      asymmetric_fence::light();  // the pass's heavy fence orders it before this reader's loads
    } else {
      r.active.exchange(hot.reader_epoch.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
    }
  } catch (...) {
    --reader_depth;
    throw;
  }
}

bool readers_fenced() noexcept { return hot.readers_fenced.load(std::memory_order_acquire); }

void fail_reader_fence_for_test(bool fail) {
  store& s = the_store();
  std::unique_lock<std::shared_mutex> lock(s.mutex());
  fence_fails_for_test = fail;
  if (fail) s.fence_failure_logged.store(false, std::memory_order_relaxed);  // the next failure is said again
}

bool fence_readers(bool on) noexcept {
  hot.readers_fenced.store(on && asymmetric_fence::register_process(), std::memory_order_seq_cst);
  return readers_fenced();
}

plan_reader::~plan_reader() {
  if (--reader_depth == 0) this_reader->active.store(0, std::memory_order_release);
}

namespace {
// The 128-bit product's halves folded: one multiply, every bit of either input reaching the result.
__extension__ typedef unsigned __int128 uint128;  // GCC's and Clang's 128-bit integer (one mul instruction)
inline std::uint64_t fold_multiply(std::uint64_t a, std::uint64_t b) noexcept {
  const uint128 p = static_cast<uint128>(a) * b;
  return static_cast<std::uint64_t>(p) ^ static_cast<std::uint64_t>(p >> 64);
}
}  // namespace

// The fields in pairs, each pair one multiply of its own (no pair waits for another), then the pairs folded: a
// miss hashes its key about ten times (lookups, the family count, the map's growth), and a chain of eight mixes
// one after another cost each about 150 instructions. The constants keep a field of 0 from zeroing its pair.
std::uint64_t hash_key(const plan_key& k) noexcept {
  const std::uint64_t a = fold_multiply(k.context ^ 0xa0761d6478bd642fULL, k.kernel ^ 0xe7037ed1a0b428dbULL);
  const std::uint64_t b = fold_multiply(k.policy ^ 0x8ebc6af09c88c6e3ULL, k.smem_rule ^ 0x589965cc75374cc3ULL);
  const std::uint64_t c = fold_multiply(k.bucket ^ 0x1d8e4e27c47d124fULL, k.launch ^ 0xeb44accab455d165ULL);
  const std::uint64_t d = fold_multiply(k.shape ^ 0x9e3779b97f4a7c15ULL, k.inputs ^ 0xbf58476d1ce4e5b9ULL);
  return fold_multiply(a ^ c ^ 0x94d049bb133111ebULL, b ^ d ^ 0x2545f4914f6cdd1dULL);
}

namespace {
// find() where the thread's front did not have the key: the shared map, and the front's line for next time.
__attribute__((noinline)) const plan_entry* find_in_map(const plan_key& key, front_set& set,
                                                        std::uint64_t gen) noexcept {
  store& s = the_store();
  std::shared_ptr<slot> sl;
  {
    std::shared_lock<std::shared_mutex> lock(s.mutex());
    auto it = s.slots.find(key);
    if (it == s.slots.end()) return nullptr;
    sl = it->second;
  }
  if (!sl->ready.load(std::memory_order_acquire)) return nullptr;
  s.map_hits.fetch_add(1, std::memory_order_relaxed);
  set.lines[set.next] = front_line{key, gen, sl->entry()};
  set.next = static_cast<unsigned char>((set.next + 1) % front_ways);
  return sl->entry();
}
}  // namespace

const plan_entry* find(const plan_key& key) noexcept {
  // Sequentially consistent: read after this thread's plan_reader announced itself (see readers above).
  const std::uint64_t gen = hot.front_generation.load(std::memory_order_seq_cst);
  front_set& set = front_set_of(key);
  for (const front_line& line : set.lines)
    if (line.generation == gen && line.entry && line.key == key) return line.entry;
  return find_in_map(key, set, gen);
}

bool bucket_admitted(const plan_key& key) {
  store& s = the_store();
  std::shared_lock<std::shared_mutex> lock(s.mutex());
  if (s.slots.count(key) != 0) return true;
  const auto f = s.family_slots.find(family_of(key));
  return f == s.family_slots.end() || f->second < max_buckets_per_family;
}

const plan_entry* find_or_build_with(const plan_key& key, entry_builder build) {
  // No find() first: every caller has just missed it (a slot made meanwhile is found under the lock).
  store& s = the_store();
  std::shared_ptr<slot> sl;
  std::vector<std::shared_ptr<slot>> gone;  // destroyed after the lock
  {
    std::unique_lock<std::shared_mutex> lock(s.mutex());
    if (key.inputs > s.swept_inputs) {
      // The inputs changed since the last sweep: plans of older generations can never be found again.
      bool swept = false;
      for (auto it = s.slots.begin(); it != s.slots.end();) {
        if (it->first.inputs < key.inputs && it->second->ready.load(std::memory_order_acquire)) {
          retire_locked(s, std::move(it->second));
          it = erase_slot_locked(s, it);
          swept = true;
        } else {
          ++it;
        }
      }
      if (swept) hot.front_generation.fetch_add(1, std::memory_order_seq_cst);
      s.swept_inputs = key.inputs;
    }
    reclaim_locked(s, gone);
    auto& ref = s.slots[key];
    if (!ref) {
      try {
        std::uint32_t& in_family = s.family_slots[family_of(key)];  // counted once the slot is there
        ref = std::make_shared<slot>();
        ++in_family;
      } catch (...) {
        s.slots.erase(key);  // no slot made: none counted
        throw;
      }
    }
    sl = ref;
  }
  gone.clear();
  report_fence_failure(s);
  // A ready slot is answered without its lock (in a child of fork(), a thread that vanished may hold it).
  if (sl->ready.load(std::memory_order_acquire)) return sl->entry();
  const std::thread::id me = std::this_thread::get_id();
  {
    std::unique_lock<std::mutex> lock(sl->m);
    for (;;) {
      if (sl->ready.load(std::memory_order_acquire)) return sl->entry();
      if (sl->builder == std::thread::id{}) break;  // nobody builds it: this thread will
      if (sl->builder == me) return nullptr;        // asked again from inside its own build
      sl->done.wait(lock);
    }
    sl->builder = me;
  }
  struct release {  // on every path: a build that throws lets the next caller retry
    slot& sl;
    ~release() {
      // A build that threw after its entry was made (keeping its plan ran out of memory): the entry goes now,
      // not when the key is built again (it may hold a plugin's policy). This thread still owns it.
      if (!sl.ready.load(std::memory_order_relaxed)) sl.made.reset();
      {
        std::lock_guard<std::mutex> lock(sl.m);
        sl.builder = std::thread::id{};
      }
      sl.done.notify_all();
    }
  } released{*sl};
  plan_entry& made = sl->made.emplace(build).e;  // only this thread builds it: `builder` is this thread
  // A route has no plan of its own; a plan logged at info was kept when its line was queued.
  if (!made.route && !made.kept) made.kept = &keep_plan(made.plan, made.kernel);
  ready_for_hits(made);
  {
    std::lock_guard<std::mutex> lock(sl->m);
    s.builds.fetch_add(1, std::memory_order_relaxed);
    sl->ready.store(true, std::memory_order_release);
  }
  return sl->entry();
}

const kept_plan& keep_plan(const plan& p, const kernel_resources& kernel) {
  kept_plans& k = the_kept_plans();
  const std::uint64_t h = hash_combine(plan_hash(p), std::hash<std::string>{}(kernel.name));
  std::lock_guard<std::mutex> lock(k.m);
  for (auto [it, end] = k.by_hash.equal_range(h); it != end; ++it) {
    const kept_plan& c = *it->second;
    if (c.kernel_name == kernel.name && c.kernel_demangled == kernel.demangled &&
        c.regs_per_thread == kernel.regs_per_thread && c.static_smem_bytes == kernel.static_smem_bytes &&
        c.local_bytes_per_thread == kernel.local_bytes_per_thread && same_value(c.plan, p))
      return c;
  }
  kept_plan* made = new kept_plan{p,
                                  kernel.name,
                                  kernel.demangled,
                                  kernel.regs_per_thread,
                                  kernel.static_smem_bytes,
                                  kernel.local_bytes_per_thread};
  made->num_attrs = fill_launch_attributes(made->attrs, p.options);
  k.by_hash.emplace(h, made);
  return *made;
}

std::size_t free_retired_plans() {
  store& s = the_store();
  std::vector<std::shared_ptr<slot>> gone;
  std::unique_lock<std::shared_mutex> lock(s.mutex());
  reclaim_locked(s, gone);
  const std::size_t left = s.retired.size();
  lock.unlock();
  report_fence_failure(s);
  return left;
}

namespace {
template <class Pred>
void forget_if(Pred drop) {
  store& s = the_store();
  std::vector<std::shared_ptr<slot>> gone;
  std::unique_lock<std::shared_mutex> lock(s.mutex());
  for (auto it = s.slots.begin(); it != s.slots.end();) {
    if (drop(it->first)) {
      retire_locked(s, std::move(it->second));
      it = erase_slot_locked(s, it);
    } else {
      ++it;
    }
  }
  hot.front_generation.fetch_add(1, std::memory_order_seq_cst);
  reclaim_locked(s, gone);
  lock.unlock();
}
}  // namespace

bool forget_entry(const plan_key& key, const plan_entry* expected) {
  store& s = the_store();
  std::vector<std::shared_ptr<slot>> gone;
  std::unique_lock<std::shared_mutex> lock(s.mutex());
  const auto it = s.slots.find(key);
  if (it == s.slots.end() || !it->second->ready.load(std::memory_order_acquire) ||
      it->second->entry() != expected)
    return false;
  retire_locked(s, std::move(it->second));
  erase_slot_locked(s, it);
  hot.front_generation.fetch_add(1, std::memory_order_seq_cst);
  reclaim_locked(s, gone);
  return true;
}

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
  cache_stats out;
  out.builds = s.builds.load();
  out.map_hits = s.map_hits.load();
  out.retired = s.retired_now.load();
  out.freed = s.freed.load();
  out.fence_failures = s.fence_failures.load();
  kept_plans& k = the_kept_plans();
  try {
    std::lock_guard<std::mutex> lock(k.m);
    out.kept_plans = k.by_hash.size();
  } catch (...) {
  }
  return out;
}

}  // namespace detail

std::vector<cached_plan> plan_cache::plans() const {
  detail::store& s = detail::the_store();
  std::vector<cached_plan> out;
  std::shared_lock<std::shared_mutex> lock(s.mutex());
  const std::uint64_t inputs = detail::plan_inputs_generation();
  for (const auto& [key, sl] : s.slots) {
    if (!sl->ready.load(std::memory_order_acquire) || sl->entry()->route) continue;  // a route has no plan
    if (key.inputs != inputs) continue;  // made under other inputs: never launched again
    const detail::plan_entry& e = *sl->entry();
    const device_limits* dev = e.device;
    out.push_back(cached_plan{key, detail::display_name(e.kernel),
                              dev ? dev->name + " #" + std::to_string(dev->ordinal) : std::string(),
                              dev ? dev->uuid : std::string(), e.plan});
  }
  return out;
}

std::size_t plan_cache::size() const {
  detail::store& s = detail::the_store();
  std::shared_lock<std::shared_mutex> lock(s.mutex());
  const std::uint64_t inputs = detail::plan_inputs_generation();
  std::size_t n = 0;
  for (const auto& kv : s.slots)
    n += kv.first.inputs == inputs && kv.second->ready.load(std::memory_order_acquire) &&
         !kv.second->entry()->route;
  return n;
}

void plan_cache::clear() { detail::forget_all_plans(); }

plan_cache& cache() {
  static plan_cache& c = *new plan_cache();  // never destroyed, as every launchfit singleton
  return c;
}

}  // namespace launchfit

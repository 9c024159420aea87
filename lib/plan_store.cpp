// SPDX-License-Identifier: MIT
// The plan store: the loaded table of the plan file, looked up on a miss, and the file layer that fills it
// and writes this process's plans back (LAUNCHFIT_CACHE); below it, the remote store (remote_store.hpp).
//
// Launches never wait for the file: lookups read the table under a mutex that is never held across I/O or
// logging, and store_plan() only queues. One background thread per process takes the queue in batches and
// merges them into the file (plan_merge.hpp), and about once a second (sooner when a lookup saw the file's
// identity change) reads what other processes wrote. What the table serves is an input of every plan: when
// it changes in a way a plan may depend on, plan_inputs_changed() is called, never on the hit path.

#include "plan_store.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "cache_file.hpp"
#include "driver.hpp"
#include "launchfit/error.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_inputs.hpp"
#include "plan_json.hpp"
#include "plan_merge.hpp"
#include "remote_store.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds batch_delay{20};         // stores this close together share one write
constexpr milliseconds lock_wait{1000};         // per attempt at the file's lock
constexpr milliseconds lock_retry_after{1000};  // after a failed attempt, unless a flush is waiting
constexpr milliseconds close_wait{2000};        // set_cache_file / close_cache_file flush this long at most
constexpr milliseconds exit_wait{2000};         // the flush at exit
constexpr std::chrono::seconds temp_sweep_every{60};
// How stale the table may be: the background thread reads the file's identity this often, and a lookup
// at most this often (then the refresh follows at once).
constexpr milliseconds refresh_every{1000};
constexpr milliseconds lookup_stat_every{100};
// Refused entries named one warning each when a file is opened; the rest are counted in one more.
constexpr std::size_t refusals_named = 8;
constexpr std::size_t path_text_bytes = 4096;

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void warn(const std::string& path, const std::string& what) {
  logger()->warn("plan cache file {}: {}", escape_text(path, path_text_bytes), what);
}

// A limit from the environment: a positive integer, else the default (with a note for the warning).
std::size_t env_limit(const char* name, std::size_t fallback, std::vector<std::string>& notes) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || n == 0 || *v == '-' || *v == '+' || *v == ' ') {
    notes.push_back(std::string(name) + "='" + sanitize_text(v, 64) + "' is not a positive integer; using " +
                    std::to_string(fallback));
    return fallback;
  }
  return static_cast<std::size_t>(n);
}

// ---- the match level --------------------------------------------------------------------------------------

// Read from LAUNCHFIT_CACHE_MATCH at first use unless set_cache_match() came first.
struct match_setting {
  std::mutex m;
  std::atomic<int> value{-1};  // a cache_match, or -1 before the first use
};

match_setting& match_state() {
  static match_setting& s = *new match_setting;
  return s;
}

cache_match current_match() {
  match_setting& s = match_state();
  int v = s.value.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<cache_match>(v);
  std::string warning;
  {
    std::lock_guard lock(s.m);
    v = s.value.load(std::memory_order_relaxed);
    if (v < 0) {
      const char* env = std::getenv("LAUNCHFIT_CACHE_MATCH");
      const std::string name = env ? env : "";
      cache_match m = cache_match::model;
      if (name == "exact") {
        m = cache_match::exact;
      } else if (!name.empty() && name != "model") {
        m = cache_match::exact;  // a typo must not widen what a production job accepts
        warning = "LAUNCHFIT_CACHE_MATCH='" + escape_text(name.substr(0, 64), path_text_bytes) +
                  "' is neither exact nor model; using exact";
      }
      v = static_cast<int>(m);
      s.value.store(v, std::memory_order_release);
    }
  }
  if (!warning.empty()) logger()->warn("{}", warning);
  return static_cast<cache_match>(v);
}

// ---- the loaded table -------------------------------------------------------------------------------------

bool same_launch_key(const stored_key& a, const stored_key& b) {
  return a.kernel == b.kernel && a.policy == b.policy && a.smem_rule == b.smem_rule;
}

bool same_but_bucket(const stored_key& a, const stored_key& b) {
  return a.device_uuid == b.device_uuid && a.cc == b.cc && a.sm_count == b.sm_count &&
         a.driver_version == b.driver_version && same_launch_key(a, b);
}

// Whether two entries of one key would serve the same plan (when they were stored aside).
bool same_content(const stored_entry& a, const stored_entry& b) {
  if (a.bytes_in_flight_per_sm != b.bytes_in_flight_per_sm || a.key.device_name != b.key.device_name ||
      a.key.l2_bytes != b.key.l2_bytes) {
    return false;
  }
  nlohmann::json pa = plan_to_json(a.plan), pb = plan_to_json(b.plan);
  pa.erase("match");
  pb.erase("match");
  return pa == pb;
}

// Entries by launch first (kernel, policy, smem rule), so that what one lookup considers is adjacent.
using table_key =
    std::tuple<std::string, std::string, std::string, std::string, int, int, int, std::uint64_t>;

table_key table_key_of(const stored_key& k) {
  return {k.kernel, k.policy, k.smem_rule, k.device_uuid, k.cc, k.sm_count, k.driver_version, k.bucket};
}

// What lookups see: the file's entries as loaded and refreshed, and this process's stores. Not locked:
// its owner's mutex guards it.
class plan_table {
 public:
  const stored_entry* exact(const stored_key& k) const {
    const auto it = entries_.find(table_key_of(k));
    return it == entries_.end() ? nullptr : &it->second;
  }
  // Calls f for every entry of this kernel and policy, and smem rule unless it is null.
  template <class F>
  void each_of(const std::string& kernel, const std::string& policy, const std::string* smem_rule,
               F f) const {
    for (auto it = entries_.lower_bound(table_key{kernel, policy, smem_rule ? *smem_rule : std::string(),
                                                  std::string(), INT_MIN, INT_MIN, INT_MIN, 0});
         it != entries_.end(); ++it) {
      if (std::get<0>(it->first) != kernel || std::get<1>(it->first) != policy ||
          (smem_rule && std::get<2>(it->first) != *smem_rule)) {
        break;
      }
      f(it->second);
    }
  }
  template <class F>
  void each(F f) const {
    for (const auto& [k, e] : entries_) f(e);
  }
  void put(stored_entry e) { entries_.insert_or_assign(table_key_of(e.key), std::move(e)); }
  // A lookup's launch, found or not: an entry another process changes for it is an input of its plan.
  void note_lookup(const stored_key& k) { looked_up_.insert(launch_hash(k)); }
  // Takes what another process wrote (the disk wins) except for the keys `ours` says this process stored
  // and has not written yet. True when an entry that a plan may depend on now differs: one of a launch
  // looked up here, or a calibration (the bytes-in-flight default of every launch).
  template <class Ours>
  bool take_from_disk(std::vector<stored_entry>& changed, Ours ours) {
    bool relied_on = false;
    for (auto& e : changed) {
      if (ours(e.key)) continue;
      table_key k = table_key_of(e.key);
      const auto it = entries_.find(k);
      if (it == entries_.end() || !same_content(it->second, e)) {
        relied_on =
            relied_on || e.key.kernel == calibration_kernel || looked_up_.count(launch_hash(e.key)) != 0;
      }
      entries_.insert_or_assign(std::move(k), std::move(e));
    }
    return relied_on;
  }
  std::size_t size() const noexcept { return entries_.size(); }
  void clear() {
    entries_.clear();
    looked_up_.clear();
  }

 private:
  static std::uint64_t launch_hash(const stored_key& k) noexcept {
    const std::hash<std::string_view> h;
    std::uint64_t x = h(k.kernel);
    x = (x ^ (x >> 29)) * 0x9e3779b97f4a7c15ULL ^ h(k.policy);
    return (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL ^ h(k.smem_rule);
  }

  std::map<table_key, stored_entry> entries_;
  std::unordered_set<std::uint64_t>
      looked_up_;  // launch_hash of every lookup (a collision only costs a replan)
};

// ---- the file layer ---------------------------------------------------------------------------------------

class file_store;
file_store& state();
void writer_loop();
void flush_at_exit();

// One per process, never destroyed (a launch from a static destructor still finds its plans).
class file_store final : public plan_store_layer {
 public:
  std::mutex config;  // set/close and the first look at LAUNCHFIT_CACHE; never the writer's
  std::atomic<bool> env_checked{false};

  mutable std::mutex memory;     // all below; never held across I/O or logging
  std::condition_variable work;  // to the writer: something to write or to look at, or a flush waits
  std::condition_variable done;  // from the writer: a batch or a refresh ended
  bool open = false;
  bool writable = false;
  cache_file_mode mode = cache_file_mode::read_write;
  std::string path;  // as given (for messages)
  std::string real;  // symbolic links resolved: what is read, locked and replaced
  std::size_t max_bytes = cache_file_default_max_bytes;
  std::size_t max_entries = default_max_entries;
  unsigned epoch = 0;  // a new file (or none) since a batch or refresh began: its result is dropped
  plan_table table;
  std::map<key_tuple, stored_entry> pending;    // stored since the last write, not yet taken by the writer
  std::map<key_tuple, stored_entry> in_flight;  // taken by the writer
  disk_view seed;                  // the file as set_cache_file read it, for the writer's first use
  file_identity known;             // the file as this process last read or wrote it
  steady::time_point next_stat{};  // a lookup looks at the file's identity again from then on
  bool refresh_wanted = false;     // the file changed (or a caller asked): read it now
  std::uint64_t refresh_asked = 0, refreshed = 0;
  std::uint64_t stored = 0, written = 0;  // store sequence numbers: the last stored, the last written
  steady::time_point not_before{};        // the writer waits until then (a batch gathering, a busy lock)
  int flushing = 0;                       // flush calls waiting: retry a busy lock at once
  bool lock_warned = false;
  std::string failure;   // why this file is not written (empty while it is)
  pid_t writer_pid = 0;  // the process whose writer thread runs (none after a fork)
  bool exit_registered = false;
  bool exiting = false;
  layer_stats counts;

  file_store() {
    // A child of fork() has no writer thread and must not inherit a locked mutex.
    lifecycle::on_fork({[] {
                          state().config.lock();
                          state().memory.lock();
                        },
                        [] {
                          state().memory.unlock();
                          state().config.unlock();
                        },
                        [] {
                          file_store& f = state();
                          new (&f.work) std::condition_variable;
                          new (&f.done) std::condition_variable;
                          for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));
                          f.in_flight.clear();
                          f.writer_pid = 0;
                          f.flushing = 0;
                          f.memory.unlock();
                          f.config.unlock();
                        }});
  }

  const char* name() const noexcept override { return "file"; }
  std::vector<stored_entry> find(const stored_key& key) override;
  void put(const stored_entry& e) override { enqueue(e); }
  bool flush(unsigned max_wait_ms) override;
  layer_stats stats() const override {
    std::lock_guard lock(memory);
    layer_stats s = counts;
    s.dead = open && !failure.empty();
    return s;
  }

  // Makes an entry visible to lookups at once and queues it for the writer. False where nothing is stored
  // (no file, or a frozen one).
  bool enqueue(stored_entry e);

  // Under memory. Starts this process's writer thread if it has none.
  void ensure_writer() {
    if (writer_pid == ::getpid()) return;
    try {
      std::thread(writer_loop).detach();
      writer_pid = ::getpid();
    } catch (const std::system_error&) {
      return;  // no thread: plans stay queued; flush_cache_file() says so
    }
    if (!exit_registered) exit_registered = lifecycle::on_exit(flush_at_exit);
  }

  // Under memory.
  bool all_written() const { return written >= stored; }
  // Under memory. Whether the file is read again when another process writes it. A frozen file is not:
  // every rank of a job keeps the plans it opened.
  bool refreshed_from_disk() const { return open && writable; }
  // Under memory. Whether a key is this process's own store, not yet in the file: it wins over the disk.
  bool ours(const stored_key& k) const {
    if (pending.empty() && in_flight.empty()) return false;
    const key_tuple t = tie_key(k);
    return pending.count(t) != 0 || in_flight.count(t) != 0;
  }

  // A lookup's look at the file, at most every lookup_stat_every: one stat outside the lock, and the
  // refresh woken when the file is not the one this process last read or wrote.
  struct identity_check {
    bool due = false;
    std::string real;
    file_identity known;
    unsigned epoch = 0;
  };
  // Under memory.
  identity_check check_due() {
    identity_check c;
    if (!refreshed_from_disk()) return c;
    const auto now = steady::now();
    if (now < next_stat) return c;
    next_stat = now + lookup_stat_every;
    c = {true, real, known, epoch};
    return c;
  }
  void check_identity(const identity_check& c) {
    if (!c.due || identity_now(c.real) == c.known) return;
    std::lock_guard lock(memory);
    if (c.epoch != epoch || !refreshed_from_disk()) return;
    refresh_wanted = true;
    ensure_writer();
    work.notify_all();
  }
};

file_store& state() {
  static file_store& f = *new file_store;
  return f;
}

// Under memory (lk). Reads what another process wrote into the table, when the file's identity changed.
// Returns whether an entry a plan may depend on changed.
bool refresh(file_store& f, std::unique_lock<std::mutex>& lk, disk_view& view) {
  const std::string path = f.real;
  const std::size_t max_bytes = f.max_bytes;
  file_identity seen = f.known;
  const unsigned epoch = f.epoch;
  f.refresh_wanted = false;
  lk.unlock();
  std::vector<stored_entry> changed;
  std::size_t refused = 0;
  reread_file(path, max_bytes, view, seen, changed, refused);
  lk.lock();
  bool relied_on = false;
  if (epoch == f.epoch) {
    f.known = seen;
    f.counts.refused += refused;
    relied_on = f.table.take_from_disk(changed, [&](const stored_key& k) { return f.ours(k); });
  }
  return relied_on;
}

void writer_loop() {
  file_store& f = state();
  disk_view view;
  unsigned view_epoch = ~0u;
  bool first_write = false;  // of the file in use: its leftover temp files are swept
  steady::time_point last_sweep{};
  steady::time_point next_check = steady::now() + refresh_every;
  std::unique_lock lk(f.memory);
  const pid_t me = ::getpid();
  for (;;) {
    if (f.writer_pid != me) return;
    if (f.epoch != view_epoch) {  // another file (or none): the writer starts from the file as it was loaded
      view = std::move(f.seed);
      f.seed = disk_view{};
      view_epoch = f.epoch;
      first_write = true;
    }
    const auto now = steady::now();
    const bool batch = f.open && f.writable && !f.pending.empty();
    if (!batch || (f.flushing == 0 && !f.exiting && now < f.not_before)) {
      if (!batch && f.exiting) {
        f.writer_pid = 0;
        return;
      }
      const bool reads = f.refreshed_from_disk() && !f.exiting;
      if (reads && (f.refresh_wanted || now >= next_check)) {
        next_check = now + refresh_every;
        const std::uint64_t asked = f.refresh_asked;
        if (refresh(f, lk, view)) {
          lk.unlock();  // after the table changed: a plan made from what a lookup saw before is never reused
          plan_inputs_changed("plan file changed by another process");
          lk.lock();
        }
        f.refreshed = std::max(f.refreshed, asked);  // refresh_cache_file() returns after the change is known
        f.done.notify_all();
        continue;
      }
      if (batch) {
        f.work.wait_until(lk, reads ? std::min(f.not_before, next_check) : f.not_before);
      } else if (reads) {
        f.work.wait_until(lk, next_check);
      } else {
        f.work.wait(lk);
      }
      continue;
    }
    f.in_flight = std::move(f.pending);
    f.pending.clear();
    std::vector<stored_entry> batch_entries;
    batch_entries.reserve(f.in_flight.size());
    for (const auto& [k, e] : f.in_flight) batch_entries.push_back(e);
    const std::uint64_t seq = f.stored;
    const unsigned epoch = f.epoch;
    write_job job{f.real, f.max_bytes, f.max_entries, first_write, lock_wait};
    if (steady::now() - last_sweep > temp_sweep_every) job.sweep_temps = true;
    if (job.sweep_temps) last_sweep = steady::now();
    first_write = false;
    lk.unlock();
    write_outcome out = write_file(job, batch_entries, view);
    lk.lock();
    std::string warning;
    bool relied_on = false;
    if (epoch == f.epoch) {
      switch (out.status) {
        case write_status::written:
          f.known = view.id;
          f.counts.writes += batch_entries.size();
          relied_on = f.table.take_from_disk(out.others, [&](const stored_key& k) { return f.ours(k); });
          break;
        case write_status::lock_busy:
          for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));  // a newer store wins
          f.not_before = steady::now() + lock_retry_after;
          if (!f.lock_warned) warning = out.why;
          f.lock_warned = true;
          break;
        case write_status::failed:
          f.writable = false;
          f.failure = out.why;
          ++f.counts.failures;
          f.counts.write_drops += f.pending.size() + f.in_flight.size();
          f.pending.clear();
          warning = "cannot write it (" + out.why + "); plans are kept in memory only";
          break;
      }
      f.in_flight.clear();
    }
    const bool say = !warning.empty() && !f.exiting;
    if (say || relied_on) {  // before a waiting flush returns: its caller may look
      const std::string path = f.path;
      lk.unlock();
      if (say) warn(path, warning);
      if (relied_on) plan_inputs_changed("plan file changed by another process");
      lk.lock();
    }
    if (out.status == write_status::written && epoch == f.epoch) f.written = std::max(f.written, seq);
    f.done.notify_all();
  }
}

// Under memory (lk). Waits for everything stored so far to be written; false when it was not.
bool flush_locked(file_store& f, std::unique_lock<std::mutex>& lk, milliseconds max_wait) {
  if (!f.open || f.mode == cache_file_mode::frozen || f.all_written()) return true;
  if (!f.writable) return false;  // plans stored, kept in memory only
  const std::uint64_t target = f.stored;
  const unsigned epoch = f.epoch;
  f.ensure_writer();
  ++f.flushing;
  f.work.notify_all();
  f.done.wait_for(lk, max_wait, [&] { return f.written >= target || !f.writable || f.epoch != epoch; });
  --f.flushing;
  return f.epoch == epoch && f.writable && f.written >= target;
}

void flush_at_exit() {
  file_store& f = state();
  std::unique_lock lk(f.memory);
  if (!flush_locked(f, lk, exit_wait) && f.writable && (!f.pending.empty() || !f.in_flight.empty())) {
    const std::string path = f.path;
    const std::size_t left = f.pending.size() + f.in_flight.size();
    f.exiting = true;
    lk.unlock();
    warn(path,
         std::to_string(left) + " plan(s) not written at exit: the file stayed locked by another process");
    lk.lock();
  }
  f.exiting = true;
  f.work.notify_all();
}

bool file_store::flush(unsigned max_wait_ms) {
  std::unique_lock lk(memory);
  return flush_locked(*this, lk, milliseconds(max_wait_ms));
}

bool file_store::enqueue(stored_entry e) {
  key_tuple k = tie_key(e.key);
  std::lock_guard lock(memory);
  if (!open || mode == cache_file_mode::frozen) return false;
  table.put(e);
  ++stored;
  if (!writable) return true;
  const bool first = pending.empty();
  pending.insert_or_assign(std::move(k), std::move(e));
  const auto soon = steady::now() + batch_delay;
  if (first && not_before < soon) not_before = soon;
  ensure_writer();
  work.notify_one();
  return true;
}

std::vector<stored_entry> file_store::find(const stored_key& key) {
  std::vector<stored_entry> out;
  identity_check check;
  {
    std::lock_guard lock(memory);
    if (!open) return out;
    ++counts.lookups;
    table.note_lookup(key);
    table.each_of(key.kernel, key.policy, &key.smem_rule, [&](const stored_entry& e) {
      if (e.key.device_uuid == key.device_uuid || same_device_model(e.key, key)) out.push_back(e);
    });
    counts.hits += out.size();
    check = check_due();
  }
  check_identity(check);
  return out;
}

// What set_cache_file found, before it is installed.
struct loaded_file {
  disk_view view;  // for the writer: the file as read here, so its first write need not read it again
  file_identity id;
  std::string real;
  bool writable = true;
  std::size_t max_bytes = cache_file_default_max_bytes;
  std::size_t max_entries = default_max_entries;
  std::vector<stored_entry> entries;
  std::size_t refused = 0;
  std::vector<std::string> warnings;
};

// The warnings for a file's bad entries: one naming each refused entry (its plan does not launch as its key
// says, which an operator wants to see), and one counting the others.
void note_bad_entries(const cache_file_contents& c, std::vector<std::string>& warnings) {
  if (c.refused == 0) {
    if (c.skipped) {
      warnings.push_back("skipped " + std::to_string(c.skipped) + " bad entr" +
                         (c.skipped == 1 ? "y" : "ies") + " (" + c.problem + ")");
    }
    return;
  }
  for (std::size_t i = 0; i < c.refusals.size() && i < refusals_named; ++i)
    warnings.push_back(c.refusals[i] + "; the entry is not used");
  if (c.refused > refusals_named) {
    warnings.push_back(
        std::to_string(c.refused - refusals_named) +
        " more entries refused: their plans do not launch as their keys say (launchfit-plans check "
        "names them)");
  }
  const std::size_t others = c.skipped - c.refused;
  if (others == 0) return;
  // The first problem that is not a refusal (refusals are problems too, in order).
  std::string first;
  for (std::size_t p = 0, r = 0; p < c.problems.size() && first.empty(); ++p) {
    if (r < c.refusals.size() && c.problems[p] == c.refusals[r]) {
      ++r;
    } else {
      first = c.problems[p];
    }
  }
  warnings.push_back("skipped " + std::to_string(others) + " bad entr" + (others == 1 ? "y" : "ies") +
                     (first.empty() ? std::string() : " (" + first + ")"));
}

loaded_file load(const std::string& path, cache_file_mode mode) {
  loaded_file out;
  out.max_bytes = env_limit("LAUNCHFIT_CACHE_MAX_BYTES", cache_file_default_max_bytes, out.warnings);
  out.max_entries = env_limit("LAUNCHFIT_CACHE_MAX_ENTRIES", default_max_entries, out.warnings);
  const resolved_path where = resolve(path);
  out.real = where.real;
  if (!where.problem.empty()) {
    out.warnings.push_back(where.problem + "; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  std::string text, why;
  const read_result r = read_bounded(out.real, out.max_bytes, text, why, out.id);
  if (r == read_result::missing) return out;  // created on first write
  if (r == read_result::refused) {
    out.warnings.push_back((why.rfind("cannot", 0) == 0 ? why : "ignored and left untouched: " + why) +
                           "; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  entry_lines disk;
  const cache_file_contents contents = read_entries(text, nullptr, disk, nullptr);
  switch (contents.status) {
    case cache_file_status::ok:
    case cache_file_status::empty:
      note_bad_entries(contents, out.warnings);
      out.refused = contents.refused;
      out.entries.reserve(disk.size());
      for (const auto& [k, h] : disk) out.entries.push_back(h.entry);
      out.view = {std::move(disk), out.id, true, {}};
      break;
    case cache_file_status::corrupt:
      out.warnings.push_back("ignored: " + contents.problem +
                             (mode == cache_file_mode::frozen ? "" : "; it will be replaced"));
      break;
    case cache_file_status::foreign:
    case cache_file_status::wrong_version:
      out.warnings.push_back("ignored and left untouched: " + contents.problem +
                             "; plans are kept in memory only");
      out.writable = false;
      break;
  }
  return out;
}

// Under config. Writes what the file in use still has pending (bounded wait), before another file (or
// the same one again) is read.
void flush_before_switch(file_store& f) {
  std::unique_lock lk(f.memory);
  if (!f.open || flush_locked(f, lk, close_wait) || !f.writable) return;
  const std::string path = f.path;
  const std::size_t left = f.pending.size() + f.in_flight.size();
  lk.unlock();
  warn(path, std::to_string(left) + " plan(s) not written before the file was closed: its lock stayed held");
}

// Under config. Installs `next` (or no file). Returns the warnings of the load.
std::vector<std::string> switch_file(file_store& f, const std::string& path, cache_file_mode mode,
                                     loaded_file* next) {
  std::unique_lock lk(f.memory);
  ++f.epoch;
  f.pending.clear();
  f.in_flight.clear();
  f.stored = f.written = 0;
  f.not_before = {};
  f.lock_warned = false;
  f.failure.clear();
  f.table.clear();
  f.known = {};
  f.next_stat = {};
  f.refresh_wanted = false;
  f.open = next != nullptr;
  if (next) {
    f.path = path;
    f.real = std::move(next->real);
    f.mode = mode;
    f.writable = next->writable && mode == cache_file_mode::read_write;
    f.max_bytes = next->max_bytes;
    f.max_entries = next->max_entries;
    for (auto& e : next->entries) f.table.put(std::move(e));
    f.known = next->id;
    f.counts.refused += next->refused;
    f.seed = f.writable ? std::move(next->view) : disk_view{};
    // The background thread also reads what other processes write.
    if (f.writable) f.ensure_writer();
  } else {
    f.seed = disk_view{};
    f.path.clear();
    f.real.clear();
    f.writable = false;
  }
  f.done.notify_all();
  f.work.notify_all();
  lk.unlock();
  return next ? std::move(next->warnings) : std::vector<std::string>{};
}

void open_locked(file_store& f, const std::string& path, cache_file_mode mode,
                 std::vector<std::string> extra = {}) {
  flush_before_switch(f);
  loaded_file next = load(path, mode);
  for (auto& w : extra) next.warnings.push_back(std::move(w));
  for (const auto& w : switch_file(f, path, mode, &next)) warn(path, w);
}

// The file of LAUNCHFIT_CACHE, opened at the first use of the store. No plan input changes: every miss asks
// the store first, so nothing was planned before it.
void ensure_env(file_store& f) {
  if (f.env_checked.load(std::memory_order_acquire)) return;
  std::lock_guard lock(f.config);
  if (f.env_checked.load(std::memory_order_relaxed)) return;
  const char* file = std::getenv("LAUNCHFIT_CACHE");
  if (file && *file) {
    cache_file_mode m = cache_file_mode::read_write;
    const char* mode_env = std::getenv("LAUNCHFIT_CACHE_MODE");
    const std::string mode_name = mode_env ? mode_env : "";
    std::vector<std::string> extra;
    if (mode_name == "frozen") {
      m = cache_file_mode::frozen;
    } else if (!mode_name.empty() && mode_name != "read_write") {
      m = cache_file_mode::frozen;  // a typo must not start writing to a file meant to be read only
      extra.push_back("LAUNCHFIT_CACHE_MODE='" + sanitize_text(mode_name, 64) +
                      "' is neither read_write nor frozen; using frozen");
    }
    open_locked(f, file, m, std::move(extra));
  }
  f.env_checked.store(true, std::memory_order_release);
}

file_store& ready_state() {
  file_store& f = state();
  ensure_env(f);
  return f;
}

// The best entry `accept` allows: the nearest bucket, then the nearest driver (an older one on a tie),
// then the newest entry, then the smallest UUID, so every process picks the same plan from the same file.
template <class Entries, class Accept>
const stored_entry* best_entry(const Entries& entries, const stored_key& key, Accept accept) {
  using rank = std::tuple<std::uint64_t, long long, bool, std::uint64_t, std::string_view>;
  auto rank_of = [&](const stored_entry& e) {
    const std::uint64_t b = e.key.bucket > key.bucket ? e.key.bucket - key.bucket : key.bucket - e.key.bucket;
    const long long d = static_cast<long long>(e.key.driver_version) - key.driver_version;
    return rank{b, d < 0 ? -d : d, d > 0, ~e.stored_at_ms, e.key.device_uuid};
  };
  const stored_entry* best = nullptr;
  rank best_rank{};
  entries([&](const stored_entry& e) {
    if (!accept(e.key)) return;
    const rank r = rank_of(e);
    if (!best || r < best_rank) {
      best = &e;
      best_rank = r;
    }
  });
  return best;
}

stored_key calibration_key(const device_limits& dev, int driver_version) {
  stored_key k = stored_key_for(dev, driver_version, kernel_resources{}, calibration_policy, "", 0);
  k.kernel = calibration_kernel;
  return k;
}

}  // namespace

plan_store_layer& file_layer() { return ready_state(); }

std::optional<plan> best_stored_plan(const std::vector<stored_entry>& candidates, const stored_key& key,
                                     bool exact_bucket, bool model, const std::string& source) {
  const auto all = [&](const auto& f) {
    for (const auto& e : candidates) f(e);
  };
  auto found = [&](const stored_entry* e, const char* level) -> std::optional<plan> {
    if (!e) return std::nullopt;
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

bool refresh_cache_file(unsigned max_wait_ms) {
  file_store& f = ready_state();
  std::unique_lock lk(f.memory);
  if (!f.refreshed_from_disk()) return false;
  const std::uint64_t target = ++f.refresh_asked;
  const unsigned epoch = f.epoch;
  f.refresh_wanted = true;
  f.ensure_writer();
  f.work.notify_all();
  f.done.wait_for(lk, milliseconds(max_wait_ms), [&] { return f.refreshed >= target || f.epoch != epoch; });
  return f.epoch == epoch && f.refreshed >= target;
}

}  // namespace detail

void set_cache_file(const std::string& path, cache_file_mode mode) {
  auto& f = detail::state();
  {
    std::lock_guard lock(f.config);
    f.env_checked.store(true, std::memory_order_release);
    detail::open_locked(f, path, mode);
  }
  // Whatever the file holds may now win over a plan made before: stored plans, a calibrated target.
  detail::plan_inputs_changed("plan file opened");
}

void close_cache_file() {
  auto& f = detail::state();
  bool was_open = false;
  {
    std::lock_guard lock(f.config);
    f.env_checked.store(true, std::memory_order_release);
    detail::flush_before_switch(f);
    {
      std::lock_guard memory(f.memory);
      was_open = f.open;
    }
    detail::switch_file(f, "", cache_file_mode::read_write, nullptr);
  }
  if (was_open) detail::plan_inputs_changed("plan file closed");  // its plans and calibrations are gone
}

bool flush_cache_file(unsigned max_wait_ms) { return detail::ready_state().flush(max_wait_ms); }

void set_cache_match(cache_match m) {
  detail::match_setting& s = detail::match_state();
  bool changed = false;
  {
    std::lock_guard lock(s.m);
    changed = s.value.exchange(static_cast<int>(m), std::memory_order_acq_rel) != static_cast<int>(m);
  }
  // Which stored plans may serve a launch decides its plan: plans found under the other level are not reused.
  if (changed) detail::plan_inputs_changed("plan match level");
}

cache_match cache_file_match() { return detail::current_match(); }

std::optional<plan> find_stored_plan(const stored_key& key, bool exact_bucket) {
  detail::plan_store_layer& file = detail::file_layer();
  const bool model = detail::current_match() == cache_match::model;
  if (auto p = detail::best_stored_plan(file.find(key), key, exact_bucket, model, "cache-file")) return p;
  // Below the file, on a miss only: the remote store (its I/O is bounded).
  detail::plan_store_layer* remote = detail::remote_layer();
  if (!remote) return std::nullopt;
  std::vector<detail::stored_entry> entries = remote->find(key);
  // Untrusted whatever the layer checked: held to the file's rule.
  entries.erase(
      std::remove_if(entries.begin(), entries.end(),
                     [](const detail::stored_entry& e) { return !detail::validate_stored_entry(e).empty(); }),
      entries.end());
  std::optional<plan> p = detail::best_stored_plan(entries, key, exact_bucket, model, "remote");
  if (p) p->match = "remote";  // one level: a remote entry is another GPU's by nature
  return p;
}

std::optional<std::size_t> find_calibration(const device_limits& dev, int driver_version) {
  auto& f = detail::ready_state();
  const stored_key key = detail::calibration_key(dev, driver_version);
  const bool model = detail::current_match() == cache_match::model;
  std::optional<std::size_t> out;
  std::string path;
  detail::file_store::identity_check check;
  {
    std::lock_guard lock(f.memory);
    if (!f.open) return std::nullopt;
    path = f.path;
    check = f.check_due();
    if (const detail::stored_entry* e = f.table.exact(key); e && e->bytes_in_flight_per_sm) {
      out = static_cast<std::size_t>(e->bytes_in_flight_per_sm);
    } else {
      const auto calibrations = [&](const auto& each) {
        f.table.each_of(detail::calibration_kernel, detail::calibration_policy, nullptr, each);
      };
      const detail::stored_entry* best = detail::best_entry(calibrations, key, [&](const stored_key& k) {
        return k.device_uuid == key.device_uuid || (model && same_device_model(k, key));
      });
      if (best && best->bytes_in_flight_per_sm) out = static_cast<std::size_t>(best->bytes_in_flight_per_sm);
    }
  }
  f.check_identity(check);
  // The file said a target; used only when this device could have measured it (a stored 1 B per SM would
  // size every block to one warp).
  if (out) {
    if (const std::string why = detail::implausible_calibration(*out, dev); !why.empty()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        detail::warn(path, "calibration not used: " + why + "; bytes_in_flight keeps its default");
      }
      return std::nullopt;
    }
  }
  return out;
}

void store_calibration(const device_limits& dev, int driver_version, std::size_t bytes_in_flight_per_sm) {
  if (const std::string why = detail::implausible_calibration(bytes_in_flight_per_sm, dev); !why.empty())
    throw error(errc::invalid_argument, "store_calibration", why);
  auto& f = detail::ready_state();
  detail::stored_entry e;
  e.key = detail::calibration_key(dev, driver_version);
  e.stored_at_ms = detail::now_ms();
  e.bytes_in_flight_per_sm = bytes_in_flight_per_sm;
  e.plan.block = dims{1, 1, 1};
  e.plan.block_threads = 1;
  e.plan.reason =
      "measured by launchfit-calibrate: " + std::to_string(bytes_in_flight_per_sm) + " B in flight per SM";
  // No plan key holds bytes_in_flight's default target: plans made under the previous one are not reused.
  if (f.enqueue(std::move(e))) detail::plan_inputs_changed("calibration stored");
}

void store_bytes_in_flight_calibration(std::size_t bytes_per_sm) {
  store_calibration(device_limits::query_current(), detail::driver().version, bytes_per_sm);
}

std::optional<std::size_t> bytes_in_flight_calibration() {
  return find_calibration(device_limits::query_current(), detail::driver().version);
}

void store_plan(const stored_key& key, const plan& p) {
  auto& f = detail::ready_state();
  // A fallback plan (a plugin declined or failed) is not the policy's decision: stored, it would stop the
  // policy from being asked again in later runs (autotune declines launches it may not re-run).
  if (p.match == "fallback") return;
  detail::stored_entry e{key, p, detail::now_ms()};
  e.plan.match = "computed";
  if (detail::plan_store_layer* remote = detail::remote_layer()) remote->put(e);
  f.enqueue(std::move(e));
}

bool cache_file_open() {
  auto& f = detail::ready_state();
  std::lock_guard lock(f.memory);
  return f.open;
}

std::size_t stored_plan_count() {
  auto& f = detail::ready_state();
  std::lock_guard lock(f.memory);
  return f.open ? f.table.size() : 0;
}

}  // namespace launchfit

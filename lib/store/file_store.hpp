// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan file's layer of the plan store (LAUNCHFIT_CACHE, set_cache_file), shared by its three
// files: file_layer.cpp (lookups, opening and closing, calibrations), file_writer.cpp (the task of the
// background queue that writes this process's plans and reads what other processes wrote) and
// file_load.cpp (reading a file when it is opened).
//
// Launches never wait for the file: lookups read the table under a mutex that is never held across I/O or
// logging, and store_plan() only queues. The writer is a task of launchfit's background queue
// (background.hpp): it takes the queue in batches and merges them into the file (plan_merge.hpp), and about
// once a second (sooner when a lookup saw the file's identity change) reads what other processes wrote. At
// exit the queue drains it first, before the remote stores and the log. What the table serves is an input
// of every plan: when it changes in a way a plan may depend on, plan_input_changed() is called, never on
// the hit path.

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../background.hpp"
#include "../cache_file.hpp"
#include "../lifecycle.hpp"
#include "../plan_merge.hpp"
#include "chain.hpp"
#include "file_table.hpp"
#include "future_stamps.hpp"

namespace launchfit::detail::plan_file {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds batch_delay{20};         // stores this close together share one write
constexpr milliseconds lock_wait{1000};         // per attempt at the file's lock
constexpr milliseconds lock_retry_after{1000};  // after a failed attempt, unless a flush is waiting
constexpr milliseconds error_retry_after{5000};  // after an error that may pass (a full disk, no descriptors)
constexpr milliseconds close_wait{2000};        // set_cache_file / close_cache_file flush this long at most
constexpr milliseconds exit_wait{2000};         // the drain at exit: attempts at a busy lock
constexpr milliseconds write_wait_cap{30000};   // a write under way (a stuck file system, not a slow write)
// The exit's wait for a write under way on the background thread: a large file under a sanitizer or a slow
// disk takes seconds and every pending plan is owed to it; a file system hung in fsync never ends.
constexpr milliseconds exit_write_wait{10000};
constexpr std::chrono::seconds temp_sweep_every{60};
// How stale the table may be: the background thread reads the file's identity this often, and a lookup
// at most this often (then the refresh follows at once).
constexpr milliseconds refresh_every{1000};
constexpr milliseconds lookup_stat_every{100};
// Refused entries named one warning each when a file is opened; the rest are counted in one more.
constexpr std::size_t refusals_named = 8;
constexpr std::size_t path_text_bytes = 4096;

inline std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// A warning about the file at `path`, its name escaped.
void warn(const std::string& path, const std::string& what);

// The file's bounds: LAUNCHFIT_CACHE_MAX_BYTES / _MAX_ENTRIES (settings.hpp), else the defaults.
inline std::size_t limit_or(std::size_t set, std::size_t fallback) { return set ? set : fallback; }

class file_store;
file_store& state();

// One per process, never destroyed (a launch from a static destructor still finds its plans, and the
// background thread, which may outlive the exit's wait, never finds it gone).
class file_store final : public plan_store_layer, public background::task {
 public:
  std::mutex config;  // set/close and the first look at LAUNCHFIT_CACHE; never the writer's
  std::atomic<bool> env_checked{false};

  mutable std::mutex memory;                                    // all below; never held across I/O or logging
  std::condition_variable* done = new std::condition_variable;  // from the writer: a batch or refresh ended
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
  bool writing = false;            // a run is writing the file (its view is being updated)
  std::uint64_t refresh_asked = 0, refreshed = 0;
  std::uint64_t stored = 0, written = 0;  // store sequence numbers: the last stored, the last written
  steady::time_point not_before{};        // the writer waits until then (a batch gathering, a busy lock)
  int flushing = 0;                       // flush calls waiting: retry a busy lock at once
  steady::time_point flush_deadline{};    // the latest of theirs: an attempt at the lock ends by then
  bool lock_warned = false;
  std::string retry_why;  // an error that may pass, said once, while it lasts (until a write succeeds)
  std::string failure;  // why this file is not written (empty while it is)
  bool exiting = false;
  // The exit's drain gave up on a busy lock: a plan stored later (a user's static destructor) gets one look at
  // the lock, never the exit's wait again per store, and the first one not written says so.
  bool exit_gave_up = false;
  bool late_warned = false;
  layer_stats counts;

  // The writer's own (only run() touches them; runs never overlap). A pointer: a child of fork() replaces
  // the view a vanished run may have held half updated.
  disk_view* view = new disk_view;
  unsigned view_epoch = ~0u;
  bool first_write = false;  // of the file in use: its leftover temp files are swept
  steady::time_point last_sweep{};
  steady::time_point next_check{};
  std::vector<void*> abandoned;  // what a forked child replaced: never freed, kept reachable

  file_store() {
    // A child of fork() must not inherit a locked mutex; what the parent's writer had taken is written again
    // by the child's (the merge makes a second write of an entry harmless).
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
                          f.abandoned.push_back(f.done);
                          f.done = new std::condition_variable;
                          if (f.writing) {
                            f.abandoned.push_back(f.view);
                            f.view = new disk_view;
                            f.view_epoch = ~0u - 1;  // the file is read again before the next write
                            f.writing = false;
                          }
                          for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));
                          f.in_flight.clear();
                          f.flushing = 0;
                          f.flush_deadline = {};
                          f.memory.unlock();
                          f.config.unlock();
                        }});
    background::add(*this, background::exit_order::plan_file);
  }

  const char* name() const noexcept override { return "file"; }
  std::vector<stored_entry> find(const stored_key& key) override;
  void put(const stored_entry& e) override { enqueue(e); }
  bool flush(unsigned max_wait_ms) override;
  layer_stats stats() const override {
    std::lock_guard lock(memory);
    layer_stats s = counts;
    s.dead = open && !failure.empty();
    s.future_stamps = future_stamps_read(stamp_reader::file);
    return s;
  }

  // Makes an entry visible to lookups at once and queues it for the writer. False where nothing is stored
  // (no file, or a frozen one, or a measured plan held for the key that this one does not beat:
  // replaces_in_file()).
  bool enqueue(stored_entry e);
  bool queue_locked(stored_entry e);  // the same, under memory, without waking the writer

  // background::task: one step of the writer (a batch written, or the file looked at again).
  background::clock::time_point run() noexcept override;
  bool has_work() const noexcept override {
    std::lock_guard lock(memory);
    return open && writable && mode != cache_file_mode::frozen && !all_written();
  }
  void drain_at_exit() noexcept override;

  // Not under memory (background.cpp's lock rule): asks the writer to run now.
  void wake_writer() { background::wake(*this); }

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
    {
      std::lock_guard lock(memory);
      if (c.epoch != epoch || !refreshed_from_disk()) return;
      refresh_wanted = true;
    }
    wake_writer();
  }
};

// The process's file layer, never destroyed; ready_state() also opens LAUNCHFIT_CACHE on first use.
file_store& state();
file_store& ready_state();

// Under memory (lk). Reads what another process wrote into the table, when the file's identity changed.
// Returns whether an entry a plan may depend on changed.
bool refresh(file_store& f, std::unique_lock<std::mutex>& lk, disk_view& view);
// Under memory (lk). Waits for everything stored so far to be written; false when it was not.
bool flush_locked(file_store& f, std::unique_lock<std::mutex>& lk, milliseconds max_wait);

}  // namespace launchfit::detail::plan_file

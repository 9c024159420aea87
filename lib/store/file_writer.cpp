// SPDX-License-Identifier: MIT
// The plan file's writer: a task of the background queue (background.hpp) that merges this process's
// plans into the file and reads what other processes wrote (file_store.hpp).

#include <exception>

#include "../plan_inputs.hpp"
#include "file_store.hpp"

namespace launchfit::detail::plan_file {
namespace {

// What this file changes of every plan's inputs (plan_inputs.hpp), registered once.
const plan_input changed_elsewhere_input = register_plan_input("plan file changed by another process");

}  // namespace

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

// One step of the writer: a batch written when one is due (at once while a flush waits or the process
// exits), else the file looked at again when it is due. Returns when the writer wants to run next.
background::clock::time_point file_store::run() noexcept {
  file_store& f = *this;
  std::unique_lock lk(f.memory);
  if (f.epoch != f.view_epoch) {  // another file (or none): the writer starts from the file as it was loaded
    if (f.view_epoch == ~0u - 1) {
      *f.view = disk_view{};  // a child of fork(): what the parent's writer saw is read again
    } else {
      *f.view = std::move(f.seed);
    }
    f.seed = disk_view{};
    f.view_epoch = f.epoch;
    f.first_write = true;
  }
  const auto now = steady::now();
  if (f.next_check == steady::time_point{}) f.next_check = now + refresh_every;
  const bool batch = f.open && f.writable && !f.pending.empty();
  const bool reads = f.refreshed_from_disk() && !f.exiting;
  if (!batch || (f.flushing == 0 && !f.exiting && now < f.not_before)) {
    if (reads && (f.refresh_wanted || now >= f.next_check)) {
      f.next_check = now + refresh_every;
      const std::uint64_t asked = f.refresh_asked;
      f.writing = true;
      const bool relied_on = refresh(f, lk, *f.view);
      f.writing = false;
      if (relied_on) {
        lk.unlock();  // after the table changed: a plan made from what a lookup saw before is never reused
        plan_input_changed(changed_elsewhere_input);
        lk.lock();
      }
      f.refreshed = std::max(f.refreshed, asked);  // refresh_cache_file() returns after the change is known
      f.done->notify_all();
    }
    if (batch) return reads ? std::min(f.not_before, f.next_check) : f.not_before;
    return reads ? f.next_check : background::never;
  }
  f.in_flight = std::move(f.pending);
  f.pending.clear();
  std::vector<stored_entry> batch_entries;
  try {
    batch_entries.reserve(f.in_flight.size());
    for (const auto& [k, e] : f.in_flight) batch_entries.push_back(e);
  } catch (const std::bad_alloc&) {
    for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));
    f.in_flight.clear();
    f.not_before = steady::now() + lock_retry_after;
    return f.not_before;
  }
  const std::uint64_t seq = f.stored;
  const unsigned epoch = f.epoch;
  // On the background thread, one look at the lock: the thread serves the log and the remote stores too, and a
  // peer holding the lock for good made it sleep 1 s of every 2 (log lines and Redis writes a second late). A
  // busy lock is looked at again lock_retry_after later. A flush on its own thread (or the exit) waits for it,
  // until the flush's deadline.
  milliseconds attempt = background::on_background_thread() || f.exit_gave_up ? milliseconds(0) : lock_wait;
  if (f.flushing > 0 && attempt > milliseconds(0)) {  // a waiting flush gives up at its deadline: so does this
    const auto left = std::chrono::duration_cast<milliseconds>(f.flush_deadline - steady::now());
    attempt = std::clamp(left, milliseconds(10), lock_wait);
  }
  write_job job{f.real, f.max_bytes, f.max_entries, f.first_write, attempt};
  if (steady::now() - f.last_sweep > temp_sweep_every) job.sweep_temps = true;
  if (job.sweep_temps) f.last_sweep = steady::now();
  f.first_write = false;
  f.writing = true;
  lk.unlock();
  write_outcome out;
  try {
    out = write_file(job, batch_entries, *f.view);
  } catch (const std::exception& e) {  // no memory for the merge: nothing half written (temp, then rename)
    out.status = write_status::retry;
    out.why = e.what();
  }
  lk.lock();
  f.writing = false;
  std::string warning;
  bool relied_on = false;
  if (epoch == f.epoch) {
    switch (out.status) {
      case write_status::written:
        f.retry_why.clear();
        f.known = f.view->id;
        f.counts.writes += batch_entries.size();
        relied_on = f.table.take_from_disk(out.others, [&](const stored_key& k) { return f.ours(k); });
        break;
      case write_status::lock_busy:
        for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));  // a newer store wins
        f.not_before = steady::now() + lock_retry_after;
        if (!f.lock_warned) warning = out.why;
        f.lock_warned = true;
        if (f.exit_gave_up && !f.late_warned) {
          f.late_warned = true;
          warning = "plan(s) stored after the exit's drain not written: " + out.why;
        }
        break;
      case write_status::retry:
        // A full disk, a descriptor limit, no memory: the plans stay pending and the write is tried again.
        for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));  // a newer store wins
        f.not_before = steady::now() + error_retry_after;
        ++f.counts.failures;
        if (f.retry_why.empty())
          warning = "cannot write it for now (" + out.why + "); its plans are kept and the write is tried again";
        f.retry_why = out.why.empty() ? "an error that may pass" : out.why;
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
  const bool say = !warning.empty() && (!f.exiting || f.exit_gave_up);
  if (say || relied_on) {  // before a waiting flush returns: its caller may look
    const std::string path = f.path;
    lk.unlock();
    if (say) warn(path, warning);
    if (relied_on) plan_input_changed(changed_elsewhere_input);
    lk.lock();
  }
  if (out.status == write_status::written && epoch == f.epoch) f.written = std::max(f.written, seq);
  f.done->notify_all();
  if (f.open && f.writable && !f.pending.empty()) return f.not_before;
  return f.refreshed_from_disk() && !f.exiting ? f.next_check : background::never;
}

// Under memory (lk). Waits for everything stored so far to be written; false when it was not. The writer
// runs on this thread when the background thread is busy with another task (an output stuck in a pipe
// must not keep plans from their file).
bool flush_locked(file_store& f, std::unique_lock<std::mutex>& lk, milliseconds max_wait) {
  if (!f.open || f.mode == cache_file_mode::frozen || f.all_written()) return true;
  if (!f.writable) return false;  // plans stored, kept in memory only
  const std::uint64_t target = f.stored;
  const unsigned epoch = f.epoch;
  const auto deadline = steady::now() + max_wait;
  const auto settled = [&] { return f.written >= target || !f.writable || f.epoch != epoch; };
  ++f.flushing;
  f.flush_deadline = std::max(f.flush_deadline, deadline);
  auto pause = milliseconds(2);  // between looks at a lock a peer holds, as file_lock.cpp paces its own
  while (!settled() && steady::now() < deadline) {
    lk.unlock();
    // `max_wait` bounds the attempts (a lock another process holds) and a flush's wait for a write under way;
    // the exit waits for one up to exit_write_wait (the file's size bound keeps a write short, a 16 MiB file
    // of 10,000 plans about 1 s, several under a sanitizer, but a file system hung in fsync never ends one:
    // the exit waited 30 s for it).
    const auto run_ends = f.exiting ? steady::now() + exit_write_wait : std::min(deadline, steady::now() + write_wait_cap);
    const bool ran = !background::on_background_thread() && background::run_here(f, run_ends);
    lk.lock();
    if (!ran || (f.pending.empty() && f.in_flight.empty() && !settled())) {
      // From a task's own run, or the writer stayed busy on another thread: wait for it.
      f.done->wait_until(lk, deadline, settled);
      break;
    }
    // An error that may pass (a full disk) is not tried again in a loop until the deadline: the writer tries
    // later.
    if (!f.retry_why.empty()) break;
    // A busy lock: the run looked at it once (on the background thread, which serves the log and the remote
    // stores too) or waited for it by this deadline (here): the next look comes after a pause, 2 ms doubling
    // to 50 ms, never in a loop of runs.
    if (!settled() && !f.pending.empty()) {
      f.done->wait_until(lk, std::min(deadline, steady::now() + pause), settled);
      pause = std::min(pause * 2, milliseconds(50));
    }
  }
  // The last flush waiting: the next attempt is sized by lock_wait again, not by this flush's deadline (a
  // flush of 10 s left every later short one attempting for up to lock_wait).
  if (--f.flushing == 0) f.flush_deadline = {};
  return f.epoch == epoch && f.writable && f.written >= target;
}

void file_store::drain_at_exit() noexcept {
  file_store& f = *this;
  std::unique_lock lk(f.memory);
  f.exiting = true;  // from now on a batch is written at once, by whoever stores it (background.hpp)
  // exit_wait bounds the attempts at a busy lock, not the writes: a write under way when the exit came (10,000
  // plans under a sanitizer on a loaded host take seconds) used up the drain's 2 s, and the plans stored
  // meanwhile were never attempted. Flushed again while each flush writes something (at most 4 times: each
  // writes all that is pending), so a lock held for good or a hung write still ends the drain.
  bool flushed = false;
  for (int round = 0; round < 4 && !flushed; ++round) {
    const std::uint64_t written_before = f.written;
    flushed = flush_locked(f, lk, exit_wait);
    if (f.written == written_before || !f.writable) break;
  }
  if (!flushed && f.writable && (!f.pending.empty() || !f.in_flight.empty())) {
    const std::string path = f.path;
    const std::size_t left = f.pending.size() + f.in_flight.size();
    const std::string why =
        !f.retry_why.empty() ? "it could not be written (" + f.retry_why + ")"
        : !f.in_flight.empty()
            ? "a write of the file did not end within " + std::to_string(exit_write_wait.count() / 1000) +
                  " s (a file system that hangs, in fsync or a write)"
            : std::string("the file stayed locked by another process");
    f.exit_gave_up = true;
    lk.unlock();
    warn(path, std::to_string(left) + " plan(s) not written at exit: " + why);
  }
}

bool file_store::flush(unsigned max_wait_ms) {
  std::unique_lock lk(memory);
  return flush_locked(*this, lk, milliseconds(max_wait_ms));
}

bool file_store::enqueue(stored_entry e) {
  background::clock::time_point when{};
  {
    std::lock_guard lock(memory);
    if (!queue_locked(std::move(e))) return false;
    when = exiting ? background::clock::time_point::min() : not_before;
  }
  background::wake(*this, when);  // after memory is released (background.cpp's lock rule)
  return true;
}

bool file_store::queue_locked(stored_entry e) {
  key_tuple k = tie_key(e.key);
  if (!open || mode == cache_file_mode::frozen) return false;
  // The rule the write applies against the disk (plan_merge.cpp), applied to what lookups see here.
  if (const stored_entry* there = table.exact(e.key); there && !replaces_in_file(e, *there)) return false;
  table.put(e);
  ++stored;
  if (!writable) return true;
  const bool first = pending.empty();
  pending.insert_or_assign(std::move(k), std::move(e));
  const auto soon = steady::now() + batch_delay;
  if (first && not_before < soon) not_before = soon;
  return true;
}

}  // namespace launchfit::detail::plan_file

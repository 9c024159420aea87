// SPDX-License-Identifier: MIT
// The asynchronous output: a bounded queue and the logging thread that drains it (see async_sink.hpp).

#include "async_sink.hpp"

#include <algorithm>
#include <utility>

namespace launchfit::detail {

std::atomic<void (*)()> log_batch_taken_for_tests{nullptr};
std::atomic<void (*)()> log_exit_waiting_for_tests{nullptr};
std::atomic<std::uint64_t> log_polls_for_tests{0};
std::atomic<std::uint64_t> log_wakes_for_tests{0};

namespace {

constexpr std::size_t queue_max_lines = 8192;
constexpr std::size_t queue_max_bytes = 8u << 20;
// A wait for the logging thread gives up only on a stuck output, never on a slow one or a thread short of
// CPU: when it has written no line for `still`, or after wait_cap in all.
constexpr auto wait_cap = std::chrono::seconds(10);
// While lines keep coming the logging thread looks for them, so a line costs its caller no wake-up (a futex
// call, which made most of a first launch's log cost): 1 ms after the last batch, then 2, 4, 8 and every 16
// ms, so a program logging a line every few tens of milliseconds wakes it a handful of times per line, not
// every millisecond. After slow_after without a line it looks every poll_idle, and after park_after it
// sleeps until a line wakes it. Waking a sleeping thread is what a line after a quiet spell costs its
// caller: on an H100 host (a VM, 2026-12-06) a new kernel's first launch 60 ms after the last line took
// 4-15 us longer at info than at warn, where a start-up burst of first launches took the same at both.
constexpr auto poll_first = std::chrono::milliseconds(1);
constexpr auto poll_longest = std::chrono::milliseconds(16);
constexpr auto slow_after = std::chrono::milliseconds(50);
constexpr auto poll_idle = std::chrono::milliseconds(100);
constexpr auto park_after = std::chrono::seconds(10);
constexpr auto exit_write_wait = std::chrono::milliseconds(500);

// Inside the output (a run writing a batch): what a user sink logs or flushes from there is never queued
// or waited for there.
thread_local bool in_output = false;

}  // namespace

bool async_sink::start() {
  {
    std::lock_guard<std::mutex> lock(*mutex_);
    if (exiting_) return false;
    if (started_) return true;
  }
  if (!background::add(*this, background::exit_order::log)) return false;
  std::lock_guard<std::mutex> lock(*mutex_);
  started_ = true;
  return !exiting_;
}

bool async_sink::submit(log_record& r) {
  // No background thread in this process, and none can be started (a process at its thread limit): the
  // caller writes the line, never queued where nothing would ever write it. (Before background.cpp's lock.)
  if (!background::exiting() && !background::has_thread()) {
    background::wake(*this, background::never, false);  // starts one where it can
    if (!background::has_thread()) return false;
  }
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(*mutex_);
    if (exiting_ && output_stuck_) {
      out_.count_dropped(1);
      return true;
    }
    if (in_output) {  // a run holds the write lock: neither queue nor write from there
      out_.count_dropped(1);
      return true;
    }
    if (exiting_ || !started_) return false;
    if (items_.size() >= queue_max_lines || bytes_ + r.weight() > queue_max_bytes) {
      out_.count_dropped(1);
      ++overflow_;  // reported by the next run once the output moves again
      return true;
    }
    bytes_ += r.weight();
    const bool warning = r.level >= spdlog::level::warn;
    items_.push_back(std::move(r));
    // While polling, the background thread looks within poll_idle: the line costs its caller no wake-up.
    // A warning or an error wakes it at once (a program that dies of an error right after it loses no line
    // to the polling), as does the first line after a quiet spell.
    now = parked_ || warning;
    parked_ = false;
    // Polling, and the next look is soon enough: the queue already has this task due by then.
    if (!now && !writing_ && looks_by_ <= background::clock::now() + poll_longest) return true;
  }
  // After mutex_ is released (background.cpp's lock rule). While polling, the wake only makes sure a thread
  // runs in this process (a child of fork() starts its own) and marks the task due: the sleeping thread is
  // not told, and finds the line at its next scheduled look (within poll_idle).
  if (now) {
    log_wakes_for_tests.fetch_add(1, std::memory_order_relaxed);
    background::wake(*this);
  } else {
    background::wake(*this, background::clock::now() + poll_longest, false);
  }
  return true;
}

bool async_sink::has_work() const noexcept {
  std::lock_guard<std::mutex> lock(*mutex_);
  return !items_.empty() || overflow_ != 0 || writing_;
}

// One batch written, or a look for lines while they keep coming: 1 ms after the last batch, then 2, 4, 8 and
// every 16 ms, every 100 ms from slow_after; after park_after without a line no look is scheduled until a
// line wakes the thread.
background::clock::time_point async_sink::run() noexcept {
  std::unique_lock<std::mutex> lock(*mutex_);
  const auto now = background::clock::now();
  if (items_.empty() && overflow_ == 0) {
    const auto quiet = now - quiet_since_;
    if (parked_ || quiet >= park_after) {
      parked_ = true;
      looks_by_ = background::never;
      return background::never;
    }
    log_polls_for_tests.fetch_add(1, std::memory_order_relaxed);
    const background::clock::duration period = quiet >= slow_after ? poll_idle : period_;
    const auto next = now + std::min<background::clock::duration>(period, park_after - quiet);
    period_ = std::min<background::clock::duration>(period_ * 2, poll_longest);
    looks_by_ = next;
    return next;
  }
  batch_.swap(items_);
  bytes_ = 0;
  const std::uint64_t overflow = std::exchange(overflow_, 0);
  writing_ = true;
  lock.unlock();
  if (void (*hook)() = log_batch_taken_for_tests.load()) hook();
  {
    std::lock_guard<std::mutex> write(out_.write_mutex());
    in_output = true;
    for (const log_record& r : batch_) {
      out_.write(r);
      written_.fetch_add(1, std::memory_order_relaxed);
    }
    if (overflow != 0) {
      try {
        out_.write(out_.drop_report(overflow));
      } catch (...) {
        out_.count_dropped(1);
      }
    }
    out_.flush();
    in_output = false;
    // Under the write lock, which a fork takes: a child never inherits the batch half cleared. Keeps the
    // moved-in buffers of items_ for the next swap.
    batch_.clear();
  }
  lock.lock();
  writing_ = false;
  drained_->notify_all();
  quiet_since_ = background::clock::now();
  period_ = poll_first;
  looks_by_ = quiet_since_ + poll_first;
  return looks_by_;
}

// Waits for the background thread to write what is queued. The output is never run on the waiting thread:
// lines reach a user's sinks from the background thread only (asynchronous means that), and an exiting
// thread must never be the one stuck in an output that stopped taking lines.
bool async_sink::wait_drained(std::chrono::milliseconds still) {
  if (in_output) return true;
  std::unique_lock<std::mutex> lock(*mutex_);
  if (!started_) return true;
  const auto done = [&] { return items_.empty() && overflow_ == 0 && !writing_; };
  if (done()) return true;
  lock.unlock();
  background::wake(*this);  // a parked or polling queue is looked at now
  lock.lock();
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t seen = written_.load(std::memory_order_relaxed);
  while (!done()) {
    if (exiting_) {
      if (void (*hook)() = log_exit_waiting_for_tests.load()) hook();
    }
    if (drained_->wait_for(lock, still, done)) break;
    const std::uint64_t w = written_.load(std::memory_order_relaxed);
    if (w == seen || std::chrono::steady_clock::now() - start >= wait_cap) return false;
    seen = w;
  }
  return true;
}

// The exiting thread never writes into the output itself while lines are queued. Where the background thread
// wrote nothing for exit_write_wait, it is stuck either in this output or in another task's run (a plan file's
// write hung in fsync, which would cost the warning that says so): then a helper thread (background::run_here)
// writes the lines, within the same bound. What is left queued then is behind a stuck output, and dropped
// (counted) rather than block the exit. The log is drained last, after the plan stores (background.hpp).
void async_sink::drain_at_exit() noexcept {
  {
    std::lock_guard<std::mutex> lock(*mutex_);
    exiting_ = true;
  }
  if (wait_drained(exit_write_wait)) return;
  const auto done = [&] {
    std::lock_guard<std::mutex> lock(*mutex_);
    return items_.empty() && overflow_ == 0 && !writing_;
  };
  const auto deadline = background::clock::now() + exit_write_wait;
  while (!done() && background::clock::now() < deadline && background::run_here(*this, deadline)) {
  }
  if (done()) return;
  std::lock_guard<std::mutex> lock(*mutex_);
  output_stuck_ = true;
  out_.count_dropped(items_.size());
  items_.clear();
  bytes_ = 0;
}

void async_sink::prepare_fork() noexcept { mutex_->lock(); }

void async_sink::parent_after_fork() noexcept { mutex_->unlock(); }

void async_sink::child_after_fork() noexcept {
  abandoned_.push_back(drained_);
  drained_ = new std::condition_variable;
  items_.clear();
  batch_.clear();  // what the vanished run was writing: the parent writes it
  bytes_ = 0;
  overflow_ = 0;
  writing_ = false;
  parked_ = true;
  looks_by_ = background::never;
  mutex_->unlock();  // taken by this thread, the child's only one, in prepare_fork()
}

}  // namespace launchfit::detail

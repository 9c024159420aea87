// SPDX-License-Identifier: MIT
// The asynchronous output: a bounded queue and the logging thread that drains it (see async_sink.hpp).

#include "async_sink.hpp"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

namespace launchfit::detail {

std::atomic<void (*)()> log_batch_taken_for_tests{nullptr};
std::atomic<void (*)()> log_exit_waiting_for_tests{nullptr};
std::atomic<std::uint64_t> log_polls_for_tests{0};

namespace {

constexpr std::size_t queue_max_lines = 8192;
constexpr std::size_t queue_max_bytes = 8u << 20;
// A wait for the logging thread gives up only on a stuck output, never on a slow one or a thread short of
// CPU: when it has written no line for `still`, or after wait_cap in all.
constexpr auto wait_cap = std::chrono::seconds(10);
// While lines keep coming the logging thread looks for them, so a line costs its caller no wake-up (a futex
// call, which made most of a first launch's log cost): 1 ms after the last batch, then 2, 4, 8 and every 16
// ms, so a program logging a line every few tens of milliseconds wakes it a handful of times per line, not
// every millisecond; after park_after without a line it sleeps until one wakes it.
constexpr auto poll_first = std::chrono::milliseconds(1);
constexpr auto poll_longest = std::chrono::milliseconds(16);
constexpr auto park_after = std::chrono::milliseconds(50);
constexpr auto exit_write_wait = std::chrono::milliseconds(500);

// On the logging thread: what a user sink logs or flushes from there is never queued or waited for there.
thread_local bool on_logging_thread = false;

}  // namespace

bool async_sink::start() {
  std::lock_guard<std::mutex> lock(*mutex_);
  return start_locked();
}

bool async_sink::start_locked() {
  if (thread_alive_) return true;
  if (exiting_) return false;
  try {
    std::thread([this] { run(); }).detach();
  } catch (const std::system_error&) {
    return false;
  }
  thread_alive_ = true;
  return true;
}

bool async_sink::submit(log_record& r) {
  {
    std::lock_guard<std::mutex> lock(*mutex_);
    if (exiting_ && output_stuck_) {
      out_.count_dropped(1);
      return true;
    }
    if (on_logging_thread) {  // the thread holds the write lock: neither queue nor write from there
      out_.count_dropped(1);
      return true;
    }
    // A forked child's thread starts with its first line.
    if (exiting_ || !start_locked()) return false;
    if (items_.size() >= queue_max_lines || bytes_ + r.weight() > queue_max_bytes) {
      out_.count_dropped(1);
      ++overflow_;  // reported by the thread once the output moves again
      return true;
    }
    bytes_ += r.weight();
    items_.push_back(std::move(r));
    // The thread is polling: it finds the line within poll_period. A warning or an error wakes it at once (a
    // program that dies of an error right after it loses no line to the polling).
    if (!parked_ && r.level < spdlog::level::warn) return true;
  }
  wake_->notify_one();
  return true;
}

void async_sink::run() {
  on_logging_thread = true;
  std::unique_lock<std::mutex> lock(*mutex_);
  const auto work = [&] { return !items_.empty() || overflow_ != 0; };
  for (;;) {
    const auto quiet_since = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration period = poll_first;
    while (!work()) {
      const auto quiet = std::chrono::steady_clock::now() - quiet_since;
      if (quiet >= park_after) {
        parked_ = true;
        wake_->wait(lock, work);
        parked_ = false;
        break;
      }
      log_polls_for_tests.fetch_add(1, std::memory_order_relaxed);
      wake_->wait_for(lock, std::min<std::chrono::steady_clock::duration>(period, park_after - quiet), work);
      period = std::min<std::chrono::steady_clock::duration>(period * 2, poll_longest);
    }
    batch_.swap(items_);
    bytes_ = 0;
    const std::uint64_t overflow = std::exchange(overflow_, 0);
    writing_ = true;
    lock.unlock();
    if (void (*hook)() = log_batch_taken_for_tests.load()) hook();
    {
      std::lock_guard<std::mutex> write(out_.write_mutex());
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
      // Under the write lock, which a fork takes: a child never inherits the batch half cleared. Keeps the
      // moved-in buffers of items_ for the next swap.
      batch_.clear();
    }
    lock.lock();
    writing_ = false;
    drained_->notify_all();
  }
}

bool async_sink::wait_drained(std::chrono::milliseconds still) {
  std::unique_lock<std::mutex> lock(*mutex_);
  if (!thread_alive_ || on_logging_thread) return true;
  wake_->notify_one();  // a parked or polling thread starts now
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t seen = written_.load(std::memory_order_relaxed);
  const auto done = [&] { return items_.empty() && !writing_; };
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

// The exiting thread never writes into the output itself while lines are queued: if the logging thread
// stops moving, the output is stuck, and the lines queued or logged from then on are dropped (counted)
// rather than block the exit.
void async_sink::drain_at_exit() {
  {
    std::lock_guard<std::mutex> lock(*mutex_);
    exiting_ = true;
  }
  if (wait_drained(exit_write_wait)) return;
  std::lock_guard<std::mutex> lock(*mutex_);
  output_stuck_ = true;
  out_.count_dropped(items_.size());
  items_.clear();
  bytes_ = 0;
}

void async_sink::prepare_fork() { mutex_->lock(); }

void async_sink::parent_after_fork() { mutex_->unlock(); }

void async_sink::child_after_fork() {
  abandoned_.insert(abandoned_.end(), {static_cast<void*>(wake_), static_cast<void*>(drained_)});
  wake_ = new std::condition_variable;
  drained_ = new std::condition_variable;
  items_.clear();
  batch_.clear();  // what the vanished thread was writing: the parent writes it
  bytes_ = 0;
  overflow_ = 0;
  writing_ = false;
  parked_ = false;
  thread_alive_ = false;
  mutex_->unlock();  // taken by this thread, the child's only one, in prepare_fork()
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// launchfit's asynchronous output: a bounded queue of finished lines, written by a task of launchfit's
// background queue (background.hpp), kept apart from the logger (as spdlog keeps its async logger apart from
// its sinks). The launching thread only queues; when the queue is full a line is dropped and counted, never
// waited for. At exit the background queue drains it last, after the plan file and the remote stores.

#include <spdlog/common.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "background.hpp"

namespace launchfit::detail {

struct plan_report;

// One line, made and escaped by the logger, not yet rendered for the route (text or JSON). A new plan's line
// is made by the logging thread: the record then carries the report instead of the payload.
struct log_record {
  spdlog::level::level_enum level = spdlog::level::info;
  spdlog::log_clock::time_point time;
  std::size_t thread_id = 0;
  bool json = false;  // payload is a launchfit JSON object
  std::string payload;
  std::shared_ptr<const plan_report> plan;  // set: the payload is format_plan(*plan) in the format in force

  // What the record counts against the queue's byte bound (a plan's line is about 1 KB).
  std::size_t weight() const noexcept { return payload.size() + (plan ? 1024 : 0); }
};

// Where the logging thread writes: the logger's output, under the logger's write lock (which the thread
// takes around each batch, as a synchronous writer takes it around each line).
class record_output {
 public:
  virtual void write(const log_record& r) noexcept = 0;  // a failure is counted as a dropped line
  virtual void flush() noexcept = 0;
  virtual log_record drop_report(std::uint64_t dropped) = 0;  // the warning for lines a full queue dropped
  virtual std::mutex& write_mutex() noexcept = 0;
  virtual void count_dropped(std::uint64_t n) noexcept = 0;

 protected:
  ~record_output() = default;
};

class async_sink final : public background::task {
 public:
  explicit async_sink(record_output& out) : out_(out) {}

  // Registers the queue with the background thread (which a forked child starts again on its first line).
  // False when the process is exiting (lines are then written by their callers).
  bool start();
  // Queues a record (or drops it from a full queue, counted). False when the caller must write it
  // synchronously: the process is exiting (or no thread could start).
  bool submit(log_record& r);
  // Waits until everything queued is written; false when the thread wrote no line for `still` (a stuck
  // output) or after wait_cap.
  bool wait_drained(std::chrono::milliseconds still);

  // Normal exit (background::shutdown, after the plan file and the remote stores): lines logged from now on
  // are written synchronously, and what is queued is written while the exit waits; when the output stops
  // moving the rest is dropped (counted), never waited for.
  void drain_at_exit() noexcept override;

  // background::task: writes one batch, or looks for lines while they keep coming (see run() in the .cpp).
  background::clock::time_point run() noexcept override;
  bool has_work() const noexcept override;
  const char* name() const noexcept override { return "log"; }

  // Fork (through the logger's hooks, see lifecycle.hpp, not the background queue's: the logger orders its
  // own locks). prepare() takes the queue's lock; the logger then takes its write lock, which a writer
  // holds only while writing. In the child the queue is emptied (the parent's lines are the parent's), its
  // locks are new, and the background thread starts again on the child's first line.
  void prepare_fork() noexcept;
  void parent_after_fork() noexcept;
  void child_after_fork() noexcept;

  // Lines the thread has written (with the synchronous writers: tells a slow output from a stuck one).
  std::atomic<std::uint64_t>& written() noexcept { return written_; }

 private:
  record_output& out_;
  // Pointers, so that a forked child can replace what a vanished thread might hold.
  std::mutex* mutex_ = new std::mutex;
  std::condition_variable* drained_ = new std::condition_variable;  // a run ended its batch
  std::deque<log_record> items_;
  // The batch being written (only the thread touches it): a member, not a local, so what a forked child
  // inherits of it stays reachable (LeakSanitizer reported the vanished thread's batch as a leak).
  std::deque<log_record> batch_;
  std::size_t bytes_ = 0;
  bool started_ = false;  // registered with the background queue
  bool writing_ = false;  // a run holds a batch
  bool parked_ = true;    // no look is scheduled: a line wakes the background thread (else it polls)
  background::clock::time_point quiet_since_{};  // the polling's schedule (run() only)
  // While polling: when the background thread looks next at the latest (what run() last asked for; the queue's
  // due time for this task is no later). A line that finds it within poll_longest asks the queue for nothing.
  background::clock::time_point looks_by_ = background::never;
  background::clock::duration period_{};
  bool exiting_ = false;        // the exit handler ran: write synchronously from now on
  bool output_stuck_ = false;   // ... or not at all: the exit found the output stuck
  std::uint64_t overflow_ = 0;  // lines dropped from a full queue, not yet reported
  std::atomic<std::uint64_t> written_{0};
  std::vector<void*> abandoned_;  // locks a forked child replaced: never freed, kept reachable
};

// Tests: called by the logging thread each time it has taken lines off the queue, before writing them.
extern std::atomic<void (*)()> log_batch_taken_for_tests;
// Tests: called by the exit drain when it finds lines not yet written and starts waiting for them.
extern std::atomic<void (*)()> log_exit_waiting_for_tests;
// Tests: how many times the logging thread has looked for lines while polling (not while parked).
extern std::atomic<std::uint64_t> log_polls_for_tests;
// Tests: how many queued lines asked for the logging thread at once (a warning, or a line that found it
// parked) rather than leaving the line to its next scheduled look.
extern std::atomic<std::uint64_t> log_wakes_for_tests;

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: launchfit's one background thread and its queue of writers (spdlog's details::thread_pool is the
// model, with one thread). Every write-behind job of the library is a `task` served here: the logging output,
// the plan file's writer and each remote store's writer. A task keeps its own queue and bounds (what it
// drops, it counts); this module decides only *when* a task runs and on which thread:
//
// - on the background thread, started on the first wake() of a process (a child of fork() starts its own);
// - for run_here(), a flush that must not wait behind another task (a plan file must be written at exit even
//   when the log's output is stuck in a pipe): on the idle background thread, or on a helper thread where it
//   is busy with another task, the caller waiting with its deadline (on the caller's own thread only where no
//   thread can be had);
// - on the calling thread after shutdown(): work that arrives while the process exits (a launch from a
//   static destructor) is done by its caller, bounded by the task's own bounds.
//
// A task runs on one thread at a time. Its run() is called with no lock of this module held. A task's own
// locks are its own to repair at fork (lifecycle::on_fork): in a child the background thread is gone, the
// task is due again at once, and what the vanished run held is the task's child hook to put back.
//
// Exit has one owner (lifecycle.hpp): at normal exit shutdown() drains the tasks in the order they were
// given (the plan file, then the remote stores, then the log), each within its own deadline, then stops the
// thread and waits for it to leave the task it is running (bounded). Nothing a task touches may be a static
// with a non-trivial destructor: a thread that outlives the wait (an output stuck in a pipe) still finds its
// state; constants are constexpr, state lives in objects that are never destroyed.

#include <chrono>
#include <cstdint>

namespace launchfit::detail::background {

using clock = std::chrono::steady_clock;
inline constexpr clock::time_point never = clock::time_point::max();

// When a task is drained at exit: lower first. The data first, then what reports on it.
enum class exit_order : int { plan_file = 0, remote_store = 1, log = 2 };

class task {
 public:
  task() = default;
  task(const task&) = delete;
  task& operator=(const task&) = delete;

  // Does the work that is due, outside every lock of this module, on whichever thread runs it (never two
  // at once). Returns when it wants to run again (`never`: not until woken). Must not throw.
  virtual clock::time_point run() noexcept = 0;
  // Whether it has work not yet done (what a drain waits for).
  virtual bool has_work() const noexcept = 0;
  // Normal exit, on the exiting thread, in exit_order: write what is pending within the task's own
  // deadline (run_here() lets it do so without waiting behind another task), then keep working
  // synchronously for whatever comes later. Default: run_here() until nothing is pending or 2 s passed.
  virtual void drain_at_exit() noexcept;
  // Short, for stats and the trace log ("log", "plan file", "remote store").
  virtual const char* name() const noexcept = 0;

 protected:
  ~task() = default;  // tasks are never destroyed through this interface; remove() before destroying one
};

// Registers a task (once; a second call is ignored). Its place in the exit drain is `order`. Registers the
// queue's fork and exit hooks with lifecycle on first use. Never throws: false when the table is full.
bool add(task& t, exit_order order) noexcept;
// Unregisters a task and waits until no thread runs it; it is never run again. For tasks that are destroyed
// (a remote store closed or replaced). Never call it from the task's own run().
void remove(task& t) noexcept;

// Asks for t to run at `when` (at once by default). Cheap: no allocation; wakes the thread only when it
// sleeps past `when` and `notify` is true (a task that knows the thread polls may pass false). After
// shutdown() the caller runs the task itself, at once, whatever `when` says.
void wake(task& t, clock::time_point when = clock::time_point::min(), bool notify = true) noexcept;

// Runs t now and waits for that run, until `deadline`: on the background thread when it is idle, on a helper
// thread when the background thread is busy with another task (a run that blocks in I/O for good then holds no
// caller past its deadline), on the calling thread only where no thread can run (none started, after
// shutdown(), no thread to be had); where another thread runs t already, waits for that run. True when a run of
// t ended. For flushes that must not wait behind other tasks. Never from t's own run().
bool run_here(task& t, clock::time_point deadline) noexcept;

// Whether the calling thread is the background thread (a task's run() must not wait for itself).
bool on_background_thread() noexcept;

// Whether this process has its background thread (started, and not stopped): false before the first wake(), in a
// child of fork() before its first, and where no thread could be started (a process at its thread limit).
bool has_thread() noexcept;
// Whether shutdown() has begun: tasks then work synchronously.
bool exiting() noexcept;

// Normal exit (called once by lifecycle's exit handler): drains every task in exit_order, then stops the
// background thread. Safe to call twice.
void shutdown() noexcept;

// For tests and stats.
struct stats {
  std::uint64_t runs = 0;             // task runs on the background thread
  std::uint64_t runs_here = 0;        // task runs on a caller's thread (run_here, after shutdown)
  std::uint64_t runs_handed = 0;      // run_here() calls that had the idle thread run the task
  std::uint64_t runs_helped = 0;      // run_here() calls that had a helper thread run it (the thread busy)
  std::uint64_t threads_started = 0;  // in this process (a child of fork() counts its own)
  int tasks = 0;
};
stats statistics() noexcept;

}  // namespace launchfit::detail::background

// SPDX-License-Identifier: MIT
// The one background thread and its table of tasks (see background.hpp).
//
// Lock rule: the queue's mutex is never held while a task runs or while another lock is taken, and wake()
// is never called with a task's own lock held (tasks release theirs first). So the fork hooks of this module
// and of the tasks need no order between them, and the thread can never wait for a lock its waker holds.

#include "background.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "lifecycle.hpp"

namespace launchfit::detail::background {
namespace {

constexpr int max_tasks = 32;
// How long shutdown() waits for the thread to leave the task it runs (an output stuck in a pipe never
// returns; the exit goes on and the thread finds every state it touches alive, see background.hpp).
constexpr auto stop_wait = std::chrono::milliseconds(500);
constexpr auto default_drain = std::chrono::seconds(2);

struct slot {
  task* t = nullptr;
  exit_order order = exit_order::log;
  clock::time_point due = never;    // when the task wants to run next
  clock::time_point woken = never;  // a wake() that came while it ran: merged into `due` after the run
  bool running = false;
  bool removed = false;
  std::thread::id runner;  // the thread that runs it, while running
  std::uint64_t runs = 0;  // runs ended (a caller that handed a run to the thread waits for this to move)
  std::uint64_t generation = 0;  // moves when the slot is given to another task (a waiter's task is gone)
};

// Never destroyed (a thread may outlive exit's wait); pointers, so that a forked child can replace what a
// vanished thread might hold.
struct queue_state {
  std::mutex* m = new std::mutex;
  std::condition_variable* wake_cv = new std::condition_variable;  // to the thread
  std::condition_variable* idle_cv = new std::condition_variable;  // a run ended
  slot slots[max_tasks];
  int count = 0;
  // Written under m; read without it by has_thread() (every queued log line asks it).
  std::atomic<pid_t> thread_pid{0};  // the process whose thread runs (none in a child of fork())
  clock::time_point sleeps_until = never;
  bool sleeping = false;
  slot* handed = nullptr;  // a run a caller handed over (run_here): the thread's next, before any task due
  bool hooks_registered = false;
  std::atomic<bool> exiting{false};
  std::atomic<bool> stopped{false};  // shutdown() ended: callers run tasks themselves (written under m)
  stats st;
  std::vector<void*> abandoned;  // locks a forked child replaced: never freed, kept reachable
};

queue_state& q() {
  static queue_state& s = *new queue_state;
  return s;
}

thread_local bool on_thread = false;

slot* find(queue_state& s, task& t) {
  for (int i = 0; i < s.count; ++i)
    if (s.slots[i].t == &t && !s.slots[i].removed) return &s.slots[i];
  return nullptr;
}

void thread_main();

// Under s.m. Starts this process's thread if it has none.
void ensure_thread(queue_state& s) {
  if (s.thread_pid == lifecycle::process_id() || s.stopped) return;
  try {
    std::thread(thread_main).detach();
  } catch (const std::system_error&) {
    return;  // no thread: tasks run when flushed (run_here) and at exit
  }
  s.thread_pid = lifecycle::process_id();
  ++s.st.threads_started;
}

// Under lk, with sl->running set by this thread: runs the task with the lock released.
void run_locked(queue_state& s, std::unique_lock<std::mutex>& lk, slot* sl) {
  task* t = sl->t;
  sl->woken = never;
  sl->runner = std::this_thread::get_id();
  lk.unlock();
  const clock::time_point next = t->run();
  lk.lock();
  sl->running = false;
  sl->runner = std::thread::id();
  sl->due = std::min(next, sl->woken);
  sl->woken = never;
  ++sl->runs;
  s.idle_cv->notify_all();
}

void thread_main() {
  on_thread = true;
  queue_state& s = q();
  std::unique_lock<std::mutex> lk(*s.m);
  const pid_t me = lifecycle::process_id();
  for (;;) {
    if (s.thread_pid != me || s.stopped) {
      if (s.thread_pid == me) s.thread_pid = 0;
      s.idle_cv->notify_all();
      return;
    }
    // A run a caller handed over first (its due is now), whatever else is due: the caller waits for it, and a
    // task due as early (a log line's wake) may block in its output for good.
    slot* next = s.handed && !s.handed->removed && !s.handed->running ? s.handed : nullptr;
    s.handed = nullptr;
    const bool handed = next != nullptr;
    for (int i = 0; i < s.count && !handed; ++i) {
      slot& sl = s.slots[i];
      if (sl.removed || sl.running) continue;
      if (!next || sl.due < next->due) next = &sl;
    }
    const auto now = clock::now();
    if (next && next->due <= now) {
      next->running = true;
      ++s.st.runs;
      run_locked(s, lk, next);
      continue;
    }
    s.sleeping = true;
    s.sleeps_until = next ? next->due : never;
    if (s.sleeps_until == never) {
      s.wake_cv->wait(lk);
    } else {
      s.wake_cv->wait_until(lk, s.sleeps_until);
    }
    s.sleeping = false;
  }
}

// Fork: the queue's lock is held across the fork, taken after every other module's (modules wake the queue
// while holding their own: the logger while it makes itself); the child has no thread, and what it ran is
// due again.
void prepare_fork() { q().m->lock(); }
void parent_after_fork() { q().m->unlock(); }
void child_after_fork() {
  queue_state& s = q();
  s.abandoned.push_back(s.wake_cv);
  s.abandoned.push_back(s.idle_cv);
  s.wake_cv = new std::condition_variable;
  s.idle_cv = new std::condition_variable;
  s.thread_pid = 0;
  s.sleeping = false;
  s.handed = nullptr;
  s.st.threads_started = 0;
  for (int i = 0; i < s.count; ++i) {
    slot& sl = s.slots[i];
    if (sl.running) sl.due = clock::time_point::min();
    sl.running = false;
    sl.runner = std::thread::id();
    sl.due = std::min(sl.due, sl.woken);
    sl.woken = never;
  }
  s.m->unlock();  // taken by this thread, the child's only one, in prepare_fork()
}

// At load time, before any thread of the program exists: registering later could wait for lifecycle's lock
// while holding another module's.
const bool fork_hooks_at_load =
    lifecycle::on_fork_innermost({prepare_fork, parent_after_fork, child_after_fork});

}  // namespace

void task::drain_at_exit() noexcept {
  const auto deadline = clock::now() + default_drain;
  while (has_work() && clock::now() < deadline) {
    if (!run_here(*this, deadline)) return;
  }
}

bool add(task& t, exit_order order) noexcept {
  queue_state& s = q();
  bool register_hooks = false;
  {
    std::lock_guard<std::mutex> lk(*s.m);
    if (find(s, t)) return true;
    slot* free = nullptr;
    for (int i = 0; i < s.count; ++i)
      if (s.slots[i].removed && !s.slots[i].running) free = &s.slots[i];
    if (!free) {
      if (s.count == max_tasks) return false;
      free = &s.slots[s.count++];
    }
    *free = slot{&t, order, never, never, false, false, std::thread::id(), 0, free->generation + 1};
    ++s.st.tasks;
    register_hooks = !s.hooks_registered;
    s.hooks_registered = true;
  }
  if (register_hooks) lifecycle::on_exit(shutdown);  // std::atexit: takes no lock of launchfit's
  return true;
}

void remove(task& t) noexcept {
  queue_state& s = q();
  std::unique_lock<std::mutex> lk(*s.m);
  slot* sl = find(s, t);
  if (!sl) return;
  sl->removed = true;  // never picked again
  if (s.handed == sl) s.handed = nullptr;
  --s.st.tasks;
  // The run in progress (another thread's) ends before the task may be destroyed.
  s.idle_cv->wait(lk, [&] { return !sl->running; });
  sl->t = nullptr;
}

void wake(task& t, clock::time_point when, bool notify) noexcept {
  queue_state& s = q();
  std::unique_lock<std::mutex> lk(*s.m);
  slot* sl = find(s, t);
  if (!sl) return;
  if (s.stopped && !(sl->running && sl->runner == std::this_thread::get_id())) {
    // Exiting: the caller does the work, within the task's own bounds.
    lk.unlock();
    run_here(t, clock::now() + default_drain);
    return;
  }
  if (sl->running) {
    sl->woken = std::min(sl->woken, when);
  } else {
    sl->due = std::min(sl->due, when);
  }
  const bool started = s.thread_pid == lifecycle::process_id();
  ensure_thread(s);
  if (!started) return;  // a new thread looks at every task first
  if (notify && s.sleeping && when < s.sleeps_until) {
    s.sleeps_until = when;
    s.wake_cv->notify_one();
  }
}

bool run_here(task& t, clock::time_point deadline) noexcept {
  queue_state& s = q();
  std::unique_lock<std::mutex> lk(*s.m);
  slot* sl = find(s, t);
  if (!sl) return false;
  if (sl->running) {
    if (sl->runner == std::this_thread::get_id()) return false;  // from its own run(): never waits for itself
    // Another thread runs it: that run is what the caller waits for.
    s.idle_cv->wait_until(lk, deadline, [&] { return !sl->running || sl->removed; });
    return !sl->running;
  }
  // A task's run may block in I/O for good (a file system hung in fsync, an output stuck in a pipe): the caller,
  // the exiting thread included, waits for it only until its deadline. The thread, idle, runs t; a thread busy
  // with another task is not waited behind: a helper thread of this module runs t. Only where no thread can be
  // started does t run on the caller's.
  if (!on_thread && !s.stopped && s.thread_pid == lifecycle::process_id()) {
    const std::uint64_t before = sl->runs;
    const std::uint64_t generation = sl->generation;
    bool handed = false;
    if (s.sleeping) {
      sl->due = clock::time_point::min();
      s.handed = sl;
      s.sleeps_until = sl->due;
      s.wake_cv->notify_one();
      ++s.st.runs_handed;
      handed = true;
    } else {
      sl->running = true;
      try {
        std::thread([sl] {
          queue_state& qs = q();
          std::unique_lock<std::mutex> helper_lk(*qs.m);
          run_locked(qs, helper_lk, sl);
        }).detach();
        ++s.st.runs_helped;
        handed = true;
      } catch (const std::system_error&) {
        sl->running = false;  // no thread: runs here
      }
    }
    if (handed) {
      // The slot's generation: a task removed meanwhile and its slot given to another never counts as run.
      const auto gone = [&] { return sl->generation != generation || sl->removed; };
      s.idle_cv->wait_until(lk, deadline, [&] { return sl->runs != before || gone() || s.stopped; });
      return !gone() && sl->runs != before;
    }
  }
  sl->running = true;
  ++s.st.runs_here;
  run_locked(s, lk, sl);
  return true;
}

bool on_background_thread() noexcept { return on_thread; }

bool has_thread() noexcept {
  const queue_state& s = q();
  return s.thread_pid.load(std::memory_order_acquire) == lifecycle::process_id() &&
         !s.stopped.load(std::memory_order_acquire);
}

bool exiting() noexcept { return q().exiting.load(std::memory_order_acquire); }

void shutdown() noexcept {
  queue_state& s = q();
  std::vector<task*> order;
  {
    std::lock_guard<std::mutex> lk(*s.m);
    if (s.exiting.exchange(true)) return;
    std::vector<slot*> live;
    for (int i = 0; i < s.count; ++i)
      if (!s.slots[i].removed) live.push_back(&s.slots[i]);
    std::stable_sort(live.begin(), live.end(),
                     [](const slot* a, const slot* b) { return a->order < b->order; });
    try {
      for (slot* sl : live) order.push_back(sl->t);
    } catch (...) {
      // No memory for the list: drain in table order.
    }
  }
  for (task* t : order) t->drain_at_exit();
  std::unique_lock<std::mutex> lk(*s.m);
  s.stopped = true;
  s.wake_cv->notify_all();
  // The thread leaves at its next look; a run in progress ends first (bounded: a stuck output never does).
  s.idle_cv->wait_for(lk, stop_wait, [&] { return s.thread_pid != ::getpid(); });
}

stats statistics() noexcept {
  queue_state& s = q();
  std::lock_guard<std::mutex> lk(*s.m);
  return s.st;
}

}  // namespace launchfit::detail::background

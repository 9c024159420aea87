// SPDX-License-Identifier: MIT
// The one place launchfit registers pthread_atfork and atexit handlers (see lifecycle.hpp).

#include "lifecycle.hpp"

#include <pthread.h>
#include <unistd.h>

#include "sanitizers.hpp"
#if defined(LAUNCHFIT_THREAD_SANITIZER)
#include <sanitizer/tsan_interface.h>
#endif

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>

namespace launchfit::detail::lifecycle {
namespace {

// Constant-initialised (no constructor runs), so a module may register from its own static initialiser
// whatever the order of initialisation. A fork never waits on registration, nor registration on a fork: a
// module registering from a function-local static's initialiser while another thread forks would otherwise wait
// inside the static's guard for the whole fork (its prepare hooks flush stores), and the child, inheriting the
// guard "in progress", would hang on its first use of that static.
constexpr int max_hooks = 16;
std::mutex table_mutex;  // registration only
fork_hooks table[max_hooks];
std::atomic<int> registered{0};  // entries below it are written (release) before it counts them
constexpr int max_leaves = 16;
fork_hooks leaves[max_leaves];
std::atomic<int> leaves_registered{0};  // as `registered`, for leaves
std::atomic<bool> innermost_set{false};
fork_hooks innermost{};  // prepared after every other module, repaired before them
bool atfork_registered = false;
std::atomic<bool> hook_refused{false};  // a registration found its table full (or no atfork handler)
std::atomic<pid_t> cached_pid{0};  // 0: not cached yet (or the fork handler could not be registered)
// The hooks a fork in progress prepared, which its parent and child hooks run: per thread, as two threads may
// fork at once (glibc runs their prepare handlers concurrently) while a third registers.
thread_local int forking_count = 0;
thread_local int forking_leaves = 0;
thread_local bool forking_innermost = false;

void prepare_all() {
  forking_count = registered.load(std::memory_order_acquire);
  forking_innermost = innermost_set.load(std::memory_order_acquire);
  for (int i = forking_count - 1; i >= 0; --i)
    if (table[i].prepare) table[i].prepare();
  forking_leaves = leaves_registered.load(std::memory_order_acquire);
  for (int i = 0; i < forking_leaves; ++i)
    if (leaves[i].prepare) leaves[i].prepare();
  if (forking_innermost && innermost.prepare) innermost.prepare();
}

void parent_all() {
  if (forking_innermost && innermost.parent) innermost.parent();
  for (int i = 0; i < forking_leaves; ++i)
    if (leaves[i].parent) leaves[i].parent();
  for (int i = 0; i < forking_count; ++i)
    if (table[i].parent) table[i].parent();
}

void child_all() {
  cached_pid.store(::getpid(), std::memory_order_relaxed);  // before any hook: hooks may ask
  // A registration another thread held at the fork is gone with that thread: the child's own (a hook's too)
  // can go on.
  new (&table_mutex) std::mutex;
  if (forking_innermost && innermost.child) innermost.child();
  for (int i = 0; i < forking_leaves; ++i)
    if (leaves[i].child) leaves[i].child();
  for (int i = 0; i < forking_count; ++i)
    if (table[i].child) table[i].child();
}

// Under table_mutex. The process ID is kept from the moment the handler that keeps it up to date exists.
bool ensure_atfork() {
  if (!atfork_registered) {
    if (::pthread_atfork(prepare_all, parent_all, child_all) != 0) return false;
    atfork_registered = true;
    cached_pid.store(::getpid(), std::memory_order_relaxed);
  }
  return true;
}

}  // namespace

namespace {

// Under table_mutex: adds hooks to one of the fixed tables (once: the same hooks again are ignored).
bool add_to(fork_hooks* to, int capacity, std::atomic<int>& count, const fork_hooks& hooks) noexcept {
  const int n = count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    if (to[i].prepare == hooks.prepare && to[i].parent == hooks.parent && to[i].child == hooks.child) return true;
  if (n == capacity || !ensure_atfork()) {
    hook_refused = true;
    return false;
  }
  to[n] = hooks;
  count.store(n + 1, std::memory_order_release);  // entries below it are written before it counts them
  return true;
}

}  // namespace

bool on_fork(const fork_hooks& hooks) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  return add_to(table, max_hooks, registered, hooks);
}

bool on_fork_leaf(const fork_hooks& hooks) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  return add_to(leaves, max_leaves, leaves_registered, hooks);
}

bool on_fork_innermost(const fork_hooks& hooks) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  if (innermost.prepare == hooks.prepare) return true;
  if (innermost.prepare || !ensure_atfork()) return hook_refused = true, false;
  innermost = hooks;
  innermost_set.store(true, std::memory_order_release);
  return true;
}

// Lock-free: callers hold locks of their own (the background queue's), which a fork takes in its prepare hooks.
pid_t process_id() noexcept {
  const pid_t p = cached_pid.load(std::memory_order_relaxed);
  return p != 0 ? p : ::getpid();
}

bool every_fork_hook_registered() noexcept { return !hook_refused.load(); }

bool on_exit(void (*handler)()) noexcept { return std::atexit(handler) == 0; }

void abandoned_in_child(void* lock) noexcept {
#if defined(LAUNCHFIT_THREAD_SANITIZER)
  // The sanitizer's own bookkeeping of an unlock, without the unlock itself.
  __tsan_mutex_pre_unlock(lock, 0);
  __tsan_mutex_post_unlock(lock, 0);
#else
  (void)lock;
#endif
}

}  // namespace launchfit::detail::lifecycle

// SPDX-License-Identifier: MIT
// The one place launchfit registers pthread_atfork and atexit handlers (see lifecycle.hpp).

#include "lifecycle.hpp"

#include <pthread.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LAUNCHFIT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define LAUNCHFIT_TSAN 1
#endif
#if defined(LAUNCHFIT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace launchfit::detail::lifecycle {
namespace {

// Constant-initialised (no constructor runs), so a module may register from its own static initialiser
// whatever the order of initialisation.
constexpr int max_hooks = 16;
std::mutex table_mutex;  // registration; held from prepare to parent/child so the table stays as it was
fork_hooks table[max_hooks];
int registered = 0;
fork_hooks innermost{};  // prepared after every other module, repaired before them
bool atfork_registered = false;
std::atomic<pid_t> cached_pid{0};  // 0: not cached yet (or the fork handler could not be registered)

void prepare_all() {
  table_mutex.lock();
  for (int i = registered - 1; i >= 0; --i)
    if (table[i].prepare) table[i].prepare();
  if (innermost.prepare) innermost.prepare();
}

void parent_all() {
  if (innermost.parent) innermost.parent();
  for (int i = 0; i < registered; ++i)
    if (table[i].parent) table[i].parent();
  table_mutex.unlock();
}

void child_all() {
  cached_pid.store(::getpid(), std::memory_order_relaxed);  // before any hook: hooks may ask
  if (innermost.child) innermost.child();
  for (int i = 0; i < registered; ++i)
    if (table[i].child) table[i].child();
  table_mutex.unlock();  // taken by this thread, the child's only one, in prepare_all()
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

bool on_fork(const fork_hooks& hooks) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  for (int i = 0; i < registered; ++i)
    if (table[i].prepare == hooks.prepare && table[i].parent == hooks.parent && table[i].child == hooks.child)
      return true;
  if (registered == max_hooks || !ensure_atfork()) return false;
  table[registered++] = hooks;
  return true;
}

bool on_fork_innermost(const fork_hooks& hooks) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  if (innermost.prepare == hooks.prepare) return true;
  if (innermost.prepare || !ensure_atfork()) return false;
  innermost = hooks;
  return true;
}

// Lock-free: callers hold locks of their own (the background queue's), which a fork takes after table_mutex.
pid_t process_id() noexcept {
  const pid_t p = cached_pid.load(std::memory_order_relaxed);
  return p != 0 ? p : ::getpid();
}

bool on_exit(void (*handler)()) noexcept { return std::atexit(handler) == 0; }

void abandoned_in_child(void* lock) noexcept {
#if defined(LAUNCHFIT_TSAN)
  // The sanitizer's own bookkeeping of an unlock, without the unlock itself.
  __tsan_mutex_pre_unlock(lock, 0);
  __tsan_mutex_post_unlock(lock, 0);
#else
  (void)lock;
#endif
}

}  // namespace launchfit::detail::lifecycle

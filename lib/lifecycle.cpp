// SPDX-License-Identifier: MIT
// The one place launchfit registers pthread_atfork and atexit handlers (see lifecycle.hpp).

#include "lifecycle.hpp"

#include <pthread.h>

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
bool atfork_registered = false;

void prepare_all() {
  table_mutex.lock();
  for (int i = registered - 1; i >= 0; --i)
    if (table[i].prepare) table[i].prepare();
}

void parent_all() {
  for (int i = 0; i < registered; ++i)
    if (table[i].parent) table[i].parent();
  table_mutex.unlock();
}

void child_all() {
  for (int i = 0; i < registered; ++i)
    if (table[i].child) table[i].child();
  table_mutex.unlock();  // taken by this thread, the child's only one, in prepare_all()
}

}  // namespace

bool on_fork(const fork_hooks& hooks) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  for (int i = 0; i < registered; ++i)
    if (table[i].prepare == hooks.prepare && table[i].parent == hooks.parent && table[i].child == hooks.child)
      return true;
  if (registered == max_hooks) return false;
  if (!atfork_registered) {
    if (::pthread_atfork(prepare_all, parent_all, child_all) != 0) return false;
    atfork_registered = true;
  }
  table[registered++] = hooks;
  return true;
}

bool on_exit(void (*handler)()) noexcept { return std::atexit(handler) == 0; }

}  // namespace launchfit::detail::lifecycle

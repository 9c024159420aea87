// SPDX-License-Identifier: MIT
#pragma once
// The process lifecycle (fork, exit) has one owner: the only place that registers pthread_atfork and
// atexit handlers. A module with a thread or a lock that a child of fork() could inherit held registers
// its hooks here.
//
// At fork, prepare hooks run in the reverse order of registration and parent/child hooks in the order of
// registration (as pthread_atfork does): a module registered first is prepared last, so its locks are the
// innermost. The logger registers first (at load time): every other module may log while it holds a lock
// of its own, never the other way round.
//
// What a prepare hook takes, its parent and child hooks give back. In the child only the forking thread
// exists: a child hook replaces what another thread could have held and leaves its module usable (a
// background thread started again on next use, or the feature off for the child, said where it is).

#include <sys/types.h>

#include <mutex>
#include <new>
#include <type_traits>

namespace launchfit::detail::lifecycle {

struct fork_hooks {
  void (*prepare)() = nullptr;
  void (*parent)() = nullptr;
  void (*child)() = nullptr;
};

// Registers a module's fork hooks (once: a second call with the same prepare hook is ignored). Safe from
// any thread, at any time, also during static initialisation. Never throws; false when the table of hooks
// is full (a fixed table: nothing is allocated at fork).
bool on_fork(const fork_hooks& hooks) noexcept;

// Registers the hooks of a leaf lock: one under which nothing else is locked (a registry's map, a table of
// settings). Leaves are prepared after every module registered with on_fork() (which may take a leaf while it
// holds its own lock) and before the background queue's, and given back before those modules, in the child
// before them too. Their order among themselves does not matter: no thread holds two. Safe from any thread at
// any time; false when the table of leaves is full.
bool on_fork_leaf(const fork_hooks& hooks) noexcept;

// Whether every registration so far found room (the tables are fixed: nothing is allocated at fork). A module
// whose hooks were refused leaves a child of fork() waiting on its lock: the fork tests ask this after using every
// module.
bool every_fork_hook_registered() noexcept;

// Registers the background queue's hooks (background.hpp), whose lock any module may take while it holds
// its own (it queues work for the background thread): prepared after every other module's, given back
// before them. One slot; false when another holds it.
bool on_fork_innermost(const fork_hooks& hooks) noexcept;

// Registers a handler run at normal process exit (std::exit, return from main), in the reverse order of
// registration, interleaved with static destructors as std::atexit handlers are. False if it could not.
// launchfit registers one: background::shutdown (background.hpp), which drains every writer in order (the
// plan file, the remote stores, the log) and stops the background thread. Modules do not register their own.
bool on_exit(void (*handler)()) noexcept;

// This process's ID without a system call (getpid() is one, about 0.2 µs on a virtual machine; the logging
// queue asks on every line it takes). Kept from the registration of the fork handler (the logger registers
// at load time) and set in a child of fork() before any module's child hook runs; never takes a lock. A child
// made without fork()'s handlers (a raw clone() that goes on to call launchfit) reads its parent's ID:
// launchfit's locks are not made safe for such a child either. Until a handler is registered, or where it
// cannot be, every call asks the system.
pid_t process_id() noexcept;

// A child hook that replaces a lock its prepare hook took (rather than unlocking it: glibc unlocks a
// write-locked rwlock only from the thread id that locked it, and the child's thread has another) calls this
// with the abandoned lock's address, so that a thread sanitizer no longer counts it as held by the child's
// thread (it would read every later lock the child takes as an inversion with it). Does nothing otherwise.
void abandoned_in_child(void* lock) noexcept;

// Registers a leaf lock, reached through `lock_of` (a never-destroyed singleton's): a std::mutex, or a
// std::shared_mutex (taken exclusively). Taken before a fork, given back in the parent and made anew in the child,
// where the thread that held it is gone (a write-locked rwlock cannot be unlocked there: see abandoned_in_child).
// Leaf mutexes live at namespace scope, constant-initialised, and must outlive every static destructor that may
// still lock them (a module unloaded from one): libstdc++'s std::mutex is trivially destroyed.
static_assert(std::is_trivially_destructible_v<std::mutex>, "a namespace-scope leaf mutex would be destroyed at exit");

template <auto lock_of>
bool on_fork_leaf_mutex() noexcept {
  using lock_type = std::remove_reference_t<decltype(lock_of())>;
  return on_fork_leaf({[] { lock_of().lock(); }, [] { lock_of().unlock(); },
                       [] {
                         abandoned_in_child(&lock_of());
                         new (&lock_of()) lock_type;
                       }});
}

}  // namespace launchfit::detail::lifecycle

// SPDX-License-Identifier: MIT
#pragma once
// Internal: SIGPIPE kept from the process while a thread writes to a socket. A write to a socket the peer
// closed raises SIGPIPE, whose default action ends the user's program; a library must not change the
// process's disposition, so the signal is blocked in the writing thread for the guard's life, and one raised
// meanwhile is taken back before the mask is restored.

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

namespace launchfit::detail {

class sigpipe_guard {
 public:
  sigpipe_guard() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~sigpipe_guard() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec now{0, 0};
      while (sigtimedwait(&pipe, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t old_{};
  bool was_pending_ = false;
};

}  // namespace launchfit::detail

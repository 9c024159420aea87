// SPDX-License-Identifier: MIT
#pragma once
// Runs a piece of a fault test in a child process with a deadline: a hang or a crash is a test failure
// with a message, never a stuck test run.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace launchfit::fault {

// Built with AddressSanitizer or ThreadSanitizer. They slow every allocation several times, and CI runs two
// tests at once on two cores: the bounds that tell a hang from a slow child are slow_factor times wider.
// (GCC 12's sanitizer allocators have no fork handlers: a test that forks from a busy process lets its
// threads leave the allocator first under them.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
inline constexpr int slow_factor = 4;
#else
inline constexpr bool sanitized = false;
inline constexpr int slow_factor = 1;
#endif

struct bounded_result {
  bool finished = false;  // exited before the deadline
  int exit_code = -1;     // when finished normally
  int signal = 0;         // when killed by a signal (not by the deadline)
  double seconds = 0;
};

// Waits at most `limit` (from `start`) for the child `pid`, then kills it.
inline bounded_result wait_bounded(pid_t pid, std::chrono::steady_clock::time_point start,
                                   std::chrono::milliseconds limit) {
  bounded_result r;
  if (pid < 0) return r;
  for (;;) {
    int status = 0;
    const pid_t w = waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (w == pid) {
      r.finished = true;
      if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
      return r;
    }
    if (std::chrono::steady_clock::now() - start > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Runs `body` in a child and exits with its return value (an uncaught exception exits 98).
[[noreturn]] inline void run_and_exit(const std::function<int()>& body) {
  int rc = 98;
  try {
    rc = body();
  } catch (...) {
    rc = 98;
  }
  std::fflush(nullptr);
  _exit(rc);
}

// Forks; the child runs `body` and exits with its return value (an uncaught exception exits 98). The
// parent waits at most `limit`, then kills the child.
inline bounded_result run_bounded(std::chrono::milliseconds limit, const std::function<int()>& body) {
  std::fflush(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) run_and_exit(body);
  return wait_bounded(pid, start, limit);
}

// "Another process" for a test whose own process starts threads before it needs one: forked at
// construction, while the test's process has no threads yet, it runs `body` only when released. A child
// forked while a thread of its parent is inside malloc can hang in an allocator that has no fork handlers
// (the sanitizers' allocators in GCC 12 are such: the child waits forever on the allocator's lock), which
// is not what such a test is about. Tests of fork itself (fork-test.cpp) fork from busy processes on
// purpose.
class held_process {
 public:
  explicit held_process(const std::function<int()>& body) {
    int go[2];
    if (::pipe(go) != 0) return;
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      ::close(go[1]);
      char c = 0;
      const bool released = ::read(go[0], &c, 1) == 1;
      if (!released) _exit(97);  // never released: the test ended first
      run_and_exit(body);
    }
    ::close(go[0]);
    if (pid_ < 0) {
      ::close(go[1]);
      return;
    }
    go_ = go[1];
  }
  held_process(const held_process&) = delete;
  held_process& operator=(const held_process&) = delete;
  ~held_process() {
    if (go_ >= 0) ::close(go_);  // an unreleased child reads end-of-file and exits
    if (pid_ > 0 && !waited_)
      wait_bounded(pid_, std::chrono::steady_clock::now(), std::chrono::milliseconds(2000));
  }

  // Lets the child run `body`; waits at most `limit` for it, then kills it.
  bounded_result release(std::chrono::milliseconds limit) {
    if (pid_ < 0 || go_ < 0) return {};
    const auto start = std::chrono::steady_clock::now();
    const bool sent = ::write(go_, "x", 1) == 1;
    ::close(go_);
    go_ = -1;
    waited_ = true;
    bounded_result r = wait_bounded(pid_, start, limit);
    if (!sent) r.finished = false;
    return r;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool waited_ = false;
};

// EXPECT-style helper: the body finished in time with exit code 0.
#define LAUNCHFIT_EXPECT_BOUNDED(limit_ms, body)                                             \
  do {                                                                                       \
    const ::launchfit::fault::bounded_result lf_r_ =                                         \
        ::launchfit::fault::run_bounded(std::chrono::milliseconds(limit_ms), body);          \
    EXPECT_TRUE(lf_r_.finished) << "did not finish within " << (limit_ms) << " ms (a hang)"; \
    EXPECT_EQ(lf_r_.signal, 0) << "killed by signal " << lf_r_.signal;                       \
    EXPECT_EQ(lf_r_.exit_code, 0) << "exit code " << lf_r_.exit_code;                        \
  } while (0)

}  // namespace launchfit::fault

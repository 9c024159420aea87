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

struct bounded_result {
  bool finished = false;  // exited before the deadline
  int exit_code = -1;     // when finished normally
  int signal = 0;         // when killed by a signal (not by the deadline)
  double seconds = 0;
};

// Forks; the child runs `body` and exits with its return value (an uncaught exception exits 98). The
// parent waits at most `limit`, then kills the child.
inline bounded_result run_bounded(std::chrono::milliseconds limit, const std::function<int()>& body) {
  std::fflush(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 98;
    try {
      rc = body();
    } catch (...) {
      rc = 98;
    }
    std::fflush(nullptr);
    _exit(rc);
  }
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

// EXPECT-style helper: the body finished in time with exit code 0.
#define LAUNCHFIT_EXPECT_BOUNDED(limit_ms, body)                                                        \
  do {                                                                                                  \
    const ::launchfit::fault::bounded_result lf_r_ =                                                    \
        ::launchfit::fault::run_bounded(std::chrono::milliseconds(limit_ms), body);                     \
    EXPECT_TRUE(lf_r_.finished) << "did not finish within " << (limit_ms) << " ms (a hang)";          \
    EXPECT_EQ(lf_r_.signal, 0) << "killed by signal " << lf_r_.signal;                                \
    EXPECT_EQ(lf_r_.exit_code, 0) << "exit code " << lf_r_.exit_code;                                 \
  } while (0)

}  // namespace launchfit::fault

// SPDX-License-Identifier: MIT
#pragma once
// A lock whose waiters give up at a deadline. std::timed_mutex would do, but its timed lock is
// pthread_mutex_clocklock on glibc, which ThreadSanitizer does not see: it then reports every unlock after
// one as the unlock of an unlocked mutex. This one waits on a condition variable, which it does see.

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace launchfit::detail {

class deadline_lock {
 public:
  // False at `deadline` if another thread still holds it.
  bool try_lock_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> l(m_);
    if (!free_.wait_until(l, deadline, [this] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  // False also while another thread changes held_: a child of fork() calls it for a lock whose m_ a thread
  // that is gone may have held at the fork, and must not wait for it.
  bool try_lock() {
    std::unique_lock<std::mutex> l(m_, std::try_to_lock);
    if (!l.owns_lock() || held_) return false;
    held_ = true;
    return true;
  }
  void lock() {
    std::unique_lock<std::mutex> l(m_);
    free_.wait(l, [this] { return !held_; });
    held_ = true;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> l(m_);
      held_ = false;
    }
    free_.notify_one();
  }

 private:
  std::mutex m_;  // held only to change held_, never across the work the lock guards
  std::condition_variable free_;
  bool held_ = false;
};

}  // namespace launchfit::detail

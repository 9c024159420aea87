// SPDX-License-Identifier: MIT
// The one background thread (lib/background.hpp): a run a caller hands over with run_here() is the thread's
// next, before another task due as early (which may block in its output for good), and a run the busy thread
// cannot take is done by a helper thread while the caller waits with its deadline, never on the caller's own.

#include "background.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace bg = launchfit::detail::background;

namespace {

// A task whose run blocks until released (an output stuck in a pipe, a file system hung in fsync).
class blocking_task final : public bg::task {
 public:
  std::atomic<bool> release{false};
  std::atomic<int> runs{0};
  bg::clock::time_point run() noexcept override {
    ++runs;
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return bg::never;
  }
  bool has_work() const noexcept override { return false; }
  void drain_at_exit() noexcept override {}
  const char* name() const noexcept override { return "test blocking"; }
};

// A task that notes each run and the thread it ran on.
class counting_task final : public bg::task {
 public:
  std::atomic<int> runs{0};
  std::atomic<std::thread::id> ran_on{};
  bg::clock::time_point run() noexcept override {
    ran_on = std::this_thread::get_id();
    ++runs;
    return bg::never;
  }
  bool has_work() const noexcept override { return false; }
  void drain_at_exit() noexcept override {}
  const char* name() const noexcept override { return "test counting"; }
};

bool eventually(const std::atomic<int>& v, int at_least) {
  for (int i = 0; i < 4000 && v.load() < at_least; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return v.load() >= at_least;
}

}  // namespace

// The thread idle, a task ahead in its table due now (woken without telling the thread, as a log line wakes
// the log): the run a caller hands over runs first. The thread ran the task due as early first, and the
// caller's run waited its whole deadline behind it.
TEST(Background, AHandedRunIsTheThreadsNextBeforeATaskDueAsEarly) {
  blocking_task ahead;
  counting_task handed;
  ASSERT_TRUE(bg::add(ahead, bg::exit_order::log));
  ASSERT_TRUE(bg::add(handed, bg::exit_order::plan_file));
  bg::wake(handed);  // starts the thread, which runs it once and sleeps
  ASSERT_TRUE(eventually(handed.runs, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  bg::wake(ahead, bg::clock::time_point::min(), false);  // due now, the sleeping thread not told
  const auto start = bg::clock::now();
  const bool ran = bg::run_here(handed, start + std::chrono::seconds(2));
  const auto waited = bg::clock::now() - start;
  EXPECT_TRUE(ran);
  EXPECT_EQ(handed.runs.load(), 2);
  EXPECT_NE(handed.ran_on.load(), std::this_thread::get_id());
  EXPECT_LT(waited, std::chrono::seconds(2)) << "the handed run waited behind the blocked task";
  ahead.release = true;
  bg::remove(ahead);
  bg::remove(handed);
}

// The thread busy in another task's run that never ends: run_here() has a helper thread run the task, and the
// caller's own thread never runs it (a run that blocks for good then holds no caller past its deadline).
TEST(Background, ARunTheBusyThreadCannotTakeIsDoneByAHelper) {
  blocking_task busy;
  counting_task flushed;
  ASSERT_TRUE(bg::add(busy, bg::exit_order::log));
  ASSERT_TRUE(bg::add(flushed, bg::exit_order::plan_file));
  bg::wake(busy);
  ASSERT_TRUE(eventually(busy.runs, 1));  // the thread is inside it
  const bg::stats before = bg::statistics();
  EXPECT_TRUE(bg::run_here(flushed, bg::clock::now() + std::chrono::seconds(2)));
  const bg::stats after = bg::statistics();
  EXPECT_EQ(flushed.runs.load(), 1);
  EXPECT_NE(flushed.ran_on.load(), std::this_thread::get_id()) << "the caller ran it";
  EXPECT_EQ(after.runs_helped, before.runs_helped + 1);
  EXPECT_EQ(after.runs_here, before.runs_here);
  busy.release = true;
  bg::remove(busy);
  bg::remove(flushed);
}

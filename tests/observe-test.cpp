// SPDX-License-Identifier: MIT
// Plan listeners and the NVTX switch on the CPU: registration, removal, a throwing listener, listeners that
// register or remove listeners from inside a call (no deadlock), and calls from many threads.
// tests/gpu/observe-test.cu checks the events real launches make.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "captured_log.hpp"
#include "launchfit/error.hpp"
#include "launchfit/observe.hpp"
#include "observe_internal.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

lf::plan a_plan() {
  lf::plan p;
  p.block = lf::dims{256, 1, 1};
  p.block_threads = 256;
  return p;
}

lf::plan_event event_for(const lf::plan& p, const char* kernel = "void saxpy(float, float const*, float*, int)") {
  lf::plan_event ev;
  ev.kernel = kernel;
  ev.device = "NVIDIA H200";
  ev.plan = &p;
  return ev;
}

}  // namespace

TEST(Listener, IsCalledWithTheEventUntilRemoved) {
  const lf::plan p = a_plan();
  std::vector<std::string> seen;
  const auto id = lf::add_plan_listener([&](const lf::plan_event& ev) {
    seen.push_back(ev.kernel + " " + ev.plan->block.to_string());
  });
  EXPECT_TRUE(ld::listeners_active());
  ld::notify_plan(event_for(p));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "void saxpy(float, float const*, float*, int) 256");
  EXPECT_TRUE(lf::remove_plan_listener(id));
  EXPECT_FALSE(lf::remove_plan_listener(id));
  ld::notify_plan(event_for(p));
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_FALSE(ld::listeners_active());
  EXPECT_THROW(lf::add_plan_listener(nullptr), lf::error);
}

TEST(Listener, AThrowingListenerIsReportedOnceAndOthersStillRun) {
  launchfit_test::captured_log log(spdlog::level::info);
  const lf::plan p = a_plan();
  int after = 0;
  const auto bad = lf::add_plan_listener([](const lf::plan_event&) { throw std::runtime_error("boom"); });
  const auto good = lf::add_plan_listener([&](const lf::plan_event&) { ++after; });
  ld::notify_plan(event_for(p, "void k\n(int)"));  // never throws into the launch
  ld::notify_plan(event_for(p));
  EXPECT_EQ(after, 2);
  EXPECT_EQ(log.warnings(), 1) << log.text();
  EXPECT_NE(log.text().find("threw for kernel"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find(": boom;"), std::string::npos) << "what() is said: " << log.text();
  EXPECT_EQ(log.text().find("void k\n"), std::string::npos) << "the kernel name is escaped";

  // Another listener that throws is another problem: reported too (once), with its own what().
  const auto worse = lf::add_plan_listener([](const lf::plan_event&) { throw std::logic_error("bang\x1b[2J"); });
  const auto odd = lf::add_plan_listener([](const lf::plan_event&) { throw 42; });
  ld::notify_plan(event_for(p));
  ld::notify_plan(event_for(p));
  EXPECT_EQ(after, 4);
  EXPECT_EQ(log.warnings(), 3) << log.text();
  EXPECT_NE(log.text().find(": bang\\x1b[2J;"), std::string::npos) << "escaped: " << log.text();
  EXPECT_NE(log.text().find("not derived from std::exception"), std::string::npos) << log.text();
  lf::remove_plan_listener(bad);
  lf::remove_plan_listener(good);
  lf::remove_plan_listener(worse);
  lf::remove_plan_listener(odd);
}

TEST(Listener, MayAddAndRemoveListenersFromInsideACall) {
  const lf::plan p = a_plan();
  std::atomic<int> inner_calls{0};
  std::uint64_t inner = 0;
  std::uint64_t self = 0;
  self = lf::add_plan_listener([&](const lf::plan_event&) {
    if (inner == 0) inner = lf::add_plan_listener([&](const lf::plan_event&) { ++inner_calls; });
    lf::remove_plan_listener(self);  // removing itself while running
  });
  ld::notify_plan(event_for(p));  // the snapshot taken before the call: the new listener runs from the next
  EXPECT_EQ(inner_calls.load(), 0);
  ld::notify_plan(event_for(p));
  EXPECT_EQ(inner_calls.load(), 1);
  EXPECT_TRUE(lf::remove_plan_listener(inner));
}

// A notifying thread took its snapshot of the listeners before remove_plan_listener() returned: the removed
// listener is still not called after it returned. Ordered with flags (no sleep): thread T is inside the first
// listener (its snapshot holds the second) while the main thread removes the second.
TEST(Listener, IsNeverCalledOnceRemoveReturnedEvenFromAnOlderSnapshot) {
  const lf::plan p = a_plan();
  std::mutex m;
  std::condition_variable cv;
  bool inside = false, go_on = false;
  std::atomic<bool> removed{false};
  std::atomic<int> late_calls{0};
  const auto first = lf::add_plan_listener([&](const lf::plan_event&) {
    std::unique_lock<std::mutex> lock(m);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return go_on; });
  });
  const auto second = lf::add_plan_listener([&](const lf::plan_event&) {
    if (removed.load()) ++late_calls;
  });
  std::thread t([&] { ld::notify_plan(event_for(p)); });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return inside; });
  }
  EXPECT_TRUE(lf::remove_plan_listener(second));
  removed = true;
  {
    std::lock_guard<std::mutex> lock(m);
    go_on = true;
  }
  cv.notify_all();
  t.join();
  EXPECT_EQ(late_calls.load(), 0) << "called after remove_plan_listener() returned";
  lf::remove_plan_listener(first);
}

// remove_plan_listener() returns only after a call in progress on another thread has ended: whenever the
// removing thread gets there, the call it finds in progress has finished when it returns.
TEST(Listener, RemoveWaitsForACallInProgressOnAnotherThread) {
  const lf::plan p = a_plan();
  std::mutex m;
  std::condition_variable cv;
  bool inside = false, release = false;
  std::atomic<bool> finished{false}, finished_when_removed{false};
  const auto id = lf::add_plan_listener([&](const lf::plan_event&) {
    std::unique_lock<std::mutex> lock(m);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    finished = true;
  });
  std::thread t([&] { ld::notify_plan(event_for(p)); });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return inside; });
  }
  std::thread remover([&] {
    lf::remove_plan_listener(id);
    finished_when_removed = finished.load();
  });
  {
    std::lock_guard<std::mutex> lock(m);
    release = true;
  }
  cv.notify_all();
  remover.join();
  t.join();
  EXPECT_TRUE(finished_when_removed.load());
}

// Many threads plan while listeners come and go: no listener is ever called after its removal returned.
TEST(Listener, RemovalRacesWithManyNotifyingThreads) {
  const lf::plan p = a_plan();
  std::atomic<bool> stop{false};
  std::atomic<long> late_calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) ld::notify_plan(event_for(p));
    });
  }
  for (int round = 0; round < 100; ++round) {
    auto removed = std::make_shared<std::atomic<bool>>(false);
    const auto id = lf::add_plan_listener([removed, &late_calls](const lf::plan_event&) {
      if (removed->load()) ++late_calls;
    });
    std::this_thread::yield();
    lf::remove_plan_listener(id);
    removed->store(true);
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(late_calls.load(), 0);
}

TEST(Listener, ManyThreadsNotifyWhileOthersRegister) {
  const lf::plan p = a_plan();
  std::atomic<long> calls{0};
  const auto id = lf::add_plan_listener([&](const lf::plan_event&) { ++calls; });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) ld::notify_plan(event_for(p));
    });
  }
  threads.emplace_back([] {
    for (int i = 0; i < 200; ++i) lf::remove_plan_listener(lf::add_plan_listener([](const lf::plan_event&) {}));
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 8000);
  lf::remove_plan_listener(id);
}

TEST(Nvtx, CanBeSwitchedOffAndOn) {
  lf::set_nvtx(true);
  if (!lf::nvtx_enabled()) {  // built with LAUNCHFIT_NVTX=OFF: nothing compiled in, nothing to switch
    EXPECT_EQ(ld::nvtx_name_for("void k(int)", a_plan(), "items"), nullptr);
    return;
  }
  lf::set_nvtx(false);
  EXPECT_FALSE(lf::nvtx_enabled());
  EXPECT_EQ(ld::nvtx_name_for("k", a_plan(), "items"), nullptr);
  lf::set_nvtx(true);
  EXPECT_TRUE(lf::nvtx_enabled());
  // No tool attached: registering and pushing are no-ops that must not crash.
  const void* name = ld::nvtx_name_for("void k(int)", a_plan(), "items");
  ld::nvtx_push(name, 1056);
  ld::nvtx_pop();
}

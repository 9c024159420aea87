// SPDX-License-Identifier: MIT
// The plan cache when keeping a new plan runs out of memory: the build's exception reaches the caller, the
// entry it made is gone with it (nothing keeps its policies alive), and the next caller builds the key again,
// exactly once however many wait for it.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"

namespace {
// The next allocation of this thread throws std::bad_alloc (other threads, the logging thread's included,
// allocate as usual).
thread_local bool fail_next_allocation = false;
}  // namespace

void* operator new(std::size_t bytes) {
  if (fail_next_allocation) {
    fail_next_allocation = false;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

namespace lf = launchfit;
namespace ld = launchfit::detail;

TEST(CacheFault, ABuildWhosePlanCannotBeKeptLeavesNothingBehindAndIsBuiltAgain) {
  (void)ld::keep_plan(lf::plan{}, lf::kernel_resources{});  // the kept plans' table exists already
  const auto overriding = std::make_shared<const lf::max_occupancy_policy>();
  lf::plan_key key;
  key.kernel = 0x1234;
  key.policy = 77;
  {
    const ld::plan_reader reading;
    auto failing = [&] {
      ld::plan_entry e;
      e.key = key;
      e.overriding = overriding;  // what the entry holds
      e.kernel.name = "_Z6failedv";
      e.plan.block_threads = 128;
      fail_next_allocation = true;  // keeping the plan (its first allocation) runs out of memory
      return e;
    };
    EXPECT_THROW((void)ld::find_or_build(key, failing), std::bad_alloc);
    fail_next_allocation = false;
    EXPECT_EQ(overriding.use_count(), 1) << "the failed build's entry still holds its policy";
  }
  // Two callers at once: one builds the key again, the other waits for it and gets the same entry.
  std::atomic<int> builds{0};
  const ld::plan_entry* got[2] = {nullptr, nullptr};
  auto caller = [&](int i) {
    const ld::plan_reader reading;
    auto ok = [&] {
      builds.fetch_add(1);
      ld::plan_entry e;
      e.key = key;
      e.kernel.name = "_Z2okv";
      e.plan.block_threads = 256;
      return e;
    };
    got[i] = ld::find_or_build(key, ok);
  };
  std::thread a(caller, 0), b(caller, 1);
  a.join();
  b.join();
  EXPECT_EQ(builds.load(), 1);
  ASSERT_NE(got[0], nullptr);
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0]->plan.block_threads, 256);
  EXPECT_NE(got[0]->kept, nullptr);
  EXPECT_EQ(got[0]->overriding, nullptr);
}

}  // namespace

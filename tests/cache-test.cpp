// SPDX-License-Identifier: MIT
// The in-memory plan cache: one plan per key under concurrency, snapshots, clear, forget.

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "launchfit/cache.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"

namespace lf = launchfit;

namespace {

// Keys as the launch makes them: under the current generation of the process-wide inputs.
lf::plan_key key_of(int kernel, int policy, std::uintptr_t ctx = 0x1000) {
  lf::plan_key k{ctx, static_cast<std::uintptr_t>(0x5000 + kernel), static_cast<std::uint64_t>(policy), 0, 0};
  k.inputs = launchfit::detail::plan_inputs_generation();
  return k;
}

}  // namespace

TEST(PlanCache, ConcurrentFirstLaunchesBuildOnePlanPerKey) {
  lf::cache().clear();
  constexpr int threads = 16, kernels = 25, policies = 3, rounds = 20;
  std::mutex m;
  std::map<std::pair<int, int>, int> builds;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < kernels * policies; ++i) {
          const int k = (i + t) % kernels, p = (i / kernels + t) % policies;
          const lf::detail::plan_entry& e = *lf::detail::find_or_build(key_of(k, p), [&] {
            {
              std::lock_guard<std::mutex> lock(m);
              ++builds[{k, p}];
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));  // widen the race window
            lf::detail::plan_entry out;
            out.key = key_of(k, p);
            out.plan.block = {static_cast<unsigned>(32 * (k + 1)), 1, 1};
            out.plan.blocks_per_sm = p + 1;
            return out;
          });
          if (e.plan.block.x != static_cast<unsigned>(32 * (k + 1)) || e.plan.blocks_per_sm != p + 1) ++mismatches;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(builds.size(), static_cast<std::size_t>(kernels * policies));
  for (const auto& [key, count] : builds) EXPECT_EQ(count, 1) << key.first << "/" << key.second;
  EXPECT_EQ(lf::cache().size(), static_cast<std::size_t>(kernels * policies));
}

TEST(PlanCache, AFailedBuildIsRetriedByTheNextCaller) {
  lf::cache().clear();
  EXPECT_THROW(lf::detail::find_or_build(key_of(1, 1), []() -> lf::detail::plan_entry { throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_EQ(lf::detail::find(key_of(1, 1)), nullptr);
  const auto& e = *lf::detail::find_or_build(key_of(1, 1), [] {
    lf::detail::plan_entry out;
    out.plan.block_threads = 64;
    return out;
  });
  EXPECT_EQ(e.plan.block_threads, 64);
}

TEST(PlanCache, KeysDifferByContextKernelPolicySmemAndBucket) {
  lf::cache().clear();
  std::vector<lf::plan_key> keys = {key_of(1, 1), key_of(1, 1, 0x2000), key_of(2, 1), key_of(1, 2)};
  keys.push_back(key_of(1, 1));
  keys.back().smem_rule = 4096;
  keys.push_back(key_of(1, 1));
  keys.back().bucket = 20;
  int n = 0;
  for (const auto& k : keys) {
    const int id = ++n;
    const auto& e = *lf::detail::find_or_build(k, [id] {
      lf::detail::plan_entry out;
      out.plan.block_threads = id;
      return out;
    });
    EXPECT_EQ(e.plan.block_threads, id);
  }
  EXPECT_EQ(lf::cache().size(), keys.size());
}

TEST(PlanCache, SnapshotClearAndForget) {
  lf::cache().clear();
  for (int k = 0; k < 4; ++k) {
    lf::detail::find_or_build(key_of(k, 0), [k] {
      lf::detail::plan_entry out;
      out.kernel.demangled = "k" + std::to_string(k);
      out.device_name = "dev";
      out.device_ordinal = 0;
      return out;
    });
  }
  const auto snap = lf::cache().plans();
  ASSERT_EQ(snap.size(), 4u);
  EXPECT_EQ(snap[0].device, "dev #0");
  lf::detail::forget_kernel(key_of(2, 0).kernel);
  EXPECT_EQ(lf::cache().size(), 3u);
  EXPECT_EQ(lf::detail::find(key_of(2, 0)), nullptr);
  EXPECT_NE(lf::detail::find(key_of(1, 0)), nullptr);
  lf::cache().clear();
  EXPECT_EQ(lf::cache().size(), 0u);
  EXPECT_EQ(lf::detail::find(key_of(1, 0)), nullptr);  // the thread-local front is invalidated too
}

// A miss that logs nothing leaves the name mangled; the cache's listing still shows it readable, and
// naming it later fills it once.
TEST(PlanCache, APlanBuiltWithoutDemanglingIsListedByItsReadableName) {
  lf::cache().clear();
  lf::detail::find_or_build(key_of(7, 0), [] {
    lf::detail::plan_entry out;
    out.kernel.name = "_Z5saxpyfPKfPfi";  // demangled left empty, as a quiet miss leaves it
    return out;
  });
  const auto snap = lf::cache().plans();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].kernel, "saxpy(float, float const*, float*, int)");

  lf::kernel_resources k;
  k.name = "_Z5saxpyfPKfPfi";
  EXPECT_EQ(lf::detail::display_name(k), "saxpy(float, float const*, float*, int)");
  EXPECT_TRUE(k.demangled.empty());  // display_name does not change the entry
  EXPECT_EQ(lf::detail::name_kernel(k), "saxpy(float, float const*, float*, int)");
  EXPECT_EQ(k.demangled, "saxpy(float, float const*, float*, int)");
  k.name = "extern_c_kernel";  // already named: name_kernel keeps what is there
  EXPECT_EQ(lf::detail::name_kernel(k), "saxpy(float, float const*, float*, int)");
  lf::cache().clear();
}

// SPDX-License-Identifier: MIT
// The planner's pure steps and the plan store, on the CPU: what a launch requires survives every policy
// and every stored plan; stored plans are checked as untrusted input; the store never holds a lock while a
// plan is built, so a build that launches its own kernel again cannot deadlock.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "launchfit/launch.hpp"

#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "planner.hpp"
#include "test_query.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

using launchfit_test::h200_query;

ld::launch_requirements cooperative_launch() {
  ld::launch_requirements need;
  need.cooperative = true;
  return need;
}

TEST(Requirements, AnOverridesPlanForACooperativeLaunchStaysCooperative) {
  // LAUNCHFIT_POLICY='k=max_occupancy()' on a cooperative() launch: the override decides the block, the
  // launch stays cooperative and its grid co-resident.
  const lf::query q = h200_query();
  lf::plan p = lf::max_occupancy_policy{}.choose(q);
  ASSERT_FALSE(p.cooperative);
  ld::apply_requirements(q, p, cooperative_launch());
  EXPECT_TRUE(p.cooperative);
  EXPECT_LE(p.blocks_per_sm, q.active_blocks_for(p.block_threads));
  EXPECT_NE(p.reason.find("cooperatively"), std::string::npos) << p.reason;
  // The one-wave grid is exactly what co-resides.
  EXPECT_EQ(lf::grid_for(p, lf::work{}).x, static_cast<unsigned>(p.resident_blocks()));
}

TEST(Requirements, APlanWhoseFixedGridCannotCoResideIsRefusedNotLaunchedPlainly) {
  const lf::query q = h200_query();
  lf::plan p = lf::fixed_policy{lf::fixed_params{1024, 100000}}.choose(q);
  try {
    ld::apply_requirements(q, p, cooperative_launch());
    FAIL() << "a cooperative grid of 100000 blocks of 1024 threads was accepted";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::invalid_plan);
    EXPECT_NE(e.message().find("co-reside"), std::string::npos) << e.what();
    EXPECT_EQ(e.kernel(), launchfit_test::h200_kernel_demangled);
  }
}

TEST(Requirements, ClusterDimsBelongToTheLaunch) {
  const lf::query q = h200_query();
  ld::launch_requirements need;
  need.cluster = lf::dims{2, 1, 1};
  lf::plan p = lf::max_occupancy_policy{}.choose(q);
  ld::apply_requirements(q, p, need);
  EXPECT_EQ(p.cluster, (lf::dims{2, 1, 1}));

  lf::plan other = lf::max_occupancy_policy{}.choose(q);
  other.cluster = lf::dims{4, 1, 1};  // a plugin that chose its own cluster
  EXPECT_THROW(ld::apply_requirements(q, other, need), lf::error);
  lf::plan unasked = lf::max_occupancy_policy{}.choose(q);
  unasked.cluster = lf::dims{3, 1, 1};
  EXPECT_THROW(ld::apply_requirements(q, unasked, ld::launch_requirements{}), lf::error);
}

TEST(Requirements, CooperativeIsDecidedOnceFromTheSpecAndItsPolicy) {
  // One place decides it (make_request): cooperative(), .cooperative(), or a cooperative policy object.
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::cooperative())).cooperative);
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::use("cooperative"))).cooperative);
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::use(std::make_shared<lf::cooperative_policy>()))).cooperative);
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::max_occupancy().cooperative())).cooperative);
  EXPECT_FALSE(ld::requirements_of(ld::make_request(lf::max_occupancy())).cooperative);
  EXPECT_FALSE(ld::requirements_of(ld::make_request(lf::use("max_occupancy"))).cooperative);
  EXPECT_TRUE(ld::make_request(lf::cooperative()).options.cooperative);
}

TEST(Requirements, KeysTellApartWhatLaunchesRequire) {
  ld::launch_request plain, coop, clustered, clustered4;
  coop.options.cooperative = true;
  clustered.options.cluster = lf::dims{2, 1, 1};
  clustered4.options.cluster = lf::dims{4, 1, 1};
  const ld::context_ref ctx{nullptr, 7};
  const lf::plan_key a = ld::base_key(plain, ctx), b = ld::base_key(coop, ctx), c = ld::base_key(clustered, ctx),
                     d = ld::base_key(clustered4, ctx);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(c == d);
  EXPECT_FALSE(b == c);
  // The context's identity, not its handle: the same handle with another identity is another key.
  EXPECT_FALSE(ld::base_key(plain, ld::context_ref{nullptr, 8}) == a);
}

// ---- stored plans are untrusted input ------------------------------------------------------------------

lf::plan stored_from(const lf::plan& computed) {
  lf::plan s = computed;
  s.policy = "forged(policy=1)";
  s.reason = "tuned\n[error] forged second line";
  s.match = "cache-file";
  return s;
}

TEST(StoredPlans, ACooperativeOrClusteredEntryUnderAPlainKeyIsRejected) {
  const lf::query q = h200_query();
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan coop = stored_from(computed);
  coop.cooperative = true;
  EXPECT_NE(ld::check_stored_plan(q, coop, {}, &computed), "");
  lf::plan clustered = stored_from(computed);
  clustered.cluster = lf::dims{3, 1, 1};
  EXPECT_NE(ld::check_stored_plan(q, clustered, {}, &computed), "");
  // ... and a plain entry under a cooperative launch.
  lf::plan plain = stored_from(computed);
  EXPECT_NE(ld::check_stored_plan(q, plain, cooperative_launch(), nullptr), "");
}

TEST(StoredPlans, AnEntryThatDiffersFromTheBuiltInPoliciesAnswerIsRejected) {
  const lf::query q = h200_query();
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan other = stored_from(computed);
  other.block = lf::dims{computed.block.x == 64 ? 128u : 64u, 1, 1};
  other.blocks_per_sm = 0;
  EXPECT_NE(ld::check_stored_plan(q, other, {}, &computed), "");
  lf::plan fixed_grid = stored_from(computed);
  fixed_grid.grid = lf::dims{5, 1, 1};  // a max_occupancy key never has a fixed grid
  EXPECT_NE(ld::check_stored_plan(q, fixed_grid, {}, &computed), "");
}

TEST(StoredPlans, DynamicSmemIsTheLaunchsRuleNotTheFiles) {
  lf::query q = h200_query();
  const std::size_t per = 200;
  q.smem_per_block = [per](int b) { return per * static_cast<std::size_t>(b) + 1024; };
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan stored = stored_from(computed);
  stored.dynamic_smem_bytes = 8 * computed.block_threads + 1024;  // made under a rule with per = 8
  EXPECT_NE(ld::check_stored_plan(q, stored, {}, nullptr), "");
}

TEST(StoredPlans, AnAcceptedEntryShowsNoFileTextRaw) {
  const lf::query q = h200_query();
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan stored = stored_from(computed);
  EXPECT_EQ(ld::check_stored_plan(q, stored, {}, &computed), "");
  EXPECT_EQ(stored.reason.find('\n'), std::string::npos) << stored.reason;
  EXPECT_NE(stored.reason.find("tuned\\n[error]"), std::string::npos) << stored.reason;  // escaped, as every log shows it
}

TEST(StoredPlans, ABlockAboveTheKernelsLimitIsRejected) {
  lf::query q = h200_query();
  q.kernel.max_threads_per_block = 128;
  lf::plan stored;
  stored.block = lf::dims{1024, 1, 1};
  EXPECT_THROW(ld::check_stored_plan(q, stored, {}, nullptr), lf::error);
}

// ---- the store: no lock held while a plan is built --------------------------------------------------------

// A deadlocked store must fail the test, not hang it (the stuck thread would block the future's destructor).
template <class F>
void wait_or_die(F& f, const char* what) {
  if (f.wait_for(std::chrono::seconds(10)) == std::future_status::ready) return;
  std::fprintf(stderr, "%s: no answer after 10 s (a deadlock)\n", what);
  std::_Exit(1);
}

lf::plan_key key_of(int kernel) {
  lf::plan_key k;
  k.context = 0xC0FFEE;
  k.kernel = static_cast<std::uintptr_t>(0x7000 + kernel);
  k.policy = 42;
  return k;
}

ld::plan_entry entry_with_block(unsigned block) {
  ld::plan_entry e;
  e.plan.block = lf::dims{block, 1, 1};
  return e;
}

TEST(PlanStore, ABuildThatAsksForItsOwnKeyGetsNoEntryInsteadOfDeadlocking) {
  // A reset callback that launches the same kernel while its plan is being tuned.
  const lf::plan_key k = key_of(1);
  auto done = std::async(std::launch::async, [&] {
    bool inner_saw_null = false;
    const ld::plan_entry* e = ld::find_or_build(k, [&] {
      inner_saw_null = ld::find_or_build(k, [] { return entry_with_block(32); }) == nullptr;
      return entry_with_block(64);
    });
    return inner_saw_null && e && e->plan.block.x == 64;
  });
  wait_or_die(done, "find_or_build from inside its own build");
  EXPECT_TRUE(done.get());
}

TEST(PlanStore, OtherThreadsWaitForTheOneBuildWithoutItHoldingALock) {
  const lf::plan_key k = key_of(2);
  std::atomic<int> builds{0};
  std::promise<void> started, finish;
  std::shared_future<void> finish_f = finish.get_future().share();
  std::thread builder([&] {
    ld::find_or_build(k, [&] {
      ++builds;
      started.set_value();
      finish_f.wait();  // user code running: other keys and threads must not be blocked
      return entry_with_block(96);
    });
  });
  started.get_future().wait();
  // Another key is served while the build runs.
  auto other = std::async(std::launch::async, [&] { return ld::find_or_build(key_of(3), [] { return entry_with_block(32); }); });
  wait_or_die(other, "another key during a build");
  auto waiter = std::async(std::launch::async, [&] { return ld::find_or_build(k, [&] { ++builds; return entry_with_block(1); }); });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  finish.set_value();
  builder.join();
  wait_or_die(waiter, "a waiter after the build");
  EXPECT_EQ(waiter.get()->plan.block.x, 96u);
  EXPECT_EQ(builds.load(), 1);
}

TEST(PlanStore, AFailedBuildLetsTheNextCallerRetry) {
  const lf::plan_key k = key_of(4);
  EXPECT_THROW(ld::find_or_build(k, []() -> ld::plan_entry { throw lf::error("test", "LAUNCHFIT_INVALID_PLAN", "no"); }),
               lf::error);
  const ld::plan_entry* e = ld::find_or_build(k, [] { return entry_with_block(128); });
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->plan.block.x, 128u);
}

TEST(PlanStore, ADeadContextsPlansAreDropped) {
  lf::plan_key k = key_of(5);
  k.context = 1234;
  ld::find_or_build(k, [] { return entry_with_block(64); });
  ASSERT_NE(ld::find(k), nullptr);
  ld::forget_context(1234);
  EXPECT_EQ(ld::find(k), nullptr);
}

TEST(PlanStore, SettingPolicyOverridesMakesEveryLaunchPlanAgain) {
  // No flush: the overrides' generation is in every key (plan-contract-test.cpp enumerates every input).
  const ld::launch_request r = ld::make_request(lf::fixed(64).items(100));
  const ld::context_ref ctx{nullptr, 3};
  const lf::plan_key before = ld::base_key(r, ctx);
  lf::set_policy_overrides("some_kernel=fixed(block=96)");
  EXPECT_FALSE(ld::base_key(r, ctx) == before) << "a plan chosen under the old overrides would be found again";
  lf::set_policy_overrides("");
}

TEST(Requirements, AUsedCooperativePolicyMakesTheLaunchCooperativeInItsKey) {
  // use("cooperative") and a plain launch of the same kernel must never share an override's plan.
  const auto coop = lf::use(std::make_shared<const lf::cooperative_policy>());
  const auto plain = lf::use(std::make_shared<const lf::max_occupancy_policy>());
  const ld::launch_request rc = ld::make_request(coop), rp = ld::make_request(plain);
  EXPECT_TRUE(rc.options.cooperative);
  EXPECT_FALSE(rp.options.cooperative);
  const ld::context_ref ctx{nullptr, 1};
  EXPECT_NE(ld::base_key(rc, ctx).launch, ld::base_key(rp, ctx).launch);
}

TEST(Requirements, ClusterDimsTooLargeForTheKeyAreRefusedBeforeAnyCudaCall) {
  const lf::kernel k(reinterpret_cast<CUfunction>(0x1234));
  try {
    lf::launch(k, lf::fixed(64).cluster(lf::dims{65538, 1, 1}).items(64));
    FAIL() << "cluster 65538 was accepted";
  } catch (const lf::error& e) {
    EXPECT_NE(e.message().find("65535"), std::string::npos) << e.what();
  }
}

TEST(StoredPlans, ATuningPolicysEntryWithAFixedGridOrA2DBlockIsRejected) {
  const lf::query q = h200_query();
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan one_block = stored_from(computed);
  one_block.grid = lf::dims{1, 1, 1};  // items(1 << 20) would launch one block
  EXPECT_NE(ld::check_stored_plan(q, one_block, {}, nullptr), "");
  lf::plan flat = stored_from(computed);
  flat.block = lf::dims{32, 8, 1};
  flat.blocks_per_sm = 0;
  EXPECT_NE(ld::check_stored_plan(q, flat, {}, nullptr), "");
}

TEST(GridFor, APlanWithoutABlockIsAnErrorNotADivisionByZero) {
  lf::plan p;  // block_threads 0
  lf::work w;
  w.kind = lf::work::shape::items;
  w.n = 100;
  EXPECT_THROW(lf::grid_for(p, w), lf::error);
}

TEST(PlanStore, HotPlansThatShareAFrontSetStillHitWithoutTheSharedMap) {
  std::vector<lf::plan_key> keys;
  for (int i = 0; i < 12; ++i) {
    lf::plan_key k = key_of(100 + i);
    k.context = 77;
    ld::find_or_build(k, [] { return entry_with_block(32); });
    keys.push_back(k);
  }
  for (const auto& k : keys) ASSERT_NE(ld::find(k), nullptr);  // warm this thread's front
  const auto before = ld::stats().map_hits;
  for (int round = 0; round < 3; ++round)
    for (const auto& k : keys) ASSERT_NE(ld::find(k), nullptr);
  // 12 keys over 16 sets of 4: at most a set overflows by chance; never a third of the lookups.
  EXPECT_LT(ld::stats().map_hits - before, 12u);
}

}  // namespace

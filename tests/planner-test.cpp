// SPDX-License-Identifier: MIT
// The planner's pure steps and the plan store, on the CPU: what a launch requires survives every policy
// and every stored plan; stored plans are checked as untrusted input; the store never holds a lock while a
// plan is built, so a build that launches its own kernel again cannot deadlock.

#include "planner.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <thread>
#include <type_traits>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "test_query.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

// find_or_build() borrows its builder for the call: a builder made from a temporary would outlive it, and
// does not compile; one made from a named callable does.
struct builds_nothing {
  ld::plan_entry operator()() const { return {}; }
};
static_assert(!std::is_constructible_v<ld::entry_builder, builds_nothing>, "a builder from a temporary");
static_assert(!std::is_constructible_v<ld::entry_builder, const builds_nothing&&>, "a builder from a temporary");
static_assert(std::is_constructible_v<ld::entry_builder, builds_nothing&>, "a builder from a named callable");
static_assert(std::is_constructible_v<ld::entry_builder, const builds_nothing&>, "a builder from a named callable");

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
  ASSERT_FALSE(p.options.cooperative);
  ld::apply_requirements(q, p, cooperative_launch());
  EXPECT_TRUE(p.options.cooperative);
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
  EXPECT_EQ(p.options.cluster, (lf::dims{2, 1, 1}));

  lf::plan other = lf::max_occupancy_policy{}.choose(q);
  other.options.cluster = lf::dims{4, 1, 1};  // a plugin that chose its own cluster
  EXPECT_THROW(ld::apply_requirements(q, other, need), lf::error);
  lf::plan unasked = lf::max_occupancy_policy{}.choose(q);
  unasked.options.cluster = lf::dims{3, 1, 1};
  EXPECT_THROW(ld::apply_requirements(q, unasked, ld::launch_requirements{}), lf::error);
}

TEST(Requirements, CooperativeIsDecidedOnceFromTheSpecAndItsPolicy) {
  // One place decides it (make_request): cooperative(), .cooperative(), or a cooperative policy object.
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::cooperative())).cooperative);
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::use("cooperative"))).cooperative);
  EXPECT_TRUE(
      ld::requirements_of(ld::make_request(lf::use(std::make_shared<lf::cooperative_policy>()))).cooperative);
  EXPECT_TRUE(ld::requirements_of(ld::make_request(lf::max_occupancy().cooperative())).cooperative);
  EXPECT_FALSE(ld::requirements_of(ld::make_request(lf::max_occupancy())).cooperative);
  EXPECT_FALSE(ld::requirements_of(ld::make_request(lf::use("max_occupancy"))).cooperative);
  EXPECT_TRUE(ld::make_request(lf::cooperative()).options.cooperative);
}

// make_request() names every member of the request it makes (none is zeroed first): each one carries what the
// spec says, and those launch() sets later are empty.
TEST(Requirements, ARequestCarriesEveryPartOfItsSpec) {
  int resets = 0;
  const auto rule = [](int block) { return static_cast<std::size_t>(block) * 8; };
  const auto s = lf::bytes_in_flight(16)
                     .items({1 << 12, 64})
                     .block_x_free()
                     .smem_per_block(rule, 7)
                     .on(reinterpret_cast<cudaStream_t>(0x99))
                     .cluster({2, 1, 1})
                     .pdl()
                     .sms(64)
                     .waves(3)
                     .blocks(lf::block_rule::power_of_two())
                     .reset([&resets] { ++resets; });
  const ld::launch_request r = ld::make_request(s);
  EXPECT_EQ(r.kernel_id, 0u);
  EXPECT_EQ(r.stub, nullptr);
  EXPECT_EQ(r.resolve, nullptr);
  EXPECT_EQ(r.driver_kernel, nullptr);
  EXPECT_EQ(r.policy, &s.get_policy());
  EXPECT_EQ(r.policy_holder, static_cast<const void*>(&s.policy_value()));
  ASSERT_NE(r.copy_policy, nullptr);
  const ld::policy_copy copied = r.copy_policy(r.policy_holder);
  ASSERT_NE(copied.policy, nullptr);
  EXPECT_EQ(copied.policy->to_string(), s.get_policy().to_string());
  copied.free_owner(copied.owner);
  EXPECT_EQ(r.policy_hash, s.get_policy().hash());
  EXPECT_EQ(r.bucket, ld::plan_bucket(s.get_policy().work_bucket(s.work_shape()), s.work_shape(), s.shape_rule()));
  ASSERT_EQ(r.smem_fn, s.smem_fn());
  EXPECT_EQ((*r.smem_fn)(32), 256u);
  EXPECT_EQ(r.shape.n, std::uint64_t{1} << 12);
  EXPECT_EQ(r.shape.ny, 64u);
  EXPECT_EQ(r.shape.waves, 3u);
  EXPECT_EQ(r.stream, reinterpret_cast<cudaStream_t>(0x99));
  EXPECT_EQ(r.options, s.options());
  EXPECT_TRUE(r.options.programmatic);
  EXPECT_EQ(r.options.sm_budget, 64);
  EXPECT_EQ(r.options.cluster, (lf::dims{2, 1, 1}));
  EXPECT_EQ(r.blocks.to_string(), s.block_sizes().to_string());
  EXPECT_TRUE(r.shape_rule.free_x);
  EXPECT_EQ(r.family, nullptr);
  EXPECT_EQ(r.family_size, 0u);
  EXPECT_EQ(r.bind, nullptr);
  EXPECT_EQ(r.bind_self, nullptr);
  EXPECT_EQ(r.args, nullptr);
  EXPECT_EQ(r.arg_sizes, nullptr);
  EXPECT_EQ(r.arg_count, 0u);
  EXPECT_TRUE(r.rerunnable) << "reset(f) allows timing candidates";
  EXPECT_FALSE(r.back_to_back) << "reset(f) without rerunnable(): not back to back";
  ASSERT_EQ(r.reset, s.reset_fn());
  (*r.reset)();
  EXPECT_EQ(resets, 1);
  EXPECT_FALSE(r.has_arguments);
  EXPECT_EQ(r.node, nullptr);
  // The size bucket of 1-D work (the spec above has 2-D work, which a built-in policy buckets as 0), and a
  // policy's own bucket folded with a free block shape's: a request whose bucket went elsewhere would reuse a
  // plan made for other work.
  const auto one_d = lf::bytes_in_flight(16).items(1000);
  const std::uint64_t one_d_bucket = one_d.get_policy().work_bucket(one_d.work_shape());
  ASSERT_NE(one_d_bucket, 0u);
  EXPECT_EQ(ld::make_request(one_d).bucket, one_d_bucket);
  struct bucket_five final : lf::policy_base {
    std::string name() const override { return "bucket_five"; }
    std::string params() const override { return ""; }
    std::uint64_t hash() const override { return 5; }
    std::uint64_t work_bucket(const lf::work&) const override { return 5; }
    lf::plan choose_impl(const lf::query&) const override { return lf::plan{}; }
  };
  const auto free_shape = lf::use(std::make_shared<bucket_five>()).items({4096, 64}).block_x_free();
  const std::uint64_t folded = ld::plan_bucket(5, free_shape.work_shape(), free_shape.shape_rule());
  ASSERT_NE(folded, 5u);
  EXPECT_EQ(ld::make_request(free_shape).bucket, folded);
  // And the other way round: rerunnable() without reset(f).
  const ld::launch_request again = ld::make_request(lf::max_occupancy().items(100).rerunnable());
  EXPECT_TRUE(again.rerunnable);
  EXPECT_TRUE(again.back_to_back);
  EXPECT_EQ(again.reset, nullptr);
  EXPECT_EQ(again.smem_fn, nullptr);
  EXPECT_FALSE(again.options.programmatic);
}

TEST(Requirements, KeysTellApartWhatLaunchesRequire) {
  ld::launch_request plain, coop, clustered, clustered4;
  coop.options.cooperative = true;
  clustered.options.cluster = lf::dims{2, 1, 1};
  clustered4.options.cluster = lf::dims{4, 1, 1};
  const ld::context_ref ctx{nullptr, 7};
  const lf::plan_key a = ld::base_key(plain, ctx), b = ld::base_key(coop, ctx),
                     c = ld::base_key(clustered, ctx), d = ld::base_key(clustered4, ctx);
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
  coop.options.cooperative = true;
  EXPECT_NE(ld::check_stored_plan(q, coop, {}, &computed), "");
  lf::plan clustered = stored_from(computed);
  clustered.options.cluster = lf::dims{3, 1, 1};
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
  EXPECT_NE(stored.reason.find("tuned\\n[error]"), std::string::npos)
      << stored.reason;  // escaped, as every log shows it
}

// A stored warning is logged as a warning of its plan: said as the store's, never as launchfit's own (a file
// wrote "driver fault detected, reset the GPU", and the log showed it as launchfit's warning).
TEST(StoredPlans, AStoredWarningIsSaidAsTheStores) {
  const lf::query q = h200_query();
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan stored = stored_from(computed);
  stored.warning = "driver fault detected, reset the GPU";
  EXPECT_EQ(ld::check_stored_plan(q, stored, {}, &computed), "");
  EXPECT_EQ(stored.warning, "the plan-cache file says: driver fault detected, reset the GPU");
  lf::plan quiet = stored_from(computed);
  EXPECT_EQ(ld::check_stored_plan(q, quiet, {}, &computed), "");
  EXPECT_EQ(quiet.warning, "") << "no warning stored: none said";
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
  auto other = std::async(std::launch::async,
                          [&] { return ld::find_or_build(key_of(3), [] { return entry_with_block(32); }); });
  wait_or_die(other, "another key during a build");
  auto waiter = std::async(std::launch::async, [&] {
    return ld::find_or_build(k, [&] {
      ++builds;
      return entry_with_block(1);
    });
  });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  finish.set_value();
  builder.join();
  wait_or_die(waiter, "a waiter after the build");
  EXPECT_EQ(waiter.get()->plan.block.x, 96u);
  EXPECT_EQ(builds.load(), 1);
}

TEST(PlanStore, AFailedBuildLetsTheNextCallerRetry) {
  const lf::plan_key k = key_of(4);
  EXPECT_THROW(ld::find_or_build(
                   k, []() -> ld::plan_entry { throw lf::error("test", "LAUNCHFIT_INVALID_PLAN", "no"); }),
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
  EXPECT_FALSE(ld::base_key(r, ctx) == before)
      << "a plan chosen under the old overrides would be found again";
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

// ---- overrides never break a launch that works ----------------------------------------------------------

// A plugin built for the tests (tests/plugins), loaded once per process.
void load_test_plugin(const std::string& name) {
  static std::map<std::string, bool> loaded;
  if (loaded[name]) return;
  lf::load_plugin(std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/plugins/liblf_" + name + ".so");
  loaded[name] = true;
}

// The planner's steps for an override's plan on this query and launch: choose, what the launch requires, the
// grid of `w`. Empty when the override serves the launch, else why not (an error the planner gives way on).
std::string override_outcome(const lf::policy& over, const lf::query& q, const ld::launch_requirements& need,
                             const lf::work& w, lf::plan* served) {
  try {
    lf::plan p = over.choose(q);
    ld::apply_requirements(q, p, need);
    const std::string refused = ld::override_work_refusal(p, w);
    if (refused.empty()) *served = p;
    return refused;
  } catch (const lf::error& e) {
    EXPECT_TRUE(ld::cannot_serve(e)) << over.to_string()
                                     << " failed in a way no override may fail: " << e.what();
    return e.message();
  }
}

TEST(Overrides, EveryBuiltInAndPluginAsAnOverrideOfACooperativeProgramServesItOrGivesWay) {
  // The cuda-samples conjugate-gradient pattern: plan_for(k, cooperative()) (no work: the co-resident wave),
  // then a cooperative launch of that plan. Under LAUNCHFIT_POLICY='k=<any policy>' the override's plan
  // serves it (cooperative, co-resident, one full wave) or fails in a way the planner gives way on, and the
  // spec's own policy serves it: no override makes plan_for() or launch() throw.
  for (const char* plugin : {"good", "error", "invalid", "decline"}) load_test_plugin(plugin);
  const lf::query q = h200_query();
  const ld::launch_requirements need = cooperative_launch();
  const lf::work no_work{};
  lf::plan own = lf::cooperative().policy_value().choose(q);
  ld::apply_requirements(q, own, need);
  ASSERT_EQ(ld::override_work_refusal(own, no_work), "");
  EXPECT_EQ(lf::grid_for(own, no_work).count(), static_cast<unsigned long long>(own.resident_blocks()));

  const std::vector<std::string> overrides = {
      // every built-in, in C++ spelling and by name, and with parameters it cannot serve the launch with
      "max_occupancy()", "max_occupancy(0)", "max_occupancy(128, 512)", "max_occupancy(prefer_block=-1)",
      "bytes_in_flight(16)", "bytes_in_flight(4, 8K)", "bytes_in_flight(per_thread=0)", "cooperative()",
      "cooperative(1)", "cooperative(64)", "cooperative(0, 2048)", "fixed(256)", "fixed(256, 100)",
      "fixed(1024, 100000)", "fixed(2048)", "fixed({32, 8})", "fixed({16, 16}, {4, 4})", "fixed({64, 64})",
      "fixed_dims(bx=32,by=4)", "planned(bx=256)", "planned()", "planned(bx=256,blocks_per_sm=64)",
      "constant_block()",
      // plugins: a plan, a plan of another block, an error, an invalid plan, a refusal to decide
      "test_good", "test_good(block=96)", "test_good(block=4096)", "test_error", "test_invalid",
      "test_decline"};
  for (const std::string& name : lf::registered_policies()) {
    bool named = false;
    for (const std::string& o : overrides)
      named = named || o.compare(0, name.size() + 1, name + "(") == 0 || o == name;
    EXPECT_TRUE(named) << "no override case for the registered policy '" << name << "'";
  }
  int served = 0, gave_way = 0;
  for (const std::string& text : overrides) {
    SCOPED_TRACE(text);
    const auto over = lf::policy_from_string(text);
    lf::plan p;
    const std::string why = override_outcome(*over, q, need, no_work, &p);
    if (!why.empty()) {
      ++gave_way;  // the planner warns once and plans with cooperative() (checked above)
      continue;
    }
    ++served;
    EXPECT_TRUE(p.options.cooperative);
    const lf::dims g = lf::grid_for(p, no_work);
    EXPECT_GT(g.count(), 0u);
    EXPECT_LE(static_cast<long long>(g.count()), p.resident_blocks()) << "co-resident";
  }
  EXPECT_GE(served, 15);
  EXPECT_GE(gave_way, 8);
}

TEST(Overrides, AnOverridesGridThatCannotServeTheWorkGivesWay) {
  const lf::query q = h200_query();
  const auto work_of = [](auto spec) { return spec.work_shape(); };
  // A fixed grid on items(n): one thread per item, so fewer blocks than the work needs would leave items
  // undone.
  const lf::plan fixed = lf::fixed(256, 80).policy_value().choose(q);
  EXPECT_EQ(ld::override_work_refusal(fixed, work_of(lf::fixed(1).items(80 * 256))), "");
  const std::string undone = ld::override_work_refusal(fixed, work_of(lf::fixed(1).items(80 * 256 + 1)));
  EXPECT_NE(undone.find("fixed grid 80"), std::string::npos) << undone;
  EXPECT_NE(undone.find("left undone"), std::string::npos) << undone;
  // The work it names is the launch's, not the override's own grid ("that fixed(80) needs" before).
  EXPECT_NE(undone.find("blocks that items(20481) needs"), std::string::npos) << undone;
  EXPECT_EQ(ld::override_work_refusal(fixed, work_of(lf::fixed(1).grid_stride(1ull << 30))), "")
      << "the kernel loops";
  EXPECT_EQ(ld::override_work_refusal(fixed, lf::work{}), "");
  EXPECT_EQ(ld::override_work_refusal(fixed, work_of(lf::fixed(1).grid({100}))), "") << "the caller's grid";
  // A cooperative items(n) launch whose work co-resides in cooperative()'s grid but not in the override's.
  const ld::launch_requirements need = cooperative_launch();
  lf::plan own = lf::cooperative().policy_value().choose(q);
  ld::apply_requirements(q, own, need);
  lf::plan thin = lf::bytes_in_flight(64).policy_value().choose(q);  // 32 KB in flight: 16 warps/SM
  ld::apply_requirements(q, thin, need);
  const long long own_threads = own.resident_blocks() * own.block_threads;
  ASSERT_LT(thin.resident_blocks() * thin.block_threads, own_threads);
  const lf::work all = work_of(lf::cooperative().items(static_cast<std::uint64_t>(own_threads)));
  EXPECT_EQ(ld::override_work_refusal(own, all), "");
  const std::string too_large = ld::override_work_refusal(thin, all);
  EXPECT_NE(too_large.find("co-reside"), std::string::npos) << too_large;
  // A block too small for the grid's limit where the spec's own is not.
  const lf::plan tiny = lf::fixed(32).policy_value().choose(q);
  const lf::work huge = work_of(lf::fixed(1).items(std::uint64_t{1} << 37));
  EXPECT_NE(ld::override_work_refusal(tiny, huge).find("grid limit"), std::string::npos);
  EXPECT_EQ(ld::override_work_refusal(lf::fixed(1024).policy_value().choose(q), huge), "");
}

TEST(Overrides, OnlyAFailureOfThePlanGivesWayNotOneOfTheDeviceOrLaunchfit) {
  EXPECT_TRUE(
      ld::cannot_serve(lf::error(lf::errc::invalid_plan, "validate(block)", "block of 2048 threads")));
  EXPECT_TRUE(ld::cannot_serve(lf::error(lf::errc::bad_policy_parameter, "make_policy", "bad")));
  EXPECT_TRUE(ld::cannot_serve(lf::error(lf::errc::plugin, "plugin", "no tuning data")));
  EXPECT_TRUE(
      ld::cannot_serve(lf::error(lf::errc::not_planned_yet, "launchfit::plan_for", "tuned on first launch")));
  EXPECT_TRUE(ld::cannot_serve(lf::error(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "grid_for", "too large")));
  EXPECT_FALSE(ld::cannot_serve(lf::error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuLaunchKernelEx", "sticky")));
  EXPECT_FALSE(ld::cannot_serve(lf::error(lf::errc::no_driver, "driver", "no libcuda")));
  EXPECT_FALSE(ld::cannot_serve(lf::error(lf::errc::internal, "launchfit::launch", "a bug")));
}

}  // namespace

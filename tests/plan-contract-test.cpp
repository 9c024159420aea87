// SPDX-License-Identifier: MIT
// The plan contract and the plan's identity, on the CPU: plan_for() answers only with what the launch runs
// (a spec without work is refused when its policy decides by the work; a plan can be launched verbatim with
// planned()), and every input a plan depends on is in its key, so a change makes a new plan and no change
// finds the old one, with no call site flushing the cache by hand.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "error_of.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"
#include "planner.hpp"
#include "policy_string.hpp"
#include "test_query.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
using launchfit_test::error_of;

namespace {

using launchfit_test::h200_query;

template <class Policy>
ld::launch_request request(const lf::spec<Policy>& s) {
  ld::launch_request r = ld::make_request(s);
  r.kernel_id = 0x5a5a00;  // a kernel id that no driver call ever sees here
  return r;
}

const ld::context_ref& ctx_for_keys() {
  static const ld::context_ref c{nullptr, 0x78};
  return c;
}

}  // namespace

// ---- the contract ----------------------------------------------------------------------------------------

TEST(PlanContract, ASpecWithoutWorkIsOneFullWaveUnderEveryPolicy) {
  // The rule: plan_for(k, spec) answers what launch(k, spec) runs for every spec launch() accepts, and a spec
  // without work runs one full wave of its plan's resident blocks whatever the policy (a fixed grid: that
  // grid).
  const lf::query q = h200_query();
  for (const char* text : {"max_occupancy()", "max_occupancy(0)", "bytes_in_flight(16)", "bytes_in_flight(4)",
                           "cooperative()", "cooperative(1)", "fixed(256)", "fixed({32, 8})",
                           "constant_block()", "planned(bx=128,blocks_per_sm=3)"}) {
    SCOPED_TRACE(text);
    const lf::plan p = lf::policy_from_string(text)->choose(q);
    EXPECT_GT(p.resident_blocks(), 0);
    EXPECT_EQ(lf::grid_for(p, lf::work{}), (lf::dims{static_cast<unsigned>(p.resident_blocks()), 1, 1}));
  }
  const lf::plan fixed_grid = lf::fixed(256, 80).policy_value().choose(q);
  EXPECT_EQ(lf::grid_for(fixed_grid, lf::work{}), (lf::dims{80, 1, 1}));
}

TEST(PlanContract, APlanMadeWithoutWorkSizesNoWorkItsPolicyWouldPlanAnotherWay) {
  // Plan without the work, then launch with it: safe where the grid comes from the plan. The n-body port
  // (planned without work, launched with .grid(grid_for(p, spec.work_shape()))) runs the plan's full wave;
  // sizing items(n) with that plan is refused, since the spec with items(n) may run another block.
  const lf::query q = h200_query();
  const auto spec = lf::max_occupancy();
  lf::plan p = spec.policy_value().choose(q);
  p.without_work = true;  // as the planner marks it: a spec without work, a policy that decides by the work
  const lf::dims wave = lf::grid_for(p, spec.work_shape());
  EXPECT_EQ(wave.x, static_cast<unsigned>(p.resident_blocks()));
  EXPECT_EQ(lf::grid_for(p, lf::max_occupancy().grid(wave).work_shape()), wave);
  for (const lf::work& w :
       {lf::max_occupancy().items(16384).work_shape(), lf::max_occupancy().items(1 << 26).work_shape(),
        lf::max_occupancy().grid_stride(16384).work_shape()}) {
    const lf::error e = error_of([&] { lf::grid_for(p, w); });
    EXPECT_EQ(e.code(), lf::errc::missing_work) << e.what();
    EXPECT_NE(e.message().find("planned(p)"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("max_occupancy(prefer_block=256"), std::string::npos) << e.what();
  }
  // The same plan with the work (or launched verbatim, whose plan is planned()'s) sizes it.
  const lf::plan with_work = lf::planned(p).policy_value().choose(q);
  EXPECT_FALSE(with_work.without_work);
  EXPECT_EQ(lf::grid_for(with_work, lf::max_occupancy().items(16384).work_shape()).x,
            static_cast<unsigned>((16384 + p.block_threads - 1) / p.block_threads));
}

TEST(PlanContract, ASpecWithoutWorkHasAPlanOfItsOwn) {
  // Its plan says without_work; the same spec with work in the same size bucket must not find that plan.
  const auto key_of = [](auto spec) { return ld::base_key(request(spec), ctx_for_keys()); };
  const lf::plan_key none = key_of(lf::max_occupancy());
  EXPECT_TRUE(none == key_of(lf::max_occupancy())) << "the same spec is the same key";
  for (const lf::plan_key& other :
       {key_of(lf::max_occupancy().items(1 << 22)), key_of(lf::max_occupancy().grid({132})),
        key_of(lf::max_occupancy().grid_stride(1 << 22))}) {
    EXPECT_EQ(other.bucket, none.bucket) << "the same size bucket";
    EXPECT_FALSE(other == none) << "but not the same plan";
  }
}

TEST(PlanContract, EveryRegisteredBuiltInHasItsStoredPlansCrossChecked) {
  // A stored plan (cache file, remote store) for a built-in policy is checked against what the policy chooses
  // now; whether a policy is built in is its own trait (policy::builtin()), so none can be left out of a
  // list. This binary's other tests register a policy of their own only for a moment: here every one is
  // launchfit's.
  const lf::query q = h200_query();
  const std::vector<std::string> names = lf::registered_policies();
  ASSERT_GE(names.size(), 7u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    // planned() has no default block (it is a plan's copy): give it one.
    const auto policy =
        lf::make_policy(name, name == "planned" ? std::map<std::string, std::string>{{"bx", "128"}}
                                                : std::map<std::string, std::string>{});
    EXPECT_TRUE(policy->builtin());
    ASSERT_TRUE(ld::cross_checks_stored_plans(*policy));
    const lf::plan computed = policy->choose(q);
    // A valid plan of another block, as another process (or an edited file) may have stored.
    lf::plan stored = computed;
    stored.block = lf::dims{computed.block.x == 64 ? 96u : 64u, computed.block.y, computed.block.z};
    stored.blocks_per_sm = 0;
    ld::launch_requirements need;
    need.cooperative = computed.options.cooperative;  // cooperative() is: its launch requires it
    bool differs_only = false;
    const std::string why = ld::check_stored_plan(q, stored, need, &computed, &differs_only);
    EXPECT_NE(why.find("is not what"), std::string::npos) << why;
    EXPECT_TRUE(differs_only);
  }
  // A policy of a user or a plugin is not built in: its stored plans (perhaps timed) are validated only.
  class users_policy final : public lf::policy_base {
   public:
    std::string name() const override { return "users"; }
    std::string params() const override { return {}; }
    std::uint64_t hash() const override { return 42; }

   protected:
    lf::plan choose_impl(const lf::query&) const override { return {}; }
  };
  EXPECT_FALSE(users_policy{}.builtin());
  EXPECT_FALSE(ld::cross_checks_stored_plans(users_policy{}));
}

TEST(PlanContract, MaxOccupancyZeroIsTheDriversBlockForEveryWork) {
  const lf::query q = h200_query();
  const lf::max_occupancy_policy driver_choice{lf::max_occupancy_params{0, 0}};
  EXPECT_FALSE(driver_choice.depends_on_work());
  EXPECT_TRUE(lf::max_occupancy_policy{}.depends_on_work());
  EXPECT_TRUE(lf::bytes_in_flight_policy{}.depends_on_work());
  EXPECT_FALSE(lf::cooperative_policy{}.depends_on_work());
  EXPECT_FALSE(lf::fixed_policy{}.depends_on_work());
  const int none = driver_choice.choose(q).block_threads;
  for (const std::uint64_t n : {1ull, 4096ull, 16384ull, 100000ull, 1ull << 26}) {
    lf::query small = q;
    small.work_hint = lf::work{lf::work::shape::items, n, 1};
    EXPECT_EQ(driver_choice.work_bucket(small.work_hint), 0u) << n;
    EXPECT_EQ(driver_choice.choose(small).block_threads, none) << n;
  }
  // The default (prefer 256) does fill the SMs for small work: the reason it needs the work.
  lf::query small = q;
  small.work_hint = lf::work{lf::work::shape::items, 16384, 1};
  EXPECT_LT(lf::max_occupancy_policy{}.choose(small).block_threads,
            lf::max_occupancy_policy{}.choose(q).block_threads);
}

TEST(PlanContract, APlanIsLaunchedVerbatimWithPlanned) {
  lf::query q = h200_query();
  q.work_hint = lf::work{lf::work::shape::items, 16384, 1};
  lf::plan p = lf::max_occupancy_policy{}.choose(q);
  p.options.programmatic = true;
  p.options.cooperative = true;
  p.options.cluster = lf::dims{2, 1, 1};
  p.dynamic_smem_bytes = 4096;
  p.sm_count = 100;
  p.options.sm_budget = 100;  // made within sms(100)
  p.options.waves = 4;
  const auto spec = lf::planned(p).items(16384);
  const ld::launch_request r = ld::make_request(spec);
  // A grid_stride launch's waves cap: planned(p) launches the grid grid_for(p, work) says (it launched one wave
  // where the plan was made for four).
  EXPECT_EQ(r.options.waves, 4u);
  EXPECT_EQ(lf::planned(p).grid_stride(1u << 26).work_shape().waves, 4u);
  EXPECT_TRUE(r.options.cooperative);
  EXPECT_TRUE(r.options.programmatic);
  EXPECT_EQ(r.options.cluster, (lf::dims{2, 1, 1}));
  EXPECT_EQ(r.options.sm_budget, 100);
  // A plan sized for the context's SMs has no SM budget to carry (planned() gave it one, which kept a full grid
  // from ever launching).
  lf::plan every_sm = p;
  every_sm.options.sm_budget = 0;
  EXPECT_EQ(ld::make_request(lf::planned(every_sm).items(16384)).options.sm_budget, 0);
  EXPECT_EQ(r.options.smem_bytes, 4096u);
  EXPECT_FALSE(spec.policy_value().depends_on_work());

  // The planned policy chooses exactly the plan's block, grid rule and residency (validated again).
  lf::query again = h200_query();
  again.work_hint =
      lf::work{lf::work::shape::items, 1 << 26, 1};  // other work: the plan is kept all the same
  const lf::plan p0 = lf::max_occupancy_policy{}.choose(q);
  const lf::plan verbatim = lf::planned(p0).policy_value().choose(again);
  EXPECT_EQ(verbatim.block, p0.block);
  EXPECT_EQ(verbatim.grid, p0.grid);
  EXPECT_EQ(verbatim.blocks_per_sm, p0.blocks_per_sm);
  EXPECT_EQ(verbatim.full_grid, p0.full_grid);
  // A planned spec is a built-in: the stored plan check compares it with what it chooses.
  EXPECT_TRUE(lf::planned(p0).policy_value().builtin());
  EXPECT_TRUE(ld::cross_checks_stored_plans(lf::planned(p0).policy_value()));
  // A hand-made plan is validated like any other.
  lf::plan zero = p0;
  zero.block = lf::dims{0, 1, 1};
  EXPECT_EQ(error_of([&] { lf::planned(zero).policy_value().choose(again); }).code(),
            lf::errc::invalid_policy);
  lf::plan too_big = p0;
  too_big.block = lf::dims{2048, 1, 1};
  EXPECT_EQ(error_of([&] { lf::planned(too_big).policy_value().choose(again); }).code(),
            lf::errc::invalid_plan);
}

TEST(PlanContract, AStoredPlanThatAddsALaunchOptionIsRefused) {
  const lf::query q = h200_query();
  lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  for (int which = 0; which < 3; ++which) {
    lf::plan stored = computed;
    if (which == 0) stored.options.cooperative = true;
    if (which == 1) stored.options.programmatic = true;
    if (which == 2) stored.options.cluster = lf::dims{2, 1, 1};
    const std::string why = ld::check_stored_plan(q, stored, ld::launch_requirements{}, &computed);
    EXPECT_FALSE(why.empty()) << which;
  }
}

TEST(PlanContract, AStoredPlanThatOnlyDiffersIsToldApartFromABrokenOne) {
  // The planner replaces a broken entry but never overwrites a valid one another process chose (processes
  // with other views would otherwise rewrite each other's entry and plan again forever).
  const lf::query q = h200_query();
  const lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan other = lf::max_occupancy_policy{lf::max_occupancy_params{0, 0}}.choose(q);
  ASSERT_NE(other.block_threads, computed.block_threads);
  bool differs_only = false;
  EXPECT_FALSE(ld::check_stored_plan(q, other, ld::launch_requirements{}, &computed, &differs_only).empty());
  EXPECT_TRUE(differs_only);
  lf::plan broken = computed;
  broken.options.cooperative = true;
  differs_only = false;
  EXPECT_FALSE(ld::check_stored_plan(q, broken, ld::launch_requirements{}, &computed, &differs_only).empty());
  EXPECT_FALSE(differs_only);
}

TEST(PlanContract, APolicyPlanThatAddsALaunchOptionIsRefusedNotStripped) {
  // An override or plugin deciding for a plain launch: cooperative or PDL it adds would change how the kernel
  // runs (a grid.sync() launch, a launch that may start before its predecessor ends).
  const lf::query q = h200_query();
  lf::plan coop = lf::cooperative_policy{}.choose(q);
  const lf::error e = error_of([&] { ld::apply_requirements(q, coop, ld::launch_requirements{}); });
  EXPECT_EQ(e.code(), lf::errc::invalid_plan);
  EXPECT_NE(e.message().find("cooperative"), std::string::npos) << e.what();
  EXPECT_EQ(e.kernel(), launchfit_test::h200_kernel_demangled);
  lf::plan pdl = lf::max_occupancy_policy{}.choose(q);
  pdl.options.programmatic = true;
  EXPECT_NE(
      error_of([&] { ld::apply_requirements(q, pdl, ld::launch_requirements{}); }).message().find("PDL"),
      std::string::npos);
  // What the launch requires is kept whatever the policy chose.
  lf::plan plain = lf::max_occupancy_policy{}.choose(q);
  ld::launch_requirements need;
  need.programmatic = true;
  ld::apply_requirements(q, plain, need);
  EXPECT_TRUE(plain.options.programmatic);
}

// ---- identity by construction ----------------------------------------------------------------------------

namespace {

// Builds of one key through the real plan store: a changed input must build again, an unchanged one hit.
struct key_probe {
  int builds = 0;
  const ld::plan_entry* entry(const lf::plan_key& k) {
    return ld::find_or_build(k, [&] {
      ++builds;
      ld::plan_entry e;
      e.key = k;
      e.plan.block = lf::dims{static_cast<unsigned>(64 * (builds % 16 + 1)), 1, 1};
      return e;
    });
  }
};

const ld::context_ref ctx{nullptr, 0x77};

}  // namespace

TEST(PlanIdentity, EveryProcessWideInputIsInTheKey) {
  const ld::launch_request r = request(lf::max_occupancy().items(1 << 22));
  key_probe probe;
  const auto expect_new_plan = [&](const char* what, const std::function<void()>& change) {
    const lf::plan_key before = ld::base_key(r, ctx);
    const ld::plan_entry* old = probe.entry(before);
    const int builds = probe.builds;
    EXPECT_EQ(probe.entry(ld::base_key(r, ctx)), old) << what << ": unchanged inputs must hit";
    EXPECT_EQ(probe.builds, builds) << what;
    change();
    const lf::plan_key after = ld::base_key(r, ctx);
    EXPECT_FALSE(after == before) << what << ": the key must change";
    probe.entry(after);
    EXPECT_EQ(probe.builds, builds + 1) << what << ": a new plan";
    EXPECT_EQ(probe.entry(ld::base_key(r, ctx)), probe.entry(after)) << what << ": then a hit";
    EXPECT_EQ(probe.builds, builds + 1) << what;
  };
  expect_new_plan("overrides set", [] { lf::set_policy_overrides("saxpy*=fixed(block=64)"); });
  expect_new_plan("overrides cleared", [] { lf::set_policy_overrides(""); });
  expect_new_plan("bytes-in-flight default", [] { lf::set_bytes_in_flight_per_sm(90, 24 * 1024); });

  const std::string file = testing::TempDir() + "plan-contract-" + std::to_string(::getpid()) + ".json";
  std::remove(file.c_str());
  expect_new_plan("cache file opened", [&] { lf::set_cache_file(file); });
  const lf::device_limits h200 = lf::device_limits::for_arch("H200");
  expect_new_plan("calibration stored", [&] { lf::store_calibration(h200, 12080, 40 * 1024); });
  expect_new_plan("cache file closed", [] { lf::close_cache_file(); });
  expect_new_plan("cache file opened again (with its calibration)", [&] { lf::set_cache_file(file); });
  expect_new_plan("cache file closed again", [] { lf::close_cache_file(); });
  std::remove(file.c_str());

  expect_new_plan("match level exact", [] { lf::set_cache_match(lf::cache_match::exact); });
  expect_new_plan("match level model", [] { lf::set_cache_match(lf::cache_match::model); });
  expect_new_plan("remote store configured", [] { lf::set_remote_store("redis://127.0.0.1:1"); });
  if (lf::remote_store_statistics()
          .enabled) {  // without libhiredis no store was made: closing changes nothing
    expect_new_plan("remote store closed", [] { lf::close_remote_store(); });
  }
  lf::close_remote_store();

  expect_new_plan("policy registered (a plugin loaded)", [] {
    lf::register_policy("contract_probe", [](const std::map<std::string, std::string>&) {
      return std::shared_ptr<const lf::policy>(std::make_shared<lf::fixed_policy>());
    });
  });
  expect_new_plan("policy unregistered (a plugin unloaded)", [] { lf::unregister_policy("contract_probe"); });
}

TEST(PlanIdentity, EveryLaunchOptionAndShapeIsInTheKey) {
  const auto key_of = [](auto spec) { return ld::base_key(request(spec), ctx); };
  const lf::plan_key base = key_of(lf::max_occupancy().items(1 << 22));
  EXPECT_TRUE(key_of(lf::max_occupancy().items(1 << 22)) == base) << "the same spec is the same key";
  EXPECT_TRUE(key_of(lf::max_occupancy().items(1 << 23)) == base) << "n in the same bucket is the same key";
  const lf::plan_key changed[] = {
      key_of(lf::max_occupancy().items(1 << 22).smem(64)),
      key_of(lf::max_occupancy().items(1 << 22).smem(128)),
      key_of(lf::max_occupancy().items(1 << 22).smem_per_block([](int b) { return std::size_t(b) * 4; })),
      key_of(lf::max_occupancy().items(1 << 22).smem_per_block([](int b) { return std::size_t(b) * 4; }, 1)),
      key_of(lf::max_occupancy().items(1 << 22).blocks(lf::block_rule::power_of_two())),
      key_of(lf::max_occupancy().items(1 << 22).blocks(lf::block_rule::multiple_of(64))),
      key_of(lf::max_occupancy().items(1 << 22).cluster({2, 1, 1})),
      key_of(lf::max_occupancy().items(1 << 22).cluster({16, 1, 1}, true)),
      key_of(lf::max_occupancy().items(1 << 22).pdl()),
      key_of(lf::max_occupancy().items(1 << 22).sms(64)),
      key_of(lf::max_occupancy().items(1 << 22).cooperative()),
      key_of(lf::max_occupancy().items(16384)),  // small work: its own bucket
      key_of(lf::max_occupancy(128).items(1 << 22)),
      key_of(lf::max_occupancy().items({2048, 2048})),
      key_of(lf::max_occupancy().items({2048, 2048}).block_y(8)),
      key_of(lf::max_occupancy().items({2048, 2048}).block_y(8).per_thread_y(4)),
      key_of(lf::max_occupancy().items({2048, 2048}).block_x_multiple(64)),
      key_of(lf::max_occupancy().items({2048, 2048}).block_x_free()),
      key_of(lf::max_occupancy().items({2048, 2048}).block_y(8).block_z(2)),
      key_of(lf::max_occupancy().grid_stride(1 << 22)),
      key_of(lf::max_occupancy().grid_stride(1 << 22).waves(1)),
      key_of(lf::max_occupancy().grid_stride(1 << 22).waves(2)),
      key_of(lf::max_occupancy().grid(lf::dims{4096, 1, 1})),
      key_of(lf::max_occupancy()),
  };
  // The work's kind is in the key: items(n) and grid_stride(n) launch different grids for one plan, and a
  // policy that times candidates decides for the grid it timed. A waves cap shapes grid_stride launches only.
  EXPECT_TRUE(key_of(lf::max_occupancy().items(1 << 22).waves(2)) == base);
  EXPECT_TRUE(key_of(lf::max_occupancy().grid_stride(1 << 22)) == key_of(lf::max_occupancy().grid_stride(1 << 23)));
  for (std::size_t i = 0; i < std::size(changed); ++i) {
    EXPECT_FALSE(changed[i] == base) << i;
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(changed[i] == changed[j]) << i << " vs " << j;
  }
}

// The SM budget was keyed by its low 24 bits: sms((1 << 24) + 8), every SM, found the plan of sms(8), whose
// resident grid is sized for 8 SMs (and the other way round). Every budget above any device's SMs is one key.
TEST(PlanIdentity, AnSmBudgetIsKeyedWhole) {
  const auto key_of = [](auto spec) { return ld::base_key(request(spec), ctx); };
  const lf::plan_key eight = key_of(lf::max_occupancy().grid_stride(1 << 22).sms(8));
  EXPECT_FALSE(key_of(lf::max_occupancy().grid_stride(1 << 22).sms((1 << 24) + 8)) == eight);
  EXPECT_FALSE(key_of(lf::max_occupancy().grid_stride(1 << 22).sms(1 << 24)) ==
               key_of(lf::max_occupancy().grid_stride(1 << 22)));
  EXPECT_TRUE(key_of(lf::max_occupancy().grid_stride(1 << 22).sms(1 << 30)) ==
              key_of(lf::max_occupancy().grid_stride(1 << 22).sms((1 << 24) + 8)))
      << "budgets above every device's SMs plan alike";
  // The probe a launch makes keys the same.
  const auto spec = lf::max_occupancy().grid_stride(1 << 22).sms((1 << 24) + 8);
  ld::launch_probe probe = ld::make_probe(spec);
  probe.kernel_id = request(spec).kernel_id;  // as the launch sets it
  EXPECT_TRUE(ld::base_key(probe, ctx) == key_of(spec));
}

// A launch keys its plan by the probe it makes where its spec is written (the key's parts computed inline there),
// a miss and plan_for() by the spec's whole request: the two keys agree for every part a spec can set, or a launch
// would plan again on every call (or, worse, hit another spec's plan).
TEST(PlanIdentity, AProbeKeysAsItsSpecsRequestForEveryPart) {
  std::vector<lf::plan_key> keys;
  const auto check = [&keys](const char* what, const auto& spec, bool own_key = true) {
    ld::launch_probe probe = ld::make_probe(spec);
    probe.kernel_id = request(spec).kernel_id;  // as the launch sets it
    const lf::plan_key key = ld::base_key(request(spec), ctx);
    EXPECT_TRUE(ld::base_key(probe, ctx) == key) << what;
    EXPECT_EQ(probe.in_full, spec.smem_fn() != nullptr || !ld::keyable_cluster(spec.options().cluster)) << what;
    if (own_key) {
      for (const lf::plan_key& k : keys) EXPECT_FALSE(k == key) << what << ": keyed as an earlier spec";
    }
    keys.push_back(key);
  };
  check("items", lf::max_occupancy().items(1 << 22));
  check("grid_stride", lf::max_occupancy().grid_stride(1 << 22));
  check("grid_stride waves", lf::max_occupancy().grid_stride(1 << 22).waves(3));
  check("grid", lf::max_occupancy().grid(lf::dims{96, 1, 1}));
  check("no work", lf::max_occupancy());
  check("2-D items", lf::max_occupancy().items({4096, 512}));
  // 3-D work plans as 2-D work does (the same block in rows of 32; the grid follows the work per launch).
  check("3-D items", lf::max_occupancy().items({256, 256, 8}), false);
  check("sms", lf::max_occupancy().items(1 << 22).sms(8));
  check("pdl", lf::max_occupancy().items(1 << 22).pdl());
  check("cooperative()", lf::max_occupancy().items(1 << 22).cooperative());
  check("cooperative policy", lf::cooperative(1).items(1 << 22));
  check("cluster", lf::max_occupancy().items(1 << 22).cluster({2, 1, 1}));
  check("cluster 16", lf::max_occupancy().items(1 << 22).cluster({16, 1, 1}, true));
  check("smem", lf::max_occupancy().items(1 << 22).smem(4096));
  check("smem rule", lf::max_occupancy().items(1 << 22).smem_per_block([](int b) { return std::size_t(b) * 4; }));
  check("power of two", lf::max_occupancy().items(1 << 22).blocks(lf::block_rule::power_of_two()));
  check("multiple of 64", lf::max_occupancy().items(1 << 22).blocks(lf::block_rule::multiple_of(64)));
  check("block_y", lf::max_occupancy().items({4096, 512}).block_y(3));
  check("block_x_multiple", lf::max_occupancy().items({4096, 512}).block_x_multiple(64));
  check("block_x_free", lf::max_occupancy().items({4096, 512}).block_x_free());
  check("per_thread_y", lf::max_occupancy().items({4096, 512}).per_thread_y(4));
  check("fixed", lf::fixed(256).items(1 << 22));
  check("bytes_in_flight", lf::bytes_in_flight(16).items(1 << 22));
  // A cluster the key cannot hold takes the full path (refused there, naming the kernel), keyed or not.
  for (const lf::dims c : {lf::dims{0, 1, 1}, lf::dims{1, 0, 1}, lf::dims{1, 1, 0}, lf::dims{65536, 1, 1},
                           lf::dims{2, 70000, 1}}) {
    const auto spec = lf::max_occupancy().items(1 << 22).cluster(c, true);
    EXPECT_TRUE(ld::make_probe(spec).in_full) << c.to_string();
  }
}

TEST(PlanIdentity, SmemAndWavesTravelInTheLaunchOptions) {
  const ld::launch_request fixed_smem = request(lf::max_occupancy().grid_stride(1 << 22).smem(4096).waves(3));
  EXPECT_EQ(fixed_smem.options.smem_bytes, 4096u);
  EXPECT_EQ(fixed_smem.options.smem_rule, 0u);
  EXPECT_EQ(fixed_smem.options.waves, 3u);
  EXPECT_EQ(fixed_smem.shape.waves, 3u) << "the grid rule sees the options' cap";
  // The request points at the spec's rule: the spec outlives it, as in a launch.
  const auto rule_spec =
      lf::max_occupancy().items(1 << 22).smem(4096).smem_per_block([](int b) { return std::size_t(b) * 8; });
  const ld::launch_request rule = request(rule_spec);
  EXPECT_EQ(rule.options.smem_bytes, 0u) << "a rule replaces the fixed bytes";
  EXPECT_NE(rule.options.smem_rule, 0u);
  ASSERT_NE(rule.smem_fn, nullptr);
  EXPECT_EQ((*rule.smem_fn)(128), 1024u);
  const auto back_spec = lf::max_occupancy().items(1 << 22).smem_per_block([](int) { return 1; }).smem(64);
  const ld::launch_request back = request(back_spec);
  EXPECT_EQ(back.options.smem_rule, 0u);
  EXPECT_EQ(back.smem_fn, nullptr);
  EXPECT_EQ(back.options.smem_identity(), 64u);
  EXPECT_TRUE(fixed_smem.options != rule.options);
}

TEST(PlanIdentity, NoCallSiteFlushesByHandAndReportsShowCurrentPlansOnly) {
  // A plan made under old inputs stays where a thread may still point at it, but is never listed again.
  key_probe probe;
  const ld::launch_request r = request(lf::fixed(128).items(1000));
  const lf::plan_key k = ld::base_key(r, ctx);
  probe.entry(k);
  const auto listed = [&] {
    for (const auto& c : lf::cache().plans())
      if (c.key == k) return true;
    return false;
  };
  EXPECT_TRUE(listed());
  ld::plan_input_changed(ld::register_plan_input("test"));
  EXPECT_FALSE(listed());
  const int builds = probe.builds;
  probe.entry(ld::base_key(r, ctx));  // the launch's next lookup: a new plan under the new inputs
  EXPECT_EQ(probe.builds, builds + 1);
  EXPECT_FALSE(listed());
}

// griddepcontrol.wait exists from PTX for compute_90 on: a kernel built from older PTX (and JIT-compiled for
// the GPU, whose binary version then reads 90) has no wait, so an early start reads stale data.
TEST(PlanContract, PdlNeedsABinaryThatCanWait) {
  ld::launch_requirements pdl;
  pdl.programmatic = true;
  lf::kernel_resources k = lf::kernel_resources::manual(32, 0, 1024, "old_ptx_consumer");
  k.ptx_version = 80;
  k.binary_version = 90;
  const lf::error e = error_of([&] { ld::require_pdl_support(pdl, k); });
  EXPECT_EQ(e.code(), lf::errc::pdl_unsupported) << e.what();
  EXPECT_EQ(e.kernel(), "old_ptx_consumer");
  EXPECT_NE(e.message().find("compute_80"), std::string::npos) << e.what();
  EXPECT_STREQ(lf::to_string(lf::errc::pdl_unsupported), "pdl_unsupported");
  ld::require_pdl_support(ld::launch_requirements{}, k);  // no .pdl(): nothing to wait for
  k.ptx_version = 90;
  ld::require_pdl_support(pdl, k);
  k.ptx_version = 0;  // unknown (a calculator kernel): the driver is not asked, nothing is refused
  ld::require_pdl_support(pdl, k);
}

// SPDX-License-Identifier: MIT
// The plugin C ABI (plugin.h) and its loader (plugin.hpp), with the test plugins of tests/plugins.

#include "launchfit/plugin.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "error_of.hpp"
#include "launchfit/error.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "test_query.hpp"

namespace lf = launchfit;

namespace {

std::string plugin_path(const std::string& name) {
  return std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/plugins/liblf_" + name + ".so";
}

using launchfit_test::error_of;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using launchfit_test::h200_query;

// Each test plugin once per process; the registry is process-wide.
lf::plugin_info load(const std::string& name) { return lf::load_plugin(plugin_path(name)); }

}  // namespace

// Fields are only ever added at the end: ABI 1.1's query ends with time_plan, 1.2 appends the work's rank and
// dimensions and the block-shape freedom, 1.3 the trials' setup time, packed without padding (on LP64 a
// plugin built against any of these headers reads the same offsets).
TEST(PluginAbi, TheQueryGrowsOnlyAtItsEndWithoutPadding) {
  static_assert(sizeof(void*) != 8 || offsetof(launchfit_query, time_plan) == 88, "ABI 1.1 layout moved");
  EXPECT_EQ(offsetof(launchfit_query, work_rank), offsetof(launchfit_query, time_plan) + sizeof(void*));
  EXPECT_EQ(offsetof(launchfit_query, block_shape_free), offsetof(launchfit_query, work_rank) + 4);
  EXPECT_EQ(offsetof(launchfit_query, work_nx), offsetof(launchfit_query, block_shape_free) + 4);
  EXPECT_EQ(offsetof(launchfit_query, work_ny), offsetof(launchfit_query, work_nx) + 8);
  EXPECT_EQ(offsetof(launchfit_query, work_nz), offsetof(launchfit_query, work_ny) + 8);
  EXPECT_EQ(offsetof(launchfit_query, block_x_step), offsetof(launchfit_query, work_nz) + 8);
  EXPECT_EQ(offsetof(launchfit_query, reserved3), offsetof(launchfit_query, block_x_step) + 4);
  EXPECT_EQ(offsetof(launchfit_query, setup_ms), offsetof(launchfit_query, reserved3) + 4);
  EXPECT_EQ(sizeof(launchfit_query), offsetof(launchfit_query, setup_ms) + sizeof(void*));
  launchfit_query older{};
  older.struct_size = offsetof(launchfit_query, work_rank);  // an ABI 1.1 launchfit
  EXPECT_TRUE(LAUNCHFIT_HAS_FIELD(&older, launchfit_query, time_plan));
  EXPECT_FALSE(LAUNCHFIT_HAS_FIELD(&older, launchfit_query, work_rank));
  EXPECT_FALSE(LAUNCHFIT_HAS_FIELD(&older, launchfit_query, block_x_step));
  older.struct_size = offsetof(launchfit_query, setup_ms);  // an ABI 1.2 launchfit
  EXPECT_TRUE(LAUNCHFIT_HAS_FIELD(&older, launchfit_query, block_x_step));
  EXPECT_FALSE(LAUNCHFIT_HAS_FIELD(&older, launchfit_query, setup_ms));
}

TEST(PluginAbi, HeaderLayoutStartsWithSizeAndVersion) {
  EXPECT_EQ(offsetof(launchfit_plugin_descriptor, struct_size), 0u);
  EXPECT_EQ(offsetof(launchfit_plugin_descriptor, abi_version), 4u);
  EXPECT_EQ(offsetof(launchfit_query, abi_version), 4u);
  EXPECT_EQ(offsetof(launchfit_plan, abi_version), 4u);
  EXPECT_EQ(offsetof(launchfit_device, abi_version), 4u);
  EXPECT_EQ(offsetof(launchfit_kernel, abi_version), 4u);
  EXPECT_EQ(LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(LAUNCHFIT_PLUGIN_ABI_VERSION), LAUNCHFIT_PLUGIN_ABI_MAJOR);
  launchfit_query q{};
  q.struct_size = offsetof(launchfit_query, time_plan);  // an older launchfit without time_plan
  EXPECT_TRUE(LAUNCHFIT_HAS_FIELD(&q, launchfit_query, smem_for_block));
  EXPECT_FALSE(LAUNCHFIT_HAS_FIELD(&q, launchfit_query, time_plan));
}

TEST(Plugin, GoodPluginLoadsAndChooses) {
  const auto info = load("good");
  EXPECT_EQ(info.name, "test_good");
  EXPECT_EQ(info.version, "1.0.0");
  EXPECT_EQ(info.abi_version, LAUNCHFIT_PLUGIN_ABI_VERSION);
  EXPECT_EQ(info.path, plugin_path("good"));
  EXPECT_EQ(info.resolved_path, std::filesystem::canonical(plugin_path("good")).string());
  bool listed = false;
  for (const auto& p : lf::loaded_plugins()) listed = listed || p.name == "test_good";
  EXPECT_TRUE(listed);
  const auto names = lf::registered_policies();
  EXPECT_NE(std::find(names.begin(), names.end(), "test_good"), names.end());

  const auto q = h200_query();
  auto policy = lf::policy_from_string("test_good");
  const lf::plan p = policy->choose(q);
  EXPECT_EQ(p.block, (lf::dims{64, 1, 1}));
  EXPECT_EQ(p.block_threads, 64);
  EXPECT_EQ(p.blocks_per_sm, q.active_blocks_for(64));
  EXPECT_EQ(p.sm_count, q.device.sm_count);
  EXPECT_EQ(p.grid.x, 0u);  // from the work
  EXPECT_EQ(p.policy, "test_good()");
  EXPECT_EQ(p.match, "computed");
  EXPECT_TRUE(contains(p.reason, "always 64 threads")) << p.reason;
  EXPECT_TRUE(contains(p.reason, std::to_string(q.device.sm_count) + " SMs")) << p.reason;
  EXPECT_GT(p.occupancy.occupancy, 0.0);

  // Parameters reach the plugin; the same file loaded again is the same plugin.
  EXPECT_EQ(lf::policy_from_string("test_good(block=256)")->choose(q).block_threads, 256);
  EXPECT_EQ(load("good").name, "test_good");
}

TEST(Plugin, PolicyStringRoundTripsAndHashesByParameters) {
  load("good");
  auto a = lf::policy_from_string("test_good( block = 128 , fallback = fixed )");
  EXPECT_EQ(a->to_string(), "test_good(block=128,fallback=fixed)");
  EXPECT_EQ(lf::policy_from_string(a->to_string())->to_string(), a->to_string());
  EXPECT_EQ(lf::policy_from_string(a->to_string())->hash(), a->hash());
  EXPECT_NE(lf::policy_from_string("test_good(block=256)")->hash(), a->hash());
}

TEST(Plugin, CreateErrorsNameThePluginAndItsMessage) {
  load("good");
  const auto e = error_of([] { lf::policy_from_string("test_good(threads=5)"); });
  EXPECT_TRUE(contains(e.message(), "col 1:")) << e.what();
  EXPECT_TRUE(contains(e.message(), "plugin 'test_good'")) << e.what();
  EXPECT_TRUE(contains(e.message(), "unknown parameter in 'threads=5'")) << e.what();
  // fallback names a policy launchfit knows, never another plugin.
  EXPECT_TRUE(contains(error_of([] { lf::policy_from_string("test_good(fallback=nope)"); }).message(),
                       "col 20: policy 'test_good': parameter 'fallback': unknown policy 'nope'"));
  EXPECT_TRUE(contains(error_of([] { lf::policy_from_string("test_good(fallback=test_good)"); }).message(),
                       "is a plugin"));
}

TEST(Plugin, WorkBucketComesFromThePlugin) {
  load("good");
  const lf::work w{lf::work::shape::items, 1u << 20, 1};
  EXPECT_EQ(lf::policy_from_string("test_good")->work_bucket(w), 0u);
  EXPECT_EQ(lf::policy_from_string("test_good(bucketed=1)")->work_bucket(w), 21u);
}

// The test plugin says in its reason how many reports its state received: feedback reaches the plugin
// behind the policy it is given (its own state, not another policy object's), and a built-in policy given
// feedback neither fails nor passes it to any plugin.
TEST(Plugin, FeedbackReachesOnlyPlugins) {
  load("good");
  const auto q = h200_query();
  auto policy = lf::policy_from_string("test_good");
  auto other = lf::policy_from_string("test_good(block=128)");
  const auto p = policy->choose(q);
  EXPECT_TRUE(contains(p.reason, "; feedback 0")) << p.reason;
  lf::plugin_feedback(*policy, p, 1.5);
  lf::plugin_feedback(*policy, p, 2.5);
  EXPECT_TRUE(contains(policy->choose(q).reason, "; feedback 2")) << policy->choose(q).reason;
  EXPECT_TRUE(contains(other->choose(q).reason, "; feedback 0")) << other->choose(q).reason;

  const lf::max_occupancy_policy built_in;
  const lf::plan before = built_in.choose(q);
  lf::plugin_feedback(built_in, p, 1.5);  // not a plugin: nothing happens, nothing is thrown
  EXPECT_EQ(built_in.choose(q).to_string(), before.to_string());
  EXPECT_TRUE(contains(policy->choose(q).reason, "; feedback 2")) << policy->choose(q).reason;
  EXPECT_TRUE(contains(other->choose(q).reason, "; feedback 0")) << other->choose(q).reason;
}

TEST(Plugin, MissingFileIsRefused) {
  const auto e = error_of([] { lf::load_plugin(plugin_path("does_not_exist")); });
  EXPECT_EQ(e.call(), "load_plugin");
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_PLUGIN_REFUSED");
  EXPECT_EQ(e.code(), lf::errc::plugin_refused);  // a file that never loaded, not a plugin that failed
  EXPECT_TRUE(contains(e.message(), plugin_path("does_not_exist") + "': no such file")) << e.what();
}

TEST(Plugin, MissingEntrySymbolIsRefused) {
  const auto e = error_of([] { load("no_entry"); });
  EXPECT_TRUE(contains(e.message(), "liblf_no_entry.so")) << e.what();
  EXPECT_TRUE(contains(e.message(), "no symbol launchfit_plugin_entry")) << e.what();
}

TEST(Plugin, NotASharedObjectIsRefused) {
  const std::string source = std::string(LAUNCHFIT_SOURCE_DIR) + "/tests/plugins/test-plugin.c";
  const auto e = error_of([&] { lf::load_plugin(source); });
  EXPECT_TRUE(contains(e.message(), "test-plugin.c': dlopen failed")) << e.what();
}

TEST(Plugin, NewerAbiMajorIsRefused) {
  const auto e = error_of([] { load("bad_abi"); });
  EXPECT_TRUE(contains(e.message(), "liblf_bad_abi.so")) << e.what();
  EXPECT_TRUE(contains(e.message(), "ABI version mismatch: plugin built for ABI 2.0, this launchfit implements ABI 1." +
                                        std::to_string(LAUNCHFIT_PLUGIN_ABI_MINOR)))
      << e.what();
  EXPECT_TRUE(contains(e.message(), "upgrade launchfit")) << e.what();
  EXPECT_THROW(lf::make_policy("test_bad_abi"), lf::error);  // nothing was registered
}

TEST(Plugin, TooSmallDescriptorIsRefused) {
  const auto e = error_of([] { load("small"); });
  EXPECT_TRUE(contains(e.message(), "liblf_small.so")) << e.what();
  EXPECT_TRUE(contains(e.message(), "struct_size " +
                                        std::to_string(offsetof(launchfit_plugin_descriptor, choose)) +
                                        " is smaller than the ABI 1.0 minimum"))
      << e.what();
}

TEST(Plugin, DuplicateNameIsRefused) {
  load("good");
  const auto e = error_of([] { load("good_twin"); });  // another file, same name
  EXPECT_TRUE(contains(e.message(), "liblf_good_twin.so")) << e.what();
  EXPECT_TRUE(contains(e.message(), "duplicate name")) << e.what();
  EXPECT_TRUE(contains(e.message(), "'test_good' is already registered")) << e.what();
}

TEST(Plugin, ErrorCarriesThePluginMessage) {
  load("error");
  auto policy = lf::policy_from_string("test_error");
  const auto e = error_of([&] { policy->choose(h200_query()); });
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_PLUGIN_ERROR");
  EXPECT_TRUE(
      contains(e.message(), "plugin 'test_error' failed: no tuning data for kernel void reduce<float>"))
      << e.what();
  EXPECT_EQ(e.kernel(), "void reduce<float>(float const*, int)");
}

TEST(Plugin, InvalidPlanIsAnErrorNamingTheLimit) {
  load("invalid");
  auto policy = lf::policy_from_string("test_invalid");
  const auto e = error_of([&] { policy->choose(h200_query()); });
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_PLAN");
  EXPECT_EQ(e.call(), "validate(block)");
  EXPECT_TRUE(contains(e.message(), "plugin 'test_invalid' returned an invalid plan")) << e.what();
  EXPECT_TRUE(contains(e.message(), "2048")) << e.what();
  EXPECT_TRUE(contains(e.message(), "1024")) << e.what();  // the device maximum it broke
  // Rebuilt to name the plugin: the kernel is named once, and the code and status are the validation's.
  EXPECT_EQ(e.code(), lf::errc::invalid_plan);
  EXPECT_EQ(e.cuda_result(), 0);
  const std::string what = e.what();
  const std::string kernel = "[kernel " + e.kernel() + "]";
  EXPECT_FALSE(e.kernel().empty()) << what;
  EXPECT_EQ(what.find(kernel), what.rfind(kernel)) << what;
  EXPECT_EQ(what.find("[kernel "), what.rfind("[kernel ")) << what;
}

TEST(Plugin, DeclineFallsBackToMaxOccupancy) {
  load("decline");
  const auto q = h200_query();
  const lf::plan p = lf::policy_from_string("test_decline")->choose(q);
  const lf::plan expected = lf::max_occupancy_policy{}.choose(q);
  EXPECT_EQ(p.block, expected.block);
  EXPECT_EQ(p.blocks_per_sm, expected.blocks_per_sm);
  EXPECT_EQ(p.match, "fallback");
  EXPECT_EQ(p.policy, "test_decline()");
  EXPECT_EQ(p.reason.rfind("declined by test_decline; max_occupancy: ", 0), 0u) << p.reason;

  const lf::plan fixed = lf::policy_from_string("test_decline(fallback=fixed)")->choose(q);
  EXPECT_EQ(fixed.block_threads, 256);
  EXPECT_EQ(fixed.reason.rfind("declined by test_decline; fixed: ", 0), 0u) << fixed.reason;

  // The plugin's message says why.
  const lf::plan why = lf::policy_from_string("test_decline(block=32)")->choose(q);
  EXPECT_EQ(why.reason.rfind("declined by test_decline (no opinion on 32 threads); max_occupancy: ", 0), 0u)
      << why.reason;
}

TEST(Plugin, ADeclineInsideAStreamCaptureSaysTheCaptureNotThePluginsGuess) {
  // Inside a capture the plugin sees only failed trials; the library knows why, and the plan says it.
  load("decline");
  auto q = h200_query();
  q.no_trials = "not tuned: the launch is being captured into a CUDA graph";
  const lf::plan p = lf::policy_from_string("test_decline(block=32)")->choose(q);
  EXPECT_EQ(p.reason.rfind("declined by test_decline (not tuned: the launch is being captured into a CUDA graph; "
                           "the plugin: no opinion on 32 threads); max_occupancy: ",
                           0),
            0u)
      << p.reason;
}

TEST(Plugin, FallbackOptionReplacesErrorsAndInvalidPlans) {
  load("error");
  load("invalid");
  const auto q = h200_query();
  const lf::plan expected = lf::max_occupancy_policy{}.choose(q);
  for (const char* text : {"test_error(fallback=max_occupancy)", "test_invalid(fallback=max_occupancy)"}) {
    SCOPED_TRACE(text);
    auto policy = lf::policy_from_string(text);
    for (int i = 0; i < 2; ++i) {  // logged once, the same plan each time
      const lf::plan p = policy->choose(q);
      EXPECT_EQ(p.block, expected.block);
      EXPECT_EQ(p.match, "fallback");
      EXPECT_TRUE(contains(p.reason, "failed (plugin '")) << p.reason;
      EXPECT_TRUE(contains(p.reason, "; max_occupancy: ")) << p.reason;
    }
  }
  const lf::plan fixed = lf::policy_from_string("test_invalid(fallback=fixed)")->choose(q);
  EXPECT_EQ(fixed.block_threads, 256);
}

// Environment variables are read once per process: these run in a fresh child process each.
class PluginEnv : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(PluginEnv, FallbackFromTheEnvironment) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_PLUGIN_FALLBACK", "1", 1);
        load("error");
        const auto p = lf::policy_from_string("test_error")->choose(h200_query());
        std::exit(p.match == "fallback" ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// Every LAUNCHFIT_* switch reads one set of words: "yes" is on here as it is for LAUNCHFIT_LOG_ASYNC.
TEST_F(PluginEnv, FallbackSwitchWordsAreTheCommonOnes) {
  for (const char* on : {"yes", "YES", "On", "true"}) {
    EXPECT_EXIT(
        {
          setenv("LAUNCHFIT_PLUGIN_FALLBACK", on, 1);
          load("error");
          const auto p = lf::policy_from_string("test_error")->choose(h200_query());
          std::exit(p.match == "fallback" ? 0 : 1);
        },
        testing::ExitedWithCode(0), "")
        << on;
  }
}

// A word that is no switch is said (variable and value), and the default (off) stays.
TEST_F(PluginEnv, FallbackSwitchRefusesOtherWords) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_PLUGIN_FALLBACK", "maybe\x1b", 1);
        load("error");
        bool threw = false;
        try {
          (void)lf::policy_from_string("test_error")->choose(h200_query());
        } catch (const lf::error&) {
          threw = true;
        }
        std::exit(threw ? 0 : 1);
      },
      testing::ExitedWithCode(0), "LAUNCHFIT_PLUGIN_FALLBACK=.*maybe.*is not a switch");
}

// A list of thousands of paths that do not load is named in its first eight and counted beyond: it logged a
// line per path, and every unknown policy's error carried them all.
TEST_F(PluginEnv, ThousandsOfPathsThatDoNotLoadAreNamedInTheirFirstFew) {
  EXPECT_EXIT(
      {
        std::string list = plugin_path("good");
        for (int i = 0; i < 3000; ++i) list += ":/nonexistent/launchfit-plugin-" + std::to_string(i) + ".so";
        setenv("LAUNCHFIT_PLUGINS", list.c_str(), 1);
        const auto p = lf::policy_from_string("test_good(block=32)")->choose(h200_query());
        std::string missing;
        try {
          lf::make_policy("no_such_policy");
        } catch (const lf::error& e) {
          missing = e.message();
        }
        std::size_t named = 0;
        for (std::size_t at = missing.find("LAUNCHFIT_PLUGINS: plugin '"); at != std::string::npos;
             at = missing.find("LAUNCHFIT_PLUGINS: plugin '", at + 1))
          ++named;
        const bool ok = p.block_threads == 32 && named == 8 && contains(missing, "2992 more paths failed to load") &&
                        missing.size() < 8000;
        if (!ok) std::fprintf(stderr, "named %zu, %zu bytes: %.600s\n", named, missing.size(), missing.c_str());
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST_F(PluginEnv, PluginsFromTheEnvironment) {
  EXPECT_EXIT(
      {
        const std::string list = plugin_path("good") + "::" + plugin_path("bad_abi");
        setenv("LAUNCHFIT_PLUGINS", list.c_str(), 1);
        // The good one loads and is selectable by name; the bad one is logged and named when asked for.
        const auto p = lf::policy_from_string("test_good(block=32)")->choose(h200_query());
        std::string missing;
        try {
          lf::make_policy("test_bad_abi");
        } catch (const lf::error& e) {
          missing = e.message();
        }
        const bool ok = p.block_threads == 32 && lf::loaded_plugins().size() == 1 &&
                        contains(missing, "LAUNCHFIT_PLUGINS: plugin '" + plugin_path("bad_abi")) &&
                        contains(missing, "ABI version mismatch");
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

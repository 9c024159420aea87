// SPDX-License-Identifier: MIT
// The plan inputs (lib/plan_inputs.hpp): each owner registers its input once in a fixed table; a change makes
// one new generation, counts for its input and names it in one trace line, escaped; the owners of the
// policy overrides, the bytes-in-flight default and the policy registry report their changes.

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "captured_log.hpp"
#include "launchfit/policy.hpp"
#include "plan_inputs.hpp"

namespace {

namespace lf = launchfit;
namespace ld = launchfit::detail;
using launchfit_test::has;

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(PlanInputs, ANameIsRegisteredOnceAndEachChangeIsANewGeneration) {
  const ld::plan_input a = ld::register_plan_input("test input a");
  const ld::plan_input b = ld::register_plan_input("test input b");
  EXPECT_NE(a.index, b.index);
  EXPECT_EQ(ld::register_plan_input("test input a").index, a.index);
  EXPECT_EQ(ld::plan_input_name(a), "test input a");
  const std::uint64_t g = ld::plan_inputs_generation(), changes_a = ld::plan_input_changes(a);
  const std::uint64_t changes_b = ld::plan_input_changes(b);
  ld::plan_input_changed(a);
  ld::plan_input_changed(a);
  ld::plan_input_changed(b);
  EXPECT_EQ(ld::plan_inputs_generation(), g + 3);
  EXPECT_EQ(ld::plan_input_changes(a), changes_a + 2);
  EXPECT_EQ(ld::plan_input_changes(b), changes_b + 1);
}

TEST(PlanInputs, AChangeNamesItsInputInOneEscapedTraceLine) {
  launchfit_test::captured_log log(spdlog::level::trace);
  const ld::plan_input hostile = ld::register_plan_input("evil\n[error] forged\x1b[31m");
  ld::plan_input_changed(hostile);
  const ld::plan_input plain = ld::register_plan_input("test plain input");
  ld::plan_input_changed(plain);
  lf::logger()->flush();
  const std::string text = log.text();
  EXPECT_EQ(count(text, "[trace] plan inputs changed input="), 2) << text;
  EXPECT_TRUE(
      has(text, "input=\"test plain input\" generation=" + std::to_string(ld::plan_inputs_generation())))
      << text;
  EXPECT_TRUE(has(text, "input=\"evil\\n[error] forged\\x1b[31m\"")) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(count(text, "\n"), 2) << text;  // the hostile name forged no line
}

TEST(PlanInputs, NoLineAboveTrace) {
  launchfit_test::captured_log log(spdlog::level::debug);
  ld::plan_input_changed(ld::register_plan_input("test quiet input"));
  lf::logger()->flush();
  EXPECT_EQ(log.text(), "");
}

TEST(PlanInputs, TheOwnersOfTheInputsReportTheirChanges) {
  struct owner {
    const char* input;
    void (*change)();
  };
  for (const owner& o :
       {owner{"policy overrides", [] { lf::set_policy_overrides("test_kernel=fixed(block=64)"); }},
        owner{"bytes-in-flight default", [] { lf::set_bytes_in_flight_per_sm(90, 40 * 1024); }},
        owner{"policy registry",
              [] {
                lf::register_policy("test_inputs_policy",
                                    [](const std::map<std::string, std::string>& params) {
                                      return lf::make_policy("fixed", params);
                                    });
              }},
        owner{"policy registry", [] { lf::unregister_policy("test_inputs_policy"); }}}) {
    launchfit_test::captured_log log(spdlog::level::trace);
    const ld::plan_input input = ld::register_plan_input(o.input);
    const std::uint64_t g = ld::plan_inputs_generation(), changes = ld::plan_input_changes(input);
    o.change();
    EXPECT_EQ(ld::plan_input_changes(input), changes + 1) << o.input;
    EXPECT_EQ(ld::plan_inputs_generation(), g + 1) << o.input;
    lf::logger()->flush();
    EXPECT_TRUE(has(log.text(), std::string("input=\"") + o.input + "\"")) << log.text();
  }
  lf::set_policy_overrides("");
}

TEST(PlanInputs, ThreadsRegisteringAndChangingAtOnceLoseNothing) {
  constexpr int threads = 8, changes = 500;
  std::vector<std::thread> pool;
  std::vector<std::vector<std::uint8_t>> seen(threads);
  const std::uint64_t g = ld::plan_inputs_generation();
  std::atomic<int> ready{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      for (int i = 0; i < changes; ++i) {
        const ld::plan_input in = ld::register_plan_input("test concurrent " + std::to_string(i % 4));
        seen[t].push_back(in.index);
        ld::plan_input_changed(in);
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(ld::plan_inputs_generation(), g + threads * changes);
  for (int t = 1; t < threads; ++t) EXPECT_EQ(seen[t], seen[0]);  // one index per name, in every thread
  std::uint64_t total = 0;
  for (int i = 0; i < 4; ++i)
    total += ld::plan_input_changes(ld::register_plan_input("test concurrent " + std::to_string(i)));
  EXPECT_EQ(total, static_cast<std::uint64_t>(threads * changes));
}

// Last: it fills the table. A long name is cut; names past the table share its last entry.
TEST(PlanInputs, ZTheTableIsFixedAndItsOverflowSharesTheLastEntry) {
  const std::string long_name(200, 'n');
  const ld::plan_input cut = ld::register_plan_input(long_name);
  EXPECT_EQ(ld::plan_input_name(cut), std::string(ld::plan_input_name_bytes, 'n'));
  std::set<std::uint8_t> indexes;
  for (std::size_t i = 0; i < 2 * ld::max_plan_inputs; ++i) {
    const ld::plan_input in = ld::register_plan_input("test filler " + std::to_string(i));
    EXPECT_LT(in.index, ld::max_plan_inputs);
    indexes.insert(in.index);
  }
  const ld::plan_input last{static_cast<std::uint8_t>(ld::max_plan_inputs - 1)};
  EXPECT_EQ(ld::plan_input_name(last), "other plan inputs");
  EXPECT_EQ(ld::register_plan_input("test filler 1000").index, last.index);
  const std::uint64_t g = ld::plan_inputs_generation();
  ld::plan_input_changed(ld::register_plan_input("test filler 2000"));
  EXPECT_EQ(ld::plan_inputs_generation(), g + 1);  // a change of an input past the table still counts
  EXPECT_EQ(ld::register_plan_input("test input a").index, ld::register_plan_input("test input a").index);
}

}  // namespace

// SPDX-License-Identifier: MIT
// CUDA graphs without a GPU: what a launch captured into a graph keeps so that tune_graph() can plan it again
// after the launch returned (a copy of its policy that outlives the spec, its arguments' sizes), the
// dependencies a node is given, refusals before any driver call, and the tuning record of a capture.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "plan_cache.hpp"
#include "tuning_record.hpp"

namespace lf = launchfit;

namespace {

TEST(GraphRequest, AValuePolicyIsCopiedAndOutlivesItsSpec) {
  lf::detail::policy_copy c;
  std::uint64_t hash = 0;
  {
    const auto s = lf::max_occupancy(128).items(1000);
    const lf::detail::launch_request r = lf::detail::make_request(s);
    ASSERT_NE(r.copy_policy, nullptr);
    ASSERT_EQ(r.policy_holder, static_cast<const void*>(&s.policy_value()));
    c = r.copy_policy(r.policy_holder);
    hash = r.policy_hash;
    ASSERT_NE(c.policy, nullptr);
    EXPECT_NE(c.policy, r.policy);  // a copy, not the spec's own
  }
  // The spec is gone; the copy answers as it did.
  EXPECT_EQ(c.policy->hash(), hash);
  EXPECT_EQ(c.policy->to_string(), lf::max_occupancy(128).get_policy().to_string());
  c.free_owner(c.owner);
}

TEST(GraphRequest, APolicyHeldByPointerIsSharedNotCopied) {
  const std::shared_ptr<const lf::policy> p = lf::policy_from_string("fixed(64)");
  const long before = p.use_count();
  lf::detail::policy_copy c;
  {
    const auto s = lf::use(p).items(10);
    const lf::detail::launch_request r = lf::detail::make_request(s);
    c = r.copy_policy(r.policy_holder);
  }
  EXPECT_EQ(c.policy, p.get());
  EXPECT_EQ(p.use_count(), before + 1);  // the copy keeps it alive
  c.free_owner(c.owner);
  EXPECT_EQ(p.use_count(), before);
}

TEST(GraphNodes, ListedDependenciesAreCopiedAnArrayIsNot) {
  const auto a = reinterpret_cast<cudaGraphNode_t>(0x10);
  const auto b = reinterpret_cast<cudaGraphNode_t>(0x20);
  const lf::node_dependencies listed{a, b};
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed.data()[0], a);
  EXPECT_EQ(listed.data()[1], b);
  std::vector<cudaGraphNode_t> mine{b};
  const lf::node_dependencies viewed(mine.data(), mine.size());
  EXPECT_EQ(viewed.data(), mine.data());
  EXPECT_EQ(viewed.size(), 1u);
  EXPECT_EQ(lf::node_dependencies{}.size(), 0u);
  // Four are held in place, more in a list; either way a copy (or a moved-from list) answers on its own.
  const auto node = [](std::uintptr_t i) { return reinterpret_cast<cudaGraphNode_t>(0x100 + i); };
  for (const lf::node_dependencies& d :
       {lf::node_dependencies{node(0), node(1), node(2), node(3)},
        lf::node_dependencies{node(0), node(1), node(2), node(3), node(4), node(5), node(6)}}) {
    lf::node_dependencies copy = d;
    lf::node_dependencies moved = std::move(copy);
    for (const lf::node_dependencies* x : std::initializer_list<const lf::node_dependencies*>{&d, &moved}) {
      ASSERT_GE(x->size(), 4u);
      for (std::size_t i = 0; i < x->size(); ++i) EXPECT_EQ(x->data()[i], node(i)) << i;
    }
    EXPECT_NE(moved.data(), d.data()) << "a copy points into the nodes it was copied from";
  }
}

TEST(GraphNodes, ANodeWithoutADriverIsALaunchfitErrorAndNoNode) {
  try {
    (void)lf::device_limits::query(0);
    GTEST_SKIP() << "a CUDA device is present (tests/gpu/graph-test.cu adds nodes there)";
  } catch (const lf::error&) {
  }
  lf::kernel k(reinterpret_cast<CUfunction>(0x1234));
  try {
    (void)lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(0x1), {}, k, lf::max_occupancy().items(10), 1, 2.0f);
    FAIL() << "a node without a driver";
  } catch (const lf::error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no CUDA driver") != std::string::npos || what.find("no CUDA device") != std::string::npos)
        << what;
  }
}

TEST(GraphRequest, APolicyHeldByARawPointerIsNotCopied) {
  // Its owner may be gone by the time tune_graph() runs: such a launch is left, never planned with a dangling
  // policy.
  const lf::max_occupancy_policy p;
  const lf::policy* raw = &p;
  const lf::detail::policy_copy c = lf::detail::copy_policy_of<const lf::policy*>(&raw);
  EXPECT_EQ(c.policy, nullptr);
  EXPECT_EQ(c.owner, nullptr);
}

TEST(TuneGraph, ANullGraphOrExecIsRefusedBeforeAnyDriverCall) {
  for (int which = 0; which < 2; ++which) {
    try {
      (void)lf::tune_graph(which ? reinterpret_cast<cudaGraph_t>(0x1) : nullptr, nullptr);
      FAIL() << "no error";
    } catch (const lf::error& e) {
      EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_INVALID_VALUE") << e.what();
      EXPECT_EQ(e.call(), "launchfit::tune_graph");
    }
  }
}

TEST(TuneGraph, AReportSaysWhatBecameOfEachNode) {
  lf::graph_tuning t;
  t.tuned = 1;
  t.left = 1;
  t.nodes.push_back({nullptr, "scale", "block=128", "block=512", lf::graph_node_report::outcome::tuned, ""});
  t.nodes.push_back({nullptr, "count", "block=256", "block=256", lf::graph_node_report::outcome::left,
                     "its spec does not allow re-running (.rerunnable())"});
  EXPECT_EQ(t.to_string(),
            "1 tuned, 0 unchanged, 1 left\ntuned scale: block=128 -> block=512\n"
            "left count: its spec does not allow re-running (.rerunnable())");
}

// A launch of a plan made inside a capture asks the driver about its stream only while the watch lasts: launches
// in a row outside captures run it down (never below zero: a count that wrapped would watch for ever), a launch
// inside one starts it again, and a copy of the entry keeps the count.
TEST(CaptureWatch, LaunchesOutsideCapturesRunItDownAndALaunchInsideOneStartsItAgain) {
  using watch = lf::detail::capture_watch;
  watch w;
  EXPECT_FALSE(w.on());  // a plan made outside a capture is never watched
  w.start();
  for (std::uint32_t i = 0; i + 1 < watch::launches; ++i) w.saw(false);
  EXPECT_TRUE(w.on());
  w.saw(true);
  for (std::uint32_t i = 0; i + 1 < watch::launches; ++i) w.saw(false);
  EXPECT_TRUE(w.on()) << "a launch inside a capture did not start the count again";
  const watch copy = w;
  w.saw(false);
  EXPECT_FALSE(w.on());
  EXPECT_TRUE(copy.on());
  for (int i = 0; i < 3; ++i) w.saw(false);
  EXPECT_FALSE(w.on()) << "the count went below zero";

  // Threads launching the same plan at once: the count ends at zero, not wrapped.
  watch shared;
  shared.start();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&shared] {
      for (std::uint32_t i = 0; i < watch::launches; ++i) shared.saw(false);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(shared.on());
}

TEST(TuningRecordCapture, ATrialRefusedByACaptureIsRemembered) {
  lf::detail::tuning_record record([](std::uint64_t) { return lf::detail::nvml::gpu_conditions{}; });
  EXPECT_FALSE(record.trials_captured());
  record.refuse_captured();
  EXPECT_TRUE(record.trials_captured());
  EXPECT_FALSE(record.tuned());
  EXPECT_FALSE(record.trials_refused());  // the lease's gate was never asked
}

}  // namespace

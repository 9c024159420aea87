// SPDX-License-Identifier: MIT
// CUDA graphs through the stub driver (stub_driver.h), without a GPU: a launch captured with autotune is tuned
// in place (the executable graph's node set to the tuned plan, never instantiated again); what the driver
// refuses (a node update, a node attribute, a user object) leaves the graph as it was and is reported or
// thrown, never half done.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/plugin.hpp"
#include "stub_driver.h"
#include "driver.hpp"
#include "plan_cache.hpp"
#include "stub_plan.hpp"

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

using launchfit_test::family_functions;
using launchfit_test::family_tags;

const std::size_t map_params[] = {sizeof(void*), sizeof(void*), sizeof(int)};

CUfunction map_kernel(const char* name, unsigned best_block) {
  const CUfunction f = launchfit_stub_function(name, 16, 0, 1024, map_params, 3);
  launchfit_stub_set_cost(f, 0.01, best_block);
  return f;
}

CUstream stream_of(std::uintptr_t n) { return reinterpret_cast<CUstream>(n); }
float* device_pointer(std::uintptr_t n) { return reinterpret_cast<float*>(n); }

class StubGraph : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
    try {
      loaded_ = lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name == "autotune";
    } catch (const lf::error&) {
      loaded_ = false;  // SetUp() fails each test, naming the plugin
    }
#endif
  }
  void SetUp() override {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
    ASSERT_TRUE(loaded_) << "the autotune plugin this build made did not load: " << LAUNCHFIT_AUTOTUNE_PLUGIN;
#else
    GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
  }
  static bool loaded_;
};
bool StubGraph::loaded_ = false;

auto tuned_spec(int n, CUstream s) { return lf::use("autotune(max_trials=16)").items(n).on(s).rerunnable(); }

unsigned exec_block(CUgraphExec exec, CUgraphNode node) {
  CUDA_KERNEL_NODE_PARAMS p{};
  EXPECT_EQ(launchfit_stub_exec_node(exec, node, &p), 1);
  return p.blockDimX;
}

CUgraphNode only_node(CUgraph g, std::size_t at = 0) {
  CUgraphNode nodes[8] = {};
  const std::size_t n = launchfit_stub_graph_nodes(g, nodes, 8);
  return at < n ? nodes[at] : nullptr;
}

// One autotuned launch of `f` over n items captured on `s`, instantiated.
struct one_capture {
  lf::launched launched;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CUgraphNode node = nullptr;
};
one_capture capture_one(CUfunction f, int n, CUstream s) {
  one_capture c;
  launchfit_stub_begin_capture(s);
  c.launched = lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  c.graph = launchfit_stub_end_capture(s);
  c.exec = launchfit_stub_instantiate(c.graph);
  c.node = only_node(c.graph);
  return c;
}
// One autotuned launch of `f` over n items with an smem rule, captured on `s`, instantiated.
template <class Rule>
one_capture capture_with_rule(CUfunction f, int n, CUstream s, Rule rule) {
  one_capture c;
  launchfit_stub_begin_capture(s);
  c.launched = lf::launch(lf::kernel(f), tuned_spec(n, s).smem_per_block(rule), device_pointer(0x1000),
                          device_pointer(0x2000), n);
  c.graph = launchfit_stub_end_capture(s);
  c.exec = launchfit_stub_instantiate(c.graph);
  c.node = only_node(c.graph);
  return c;
}

lf::graph_tuning tune(CUgraph g, CUgraphExec exec, std::uintptr_t stream) {
  return lf::tune_graph(reinterpret_cast<cudaGraph_t>(g), reinterpret_cast<cudaGraphExec_t>(exec),
                        reinterpret_cast<cudaStream_t>(stream_of(stream)));
}

// A plan a capture kept from its trials, launched many times outside captures by a spec that may not re-run
// (the same key: .rerunnable() is not in it), is still watched: a later capture of the rerunnable spec is
// remembered and tuned in place. The launches that may not re-run ended the watch, and the second graph's node
// kept its static plan with nothing said.
TEST_F(StubGraph, LaunchesThatMayNotRerunDoNotEndTheWatchOfAPlanWaitingForItsTrials) {
  const CUfunction f = map_kernel("_Z8watchedPKfPfi", 128);
  const int n = 1 << 20;
  const one_capture first = capture_one(f, n, stream_of(0x94));
  const auto once = lf::use("autotune(max_trials=16)").items(n).on(stream_of(0x95));
  for (std::uint32_t i = 0; i < 2 * lf::detail::capture_watch::launches; ++i)
    lf::launch(lf::kernel(f), once, device_pointer(0x1000), device_pointer(0x2000), n);
  const one_capture second = capture_one(f, n, stream_of(0x96));
  const lf::graph_tuning t = tune(second.graph, second.exec, 0x97);
  EXPECT_EQ(t.tuned + t.unchanged, 1u) << t.to_string();
  EXPECT_EQ(exec_block(second.exec, second.node), 128u) << t.to_string();
  for (const one_capture* c : {&first, &second}) {
    launchfit_stub_destroy_exec(c->exec);
    launchfit_stub_destroy_graph(c->graph);
  }
}

TEST_F(StubGraph, ALaunchCapturedWithAutotuneIsTunedInPlace) {
  const CUfunction f = map_kernel("_Z5firstPKfPfi", 128);
  const CUstream s = stream_of(0x20);
  const int n = 1 << 20;
  const unsigned long long instantiations_before = launchfit_stub_instantiations();
  const std::size_t live_before = launchfit_stub_live_graphs();
  const unsigned long long graph_launches_before = launchfit_stub_graph_launches();
  const one_capture c = capture_one(f, n, s);
  const lf::launched& first = c.launched;
  const CUgraph g = c.graph;
  EXPECT_NE(first.plan().reason.find("captured into a CUDA graph"), std::string::npos) << first.plan().reason;
  const CUgraphExec exec = c.exec;
  const unsigned long long instantiated = launchfit_stub_instantiations();
  EXPECT_EQ(instantiated, instantiations_before + 1);
  const CUgraphNode node = c.node;
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(exec_block(exec, node), first.block.x);
  EXPECT_NE(first.block.x, 128u) << "the static plan is already the best: the test would show nothing";

  const lf::graph_tuning t = tune(g, exec, 0x21);
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  EXPECT_EQ(t.left, 0u) << t.to_string();
  // The report names the kernel readably and gives the plan it ran and the plan it runs now (rendered when
  // tune_graph() reports, from the plans kept when the launch was captured and when it was tuned).
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.nodes[0].kernel, "first(float const*, float*, int)");
  EXPECT_NE(t.nodes[0].before.find("block=" + std::to_string(first.block.x) + " "), std::string::npos)
      << t.nodes[0].before;
  EXPECT_NE(t.nodes[0].before.find("policy=autotune("), std::string::npos) << t.nodes[0].before;
  EXPECT_NE(t.nodes[0].after.find("block=128 "), std::string::npos) << t.nodes[0].after;
  EXPECT_NE(t.to_string().find("tuned first(float const*, float*, int): "), std::string::npos) << t.to_string();
  // Its trials ran as graph replays, each candidate's graph captured on a private stream and gone after.
  EXPECT_GT(launchfit_stub_graph_launches(), graph_launches_before);
  EXPECT_EQ(launchfit_stub_live_graphs(), live_before + 2) << "a trial graph outlived the tuning";
  EXPECT_EQ(launchfit_stub_live_streams(), 0u) << "the tuning's capture stream outlived it";
  EXPECT_EQ(launchfit_stub_active_captures(), 0u);
  EXPECT_EQ(exec_block(exec, node), 128u) << "the executable graph's node runs another block than the tuned one";
  CUDA_KERNEL_NODE_PARAMS in_graph{};
  ASSERT_EQ(launchfit_stub_graph_node(node, &in_graph), 1);
  EXPECT_EQ(in_graph.blockDimX, 128u);
  EXPECT_EQ(static_cast<long long>(in_graph.gridDimX) * 128, static_cast<long long>(n));
  EXPECT_EQ(launchfit_stub_instantiations_of(g), 1u) << "tune_graph instantiated the graph again";
  // Captured again: the tuned plan directly.
  launchfit_stub_begin_capture(s);
  const lf::launched again = lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  launchfit_stub_destroy_graph(launchfit_stub_end_capture(s));
  EXPECT_EQ(again.block.x, 128u);
  EXPECT_NE(again.plan().reason.find("timed as graph replays"), std::string::npos) << again.plan().reason;
  launchfit_stub_destroy_exec(exec);
  launchfit_stub_destroy_graph(g);
}

// Where the first candidate cannot be captured into a graph, the whole tuning times stream launches; where a
// later one cannot be, it is not timed (a ranking never mixes the two), and nothing is left capturing or
// alive.
TEST_F(StubGraph, ATuningTimesAllItsCandidatesOneWay) {
  const CUstream s = stream_of(0x30);
  const int n = 1 << 20;
  {
    const CUfunction f = map_kernel("_Z6streamPKfPfi", 128);
    const one_capture c = capture_one(f, n, s);
    const std::size_t live = launchfit_stub_live_graphs();
    const unsigned long long graph_launches = launchfit_stub_graph_launches();
    launchfit_stub_fail("cuStreamBeginCapture", CUDA_ERROR_NOT_SUPPORTED, 1);
    const lf::graph_tuning t = tune(c.graph, c.exec, 0x31);
    launchfit_stub_fail("cuStreamBeginCapture", CUDA_SUCCESS, 0);
    EXPECT_EQ(t.tuned, 1u) << t.to_string();
    EXPECT_EQ(launchfit_stub_graph_launches(), graph_launches) << "a candidate was replayed as a graph";
    launchfit_stub_begin_capture(s);
    const lf::launched again =
        lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
    launchfit_stub_destroy_graph(launchfit_stub_end_capture(s));
    EXPECT_EQ(again.plan().reason.find("timed as graph replays"), std::string::npos) << again.plan().reason;
    EXPECT_EQ(exec_block(c.exec, c.node), 128u);
    EXPECT_EQ(launchfit_stub_live_graphs(), live);
    EXPECT_EQ(launchfit_stub_active_captures(), 0u);
    launchfit_stub_destroy_exec(c.exec);
    launchfit_stub_destroy_graph(c.graph);
  }
  {
    const CUfunction f = map_kernel("_Z5mixedPKfPfi", 128);
    const one_capture c = capture_one(f, n, s);
    const std::size_t live = launchfit_stub_live_graphs();
    launchfit_stub_fail_after("cuGraphInstantiateWithFlags", CUDA_ERROR_NOT_SUPPORTED, 1, -1);
    const lf::graph_tuning t = tune(c.graph, c.exec, 0x32);
    launchfit_stub_fail("cuGraphInstantiateWithFlags", CUDA_SUCCESS, 0);
    // Only the first candidate was timed; the tuning still chooses, from what it timed, and says how many
    // candidates could not run (each refused with "this candidate cannot be captured into a CUDA graph, as the
    // tuning's first was").
    EXPECT_EQ(t.tuned + t.unchanged, 1u) << t.to_string();
    launchfit_stub_begin_capture(s);
    const lf::launched again =
        lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
    launchfit_stub_destroy_graph(launchfit_stub_end_capture(s));
    EXPECT_NE(again.plan().reason.find("timed as graph replays"), std::string::npos) << again.plan().reason;
    EXPECT_NE(again.plan().reason.find("could not run"), std::string::npos) << again.plan().reason;
    EXPECT_EQ(launchfit_stub_live_graphs(), live)
        << "a trial graph whose instantiation failed was left alive";
    EXPECT_EQ(launchfit_stub_active_captures(), 0u);
    EXPECT_EQ(launchfit_stub_live_streams(), 0u);
    launchfit_stub_destroy_exec(c.exec);
    launchfit_stub_destroy_graph(c.graph);
  }
}

TEST_F(StubGraph, ANodeUpdateTheDriverRefusesIsReportedAndTheOthersAreTuned) {
  const CUfunction a = map_kernel("_Z6refusePKfPfi", 128);
  const CUfunction b = map_kernel("_Z6acceptPKfPfi", 64);
  const CUstream s = stream_of(0x22);
  const int n = 1 << 18;
  launchfit_stub_begin_capture(s);
  const lf::launched la = lf::launch(lf::kernel(a), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  const lf::launched lb = lf::launch(lf::kernel(b), tuned_spec(n, s), device_pointer(0x2000), device_pointer(0x3000), n);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec exec = launchfit_stub_instantiate(g);
  const CUgraphNode na = only_node(g, 0), nb = only_node(g, 1);
  launchfit_stub_fail("cuGraphExecKernelNodeSetParams", CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, 1);
  lf::graph_tuning t;
  ASSERT_NO_THROW(t = tune(g, exec, 0x23));
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  EXPECT_EQ(t.left, 1u) << t.to_string();
  bool reported = false;
  for (const lf::graph_node_report& r : t.nodes)
    reported = reported || (r.result == lf::graph_node_report::outcome::left &&
                            r.why.find("CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE") != std::string::npos);
  EXPECT_TRUE(reported) << t.to_string();
  // The refused node runs what it ran, in the executable graph and in the graph; the other one is tuned.
  EXPECT_EQ(exec_block(exec, na), la.block.x);
  CUDA_KERNEL_NODE_PARAMS pa{};
  ASSERT_EQ(launchfit_stub_graph_node(na, &pa), 1);
  EXPECT_EQ(pa.blockDimX, la.block.x);
  EXPECT_EQ(exec_block(exec, nb), 64u);
  EXPECT_NE(lb.block.x, 64u);
  // Asked again, the refused node is tuned now (its plan is, since the first call).
  const lf::graph_tuning t2 = tune(g, exec, 0x23);
  EXPECT_EQ(exec_block(exec, na), 128u) << t2.to_string();
  launchfit_stub_destroy_exec(exec);
  launchfit_stub_destroy_graph(g);
}

// The executable graph's node was updated, the graph's was refused: the executable one is set back, so the
// graph and its executable graph run the same plan (and a later instantiation runs what this one runs).
TEST_F(StubGraph, AGraphNodeUpdateTheDriverRefusesSetsTheExecutableNodeBack) {
  const one_capture c = capture_one(map_kernel("_Z4backPKfPfi", 128), 1 << 16, stream_of(0x28));
  const lf::launched& l = c.launched;
  const CUgraph g = c.graph;
  const CUgraphExec exec = c.exec;
  const CUgraphNode node = c.node;
  launchfit_stub_fail("cuGraphKernelNodeSetParams", CUDA_ERROR_INVALID_VALUE, 1);
  const unsigned long long exec_updates = launchfit_stub_calls("cuGraphExecKernelNodeSetParams");
  const lf::graph_tuning t = tune(g, exec, 0x29);
  EXPECT_EQ(t.tuned, 0u) << t.to_string();
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_NE(t.nodes[0].why.find("cuGraphKernelNodeSetParams"), std::string::npos) << t.to_string();
  EXPECT_NE(t.nodes[0].why.find("both run its captured plan"), std::string::npos) << t.to_string();
  EXPECT_EQ(launchfit_stub_calls("cuGraphExecKernelNodeSetParams"), exec_updates + 2) << "set, then set back";
  EXPECT_EQ(exec_block(exec, node), l.block.x);
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_graph_node(node, &p), 1);
  EXPECT_EQ(p.blockDimX, l.block.x);
  launchfit_stub_destroy_exec(exec);
  launchfit_stub_destroy_graph(g);
}

// The graph's node refused, and setting the executable one back refused too: the report says the executable
// graph runs the tuned plan (its `after`), and the graph keeps the captured one.
TEST_F(StubGraph, WhereTheDriverAlsoRefusesTheSetBackTheReportSaysWhatTheExecutableGraphRuns) {
  const one_capture c = capture_one(map_kernel("_Z6strandPKfPfi", 128), 1 << 16, stream_of(0x2a));
  launchfit_stub_fail("cuGraphKernelNodeSetParams", CUDA_ERROR_INVALID_VALUE, 1);
  launchfit_stub_fail_after("cuGraphExecKernelNodeSetParams", CUDA_ERROR_INVALID_VALUE, 1, 1);  // the set-back
  const lf::graph_tuning t = tune(c.graph, c.exec, 0x2b);
  ASSERT_EQ(t.nodes.size(), 1u);
  const lf::graph_node_report& r = t.nodes[0];
  EXPECT_EQ(r.result, lf::graph_node_report::outcome::left) << t.to_string();
  EXPECT_NE(r.why.find("the executable graph runs the tuned plan, the graph the captured one"), std::string::npos)
      << t.to_string();
  EXPECT_NE(r.after.find("block=128"), std::string::npos) << r.after;
  EXPECT_EQ(exec_block(c.exec, c.node), 128u);
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_graph_node(c.node, &p), 1);
  EXPECT_EQ(p.blockDimX, c.launched.block.x);
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

// A user object in the graph would cost every replay of it (1-2 us a replay on an H100): launchfit puts none
// there, and remembers the launch all the same.
TEST_F(StubGraph, AGraphHoldsNoUserObjectOfLaunchfits) {
  const unsigned long long created = launchfit_stub_calls("cuUserObjectCreate");
  const unsigned long long retained = launchfit_stub_calls("cuGraphRetainUserObject");
  const one_capture c = capture_one(map_kernel("_Z8unheldPKfPfi", 128), 1 << 20, stream_of(0x24));
  EXPECT_EQ(launchfit_stub_calls("cuUserObjectCreate"), created);
  EXPECT_EQ(launchfit_stub_calls("cuGraphRetainUserObject"), retained);
  const lf::graph_tuning t = tune(c.graph, c.exec, 0x25);
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

}  // namespace

// add_kernel_node() on the stub: refusals leave no node behind (no plugin needed).
namespace {

CUgraph empty_graph(CUstream s) {
  launchfit_stub_begin_capture(s);
  return launchfit_stub_end_capture(s);
}

TEST_F(StubGraph, EveryExecutableGraphOfATunedGraphRunsTheTunedPlan) {
  const CUfunction f = map_kernel("_Z7twoexecPKfPfi", 128);
  const int n = 1 << 20;
  const one_capture c = capture_one(f, n, stream_of(0x40));
  const CUgraphExec second = launchfit_stub_instantiate(c.graph);  // instantiated before the tuning
  ASSERT_NE(c.launched.block.x, 128u);
  EXPECT_EQ(tune(c.graph, c.exec, 0x41).tuned, 1u);
  EXPECT_EQ(exec_block(c.exec, c.node), 128u);
  const lf::graph_tuning t = tune(c.graph, second, 0x41);
  EXPECT_EQ(t.unchanged, 1u) << t.to_string();
  EXPECT_EQ(exec_block(second, c.node), 128u) << "the second executable graph still runs the captured plan: "
                                              << t.to_string();
  // Refused by the driver: reported as left, naming what it runs.
  const CUgraphExec third = launchfit_stub_instantiate(c.graph);
  launchfit_stub_fail("cuGraphExecKernelNodeSetParams", CUDA_ERROR_NOT_SUPPORTED, 1);
  const lf::graph_tuning refused = tune(c.graph, third, 0x41);
  launchfit_stub_fail("cuGraphExecKernelNodeSetParams", CUDA_SUCCESS, 0);
  EXPECT_EQ(refused.left, 1u) << refused.to_string();
  ASSERT_EQ(refused.nodes.size(), 1u);
  EXPECT_NE(refused.nodes[0].why.find("refused"), std::string::npos) << refused.nodes[0].why;
  launchfit_stub_destroy_exec(third);
  launchfit_stub_destroy_exec(second);
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

TEST_F(StubGraph, ANodeAddedWhileItsStreamIsCapturedIsTunedByTheNextLaunchOutsideACapture) {
  const CUfunction f = map_kernel("_Z7addnodePKfPfi", 128);
  const CUstream s = stream_of(0x50);
  const int n = 1 << 20;
  launchfit_stub_begin_capture(s);
  const CUgraph into = launchfit_stub_end_capture(s);  // an empty graph to add the node to
  launchfit_stub_begin_capture(s);                     // the spec's stream is captured meanwhile
  const lf::kernel_node made = lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(into), {}, lf::kernel(f),
                                                   tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  launchfit_stub_destroy_graph(launchfit_stub_end_capture(s));
  EXPECT_NE(made.node, nullptr);
  EXPECT_NE(made.what.plan().reason.find("captured into a CUDA graph"), std::string::npos) << made.what.plan().reason;
  const lf::launched after =
      lf::launch(lf::kernel(f), tuned_spec(n, stream_of(0x51)), device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(after.block.x, 128u) << after.plan().reason;
  launchfit_stub_destroy_graph(into);
}

// The same node is remembered for tune_graph(): its graph, instantiated, is tuned in place (it kept the static
// plan for good, and tune_graph() said "no launch remembered").
TEST_F(StubGraph, ANodeAddedWithItsTrialsKeptFromItIsTunedInPlace) {
  const CUfunction f = map_kernel("_Z8addnode2PKfPfi", 128);
  const CUstream s = stream_of(0x52);
  const int n = 1 << 20;
  launchfit_stub_begin_capture(s);
  const CUgraph into = launchfit_stub_end_capture(s);
  launchfit_stub_begin_capture(s);
  const lf::kernel_node made = lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(into), {}, lf::kernel(f),
                                                   tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  launchfit_stub_destroy_graph(launchfit_stub_end_capture(s));
  ASSERT_NE(made.node, nullptr);
  ASSERT_NE(made.what.block.x, 128u) << "the static plan is the tuned one already: the test would show nothing";
  const CUgraphExec e = launchfit_stub_instantiate(into);
  const lf::graph_tuning t = tune(into, e, 0x53);
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  EXPECT_EQ(exec_block(e, reinterpret_cast<CUgraphNode>(made.node)), 128u) << t.to_string();
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(into);
}

// A node left because no trial could run says why by the state of the stream tune_graph() was given: being
// captured, or a state the driver could not tell (it blamed a capture of that stream for both).
TEST_F(StubGraph, ANodeLeftForWantOfTrialsSaysWhatTheStreamWas) {
  const CUfunction f = map_kernel("_Z9whystreamPKfPfi", 128);
  const one_capture c = capture_one(f, 1 << 20, stream_of(0x54));
  launchfit_stub_begin_capture(stream_of(0x55));
  const lf::graph_tuning captured = tune(c.graph, c.exec, 0x55);
  launchfit_stub_destroy_graph(launchfit_stub_end_capture(stream_of(0x55)));
  ASSERT_EQ(captured.nodes.size(), 1u) << captured.to_string();
  EXPECT_EQ(captured.nodes[0].result, lf::graph_node_report::outcome::left) << captured.to_string();
  EXPECT_NE(captured.nodes[0].why.find("is being captured"), std::string::npos) << captured.to_string();
  launchfit_stub_fail("cuStreamIsCapturing", CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, -1);
  const lf::graph_tuning unknown = tune(c.graph, c.exec, 0x56);
  launchfit_stub_fail("cuStreamIsCapturing", CUDA_SUCCESS, 0);
  ASSERT_EQ(unknown.nodes.size(), 1u) << unknown.to_string();
  EXPECT_NE(unknown.nodes[0].why.find("could not tell"), std::string::npos) << unknown.to_string();
  EXPECT_NE(unknown.nodes[0].why.find("cudaStreamNonBlocking"), std::string::npos) << unknown.to_string();
  const lf::graph_tuning later = tune(c.graph, c.exec, 0x57);
  EXPECT_EQ(later.tuned, 1u) << later.to_string();
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

TEST_F(StubGraph, ALaunchWhoseCaptureStateTheDriverCannotTellIsTunedLater) {
  const CUfunction f = map_kernel("_Z7unknownPKfPfi", 128);
  const int n = 1 << 20;
  // The legacy stream while another stream captures: the driver answers with an error, not a state, for as
  // long as that capture lasts.
  launchfit_stub_fail("cuStreamIsCapturing", CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, -1);
  const lf::launched first =
      lf::launch(lf::kernel(f), tuned_spec(n, stream_of(0x70)), device_pointer(0x1000), device_pointer(0x2000), n);
  launchfit_stub_fail("cuStreamIsCapturing", CUDA_SUCCESS, 0);
  EXPECT_NE(first.plan().reason.find("could not tell"), std::string::npos) << first.plan().reason;
  const lf::launched later =
      lf::launch(lf::kernel(f), tuned_spec(n, stream_of(0x70)), device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(later.block.x, 128u) << later.plan().reason;
}

// Counts its live copies: launches remembered from a capture own one each.
int live_counted = 0;
struct counted_params {
  int x = 0;
  static constexpr std::array<const char*, 1> names{"x"};
};
class counted_policy : public lf::param_policy<counted_policy, counted_params> {
 public:
  static constexpr const char* policy_name = "counted";
  counted_policy() { ++live_counted; }
  counted_policy(const counted_policy& o) : param_policy(o) { ++live_counted; }
  ~counted_policy() override { --live_counted; }

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    const lf::plan p = launchfit_test::full_residency_plan(q, 256, "counted");
    if (q.time_plan) (void)q.time_plan(p);  // asks for a trial: a capture keeps it from trials
    return p;
  }
};

// Without a user object, a destroyed graph is not told: what launchfit remembers is bounded, the oldest
// dropped first (with its copy of the policy), and the newest graph is still tuned.
TEST_F(StubGraph, RememberedLaunchesAreBoundedTheOldestDroppedFirst) {
  const CUfunction f = map_kernel("_Z7countedPKfPfi", 128);
  const CUstream s = stream_of(0x80);
  const int n = 1 << 20;
  const int before = live_counted;
  constexpr int bound = 4096;  // max_captured_launches
  CUgraph last = nullptr;
  for (int i = 0; i < bound + 200; ++i) {
    launchfit_stub_begin_capture(s);
    lf::launch(lf::kernel(f), lf::spec<counted_policy>(counted_policy{}).items(n).on(s).rerunnable(),
               device_pointer(0x1000), device_pointer(0x2000), n);
    const CUgraph g = launchfit_stub_end_capture(s);
    if (last) launchfit_stub_destroy_graph(last);
    last = g;
  }
  // Fewer where a destroyed graph's node handle came back in a later graph (that launch replaced it).
  EXPECT_LE(live_counted - before, bound) << "remembered launches are not bounded";
  const CUgraphExec exec = launchfit_stub_instantiate(last);
  const lf::graph_tuning t = tune(last, exec, 0x81);
  EXPECT_EQ(t.nodes.size(), 1u) << t.to_string();
  launchfit_stub_destroy_exec(exec);
  launchfit_stub_destroy_graph(last);
}

TEST_F(StubGraph, AnSmemRuleIsNotAskedForBlocksAboveTheKernelsLimit) {
  // __launch_bounds__(256): a rule may refuse blocks the kernel cannot run.
  const CUfunction f = launchfit_stub_function("_Z6boundsPKfPfi", 16, 0, 256, map_params, 3);
  launchfit_stub_set_cost(f, 0.01, 64);
  const auto rule = [](int b) -> std::size_t {
    if (b > 256) throw std::invalid_argument("a block above the kernel's launch bounds");
    return static_cast<std::size_t>(b) * 16;
  };
  const one_capture c = capture_with_rule(f, 1 << 20, stream_of(0xc0), rule);
  const lf::graph_tuning t = tune(c.graph, c.exec, 0xc1);
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_exec_node(c.exec, c.node, &p), 1);
  EXPECT_EQ(p.blockDimX, 64u);
  EXPECT_EQ(p.sharedMemBytes, 64u * 16);
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

TEST_F(StubGraph, ANodeWhoseTrialsCannotRunIsLeftWithItsPolicysReason) {
  const CUfunction f = map_kernel("_Z8failuresPKfPfi", 128);
  const int n = 1 << 20;
  const one_capture c = capture_one(f, n, stream_of(0xf0));
  launchfit_stub_fail("cuStreamBeginCapture", CUDA_ERROR_NOT_SUPPORTED, -1);  // no trial as a graph replay
  launchfit_stub_fail("cuLaunchKernelEx", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, -1);  // nor as a launch
  lf::graph_tuning t;
  EXPECT_NO_THROW(t = tune(c.graph, c.exec, 0xf1));
  launchfit_stub_fail("cuStreamBeginCapture", CUDA_SUCCESS, 0);
  launchfit_stub_fail("cuLaunchKernelEx", CUDA_SUCCESS, 0);
  EXPECT_EQ(t.tuned, 0u) << t.to_string();
  EXPECT_EQ(t.left, 1u) << t.to_string();
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_NE(t.nodes[0].why.find("declined"), std::string::npos) << t.nodes[0].why;
  EXPECT_EQ(exec_block(c.exec, c.node), c.launched.block.x);
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

TEST(StubNodes, ANodeForANullGraphIsRefusedBeforeTheDriverIsAsked) {
  const CUfunction f = launchfit_stub_function("_Z4nullPKfPfi", 16, 0, 1024, map_params, 3);
  const unsigned long long before = launchfit_stub_calls("cuGraphAddNode");
  try {
    lf::add_kernel_node(nullptr, {}, lf::kernel(f), lf::max_occupancy().items(100), device_pointer(0x1000),
                        device_pointer(0x2000), 100);
    ADD_FAILURE() << "a node for a null graph was not refused";
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("null graph"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("null"), std::string::npos) << e.what();
  }
  EXPECT_EQ(launchfit_stub_calls("cuGraphAddNode"), before);
}

TEST(StubNodes, ANodeWhoseAttributeTheDriverRefusesIsNotLeftInTheGraph) {
  const CUfunction f = launchfit_stub_function("_Z4attrPKfPfi", 16, 0, 1024, map_params, 3);
  const CUgraph g = empty_graph(stream_of(0x26));
  launchfit_stub_fail("cuGraphKernelNodeSetAttribute", CUDA_ERROR_NOT_SUPPORTED, 1);
  try {
    lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(g), {}, lf::kernel(f), lf::cooperative(), device_pointer(0x1000),
                        device_pointer(0x2000), 100);
    ADD_FAILURE() << "a node whose attribute the driver refused did not throw";
  } catch (const lf::error& e) {
    // The kernel and the plan are named, though their text is made only once the driver has refused.
    const std::string what = e.what();
    EXPECT_NE(what.find("cuGraphKernelNodeSetAttribute"), std::string::npos) << what;
    EXPECT_NE(what.find("attr"), std::string::npos) << what;
    EXPECT_NE(what.find("policy=cooperative("), std::string::npos) << what;
  }
  EXPECT_EQ(launchfit_stub_graph_nodes(g, nullptr, 0), 0u) << "a cooperative node without its cooperative attribute was left in the graph";
  // Without the failure the node is added, with the attribute.
  const lf::kernel_node made = lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(g), {}, lf::kernel(f), lf::cooperative(),
                                                   device_pointer(0x1000), device_pointer(0x2000), 100);
  ASSERT_NE(made.node, nullptr);
  EXPECT_EQ(launchfit_stub_graph_nodes(g, nullptr, 0), 1u);
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_graph_node(reinterpret_cast<CUgraphNode>(made.node), &p), 1);
  EXPECT_EQ(p.blockDimX, made.what.block.x);
  EXPECT_EQ(p.gridDimX, made.what.grid.x);
  launchfit_stub_destroy_graph(g);
}

TEST(StubNodes, ANodeTheDriverRefusesToAddThrowsNamingTheKernel) {
  const CUfunction f = launchfit_stub_function("_Z6noroomPKfPfi", 16, 0, 1024, map_params, 3);
  const CUgraph g = empty_graph(stream_of(0x27));
  launchfit_stub_fail("cuGraphAddNode", CUDA_ERROR_OUT_OF_MEMORY, 1);
  try {
    lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(g), {}, lf::kernel(f), lf::max_occupancy().items(100),
                        device_pointer(0x1000), device_pointer(0x2000), 100);
    ADD_FAILURE() << "a refused node did not throw";
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("cuGraphAddNode"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("noroom"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("policy=max_occupancy("), std::string::npos) << e.what();
  }
  launchfit_stub_destroy_graph(g);
}

// An smem rule defined for whole warps only (as every launch outside a capture asks it) is asked for whole
// warps at the capture too: the node is tuned, not left because the rule threw for a block of 1 thread.
TEST_F(StubGraph, AnSmemRuleForWholeWarpsOnlyIsTunedInPlace) {
  const CUfunction f = map_kernel("_Z9wholewarpPKfPfi", 128);
  const auto rule = [](int b) -> std::size_t {
    if (b % 32 != 0) throw std::invalid_argument("whole warps only");
    return static_cast<std::size_t>(b) * 16;
  };
  const one_capture c = capture_with_rule(f, 1 << 20, stream_of(0x90), rule);
  const lf::graph_tuning t = tune(c.graph, c.exec, 0x91);
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_exec_node(c.exec, c.node, &p), 1);
  EXPECT_EQ(p.blockDimX, 128u) << t.to_string();
  EXPECT_EQ(p.sharedMemBytes, 128u * 16u) << "the node's smem is not the rule's for its block";
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

// A family of kernels, each with launch bounds of its own block, whose smem comes from a rule: tuned in place,
// any member may be chosen (the rule asked up to the widest member's block), as a launch outside a capture
// chooses; the tuning stored for the key is that one too.
lf::launched launch_family_with_rule(CUstream s, int n, std::uintptr_t id) {
  static const lf::detail::family_member members[3] = {
      {128, &family_tags[0]}, {256, &family_tags[1]}, {512, &family_tags[2]}};
  const auto rule = [](int b) -> std::size_t { return static_cast<std::size_t>(b) * 8; };
  const auto spec = tuned_spec(n, s).smem_per_block(rule);  // the request points into it
  lf::detail::launch_request r = lf::detail::make_request(spec);
  launchfit_test::as_family(r, id, members, 3);
  const float* a = device_pointer(0x1000);
  float* b = device_pointer(0x2000);
  int count = n;
  void* args[] = {&a, &b, &count};
  r.args = args;
  r.arg_sizes = map_params;
  r.arg_count = 3;
  r.has_arguments = true;
  return lf::detail::launch(r);
}
TEST_F(StubGraph, AFamilyWithAnSmemRuleIsTunedUpToItsWidestMember) {
  family_functions[0] = launchfit_stub_function("_Z6memberILi128EEvPKfPfi", 16, 0, 128, map_params, 3);
  family_functions[1] = launchfit_stub_function("_Z6memberILi256EEvPKfPfi", 16, 0, 256, map_params, 3);
  family_functions[2] = launchfit_stub_function("_Z6memberILi512EEvPKfPfi", 16, 0, 512, map_params, 3);
  for (int i = 0; i < 3; ++i) launchfit_stub_set_cost(family_functions[i], 0.01, 512);
  const int n = 1 << 20;
  EXPECT_EQ(launch_family_with_rule(stream_of(0xa0), n, 0xa001).block.x, 512u) << "outside a capture";
  const CUstream s = stream_of(0xa1);
  launchfit_stub_begin_capture(s);
  const lf::launched captured = launch_family_with_rule(s, n, 0xa003);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  EXPECT_NE(captured.block.x, 512u) << "the static plan is the tuned one already: the test would show nothing";
  const lf::graph_tuning t = tune(g, e, 0xa2);
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  EXPECT_EQ(exec_block(e, only_node(g)), 512u) << t.to_string();
  EXPECT_EQ(launch_family_with_rule(stream_of(0xa3), n, 0xa003).block.x, 512u) << "the key's plan after tuning";
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// A node whose planning throws (here a policy of the program's own, once trials run) is left and reported with
// the error; the nodes before and after it are tuned, and tune_graph() returns its report. not_an_exception: the
// policy throws an int instead of a std::exception.
struct throwing_params {
  int not_an_exception = 0;
  static constexpr std::array<const char*, 1> names{"not_an_exception"};
};
class throws_once_timed : public lf::param_policy<throws_once_timed, throwing_params> {
 public:
  static constexpr const char* policy_name = "throws_once_timed";
  using lf::param_policy<throws_once_timed, throwing_params>::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    const lf::plan p = launchfit_test::full_residency_plan(q, 256, "throws once timed");
    if (q.time_plan && q.time_plan(p) >= 0) {
      if (params_.not_an_exception) throw 42;
      throw std::runtime_error("a policy's own bug once trials run");
    }
    return p;
  }
};
TEST_F(StubGraph, ANodeWhosePlanningThrowsIsLeftAndTheOthersAreTuned) {
  const CUfunction a = map_kernel("_Z7throw_aPKfPfi", 128);
  const CUfunction b = map_kernel("_Z7throw_bPKfPfi", 128);
  const CUfunction c = map_kernel("_Z7throw_cPKfPfi", 128);
  const CUstream s = stream_of(0xb0);
  const int n = 1 << 20;
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(a), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  lf::launch(lf::kernel(b), lf::spec<throws_once_timed>(throws_once_timed{}).items(n).on(s).rerunnable(),
             device_pointer(0x1000), device_pointer(0x2000), n);
  lf::launch(lf::kernel(c), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  lf::graph_tuning t;
  try {
    t = tune(g, e, 0xb1);
  } catch (const std::exception& x) {
    FAIL() << "one node's failure ended the tuning of every node: " << x.what();
  }
  EXPECT_EQ(t.tuned, 2u) << t.to_string();
  EXPECT_EQ(t.left, 1u) << t.to_string();
  ASSERT_EQ(t.nodes.size(), 3u) << t.to_string();
  EXPECT_EQ(t.nodes[1].result, lf::graph_node_report::outcome::left);
  EXPECT_NE(t.nodes[1].why.find("a policy's own bug once trials run"), std::string::npos) << t.nodes[1].why;
  EXPECT_EQ(exec_block(e, only_node(g, 0)), 128u);
  EXPECT_EQ(exec_block(e, only_node(g, 1)), 256u);
  EXPECT_EQ(exec_block(e, only_node(g, 2)), 128u);
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// The same with a policy that throws something that is not a std::exception: the node is left and reported as
// such, the other node tuned, and nothing escapes tune_graph().
TEST_F(StubGraph, ANodeWhosePlanningThrowsANonStandardExceptionIsLeftAndReported) {
  const CUfunction a = map_kernel("_Z7throw_dPKfPfi", 128);
  const CUfunction b = map_kernel("_Z7throw_ePKfPfi", 128);
  const CUstream s = stream_of(0xb2);
  const int n = 1 << 20;
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(a), lf::spec<throws_once_timed>(throws_once_timed(throwing_params{1})).items(n).on(s).rerunnable(),
             device_pointer(0x1000), device_pointer(0x2000), n);
  lf::launch(lf::kernel(b), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  lf::graph_tuning t;
  try {
    t = tune(g, e, 0xb3);
  } catch (...) {
    FAIL() << "a policy's int escaped tune_graph()";
  }
  EXPECT_EQ(t.tuned, 1u) << t.to_string();
  EXPECT_EQ(t.left, 1u) << t.to_string();
  ASSERT_EQ(t.nodes.size(), 2u) << t.to_string();
  EXPECT_EQ(t.nodes[0].result, lf::graph_node_report::outcome::left);
  EXPECT_NE(t.nodes[0].why.find("not a std::exception"), std::string::npos) << t.nodes[0].why;
  EXPECT_EQ(exec_block(e, only_node(g, 0)), 256u) << "the captured plan";
  EXPECT_EQ(exec_block(e, only_node(g, 1)), 128u) << "tuned";
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// A graph node the program set to other parameters after the capture is left as it is and reported (it used
// to be dropped without a word); an executable graph's own changes cannot be read, and tune_graph() says so.
TEST_F(StubGraph, AGraphNodeChangedSinceTheCaptureIsLeftAndReported) {
  const CUfunction f = map_kernel("_Z7changedPKfPfi", 128);
  const int n = 1 << 20;
  const one_capture c = capture_one(f, n, stream_of(0xc0));
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_graph_node(c.node, &p), 1);
  const float* other_a = device_pointer(0x9000);
  float* other_b = device_pointer(0xa000);
  int other_n = 1024;
  void* other_args[] = {&other_a, &other_b, &other_n};
  p.kernelParams = other_args;
  p.gridDimX = (other_n + p.blockDimX - 1) / p.blockDimX;
  void* set = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2("cuGraphKernelNodeSetParams", &set, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(reinterpret_cast<decltype(&cuGraphKernelNodeSetParams)>(set)(c.node, &p), CUDA_SUCCESS);
  const lf::graph_tuning t = tune(c.graph, c.exec, 0xc1);
  EXPECT_EQ(t.tuned, 0u) << t.to_string();
  EXPECT_EQ(t.left, 1u) << t.to_string();
  ASSERT_EQ(t.nodes.size(), 1u) << t.to_string();
  EXPECT_NE(t.nodes[0].why.find("set to other parameters since it was captured"), std::string::npos)
      << t.nodes[0].why;
  CUDA_KERNEL_NODE_PARAMS now{};
  ASSERT_EQ(launchfit_stub_graph_node(c.node, &now), 1);
  EXPECT_EQ(now.gridDimX, p.gridDimX) << "the program's node was changed";
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

// Launches forgotten past the bound on remembered launches are counted in the report of their graph.
TEST_F(StubGraph, LaunchesForgottenPastTheBoundAreCountedInTheReport) {
  const CUfunction f = map_kernel("_Z9forgottenPKfPfi", 128);
  const CUstream s = stream_of(0xd0);
  const int n = 1 << 20;
  constexpr int bound = 4096;  // max_captured_launches
  launchfit_stub_begin_capture(s);
  for (int i = 0; i < bound + 100; ++i)
    lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  const lf::graph_tuning t = tune(g, e, 0xd1);
  EXPECT_EQ(t.tuned, static_cast<std::size_t>(bound)) << "every remembered node is set to the tuned plan";
  EXPECT_EQ(t.nodes.size(), static_cast<std::size_t>(bound));
  EXPECT_EQ(t.forgotten, 100u);
  EXPECT_NE(t.to_string().find("100 launches captured into this graph"), std::string::npos) << t.to_string().substr(0, 400);
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// A destroyed graph's forgotten launches are not another graph's: a graph made at its handle (drivers reuse
// them) with kernel nodes launchfit does not remember reported them as forgotten (the count was kept per
// handle and only clamped by the new graph's unremembered kernel nodes).
TEST_F(StubGraph, ForgottenLaunchesOfADestroyedGraphAreNotCountedForAGraphAtItsHandle) {
  launchfit_stub_reuse_graph_handles(1);
  struct restore {
    ~restore() { launchfit_stub_reuse_graph_handles(0); }
  } restored;
  const CUfunction f = map_kernel("_Z10forgottenbPKfPfi", 128);
  const CUstream s = stream_of(0xd8);
  const int n = 1 << 20;
  constexpr int bound = 4096;  // max_captured_launches
  launchfit_stub_begin_capture(s);
  for (int i = 0; i < bound + 100; ++i)
    lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  const CUgraph old = launchfit_stub_end_capture(s);
  std::array<CUgraphNode, 11> old_nodes{};
  ASSERT_GE(launchfit_stub_graph_nodes(old, old_nodes.data(), old_nodes.size()), old_nodes.size());
  // Another graph's launches push the rest of the old graph's out: launchfit remembers none of it now.
  launchfit_stub_begin_capture(s);
  for (int i = 0; i < bound; ++i)
    lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  const CUgraph pusher = launchfit_stub_end_capture(s);
  launchfit_stub_destroy_graph(old);  // never tuned: its forgotten launches stay noted under its handle

  // Another graph at the same handle and node handles: one launch launchfit remembers, and ten raw kernel nodes
  // it does not, of the forgotten launches' own kernel: five at another grid (a function alone matched them),
  // five at the forgotten launches' grid and block with other arguments.
  const CUfunction other = map_kernel("_Z6otherbPKfPfi", 128);
  const lf::plan& static_plan = lf::plan_for(lf::kernel(f), lf::max_occupancy().items(n));
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(other), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
  for (int i = 0; i < 10; ++i) {
    float* x = device_pointer(i < 5 ? 0x1000 : 0x3000);
    float* y = device_pointer(0x2000);
    int items = n;
    void* args[] = {&x, &y, &items};
    CUlaunchConfig cfg{};
    cfg.gridDimX = i < 5 ? 2048 : static_cast<unsigned>((n + static_plan.block_threads - 1) / static_plan.block_threads);
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = i < 5 ? 256 : static_cast<unsigned>(static_plan.block_threads);
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = i < 5 ? 0 : static_cast<unsigned>(static_plan.dynamic_smem_bytes);
    cfg.hStream = s;
    ASSERT_EQ(ld::driver().cuLaunchKernelEx(&cfg, f, args, nullptr), CUDA_SUCCESS);
  }
  const CUgraph g = launchfit_stub_end_capture(s);
  ASSERT_EQ(g, old) << "the stub did not reuse the destroyed graph's handle";
  std::array<CUgraphNode, 11> made{};
  ASSERT_EQ(launchfit_stub_graph_nodes(g, made.data(), made.size()), 11u);
  EXPECT_EQ(made, old_nodes) << "the stub did not reuse the destroyed graph's node handles";
  const CUgraphExec e = launchfit_stub_instantiate(g);
  const lf::graph_tuning t = tune(g, e, 0xd9);
  EXPECT_EQ(t.forgotten, 0u) << t.to_string().substr(0, 400);
  EXPECT_EQ(t.tuned, 1u) << t.to_string().substr(0, 400);
  EXPECT_EQ(t.to_string().find("forgotten"), std::string::npos) << t.to_string().substr(0, 400);
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
  launchfit_stub_destroy_graph(pusher);
}

// A graph captured again at the same graph and node handles (a driver's allocator hands them out again) with the
// same forgotten launches counts them once per node, not once per capture: the count grew by the forgotten
// launches at every capture.
TEST_F(StubGraph, ForgottenLaunchesCaptureAfterCaptureAtTheSameHandlesAreCountedOnce) {
  launchfit_stub_reuse_graph_handles(1);
  struct restore {
    ~restore() { launchfit_stub_reuse_graph_handles(0); }
  } restored;
  const CUfunction f = map_kernel("_Z10forgottencPKfPfi", 128);
  const CUstream s = stream_of(0xda);
  const int n = 1 << 20;
  constexpr int bound = 4096;  // max_captured_launches
  CUgraph first = nullptr;
  std::array<CUgraphNode, 8> first_nodes{};
  for (int round = 0; round < 3; ++round) {
    lf::cache().clear();  // the capture plans again, so every launch's tuning is deferred again
    launchfit_stub_begin_capture(s);
    for (int i = 0; i < bound + 100; ++i)
      lf::launch(lf::kernel(f), tuned_spec(n, s), device_pointer(0x1000), device_pointer(0x2000), n);
    const CUgraph g = launchfit_stub_end_capture(s);
    std::array<CUgraphNode, 8> nodes{};
    ASSERT_GE(launchfit_stub_graph_nodes(g, nodes.data(), nodes.size()), nodes.size());
    if (round == 0) {
      first = g;
      first_nodes = nodes;
    }
    ASSERT_EQ(g, first) << "the stub did not reuse the graph's handle";
    EXPECT_EQ(nodes, first_nodes) << "the stub did not reuse the graph's node handles";
    const CUgraphExec e = launchfit_stub_instantiate(g);
    const lf::graph_tuning t = tune(g, e, 0xdb);
    EXPECT_EQ(t.forgotten, 100u) << "round " << round << ": " << t.to_string().substr(0, 300);
    launchfit_stub_destroy_exec(e);
    launchfit_stub_destroy_graph(g);
  }
}

// A driver-API kernel without parameters is tuned in place like any other: its launch handed launchfit a null
// array of argument sizes (a zero-length std::array's), and tune_graph() left it as "the sizes of its arguments
// are unknown".
TEST_F(StubGraph, AKernelWithoutParametersIsTunedInPlace) {
  const CUfunction f = launchfit_stub_function("_Z8noparamsv", 16, 0, 1024, nullptr, 0);
  launchfit_stub_set_cost(f, 0.01, 128);
  const CUstream s = stream_of(0xdc);
  const int n = 1 << 20;
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(f), tuned_spec(n, s));
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  const lf::graph_tuning t = tune(g, e, 0xdd);
  ASSERT_EQ(t.nodes.size(), 1u) << t.to_string();
  EXPECT_EQ(t.left, 0u) << t.to_string();
  EXPECT_EQ(t.tuned + t.unchanged, 1u) << t.to_string();
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// Where the driver does not report a driver-API kernel's parameters (before CUDA 12.4), a launch's arguments are
// not checked against them: here five arguments, the first a 16-byte struct, for three parameters, the first a
// pointer. Its node is left and says why; its arguments are never compared with the node's parameters, which
// would read past them (two more than the node has, and sixteen bytes of an eight-byte one).
struct sixteen_bytes {
  double a = 1, b = 2;
};
TEST_F(StubGraph, ANodeOfAKernelWhoseParametersTheDriverDoesNotReportIsLeftUnread) {
  const CUfunction f = launchfit_stub_function("_Z8unlistedPKfPfi", 16, 0, 1024, map_params, 3);
  launchfit_stub_report_params(f, 0);
  const CUstream s = stream_of(0xde);
  const int n = 1 << 20;
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(f), tuned_spec(n, s), sixteen_bytes{}, device_pointer(0x2000), n, n, n);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  const lf::graph_tuning t = tune(g, e, 0xdf);
  ASSERT_EQ(t.nodes.size(), 1u) << t.to_string();
  EXPECT_EQ(t.left, 1u) << t.to_string();
  EXPECT_EQ(t.nodes[0].result, lf::graph_node_report::outcome::left) << t.to_string();
  EXPECT_NE(t.nodes[0].why.find("cuFuncGetParamInfo"), std::string::npos) << t.nodes[0].why;
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// A policy of the program's own may choose a block below a warp: the smem rule is asked for such blocks at the
// capture too, so tune_graph() may choose what the same policy chooses outside a capture.
struct below_warp_params {
  int x = 0;
  static constexpr std::array<const char*, 1> names{"x"};
};
class times_16_and_128 : public lf::param_policy<times_16_and_128, below_warp_params> {
 public:
  static constexpr const char* policy_name = "times_16_and_128";

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    lf::plan best = launchfit_test::full_residency_plan(q, 128, "128");
    if (!q.time_plan) return best;
    const lf::plan small = launchfit_test::full_residency_plan(q, 16, "16");
    const double at_small = q.time_plan(small), at_128 = q.time_plan(best);
    return at_small >= 0 && (at_128 < 0 || at_small < at_128) ? small : best;
  }
};
TEST_F(StubGraph, APolicyMayTuneABlockBelowAWarpInPlace) {
  const auto rule = [](int b) -> std::size_t { return static_cast<std::size_t>(b) * 16; };
  const int n = 1 << 16;
  const auto spec_on = [&](CUstream s) {
    return lf::spec<times_16_and_128>(times_16_and_128{}).items(n).on(s).rerunnable().smem_per_block(rule);
  };
  const CUfunction outside = map_kernel("_Z7small16PKfPfi", 16);
  EXPECT_EQ(lf::launch(lf::kernel(outside), spec_on(stream_of(0xe0)), device_pointer(0x1000),
                       device_pointer(0x2000), n)
                .block.x,
            16u);
  const CUfunction f = map_kernel("_Z8small16cPKfPfi", 16);
  const CUstream s = stream_of(0xe1);
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(f), spec_on(s), device_pointer(0x1000), device_pointer(0x2000), n);
  const CUgraph g = launchfit_stub_end_capture(s);
  const CUgraphExec e = launchfit_stub_instantiate(g);
  const lf::graph_tuning t = tune(g, e, 0xe2);
  EXPECT_EQ(exec_block(e, only_node(g)), 16u) << t.to_string();
  launchfit_stub_destroy_exec(e);
  launchfit_stub_destroy_graph(g);
}

// A node the program set to run another kernel since the capture is reported as left too.
TEST_F(StubGraph, AGraphNodeSetToAnotherKernelIsLeftAndReported) {
  const CUfunction f = map_kernel("_Z8swappedPKfPfi", 128);
  const CUfunction other = map_kernel("_Z8replacedPKfPfi", 128);
  const one_capture c = capture_one(f, 1 << 20, stream_of(0xe4));
  CUDA_KERNEL_NODE_PARAMS p{};
  ASSERT_EQ(launchfit_stub_graph_node(c.node, &p), 1);
  p.func = other;
  void* set = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2("cuGraphKernelNodeSetParams", &set, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(reinterpret_cast<decltype(&cuGraphKernelNodeSetParams)>(set)(c.node, &p), CUDA_SUCCESS);
  const lf::graph_tuning t = tune(c.graph, c.exec, 0xe5);
  ASSERT_EQ(t.nodes.size(), 1u) << t.to_string();
  EXPECT_EQ(t.nodes[0].result, lf::graph_node_report::outcome::left);
  EXPECT_NE(t.nodes[0].why.find("set to other parameters"), std::string::npos) << t.nodes[0].why;
  launchfit_stub_destroy_exec(c.exec);
  launchfit_stub_destroy_graph(c.graph);
}

// add_kernel_node() takes its arguments by value, as launch() does: an array argument is the pointer it decays
// to, for a driver-API kernel whose parameter is a pointer. (Taken by reference, the node got the array's
// contents as the pointer: 8 bytes of two floats have a pointer's size, so no size check caught it.)
TEST_F(StubGraph, ANodesArgumentsAreTakenByValueAsALaunchTakesThem) {
  static const std::size_t one_pointer[] = {sizeof(void*)};
  const CUfunction f = launchfit_stub_function("_Z8by_valuePf", 16, 0, 1024, one_pointer, 1);
  const CUstream s = stream_of(0x5a);
  launchfit_stub_begin_capture(s);
  const CUgraph into = launchfit_stub_end_capture(s);
  float pair[2] = {1.0f, 2.0f};
  const lf::kernel_node made =
      lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(into), {}, lf::kernel(f), lf::fixed(64).items(64).on(s), pair);
  ASSERT_NE(made.node, nullptr);
  CUDA_KERNEL_NODE_PARAMS params{};
  ASSERT_EQ(launchfit_stub_graph_node(reinterpret_cast<CUgraphNode>(made.node), &params), 1);
  ASSERT_NE(params.kernelParams, nullptr);
  void* passed = nullptr;
  std::memcpy(&passed, params.kernelParams[0], sizeof passed);
  EXPECT_EQ(passed, static_cast<void*>(pair)) << "the node's parameter is not the array's address";
  launchfit_stub_destroy_graph(into);
}

}  // namespace

// SPDX-License-Identifier: MIT
// CUDA graphs on a real GPU. A chain of 65 launches of five kernels at four sizes, captured at start-up with
// autotune (their first use is inside the capture, so they run static plans), then tuned in place by
// tune_graph(): every result exact after the update, the same executable graph (never instantiated again),
// its nodes set to exactly the plans the same chain gets when captured after tuning, and the one node whose
// spec does not allow re-running untouched and reported. Kernel nodes built from cooperative, cluster and
// PDL specs run exactly as the same launches in a stream. Captured cooperative, cluster and PDL launches tuned
// in place keep their attributes and programmatic edge, and run exactly. A spec that cannot be re-run stops
// asking the driver about captures after its launches outside them, and keeps being reported while captures
// launch it.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "test_doubles.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/plugin.hpp"
#include "plan_cache.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;

namespace {

// Five kernels, each re-runnable (its output depends on its input only), each over n floats. Block 0's
// first thread writes the block and grid it runs with to seen[2 * link]: what the executable graph launched.
__device__ void note_dims(unsigned* seen, int link) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    seen[2 * link] = blockDim.x;
    seen[2 * link + 1] = gridDim.x;
  }
}
__global__ void g_scale(const float* x, float* y, unsigned n, unsigned* seen, int link) {
  note_dims(seen, link);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
__global__ void g_offset(const float* x, float* y, unsigned n, unsigned* seen, int link) {
  note_dims(seen, link);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
__global__ void g_square_half(const float* x, float* y, unsigned n, unsigned* seen, int link) {
  note_dims(seen, link);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fmaf_rn(0.5f * x[i], x[i], -3.0f);  // one rounding, as the host computes it
}
__global__ void g_negate_stride(const float* x, float* y, unsigned n, unsigned* seen, int link) {
  note_dims(seen, link);
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = -x[i];
}
__global__ void g_mix(const float* x, float* y, unsigned n, unsigned* seen, int link) {
  note_dims(seen, link);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] - 0.25f * static_cast<float>(i % 7);
}
using kernel_fn = void (*)(const float*, float*, unsigned, unsigned*, int);
constexpr kernel_fn kernels[] = {g_scale, g_offset, g_square_half, g_negate_stride, g_mix};
float host_apply(int k, float x, unsigned i) {
  switch (k) {
    case 0: return 2.0f * x;
    case 1: return x + 1.0f;
    case 2: return std::fmaf(0.5f * x, x, -3.0f);  // the kernel's fused multiply-add, exactly
    case 3: return -x;
    default: return x - 0.25f * static_cast<float>(i % 7);
  }
}
// Not re-runnable by its spec: counts its runs (tuning it would count trials too).
__global__ void g_count(unsigned* runs) {
  if (blockIdx.x == 0 && threadIdx.x == 0) ++*runs;
}

constexpr unsigned sizes[] = {1u << 12, 1u << 15, 1u << 18, 1u << 20};
constexpr int chain_length = 64;

struct chain {
  // One buffer pair per launch: launch j reads in[j] (the chain's input for j = 0, else out[j - 1]).
  std::vector<float*> buffers;  // chain_length + 1 buffers of the largest size
  unsigned* runs = nullptr;
  unsigned* seen = nullptr;  // 2 * chain_length: each link's block and grid as it ran
  ~chain() {
    for (float* b : buffers) cudaFree(b);
    cudaFree(runs);
    cudaFree(seen);
  }
};
int kernel_of(int j) { return j % 5; }
unsigned size_of(int j) { return sizes[(j / 5) % 4]; }

lf::launched launch_link(const chain& c, int j, cudaStream_t s) {
  const unsigned n = size_of(j);
  return lf::launch(kernels[kernel_of(j)], lf::use("autotune(max_trials=16)").items(n).on(s).rerunnable(),
                    c.buffers[j], c.buffers[j + 1], n, c.seen, j);
}

// The chain as one capture: 64 autotuned links and, in the middle, one launch whose spec is not re-runnable.
cudaGraph_t capture_chain(const chain& c, cudaStream_t s, std::vector<lf::launched>* plans) {
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  for (int j = 0; j < chain_length; ++j) {
    const lf::launched l = launch_link(c, j, s);
    if (plans) plans->push_back(l);
    if (j == chain_length / 2) lf::launch(g_count, lf::use("autotune").items(1).on(s), c.runs);
  }
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  return g;
}

std::vector<float> input_values() {
  std::vector<float> v(sizes[3]);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 97) - 48) * 0.125f;
  return v;
}

// What the chain leaves in its last buffer, computed on the host per element.
std::vector<float> expected_output(const std::vector<float>& in) {
  std::vector<float> cur = in;
  std::vector<float> next(in.size(), 0.0f);
  for (int j = 0; j < chain_length; ++j) {
    const unsigned n = size_of(j);
    for (unsigned i = 0; i < n; ++i) next[i] = host_apply(kernel_of(j), cur[i], i);
    cur.swap(next);
  }
  return cur;
}

// Poisons every buffer, writes the input, replays `exec`, and compares the last link's n elements.
void replay_and_check(const chain& c, cudaGraphExec_t exec, cudaStream_t s, const std::vector<float>& in,
                      const std::vector<float>& want, const char* when) {
  for (float* b : c.buffers) ASSERT_EQ(cudaMemset(b, 0xff, sizes[3] * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.buffers[0], in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const unsigned n = size_of(chain_length - 1);
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), c.buffers[chain_length], n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0u) << when << ": " << wrong << " of " << n << " elements differ";
}

// The chain's kernel nodes by link (read from each node's last argument), with the launch configuration each
// runs; the counting node (one parameter) under -1.
struct node_config {
  void* func = nullptr;
  unsigned grid = 0, block = 0;
};
std::map<int, node_config> kernel_configs(cudaGraph_t g) {
  auto get_nodes = LF_DRIVER(cuGraphGetNodes);
  auto get_type = LF_DRIVER(cuGraphNodeGetType);
  auto get_params = LF_DRIVER(cuGraphKernelNodeGetParams);
  std::map<int, node_config> out;
  if (!get_nodes || !get_type || !get_params) return out;
  std::size_t n = 0;
  get_nodes(reinterpret_cast<CUgraph>(g), nullptr, &n);
  std::vector<CUgraphNode> nodes(n);
  get_nodes(reinterpret_cast<CUgraph>(g), nodes.data(), &n);
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t{};
    if (get_type(node, &t) != CUDA_SUCCESS || t != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS p{};
    if (get_params(node, &p) != CUDA_SUCCESS) continue;
    cudaFunction_t count_fn = nullptr;
    if (cudaGetFuncBySymbol(&count_fn, reinterpret_cast<const void*>(g_count)) != cudaSuccess) continue;
    int index = -1;  // the counting kernel has one parameter; a link's fifth is its index
    if (reinterpret_cast<CUfunction>(count_fn) != p.func) {
      if (!p.kernelParams || !p.kernelParams[4]) continue;
      index = *static_cast<const int*>(p.kernelParams[4]);
    }
    out[index] = {reinterpret_cast<void*>(p.func), p.gridDimX, p.blockDimX};
  }
  return out;
}

class GraphGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    std::string why;
    if (!launchfit_test::load_autotune(why)) GTEST_SKIP() << why;
  }
};

TEST_F(GraphGpu, ACapturedChainIsTunedInPlaceAndRunsExactlyAsTheChainCapturedAfterTuning) {
  chain c;
  c.buffers.resize(chain_length + 1);
  for (float*& b : c.buffers) ASSERT_EQ(cudaMalloc(&b, sizes[3] * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c.runs, sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMemset(c.runs, 0, sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c.seen, 2 * chain_length * sizeof(unsigned)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> in = input_values();
  const std::vector<float> want = expected_output(in);

  // First use inside the capture: static plans, and their lines say why.
  std::vector<lf::launched> captured;
  cudaGraph_t graph = capture_chain(c, s, &captured);
  ASSERT_NE(graph, nullptr);
  ASSERT_EQ(captured.size(), static_cast<std::size_t>(chain_length));
  EXPECT_NE(captured[0].plan().reason.find("captured into a CUDA graph"), std::string::npos)
      << captured[0].plan().reason;
  EXPECT_EQ(captured[0].plan().reason.find("mark the spec .rerunnable()"), std::string::npos)
      << "the capture, not the spec, kept this launch from tuning: " << captured[0].plan().reason;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  cudaGraphExec_t other = nullptr;  // another executable graph of the same graph, instantiated before tuning
  ASSERT_EQ(cudaGraphInstantiate(&other, graph, 0), cudaSuccess);
  replay_and_check(c, exec, s, in, want, "static plans");
  const std::map<int, node_config> before = kernel_configs(graph);
  ASSERT_EQ(before.size(), static_cast<std::size_t>(chain_length + 1));
  ASSERT_EQ(before.count(-1), 1u);

  cudaStream_t tuning = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&tuning, cudaStreamNonBlocking), cudaSuccess);
  const cudaGraphExec_t same = exec;
  unsigned runs_before = 0;
  ASSERT_EQ(cudaMemcpy(&runs_before, c.runs, sizeof runs_before, cudaMemcpyDeviceToHost), cudaSuccess);
  const lf::graph_tuning t = lf::tune_graph(graph, exec, tuning);
  std::printf("%s\n", t.to_string().substr(0, 2000).c_str());
  EXPECT_EQ(t.tuned, static_cast<std::size_t>(chain_length));
  EXPECT_EQ(t.left, 1u);
  EXPECT_EQ(t.nodes.size(), static_cast<std::size_t>(chain_length + 1));
  bool reported = false;
  for (const lf::graph_node_report& n : t.nodes) {
    if (n.result != lf::graph_node_report::outcome::left) continue;
    reported = n.kernel.find("g_count") != std::string::npos && n.why.find(".rerunnable()") != std::string::npos;
    EXPECT_EQ(n.before, n.after);
  }
  EXPECT_TRUE(reported) << t.to_string();
  unsigned runs_after = 0;
  ASSERT_EQ(cudaMemcpy(&runs_after, c.runs, sizeof runs_after, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(runs_after, runs_before) << "the node whose spec does not allow re-running was run by tuning";
  EXPECT_EQ(exec, same);

  // The same executable graph, exact, on the tuned plans: what each link ran with is what its tuned node
  // says (the graph's nodes were updated with the executable's), so the update reached the executable.
  replay_and_check(c, exec, s, in, want, "tuned in place");
  const std::map<int, node_config> after = kernel_configs(graph);
  ASSERT_EQ(after.size(), before.size());
  std::vector<unsigned> seen(2 * chain_length);
  ASSERT_EQ(cudaMemcpy(seen.data(), c.seen, seen.size() * sizeof(unsigned), cudaMemcpyDeviceToHost), cudaSuccess);
  int changed = 0;
  for (int j = 0; j < chain_length; ++j) {
    ASSERT_EQ(after.count(j), 1u) << "link " << j;
    changed += after.at(j).block != before.at(j).block;
    EXPECT_EQ(seen[2 * j], after.at(j).block) << "link " << j << ": the executable graph ran another block";
    EXPECT_EQ(seen[2 * j + 1], after.at(j).grid) << "link " << j << ": the executable graph ran another grid";
  }
  EXPECT_EQ(after.at(-1).block, before.at(-1).block);
  EXPECT_EQ(after.at(-1).grid, before.at(-1).grid);
  std::printf("tune_graph changed the block of %d of %d links\n", changed, chain_length);
  // Autotune's best block for these small maps is not max_occupancy's on every one of 20 kernel and size
  // pairs: an update that reached no node would be a graph left static.
  EXPECT_GT(changed, 0) << "no node's block changed: the update did not reach the graph";

  // Captured after tuning: the tuned plans directly, and every node as the tuned-in-place graph has it.
  std::vector<lf::launched> recaptured;
  cudaGraph_t again = capture_chain(c, s, &recaptured);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(recaptured[0].plan().reason.find("captured into a CUDA graph"), std::string::npos)
      << recaptured[0].plan().reason;
  const std::map<int, node_config> fresh = kernel_configs(again);
  ASSERT_EQ(fresh.size(), after.size());
  for (const auto& [link, cfg] : fresh) {
    ASSERT_EQ(after.count(link), 1u) << "link " << link;
    EXPECT_EQ(cfg.func, after.at(link).func) << "link " << link;
    EXPECT_EQ(cfg.block, after.at(link).block) << "link " << link;
    EXPECT_EQ(cfg.grid, after.at(link).grid) << "link " << link;
  }
  cudaGraphExec_t exec2 = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec2, again, 0), cudaSuccess);
  replay_and_check(c, exec2, s, in, want, "captured after tuning");

  // A second tune_graph has nothing left to time: every node unchanged, the same plans.
  const lf::graph_tuning t2 = lf::tune_graph(graph, exec, tuning);
  EXPECT_EQ(t2.tuned, 0u);
  EXPECT_EQ(t2.unchanged, static_cast<std::size_t>(chain_length));
  EXPECT_EQ(t2.left, 1u);
  for (std::size_t i = 0; i < t2.nodes.size(); ++i) EXPECT_EQ(t2.nodes[i].before, t2.nodes[i].after);

  // The other executable graph, instantiated before the tuning: set to the tuned plans by tune_graph(), and
  // exact on them.
  const lf::graph_tuning t3 = lf::tune_graph(graph, other, tuning);
  EXPECT_EQ(t3.unchanged, static_cast<std::size_t>(chain_length)) << t3.to_string().substr(0, 2000);
  EXPECT_EQ(t3.left, 1u);
  replay_and_check(c, other, s, in, want, "another executable graph of the tuned graph");
  ASSERT_EQ(cudaMemcpy(seen.data(), c.seen, seen.size() * sizeof(unsigned), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int j = 0; j < chain_length; ++j) {
    EXPECT_EQ(seen[2 * j], after.at(j).block) << "link " << j << ": the other executable graph ran another block";
    EXPECT_EQ(seen[2 * j + 1], after.at(j).grid) << "link " << j << ": the other executable graph ran another grid";
  }

  cudaGraphExecDestroy(other);
  cudaGraphExecDestroy(exec2);
  cudaGraphDestroy(again);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(tuning);
  cudaStreamDestroy(s);
}

// Its own kernel: counts its runs, like g_count.
__global__ void g_watched(unsigned* runs) {
  if (blockIdx.x == 0 && threadIdx.x == 0) ++*runs;
}

// One capture of one g_watched launch (a spec that does not allow re-running, under a policy that is not a
// built-in), instantiated, replayed once and handed to tune_graph(); answers what it left. The graphs live until
// the test ends (`kept`): a graph made at a destroyed one's handle, with its node at the same node handle and the
// same launch, is not told from it (launchfit knows a captured launch by those handles and what the node runs).
struct kept_graphs {
  std::vector<std::pair<cudaGraph_t, cudaGraphExec_t>> all;
  ~kept_graphs() {
    for (auto& [g, e] : all) {
      cudaGraphExecDestroy(e);
      cudaGraphDestroy(g);
    }
  }
};
std::size_t left_by_tuning_one_capture(unsigned* runs, cudaStream_t s, cudaStream_t tuning, kept_graphs& kept) {
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  lf::launch(g_watched, lf::use("autotune").items(1).on(s), runs);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  kept.all.emplace_back(g, exec);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  const lf::graph_tuning t = lf::tune_graph(g, exec, tuning);
  EXPECT_EQ(t.tuned, 0u);
  return t.left;
}

// A plan made inside a capture by a spec that cannot be re-run is watched: while captures keep launching it,
// each capture's node is reported; after capture_watch::launches launches in a row outside any capture, its
// launches stop asking the driver about their stream (a hit that pays nothing for graphs), and a later
// capture's node of it is neither remembered nor touched. The node runs as captured throughout.
TEST_F(GraphGpu, ASpecThatCannotBeRerunStopsAskingAboutCapturesAfterItsLaunchesOutsideThem) {
  unsigned* runs = nullptr;
  ASSERT_EQ(cudaMalloc(&runs, sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMemset(runs, 0, sizeof(unsigned)), cudaSuccess);
  cudaStream_t s = nullptr, tuning = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&tuning, cudaStreamNonBlocking), cudaSuccess);
  constexpr unsigned watch = lf::detail::capture_watch::launches;
  const auto outside = [&](unsigned times) {
    for (unsigned i = 0; i < times; ++i) lf::launch(g_watched, lf::use("autotune").items(1).on(s), runs);
  };

  kept_graphs kept;
  EXPECT_EQ(left_by_tuning_one_capture(runs, s, tuning, kept), 1u) << "planned inside the capture: reported";
  outside(watch - 1);
  EXPECT_EQ(left_by_tuning_one_capture(runs, s, tuning, kept), 1u) << "one launch short of the watch: reported";
  outside(watch);
  EXPECT_EQ(left_by_tuning_one_capture(runs, s, tuning, kept), 0u)
      << "after " << watch << " launches outside captures the launch still asked about its stream";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  unsigned ran = 0;
  ASSERT_EQ(cudaMemcpy(&ran, runs, sizeof ran, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(ran, 3 + (watch - 1) + watch) << "a run was added or lost: tuning ran a node it may not re-run";
  cudaStreamDestroy(tuning);
  cudaStreamDestroy(s);
  cudaFree(runs);
}

// Its own kernel, so no plan of another test is in memory or in the file.
__global__ void g_fresh(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 3.0f * x[i] + 1.0f;
}

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST_F(GraphGpu, APlanACaptureKeptFromTrialsIsNeverStoredAndTheFirstLaunchOutsideACaptureTunesIt) {
  const std::string file = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/graph-test-plans.json";
  std::remove(file.c_str());
  lf::set_cache_file(file);
  constexpr unsigned n = 1u << 16;
  float *x = nullptr, *y = nullptr;
  ASSERT_EQ(cudaMalloc(&x, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0, n * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const auto spec = lf::use("autotune(max_trials=12)").items(n).on(s).rerunnable();

  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  const lf::launched inside = lf::launch(g_fresh, spec, x, y, n);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_NE(inside.plan().reason.find("captured into a CUDA graph"), std::string::npos) << inside.plan().reason;
  EXPECT_THROW((void)lf::plan_for(g_fresh, spec), lf::error);  // the plan contract: not what launches will run
  ASSERT_TRUE(lf::flush_cache_file());
  EXPECT_EQ(read_text(file).find("g_fresh"), std::string::npos) << "the static plan a capture forced was stored";

  const lf::launched outside = lf::launch(g_fresh, spec, x, y, n);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(outside.plan().reason.find("captured into a CUDA graph"), std::string::npos) << outside.plan().reason;
  EXPECT_NE(outside.plan().reason.find("timed plan"), std::string::npos) << outside.plan().reason;
  EXPECT_EQ(&lf::plan_for(g_fresh, spec), &outside.plan());
  ASSERT_TRUE(lf::flush_cache_file());
  EXPECT_NE(read_text(file).find("g_fresh"), std::string::npos) << "the tuned plan was not stored";
  // A later launch is a hit on the tuned plan: the same plan, no new line.
  EXPECT_EQ(&lf::launch(g_fresh, spec, x, y, n).plan(), &outside.plan());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(x);
  cudaFree(y);
  lf::close_cache_file();
}

// ---- nodes from specs ----------------------------------------------------------------------------------

// The sum of in[0, n) into *out: partial sums per block, a grid-wide barrier, then block 0 adds them up.
__device__ void grid_sum(cg::grid_group& grid, const int* in, int* partial, int* out, unsigned n) {
  int sum = 0;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) sum += in[i];
  atomicAdd(&partial[blockIdx.x], sum);
  grid.sync();
  if (grid.thread_rank() == 0) {
    int total = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
    *out = total;
  }
}
__global__ void coop_sum(const int* in, int* partial, int* out, unsigned n) {
  cg::grid_group grid = cg::this_grid();
  grid_sum(grid, in, partial, out, n);
}

// The edges of `g` as (from, to, data).
struct graph_edges {
  std::vector<CUgraphNode> from, to;
  std::vector<CUgraphEdgeData> data;
};
graph_edges edges_of(cudaGraph_t g) {
  graph_edges e;
  auto get_edges = LF_DRIVER(cuGraphGetEdges);
  EXPECT_NE(get_edges, nullptr);
  if (!get_edges) return e;
  std::size_t ne = 0;
  get_edges(reinterpret_cast<CUgraph>(g), nullptr, nullptr, nullptr, &ne);
  e.from.resize(ne);
  e.to.resize(ne);
  e.data.resize(ne);
  get_edges(reinterpret_cast<CUgraph>(g), e.from.data(), e.to.data(), e.data.data(), &ne);
  return e;
}
bool is_programmatic(const CUgraphEdgeData& d) {
  return d.type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && d.from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
}

__global__ void cluster_ranks(unsigned* out) {
  const unsigned rank = cg::this_cluster().block_rank();
  const unsigned size = cg::this_cluster().num_blocks();
  if (threadIdx.x == 0) out[blockIdx.x] = rank * 100 + size;
}

__global__ void pdl_produce(int* a, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = static_cast<int>(i) + 1;
}
__global__ void pdl_consume(const int* a, int* b, unsigned n) {
  cudaGridDependencySynchronize();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = 2 * a[i];
}

template <class T>
std::vector<T> read_back(const T* d, std::size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(GraphNodesGpu, CooperativeClusterAndPdlNodesRunExactlyAsTheSameLaunchesInAStream) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  constexpr unsigned n = 1u << 20;
  int *in = nullptr, *partial = nullptr, *sum = nullptr, *a = nullptr, *b = nullptr;
  unsigned* ranks = nullptr;
  ASSERT_EQ(cudaMalloc(&in, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&partial, 4096 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&sum, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ranks, 4096 * sizeof(unsigned)), cudaSuccess);
  std::vector<int> ones(n);
  for (unsigned i = 0; i < n; ++i) ones[i] = static_cast<int>(i % 13) - 6;
  long long want_sum = 0;
  for (int v : ones) want_sum += v;
  ASSERT_EQ(cudaMemcpy(in, ones.data(), n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  const auto coop = lf::cooperative().grid_stride(n);
  const auto clustered = lf::max_occupancy().items(64 * 256).cluster({2, 1, 1});
  const auto consumer = lf::max_occupancy().items(n).pdl();
  const auto producer = lf::max_occupancy().items(n);

  auto reset = [&] {
    ASSERT_EQ(cudaMemset(partial, 0, 4096 * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(sum, 0xff, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(a, 0, n * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(b, 0xff, n * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(ranks, 0xff, 4096 * sizeof(unsigned)), cudaSuccess);
  };

  // In a stream.
  reset();
  const lf::launched lc = lf::launch(coop_sum, coop, in, partial, sum, n);
  const lf::launched lr = lf::launch(cluster_ranks, clustered, ranks);
  lf::launch(pdl_produce, producer, a, n);
  lf::launch(pdl_consume, consumer, a, b, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> stream_sum = read_back(sum, 1);
  const std::vector<unsigned> stream_ranks = read_back(ranks, lr.grid.x);
  const std::vector<int> stream_b = read_back(b, n);
  EXPECT_EQ(stream_sum[0], static_cast<int>(want_sum));

  // As kernel nodes of one graph.
  reset();
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaGraphCreate(&g, 0), cudaSuccess);
  const lf::kernel_node nc = lf::add_kernel_node(g, {}, coop_sum, coop, in, partial, sum, n);
  const lf::kernel_node nr = lf::add_kernel_node(g, {nc.node}, cluster_ranks, clustered, ranks);
  const lf::kernel_node np = lf::add_kernel_node(g, {nr.node}, pdl_produce, producer, a, n);
  const lf::kernel_node nq = lf::add_kernel_node(g, {np.node}, pdl_consume, consumer, a, b, n);
  ASSERT_NE(nq.node, nullptr);
  EXPECT_EQ(nc.what.grid.x, lc.grid.x);
  EXPECT_EQ(nc.what.block.x, lc.block.x);
  EXPECT_TRUE(nc.what.plan().options.cooperative);
  EXPECT_EQ(nr.what.plan().options.cluster.x, 2u);
  EXPECT_TRUE(nq.what.plan().options.programmatic);
  // The consumer's edge is programmatic, as a captured .pdl() launch's is.
  {
    const graph_edges e = edges_of(g);
    bool programmatic = false;
    for (std::size_t i = 0; i < e.data.size(); ++i)
      programmatic |= e.to[i] == reinterpret_cast<CUgraphNode>(nq.node) &&
                      e.from[i] == reinterpret_cast<CUgraphNode>(np.node) && is_programmatic(e.data[i]);
    EXPECT_TRUE(programmatic);
  }
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(read_back(sum, 1), stream_sum);
  EXPECT_EQ(read_back(ranks, lr.grid.x), stream_ranks) << "cluster attribute not on the node";
  EXPECT_EQ(read_back(b, n), stream_b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  for (void* p : {static_cast<void*>(in), static_cast<void*>(partial), static_cast<void*>(sum),
                  static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(ranks)})
    cudaFree(p);
}

// ---- captured cooperative, cluster and PDL launches, tuned in place ----------------------------------------

// A tuning policy of the program's own whose choice does not depend on timings: 256 threads where it may not
// time (inside a capture), 128 where it may (it times that plan first, as a tuning policy does). So
// tune_graph() changes every node's block, whatever the GPU's timings.
struct retimed_params {
  int static_block = 256, timed_block = 128;
  static constexpr std::array<const char*, 2> names{"static_block", "timed_block"};
};
class static_256_timed_128 final : public lf::param_policy<static_256_timed_128, retimed_params> {
 public:
  static constexpr const char* policy_name = "static_256_timed_128";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    const auto plan_of = [&q](unsigned block, const char* why) {
      lf::plan p;
      p.block = lf::dims{block, 1, 1};
      p.block_threads = static_cast<int>(block);
      p.blocks_per_sm = q.active_blocks_for(static_cast<int>(block));
      p.reason = why;
      return p;
    };
    const auto static_block = static_cast<unsigned>(params_.static_block);
    if (!q.time_plan) return plan_of(static_block, "static: no trials");
    const lf::plan timed = plan_of(static_cast<unsigned>(params_.timed_block), "timed");
    return q.time_plan(timed) >= 0 ? timed : plan_of(static_block, "the trial failed");
  }
};

// coop_sum, with the block it ran and whether its grid was launched cooperatively (without the attribute
// this_grid() is not valid: the kernel says so and returns instead of waiting at grid.sync()).
__global__ void coop_sum_checked(const int* in, int* partial, int* out, unsigned* seen, unsigned n) {
  cg::grid_group grid = cg::this_grid();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    seen[0] = blockDim.x;
    seen[1] = grid.is_valid() ? 1u : 0u;
  }
  if (grid.is_valid()) grid_sum(grid, in, partial, out, n);
}
__global__ void cluster_ranks_seen(unsigned* out, unsigned* seen) {
  const unsigned rank = cg::this_cluster().block_rank();
  const unsigned size = cg::this_cluster().num_blocks();
  if (threadIdx.x == 0) out[blockIdx.x] = rank * 100 + size;
  if (blockIdx.x == 0 && threadIdx.x == 0) seen[0] = blockDim.x;
}
__global__ void pdl_consume_seen(const int* a, int* b, unsigned n, unsigned* seen) {
  cudaGridDependencySynchronize();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = 2 * a[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) seen[0] = blockDim.x;
}

TEST(GraphNodesGpu, CapturedCooperativeClusterAndPdlLaunchesKeepTheirAttributesWhenTunedInPlace) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  lf::cache().clear();
  constexpr unsigned n = 1u << 20;
  constexpr unsigned cluster_items = 64 * 256;
  int *in = nullptr, *partial = nullptr, *sum = nullptr, *a = nullptr, *b = nullptr;
  unsigned *ranks = nullptr, *seen = nullptr;
  ASSERT_EQ(cudaMalloc(&in, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&partial, 8192 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&sum, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ranks, 4096 * sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&seen, 8 * sizeof(unsigned)), cudaSuccess);
  std::vector<int> values(n);
  long long want_sum = 0;
  for (unsigned i = 0; i < n; ++i) want_sum += values[i] = static_cast<int>(i % 13) - 6;
  ASSERT_EQ(cudaMemcpy(in, values.data(), n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<int> want_b(n);
  for (unsigned i = 0; i < n; ++i) want_b[i] = 2 * (static_cast<int>(i) + 1);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const auto tuned = [s] { return lf::spec<static_256_timed_128>(static_256_timed_128{}).on(s).rerunnable(); };
  const auto coop = tuned().cooperative().grid_stride(n);
  const auto clustered = tuned().items(cluster_items).cluster({2, 1, 1});
  const auto producer = lf::max_occupancy().items(n).on(s);
  const auto consumer = tuned().items(n).pdl();

  // Captured at start-up: the first use of each spec is inside the capture, so each runs its static plan.
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const lf::launched lc = lf::launch(coop_sum_checked, coop, in, partial, sum, seen, n);
  const lf::launched lr = lf::launch(cluster_ranks_seen, clustered, ranks, seen + 2);
  lf::launch(pdl_produce, producer, a, n);
  const lf::launched lq = lf::launch(pdl_consume_seen, consumer, a, b, n, seen + 4);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(lc.block.x, 256u);
  EXPECT_EQ(lr.block.x, 256u);
  EXPECT_EQ(lq.block.x, 256u);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  const auto replay_and_check = [&](unsigned block, const char* when) {
    ASSERT_EQ(cudaMemset(partial, 0, 8192 * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(sum, 0xff, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(a, 0, n * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(b, 0xff, n * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(ranks, 0xff, 4096 * sizeof(unsigned)), cudaSuccess);
    ASSERT_EQ(cudaMemset(seen, 0xff, 8 * sizeof(unsigned)), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<unsigned> saw = read_back(seen, 8);
    EXPECT_EQ(saw[0], block) << when << ": the cooperative node's block";
    EXPECT_EQ(saw[1], 1u) << when << ": the cooperative node was not launched cooperatively";
    EXPECT_EQ(saw[2], block) << when << ": the cluster node's block";
    EXPECT_EQ(saw[4], block) << when << ": the PDL node's block";
    EXPECT_EQ(read_back(sum, 1)[0], static_cast<int>(want_sum)) << when;
    const unsigned grid = cluster_items / block;
    const std::vector<unsigned> r = read_back(ranks, grid);
    for (unsigned i = 0; i < grid; ++i) ASSERT_EQ(r[i], (i % 2) * 100 + 2) << when << ": block " << i;
    EXPECT_EQ(read_back(b, n), want_b) << when;
  };
  replay_and_check(256, "before tuning");

  const lf::graph_tuning t = lf::tune_graph(g, exec, s);
  EXPECT_EQ(t.tuned, 3u) << t.to_string();
  replay_and_check(128, "tuned in place");
  // The graph's own nodes: the cooperative and cluster attributes and the programmatic edge are still there.
  std::size_t count = 0;
  ASSERT_EQ(cudaGraphGetNodes(g, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  ASSERT_EQ(cudaGraphGetNodes(g, nodes.data(), &count), cudaSuccess);
  int cooperative_nodes = 0, cluster_nodes = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    ASSERT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaLaunchAttributeValue v{};
    if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeCooperative, &v) == cudaSuccess && v.cooperative)
      ++cooperative_nodes;
    v = cudaLaunchAttributeValue{};
    if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeClusterDimension, &v) == cudaSuccess &&
        v.clusterDim.x == 2)
      ++cluster_nodes;
  }
  EXPECT_EQ(cooperative_nodes, 1);
  EXPECT_EQ(cluster_nodes, 1);
  int programmatic = 0;
  for (const CUgraphEdgeData& d : edges_of(g).data) programmatic += is_programmatic(d);
  EXPECT_EQ(programmatic, 1) << "the PDL launch's programmatic edge";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  for (void* p : {static_cast<void*>(in), static_cast<void*>(partial), static_cast<void*>(sum),
                  static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(ranks), static_cast<void*>(seen)})
    cudaFree(p);
}

}  // namespace

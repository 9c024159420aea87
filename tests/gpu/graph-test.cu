// SPDX-License-Identifier: MIT
// CUDA graphs on a real GPU. A chain of 65 launches of five kernels at four sizes, captured at start-up with
// autotune (their first use is inside the capture, so they run static plans), then tuned in place by
// tune_graph(): every result exact after the update, the same executable graph (never instantiated again),
// its nodes set to exactly the plans the same chain gets when captured after tuning, and the one node whose
// spec does not allow re-running untouched and reported. Kernel nodes built from cooperative, cluster and
// PDL specs run exactly as the same launches in a stream.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "test_doubles.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;

namespace {

// Five kernels, each re-runnable (its output depends on its input only), each over n floats.
__global__ void g_scale(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
__global__ void g_offset(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
__global__ void g_square_half(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.5f * x[i] * x[i] - 3.0f;
}
__global__ void g_negate_stride(const float* x, float* y, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = -x[i];
}
__global__ void g_mix(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] - 0.25f * static_cast<float>(i % 7);
}
using kernel_fn = void (*)(const float*, float*, unsigned);
constexpr kernel_fn kernels[] = {g_scale, g_offset, g_square_half, g_negate_stride, g_mix};
float host_apply(int k, float x, unsigned i) {
  switch (k) {
    case 0: return 2.0f * x;
    case 1: return x + 1.0f;
    case 2: return 0.5f * x * x - 3.0f;
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
  ~chain() {
    for (float* b : buffers) cudaFree(b);
    cudaFree(runs);
  }
};
int kernel_of(int j) { return j % 5; }
unsigned size_of(int j) { return sizes[(j / 5) % 4]; }

lf::launched launch_link(const chain& c, int j, cudaStream_t s) {
  const unsigned n = size_of(j);
  return lf::launch(kernels[kernel_of(j)], lf::use("autotune(max_trials=16)").items(n).on(s).rerunnable(),
                    c.buffers[j], c.buffers[j + 1], n);
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

// The kernel nodes of a graph in their order, with the launch configuration each runs.
struct node_config {
  void* func;
  unsigned grid, block;
};
std::vector<node_config> kernel_configs(cudaGraph_t g) {
  auto get_nodes = LF_DRIVER(cuGraphGetNodes);
  auto get_type = LF_DRIVER(cuGraphNodeGetType);
  auto get_params = LF_DRIVER(cuGraphKernelNodeGetParams);
  std::vector<node_config> out;
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
    out.push_back({reinterpret_cast<void*>(p.func), p.gridDimX, p.blockDimX});
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
  replay_and_check(c, exec, s, in, want, "static plans");
  const std::vector<node_config> before = kernel_configs(graph);
  ASSERT_EQ(before.size(), static_cast<std::size_t>(chain_length + 1));

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

  // The same executable graph, exact, on the tuned plans.
  replay_and_check(c, exec, s, in, want, "tuned in place");
  const std::vector<node_config> after = kernel_configs(graph);
  ASSERT_EQ(after.size(), before.size());
  int changed = 0;
  for (std::size_t i = 0; i < after.size(); ++i) changed += after[i].block != before[i].block;
  std::printf("tune_graph changed the block of %d of %zu nodes\n", changed, after.size());

  // Captured after tuning: the tuned plans directly, and every node as the tuned-in-place graph has it.
  std::vector<lf::launched> recaptured;
  cudaGraph_t again = capture_chain(c, s, &recaptured);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(recaptured[0].plan().reason.find("captured into a CUDA graph"), std::string::npos)
      << recaptured[0].plan().reason;
  const std::vector<node_config> fresh = kernel_configs(again);
  ASSERT_EQ(fresh.size(), after.size());
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    EXPECT_EQ(fresh[i].func, after[i].func) << "node " << i;
    EXPECT_EQ(fresh[i].block, after[i].block) << "node " << i;
    EXPECT_EQ(fresh[i].grid, after[i].grid) << "node " << i;
  }
  cudaGraphExec_t exec2 = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec2, again, 0), cudaSuccess);
  replay_and_check(c, exec2, s, in, want, "captured after tuning");

  // A second tune_graph has nothing left to time: the same plans.
  const lf::graph_tuning t2 = lf::tune_graph(graph, exec, tuning);
  EXPECT_EQ(t2.tuned, static_cast<std::size_t>(chain_length));
  for (std::size_t i = 0; i < t2.nodes.size(); ++i) EXPECT_EQ(t2.nodes[i].before, t2.nodes[i].after);

  cudaGraphExecDestroy(exec2);
  cudaGraphDestroy(again);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(tuning);
  cudaStreamDestroy(s);
}

// ---- nodes from specs ----------------------------------------------------------------------------------

__global__ void coop_sum(const int* in, int* partial, int* out, unsigned n) {
  cg::grid_group grid = cg::this_grid();
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
  EXPECT_TRUE(nc.what.plan().cooperative);
  EXPECT_EQ(nr.what.plan().cluster.x, 2u);
  EXPECT_TRUE(nq.what.plan().programmatic);
  // The consumer's edge is programmatic, as a captured .pdl() launch's is.
  auto get_edges = LF_DRIVER(cuGraphGetEdges);
  if (get_edges) {
    std::size_t ne = 0;
    get_edges(reinterpret_cast<CUgraph>(g), nullptr, nullptr, nullptr, &ne);
    std::vector<CUgraphNode> from(ne), to(ne);
    std::vector<CUgraphEdgeData> data(ne);
    get_edges(reinterpret_cast<CUgraph>(g), from.data(), to.data(), data.data(), &ne);
    bool programmatic = false;
    for (std::size_t i = 0; i < ne; ++i)
      programmatic |= to[i] == reinterpret_cast<CUgraphNode>(nq.node) &&
                      data[i].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
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

}  // namespace

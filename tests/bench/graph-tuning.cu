// SPDX-License-Identifier: MIT
// CUDA graphs on a GPU: a chain of 60 launches of five small kernels at four sizes, captured at start-up with
// autotune (first use inside the capture: static plans), replayed; tuned in place by tune_graph() (its wall
// time) and replayed again; then the same chain captured after tuning, replayed: the tuned-in-place graph
// against it. Where the tuned chain gains or loses: the chain with one size's links tuned and the rest static,
// and each distinct link alone (32 back-to-back launches in one graph, as its trials are timed), tuned over
// static; the same update made by hand with the CUDA runtime, against the chain captured after tuning; and
// both chains captured from plain <<<>>> launches of the same blocks and grids.
// And the per-node cost of a graph of kernel nodes built by add_kernel_node() against the same
// nodes built by cudaGraphAddKernelNode. Every replay's result is checked against the host.
//   graph-tuning [--json PATH] [--autotune-plugin PATH] [--replays N] [--device N]

#include <launchfit/graph.hpp>
#include <launchfit/launch.hpp>
#include <launchfit/plugin.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.cuh"

namespace lf = launchfit;

namespace {

__global__ void b_scale(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
__global__ void b_offset(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
__global__ void b_square(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fmaf_rn(0.5f * x[i], x[i], -3.0f);  // one rounding, as the host computes it
}
__global__ void b_negate(const float* x, float* y, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = -x[i];
}
__global__ void b_axpy(const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fmaf_rn(1.5f, x[i], 0.25f);
}
using kernel_fn = void (*)(const float*, float*, unsigned);
constexpr kernel_fn kernels[] = {b_scale, b_offset, b_square, b_negate, b_axpy};
constexpr const char* kernel_names[] = {"scale", "offset", "square", "negate", "axpy"};
float host_apply(int k, float x) {
  switch (k) {
    case 0: return 2.0f * x;
    case 1: return x + 1.0f;
    case 2: return std::fmaf(0.5f * x, x, -3.0f);  // the kernel's fused multiply-add, exactly
    case 3: return -x;
    default: return std::fmaf(1.5f, x, 0.25f);
  }
}
constexpr unsigned sizes[] = {1u << 14, 1u << 16, 1u << 18, 1u << 20};
constexpr int links = 60;
int kernel_of(int j) { return j % 5; }
unsigned size_of(int j) { return sizes[(j / 5) % 4]; }
// The grid link j launches with plan p (its items(n) work).
lf::dims grid_of(const lf::plan& p, int j) { return lf::grid_for(p, lf::max_occupancy().items(size_of(j)).work_shape()); }

__global__ void noop(int* p) {
  if (p && threadIdx.x == 1024) *p = 0;  // never true: keeps the parameter
}

struct chain {
  std::vector<bench::device_buffer<float>> buffers;
  chain() {
    for (int j = 0; j <= links; ++j) buffers.emplace_back(sizes[3]);
  }
};

// The chain captured with autotune; `plans` receives each link's plan (kept by launchfit for the process).
cudaGraph_t capture(chain& c, cudaStream_t s, std::vector<const lf::plan*>* plans = nullptr) {
  cudaGraph_t g = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int j = 0; j < links; ++j) {
    const unsigned n = size_of(j);
    const lf::launched l = lf::launch(kernels[kernel_of(j)], lf::use("autotune").items(n).on(s).rerunnable(),
                                      c.buffers[j].get(), c.buffers[j + 1].get(), n);
    if (plans) plans->push_back(&l.plan());
  }
  BENCH_CUDA(cudaStreamEndCapture(s, &g));
  return g;
}

// The chain captured with given plans launched verbatim (planned()): link j runs *plans[j], `copies` times.
cudaGraph_t capture_planned_graph(chain& c, cudaStream_t s, const std::vector<const lf::plan*>& plans,
                                  int first = 0, int count = links, int copies = 1) {
  cudaGraph_t g = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int j = first; j < first + count; ++j) {
    const unsigned n = size_of(j);
    for (int k = 0; k < copies; ++k)
      lf::launch(kernels[kernel_of(j)], lf::planned(*plans[j]).items(n).on(s), c.buffers[j].get(),
                 c.buffers[j + 1].get(), n);
  }
  BENCH_CUDA(cudaStreamEndCapture(s, &g));
  return g;
}
cudaGraphExec_t capture_planned(chain& c, cudaStream_t s, const std::vector<const lf::plan*>& plans,
                                int first = 0, int count = links, int copies = 1) {
  const cudaGraph_t g = capture_planned_graph(c, s, plans, first, count, copies);
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  BENCH_CUDA(cudaGraphDestroy(g));
  return exec;
}

// The chain captured from plain <<<grid, block>>> launches of the plans' blocks and grids: the CUDA baseline.
cudaGraphExec_t capture_raw(chain& c, cudaStream_t s, const std::vector<const lf::plan*>& plans) {
  cudaGraph_t g = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int j = 0; j < links; ++j) {
    const lf::plan& p = *plans[j];
    const lf::dims grid = grid_of(p, j);
    kernels[kernel_of(j)]<<<dim3(grid.x, grid.y, grid.z), dim3(p.block.x, p.block.y, p.block.z),
                            p.dynamic_smem_bytes, s>>>(c.buffers[j].get(), c.buffers[j + 1].get(), size_of(j));
  }
  BENCH_CUDA(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  BENCH_CUDA(cudaGraphDestroy(g));
  return exec;
}

// The chain captured with the static plans, instantiated, then each kernel node of the executable graph set to
// the tuned plan's block and grid by the CUDA runtime alone (cudaGraphExecKernelNodeSetParams): what an
// in-place update costs a replay without launchfit.
cudaGraphExec_t updated_by_hand(chain& c, cudaStream_t s, const std::vector<const lf::plan*>& static_plans,
                                const std::vector<const lf::plan*>& tuned_plans) {
  const cudaGraph_t g = capture_planned_graph(c, s, static_plans);
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  std::size_t count = 0;
  BENCH_CUDA(cudaGraphGetNodes(g, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  BENCH_CUDA(cudaGraphGetNodes(g, nodes.data(), &count));
  if (count != static_cast<std::size_t>(links)) throw bench::cuda_failure("the chain has another node count");
  // Captured in a line: the node reading buffer j is link j.
  for (cudaGraphNode_t node : nodes) {
    cudaKernelNodeParams p{};
    BENCH_CUDA(cudaGraphKernelNodeGetParams(node, &p));
    const float* in = *static_cast<const float* const*>(p.kernelParams[0]);
    int j = 0;
    while (j < links && c.buffers[j].get() != in) ++j;
    if (j == links) throw bench::cuda_failure("a node of the chain reads no buffer of it");
    const lf::plan& tuned = *tuned_plans[j];
    const lf::dims grid = grid_of(tuned, j);
    p.blockDim = dim3(tuned.block.x, tuned.block.y, tuned.block.z);
    p.gridDim = dim3(grid.x, grid.y, grid.z);
    p.sharedMemBytes = static_cast<unsigned>(tuned.dynamic_smem_bytes);
    BENCH_CUDA(cudaGraphExecKernelNodeSetParams(exec, node, &p));
  }
  BENCH_CUDA(cudaGraphDestroy(g));
  return exec;
}

// Median time of one replay (us): `reps` batches of `replays` back-to-back graph launches, event-timed.
double replay_us(cudaGraphExec_t exec, cudaStream_t s, int replays, int reps = 9) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int w = 0; w < 20; ++w) BENCH_CUDA(cudaGraphLaunch(exec, s));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(a, s));
    for (int i = 0; i < replays; ++i) BENCH_CUDA(cudaGraphLaunch(exec, s));
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / replays);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return bench::median(t);
}

// Replays once from a fresh input and compares the last link with the host: the number of wrong elements.
std::size_t check(chain& c, cudaGraphExec_t exec, cudaStream_t s) {
  std::vector<float> in(sizes[3]);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(static_cast<int>(i % 61) - 30) * 0.0625f;
  for (auto& b : c.buffers) BENCH_CUDA(cudaMemset(b.get(), 0xff, b.bytes()));
  BENCH_CUDA(cudaMemcpy(c.buffers[0].get(), in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaGraphLaunch(exec, s));
  BENCH_CUDA(cudaStreamSynchronize(s));
  // Each link writes its own n elements of a poisoned buffer: beyond them the next link reads the poison (a
  // NaN), as the host model does.
  std::vector<float> want = in;
  for (int j = 0; j < links; ++j) {
    std::vector<float> next(in.size(), std::numeric_limits<float>::quiet_NaN());
    for (unsigned i = 0; i < size_of(j); ++i) next[i] = host_apply(kernel_of(j), want[i]);
    want.swap(next);
  }
  const unsigned n = size_of(links - 1);
  std::vector<float> got(n);
  BENCH_CUDA(cudaMemcpy(got.data(), c.buffers[links].get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  std::size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += !(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
  return wrong;
}

int run(int argc, char** argv) {
  const bench::args a(argc, argv);
  const bench::device_info dev = bench::open_device(a.int_value("--device", 0));
  const std::string json_path = a.value("--json");
  const int replays = a.int_value("--replays", 200);
  std::string plugin = a.value("--autotune-plugin");
  if (plugin.empty()) plugin = "plugins/liblaunchfit-autotune.so";
  lf::load_plugin(plugin);
  std::printf("graph-tuning on %s\n", dev.describe().c_str());
  int failures = 0;
  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  chain c;

  // Captured first: static plans.
  std::vector<const lf::plan*> static_plans, tuned_plans;
  cudaGraph_t g = capture(c, s, &static_plans);
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  std::size_t wrong = check(c, exec, s);
  failures += wrong != 0;
  const double static_us = replay_us(exec, s, replays);

  const auto t0 = std::chrono::steady_clock::now();
  const lf::graph_tuning t = lf::tune_graph(g, exec, s);
  BENCH_CUDA(cudaStreamSynchronize(s));
  const double tune_ms = 1000.0 * bench::seconds_since(t0);
  wrong = check(c, exec, s);
  failures += wrong != 0;
  const double tuned_us = replay_us(exec, s, replays);

  // Captured after tuning: the tuned plans directly.
  cudaGraph_t g2 = capture(c, s, &tuned_plans);
  cudaGraphExec_t exec2 = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec2, g2, 0));
  failures += check(c, exec2, s) != 0;
  // The same, its graph holding a user object (as a graph whose launches launchfit remembers does): what the
  // object costs a replay.
  cudaGraph_t g3 = capture(c, s, nullptr);
  cudaUserObject_t object = nullptr;
  BENCH_CUDA(cudaUserObjectCreate(&object, nullptr, [](void*) {}, 1, cudaUserObjectNoDestructorSync));
  BENCH_CUDA(cudaGraphRetainUserObject(g3, object, 1, cudaGraphUserObjectMove));
  cudaGraphExec_t with_object = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&with_object, g3, 0));
  failures += check(c, with_object, s) != 0;
  // Interleaved, so that clock drift favours neither.
  // And the static plans again, launched verbatim (planned()): the exec they were captured in now runs the tuned
  // plans. Replays timed one after the other, around the tuning, drift with the GPU's clocks: every comparison
  // of plans is interleaved.
  const cudaGraphExec_t static_again = capture_planned(c, s, static_plans);
  failures += check(c, static_again, s) != 0;
  // And the same update made by hand, to tell the driver's cost of an updated executable graph from launchfit's.
  const cudaGraphExec_t by_hand = updated_by_hand(c, s, static_plans, tuned_plans);
  failures += check(c, by_hand, s) != 0;
  // And both chains from plain <<<>>> launches of the same blocks and grids.
  const cudaGraphExec_t raw_static = capture_raw(c, s, static_plans), raw_tuned = capture_raw(c, s, tuned_plans);
  failures += check(c, raw_static, s) != 0;
  failures += check(c, raw_tuned, s) != 0;
  // The tuned graph instantiated again: tune_graph() set the graph's own nodes too.
  cudaGraphExec_t reinstantiated = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&reinstantiated, g, 0));
  failures += check(c, reinstantiated, s) != 0;
  std::vector<double> in_place, recaptured, static_runs, by_hand_runs, raw_static_runs, raw_tuned_runs, again_runs,
      object_runs;
  // Each round starts at the next graph, so that no graph always replays first or after the same one.
  const std::pair<cudaGraphExec_t, std::vector<double>*> rows[] = {
      {exec, &in_place},          {exec2, &recaptured},           {static_again, &static_runs},
      {by_hand, &by_hand_runs},   {raw_static, &raw_static_runs}, {raw_tuned, &raw_tuned_runs},
      {reinstantiated, &again_runs}, {with_object, &object_runs}};
  constexpr int row_count = static_cast<int>(sizeof rows / sizeof rows[0]);
  for (int r = 0; r < 2 * row_count; ++r) {
    for (int i = 0; i < row_count; ++i) {
      const auto& [graph_exec, runs] = rows[(r + i) % row_count];
      runs->push_back(replay_us(graph_exec, s, replays, 3));
    }
  }
  const double in_place_us = bench::median(in_place), recaptured_us = bench::median(recaptured);
  const double static_interleaved_us = bench::median(static_runs), by_hand_us = bench::median(by_hand_runs);
  const double raw_static_us = bench::median(raw_static_runs), raw_tuned_us = bench::median(raw_tuned_runs);
  const double again_us = bench::median(again_runs), object_us = bench::median(object_runs);
  std::printf("chain of %d launches (5 kernels x 4 sizes, 2^14..2^20 floats), %d replays x 9, median per replay:\n",
              links, replays);
  std::printf("  static plans (first use inside the capture): %8.2f us (timed alone, before tuning)\n", static_us);
  std::printf("  tune_graph: %zu tuned, %zu unchanged, %zu left in %.1f ms (wall, trials included)\n", t.tuned,
              t.unchanged, t.left, tune_ms);
  std::printf("  tuned in place:                              %8.2f us (timed alone, after tuning)\n", tuned_us);
  std::printf("  tuned in place vs the static plans (interleaved): %.2f vs %.2f us = %.4f\n", in_place_us,
              static_interleaved_us, in_place_us / static_interleaved_us);
  std::printf("  in place vs captured after tuning (interleaved): %.2f vs %.2f us = %.4f\n", in_place_us,
              recaptured_us, in_place_us / recaptured_us);
  std::printf("  updated by hand (cudaGraphExecKernelNodeSetParams) vs captured after tuning: %.2f vs %.2f us = %.4f;"
              " in place vs by hand = %.4f\n",
              by_hand_us, recaptured_us, by_hand_us / recaptured_us, in_place_us / by_hand_us);
  std::printf("  plain <<<>>> chains of the same blocks and grids: static %.2f us, tuned %.2f us = %.4f; launchfit's"
              " static %.4f and recaptured %.4f of them\n",
              raw_static_us, raw_tuned_us, raw_tuned_us / raw_static_us, static_interleaved_us / raw_static_us,
              recaptured_us / raw_tuned_us);
  std::printf("  the tuned graph instantiated again: %.2f us = %.4f of captured after tuning, in place %.4f of it\n",
              again_us, again_us / recaptured_us, in_place_us / again_us);
  std::printf("  captured after tuning, its graph holding a user object: %.2f us = %.4f of the same without\n",
              object_us, object_us / recaptured_us);

  // Where the tuned chain gains or loses: the chain with one size's links tuned and the rest static, against
  // the chain all static (both captured with planned(), interleaved); and each of the 20 distinct links alone,
  // 32 back-to-back launches in one graph (as its trials were timed), tuned against static.
  std::vector<double> group_ratio(4), alone_ratio(20);
  {
    const cudaGraphExec_t all_static = capture_planned(c, s, static_plans);
    for (int grp = 0; grp < 4; ++grp) {
      std::vector<const lf::plan*> mixed = static_plans;
      for (int j = 0; j < links; ++j)
        if ((j / 5) % 4 == grp) mixed[j] = tuned_plans[j];
      const cudaGraphExec_t mix = capture_planned(c, s, mixed);
      std::vector<double> a, b;
      for (int r = 0; r < 5; ++r) {
        a.push_back(replay_us(mix, s, replays / 2, 3));
        b.push_back(replay_us(all_static, s, replays / 2, 3));
      }
      group_ratio[grp] = bench::median(a) / bench::median(b);
      BENCH_CUDA(cudaGraphExecDestroy(mix));
    }
    BENCH_CUDA(cudaGraphExecDestroy(all_static));
    for (int j = 0; j < 20; ++j) {
      const cudaGraphExec_t st = capture_planned(c, s, static_plans, j, 1, 32);
      const cudaGraphExec_t tu = capture_planned(c, s, tuned_plans, j, 1, 32);
      std::vector<double> a, b;
      for (int r = 0; r < 5; ++r) {
        a.push_back(replay_us(tu, s, 20, 3));
        b.push_back(replay_us(st, s, 20, 3));
      }
      alone_ratio[j] = bench::median(a) / bench::median(b);
      BENCH_CUDA(cudaGraphExecDestroy(st));
      BENCH_CUDA(cudaGraphExecDestroy(tu));
    }
  }
  std::printf("  the chain with one size's links tuned, the rest static, over all static:");
  for (int grp = 0; grp < 4; ++grp) std::printf(" 2^%d %.3f", 14 + 2 * grp, group_ratio[grp]);
  std::printf("\n  each link alone (32 back-to-back launches in a graph), tuned over static:\n");
  for (int j = 0; j < 20; ++j) {
    std::printf("    2^%d %-8s block %4u -> %4u: %.3f\n", 14 + 2 * (j / 5), kernel_names[kernel_of(j)],
                static_plans[j]->block.x, tuned_plans[j]->block.x, alone_ratio[j]);
  }

  // Per-node cost: 1,000 one-block nodes in a line, built by launchfit and by hand.
  constexpr int nodes = 1000;
  const auto spec = lf::fixed(64).items(64);
  cudaGraph_t built = nullptr, raw = nullptr;
  BENCH_CUDA(cudaGraphCreate(&built, 0));
  BENCH_CUDA(cudaGraphCreate(&raw, 0));
  int* nothing = nullptr;
  const auto b0 = std::chrono::steady_clock::now();
  cudaGraphNode_t prev = nullptr;
  lf::launched shape{};
  for (int i = 0; i < nodes; ++i) {
    const lf::kernel_node k = prev ? lf::add_kernel_node(built, {prev}, noop, spec, nothing)
                                   : lf::add_kernel_node(built, {}, noop, spec, nothing);
    prev = k.node;
    shape = k.what;
  }
  const double build_lf_us = 1e6 * bench::seconds_since(b0) / nodes;
  const auto b1 = std::chrono::steady_clock::now();
  prev = nullptr;
  for (int i = 0; i < nodes; ++i) {
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(noop);
    p.gridDim = dim3(shape.grid.x, shape.grid.y, shape.grid.z);
    p.blockDim = dim3(shape.block.x, shape.block.y, shape.block.z);
    void* args[] = {&nothing};
    p.kernelParams = args;
    cudaGraphNode_t n = nullptr;
    BENCH_CUDA(cudaGraphAddKernelNode(&n, raw, prev ? &prev : nullptr, prev ? 1 : 0, &p));
    prev = n;
  }
  const double build_raw_us = 1e6 * bench::seconds_since(b1) / nodes;
  cudaGraphExec_t eb = nullptr, er = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&eb, built, 0));
  BENCH_CUDA(cudaGraphInstantiate(&er, raw, 0));
  std::vector<double> node_lf, node_raw;
  for (int r = 0; r < 5; ++r) {
    node_lf.push_back(replay_us(eb, s, 20, 3) / nodes);
    node_raw.push_back(replay_us(er, s, 20, 3) / nodes);
  }
  const double per_node_lf = bench::median(node_lf), per_node_raw = bench::median(node_raw);
  std::printf("graph of %d one-block kernel nodes in a line (block %u): per node %.3f us (launchfit-built) vs "
              "%.3f us (cudaGraphAddKernelNode) = %.3f; building %.2f vs %.2f us per node\n",
              nodes, shape.block.x, per_node_lf, per_node_raw, per_node_lf / per_node_raw, build_lf_us,
              build_raw_us);

  if (!json_path.empty()) {
    std::ostringstream js;
    js << "{\n\"benchmark\":\"graph-tuning\",\n\"device\":" << dev.json() << ",\n\"links\":" << links
       << ",\"replays\":" << replays << ",\n\"static_us\":" << bench::json_number(static_us)
       << ",\"tune_graph_ms\":" << bench::json_number(tune_ms) << ",\"tuned\":" << t.tuned
       << ",\"unchanged\":" << t.unchanged << ",\"left\":" << t.left
       << ",\n\"tuned_us\":" << bench::json_number(tuned_us)
       << ",\"in_place_us\":" << bench::json_number(in_place_us)
       << ",\"recaptured_us\":" << bench::json_number(recaptured_us)
       << ",\"in_place_over_recaptured\":" << bench::json_number(in_place_us / recaptured_us)
       << ",\"static_interleaved_us\":" << bench::json_number(static_interleaved_us)
       << ",\"in_place_over_static_interleaved\":" << bench::json_number(in_place_us / static_interleaved_us)
       << ",\"by_hand_us\":" << bench::json_number(by_hand_us)
       << ",\"reinstantiated_us\":" << bench::json_number(again_us)
       << ",\"recaptured_with_user_object_us\":" << bench::json_number(object_us)
       << ",\"raw_static_us\":" << bench::json_number(raw_static_us)
       << ",\"raw_tuned_us\":" << bench::json_number(raw_tuned_us)
       << ",\"by_hand_over_recaptured\":" << bench::json_number(by_hand_us / recaptured_us)
       << ",\n\"nodes\":" << nodes << ",\"per_node_us_launchfit\":" << bench::json_number(per_node_lf)
       << ",\"per_node_us_raw\":" << bench::json_number(per_node_raw)
       << ",\"build_us_per_node_launchfit\":" << bench::json_number(build_lf_us)
       << ",\"build_us_per_node_raw\":" << bench::json_number(build_raw_us)
       << ",\n\"group_tuned_over_static\":[" << bench::json_number(group_ratio[0]) << ","
       << bench::json_number(group_ratio[1]) << "," << bench::json_number(group_ratio[2]) << ","
       << bench::json_number(group_ratio[3]) << "],\n\"alone_tuned_over_static\":[";
    for (int j = 0; j < 20; ++j) {
      js << (j ? "," : "") << "{\"size\":" << size_of(j) << ",\"kernel\":" << bench::json_string(kernel_names[kernel_of(j)])
         << ",\"static_block\":" << static_plans[j]->block.x << ",\"tuned_block\":" << tuned_plans[j]->block.x
         << ",\"ratio\":" << bench::json_number(alone_ratio[j]) << "}";
    }
    js << "]"
       << ",\n\"report\":" << bench::json_string(t.to_string()) << ",\n\"failures\":" << failures << "\n}\n";
    bench::write_file(json_path, js.str());
    std::printf("wrote %s\n", json_path.c_str());
  }
  std::printf("%s\n", bench::verification_summary(failures, "all replays exact").c_str());
  cudaGraphExecDestroy(eb);
  cudaGraphExecDestroy(er);
  cudaGraphDestroy(built);
  cudaGraphDestroy(raw);
  cudaGraphExecDestroy(raw_tuned);
  cudaGraphExecDestroy(raw_static);
  cudaGraphExecDestroy(by_hand);
  cudaGraphExecDestroy(reinstantiated);
  cudaGraphExecDestroy(with_object);
  cudaGraphDestroy(g3);
  cudaGraphExecDestroy(static_again);
  cudaGraphExecDestroy(exec2);
  cudaGraphDestroy(g2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("graph-tuning", run, argc, argv); }

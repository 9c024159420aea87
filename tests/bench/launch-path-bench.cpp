// SPDX-License-Identifier: MIT
// launchfit's own host cost per launch, without a GPU: launches of a driver-API kernel through the stub driver
// (tests/stub-driver, an H200 whose every entry point answers at once), so what is timed is launchfit's code
// and the driver calls it makes, each at the stub's cost. Beside it, the stub's cuLaunchKernelEx called
// directly with the same configuration: the difference is launchfit's own work on the hit path. The first
// launch of a fresh kernel (a miss: kernel resolution, attribute and occupancy queries, the policy, the plan's
// key, its log record handed to the logging thread) at the default log level; counters give the driver calls
// each kind of launch makes, the number a real driver multiplies by its own cost per call.
//
//   launch-path-bench [--benchmark_format=json] [--benchmark_min_time=0.2]

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/plugin.hpp"
#include "stub_driver.h"

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

namespace lf = launchfit;

// Every operator new of this thread, launchfit's included (it is one program): the first launch's count is
// taken around the launch alone, so the logging thread's work on its line is not in it.
thread_local long long news = 0;
void* operator new(std::size_t bytes) {
  ++news;
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// Destroys a graph a benchmark built (up to millions of nodes) and hands its memory back to the allocator's
// free lists now: glibc merges freed small blocks only on a later large request, which the next benchmark's
// timed loop would pay (a captured launch timed at 5 ms instead of 1 us after a graph of a million nodes).
void destroy_built_graph(CUgraph graph) {
  launchfit_stub_destroy_graph(graph);
  malloc_trim(0);
}

const std::size_t params[] = {sizeof(float), sizeof(void*), sizeof(void*), sizeof(int)};
float* const x = reinterpret_cast<float*>(0x1000);
float* const y = reinterpret_cast<float*>(0x2000);
const CUstream stream = reinterpret_cast<CUstream>(0x30);
constexpr int n = 1 << 20;

// A function handle launchfit has not seen. Names repeat every 1,024 kernels: the plans launchfit keeps for
// the process's lifetime (one per distinct plan and kernel name, for plan_for()'s references) stay as many as
// a large program's, instead of growing with every iteration of the benchmark. So a first launch here finds
// its kept plan where a new kernel's would allocate one (about one allocation and a plan's copy fewer).
CUfunction fresh_kernel() {
  static int made = 0;
  const std::string name = "_Z4axpy" + std::to_string(made++ % 1024) + "fPKfPfi";
  return launchfit_stub_function(name.c_str(), 16, 0, 1024, params, 4);
}

// Driver calls per iteration, by entry point, as benchmark counters.
void count_calls(benchmark::State& state) {
  const double per = 1.0 / static_cast<double>(state.iterations());
  for (const char* entry :
       {"cuLaunchKernelEx", "cuCtxGetCurrent", "cuCtxGetId", "cuFuncGetAttribute", "cuFuncGetName",
        "cuFuncGetParamInfo", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        "cuOccupancyMaxPotentialBlockSize", "cuStreamIsCapturing", "cuDeviceGetAttribute", "cuCtxGetDevice", "cuGraphAddNode",
        "cuGraphKernelNodeSetAttribute", "cuStreamGetCaptureInfo"}) {
    const double c = static_cast<double>(launchfit_stub_calls(entry)) * per;
    if (c > 0) state.counters[entry] = c;
  }
  state.counters["driver_calls"] = static_cast<double>(launchfit_stub_total_calls()) * per;
}

// The stub's cuLaunchKernelEx as a program without launchfit calls it: a fresh kernel, its configuration and
// arguments made once.
struct raw_launch {
  decltype(&cuLaunchKernelEx) launch = nullptr;
  CUfunction f = fresh_kernel();
  CUlaunchConfig cfg{};
  float a = 2.0f;
  int count = n;
  void* args[4] = {&a, const_cast<float**>(&x), const_cast<float**>(&y), &count};
  raw_launch() {
    void* fn = nullptr;
    cuGetProcAddress_v2("cuLaunchKernelEx", &fn, CUDA_VERSION, 0, nullptr);
    launch = reinterpret_cast<decltype(&cuLaunchKernelEx)>(fn);
    cfg.gridDimX = n / 256;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = stream;
  }
  raw_launch(const raw_launch&) = delete;
  raw_launch& operator=(const raw_launch&) = delete;
  CUresult operator()() { return launch(&cfg, f, args, nullptr); }
};

// The stub's cuLaunchKernelEx, called as a program without launchfit would: the floor of this driver.
void BM_raw_cuLaunchKernelEx(benchmark::State& state) {
  raw_launch raw;
  launchfit_stub_reset_calls();
  for (auto _ : state) benchmark::DoNotOptimize(raw());
  count_calls(state);
}
BENCHMARK(BM_raw_cuLaunchKernelEx);

// launch() of a kernel whose plan is cached (the first launch, untimed, made it): the hit path.
template <class Spec>
void time_hits(benchmark::State& state, const Spec& spec) {
  const lf::kernel k(fresh_kernel());
  lf::launch(k, spec, 2.0f, x, y, n);
  launchfit_stub_reset_calls();
  for (auto _ : state) benchmark::DoNotOptimize(lf::launch(k, spec, 2.0f, x, y, n));
  count_calls(state);
}
void BM_launchfit_hit(benchmark::State& state) { time_hits(state, lf::max_occupancy().items(n).on(stream)); }
BENCHMARK(BM_launchfit_hit);
// The same with the spec written in the launch statement, as programs write it: made on every launch.
void BM_launchfit_hit_spec_inline(benchmark::State& state) {
  const lf::kernel k(fresh_kernel());
  lf::launch(k, lf::max_occupancy().items(n).on(stream), 2.0f, x, y, n);
  launchfit_stub_reset_calls();
  for (auto _ : state) benchmark::DoNotOptimize(lf::launch(k, lf::max_occupancy().items(n).on(stream), 2.0f, x, y, n));
  count_calls(state);
}
BENCHMARK(BM_launchfit_hit_spec_inline);
// The same with .pdl(): one launch attribute.
void BM_launchfit_hit_pdl(benchmark::State& state) { time_hits(state, lf::max_occupancy().items(n).on(stream).pdl()); }
BENCHMARK(BM_launchfit_hit_pdl);

// A hit and a raw launch after the CPU's private caches were filled with other data (not timed), as a launch
// finds them after the driver's previous launch and the program's own work between launches: what the hit
// path costs in cache misses (Arg: KB of other data read between launches; 0: none).
template <class Launch>
void time_cold(benchmark::State& state, Launch&& launch) {
  static const std::vector<unsigned char> all(64u << 20, 1);  // read, never written: no write-backs timed
  const std::vector<unsigned char> other(all.begin(), all.begin() + (state.range(0) << 10));
  launchfit_stub_reset_calls();
  for (auto _ : state) {
    state.PauseTiming();
    unsigned sum = 0;
    for (std::size_t i = 0; i < other.size(); i += 64) sum += other[i];
    benchmark::DoNotOptimize(sum);
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    launch();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  count_calls(state);
}
void BM_raw_cuLaunchKernelEx_cold(benchmark::State& state) {
  raw_launch raw;
  time_cold(state, [&] { benchmark::DoNotOptimize(raw()); });
}
BENCHMARK(BM_raw_cuLaunchKernelEx_cold)->UseManualTime()->Arg(0)->Arg(1024);
void BM_launchfit_hit_cold(benchmark::State& state) {
  const lf::kernel k(fresh_kernel());
  const auto spec = lf::max_occupancy().items(n).on(stream);
  lf::launch(k, spec, 2.0f, x, y, n);
  time_cold(state, [&] { benchmark::DoNotOptimize(lf::launch(k, lf::max_occupancy().items(n).on(stream), 2.0f, x, y, n)); });
}
BENCHMARK(BM_launchfit_hit_cold)->UseManualTime()->Arg(0)->Arg(1024);

// The first launch of a kernel launchfit has not seen: the whole miss, at the default log level (its line is
// formatted and written by the logging thread). The cache is emptied every 256 kernels (not timed), so it
// holds what a program's does, not tens of thousands of plans.
void BM_launchfit_first_launch(benchmark::State& state) {
  const auto spec = lf::max_occupancy().items(n).on(stream);
  launchfit_stub_reset_calls();
  long long made = 0, allocations = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (++made % 256 == 0) lf::cache().clear();
    const lf::kernel k(fresh_kernel());
    state.ResumeTiming();
    const long long before = news;
    benchmark::DoNotOptimize(lf::launch(k, spec, 2.0f, x, y, n));
    allocations += news - before;
  }
  count_calls(state);
  state.counters["allocations"] = static_cast<double>(allocations) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_launchfit_first_launch);

// The same first launch after the CPU's private caches were filled with other data (not timed), as a real
// first launch finds them after the driver loaded the kernel's module: what a miss costs in cache misses.
void BM_launchfit_first_launch_cold(benchmark::State& state) {
  const auto spec = lf::max_occupancy().items(n).on(stream);
  static const std::vector<unsigned char> all(64u << 20, 1);  // read, never written: no write-backs timed
  const std::vector<unsigned char> other(all.begin(), all.begin() + (state.range(0) << 10));
  launchfit_stub_reset_calls();
  long long made = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (++made % 256 == 0) lf::cache().clear();
    const lf::kernel k(fresh_kernel());
    unsigned sum = 0;
    for (std::size_t i = 0; i < other.size(); i += 64) sum += other[i];
    benchmark::DoNotOptimize(sum);
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(lf::launch(k, spec, 2.0f, x, y, n));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  count_calls(state);
}
BENCHMARK(BM_launchfit_first_launch_cold)->UseManualTime()->Arg(0)->Arg(1024)->Arg(4096);

// add_kernel_node() of a kernel whose plan is cached, in a line of nodes: the plan's hit, the node's
// parameters and attributes, one cuGraphAddNode. Beside it the stub's cuGraphAddNode called directly.
void BM_launchfit_add_kernel_node(benchmark::State& state) {
  const lf::kernel k(fresh_kernel());
  const auto spec = lf::max_occupancy().items(n).on(stream);
  const CUstream capturing = reinterpret_cast<CUstream>(0x40);
  launchfit_stub_begin_capture(capturing);
  const CUgraph graph = launchfit_stub_end_capture(capturing);
  const auto g = reinterpret_cast<cudaGraph_t>(graph);
  cudaGraphNode_t prev = lf::add_kernel_node(g, {}, k, spec, 2.0f, x, y, n).node;
  launchfit_stub_reset_calls();
  for (auto _ : state) prev = lf::add_kernel_node(g, {prev}, k, spec, 2.0f, x, y, n).node;
  count_calls(state);
  destroy_built_graph(graph);
}
BENCHMARK(BM_launchfit_add_kernel_node);
void BM_raw_cuGraphAddNode(benchmark::State& state) {
  void* fn = nullptr;
  cuGetProcAddress_v2("cuGraphAddNode", &fn, CUDA_VERSION, 0, nullptr);
  const auto add = reinterpret_cast<decltype(&cuGraphAddNode)>(fn);
  const CUfunction f = fresh_kernel();
  const CUstream capturing = reinterpret_cast<CUstream>(0x40);
  launchfit_stub_begin_capture(capturing);
  const CUgraph graph = launchfit_stub_end_capture(capturing);
  float a = 2.0f;
  int count = n;
  void* args[] = {&a, const_cast<float**>(&x), const_cast<float**>(&y), &count};
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel.func = f;
  p.kernel.gridDimX = n / 256;
  p.kernel.gridDimY = p.kernel.gridDimZ = 1;
  p.kernel.blockDimX = 256;
  p.kernel.blockDimY = p.kernel.blockDimZ = 1;
  p.kernel.kernelParams = args;
  CUgraphNode prev = nullptr;
  launchfit_stub_reset_calls();
  for (auto _ : state) {
    CUgraphNode node = nullptr;
    add(&node, graph, prev ? &prev : nullptr, nullptr, prev ? 1 : 0, &p);
    prev = node;
  }
  count_calls(state);
  destroy_built_graph(graph);
}
BENCHMARK(BM_raw_cuGraphAddNode);

// A policy of the program's own (not a built-in): a plan it makes inside a stream capture for a spec that may
// not re-run its kernel is watched, and each launch of it inside a capture is remembered for tune_graph()'s
// report (which names it left).
class own_policy final : public lf::param_policy<own_policy, lf::no_params> {
 public:
  static constexpr const char* policy_name = "bench_own";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    lf::plan p;
    p.block = lf::dims{256, 1, 1};
    p.blocks_per_sm = q.active_blocks_for(256);
    p.reason = "256 threads";
    return p;
  }
};

// launch() inside a stream capture of a plan made inside one by such a policy: the hit, the driver's capture
// info and the launch remembered (the oldest dropped past launchfit's bound, as a program capturing every
// iteration would). The capture's graph grows by one node per launch.
void BM_launchfit_captured_launch(benchmark::State& state) {
  const lf::kernel k(fresh_kernel());
  const CUstream capturing = reinterpret_cast<CUstream>(0x50);
  const auto spec = lf::spec<own_policy>(own_policy{}).items(n).on(capturing);
  launchfit_stub_begin_capture(capturing);
  lf::launch(k, spec, 2.0f, x, y, n);
  launchfit_stub_reset_calls();
  for (auto _ : state) benchmark::DoNotOptimize(lf::launch(k, spec, 2.0f, x, y, n));
  count_calls(state);
  destroy_built_graph(launchfit_stub_end_capture(capturing));
}
BENCHMARK(BM_launchfit_captured_launch);

#if defined(LAUNCHFIT_AUTOTUNE_PLUGIN)
bool autotune_loaded(benchmark::State& state) {
  static const bool loaded = lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name == "autotune";
  if (!loaded) state.SkipWithError("the autotune plugin did not load");
  return loaded;
}

// A cached launch of the autotune plugin's policy (its tuned plan), the spec made once.
void BM_launchfit_hit_autotune(benchmark::State& state) {
  if (!autotune_loaded(state)) return;
  time_hits(state, lf::use("autotune(max_trials=8)").items(n).on(stream).rerunnable());
}
BENCHMARK(BM_launchfit_hit_autotune);

// The same with the policy's string in the launch statement, as lf::launch(k,
// lf::use("autotune").items(n).rerunnable(), ...) writes it: each launch resolves the string, and the plugin's
// policy object lives for that statement only (its state made and destroyed by the plugin each time).
void BM_launchfit_hit_use_autotune(benchmark::State& state) {
  if (!autotune_loaded(state)) return;
  const lf::kernel k(fresh_kernel());
  lf::launch(k, lf::use("autotune(max_trials=8)").items(n).on(stream).rerunnable(), 2.0f, x, y, n);
  launchfit_stub_reset_calls();
  for (auto _ : state)
    benchmark::DoNotOptimize(lf::launch(k, lf::use("autotune(max_trials=8)").items(n).on(stream).rerunnable(), 2.0f, x, y, n));
  count_calls(state);
}
BENCHMARK(BM_launchfit_hit_use_autotune);
#endif

}  // namespace

BENCHMARK_MAIN();

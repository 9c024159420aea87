// SPDX-License-Identifier: MIT
// launch-overhead: host time per launch of an empty kernel through <<<>>>, cuLaunchKernel, cuLaunchKernelEx and
// launchfit::launch on a warm plan cache (runtime kernel with items(n), runtime kernel with fixed(256, 1),
// driver kernel from the same CUfunction), and the cost of a launch that misses the plan cache.
//
// Two batch shapes: 10,000 back-to-back async launches (the rate a long launch stream sustains; it becomes
// bound by the driver's launch queue once that fills) and 100-launch batches with the stream drained in
// between (the host cost of a launch while the queue has room). Medians over batches.
//
//   launch-overhead [--quick] [--json PATH] [--batches N] [--device N]
//   launch-overhead --profile-miss S [--profile-level info|warn]   nothing else: for S seconds, cache().clear()
//                   then one launch (the miss, its plan logged at that level, default info), a sampling
//                   profiler's target

#include <cuda.h>
#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_common.cuh"
#include "launchfit/cache.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "plan_cache.hpp"

namespace lf = launchfit;

namespace {

__global__ void empty_kernel(int) {}

// Distinct kernels for first launches that really are first: one set launched raw, one through launchfit,
// one resolved and launched through the driver step by step (where launchfit's first launch goes).
template <int I>
__global__ void fresh_kernel(int) {}
constexpr int fresh_count = 32;
using fresh_fn = void (*)(int);
template <int Offset, int... I>
std::vector<fresh_fn> fresh_table(std::integer_sequence<int, I...>) {
  return std::vector<fresh_fn>{&fresh_kernel<I + Offset>...};
}

// Counts launches (one increment per launch), to check that every path really launches.
__global__ void count_launch(unsigned long long* counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(counter, 1ULL);
}

void check_cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  throw bench::cuda_failure(std::string(what) + " failed: " + (name ? name : "unknown CUresult"));
}

CUfunction function_of(const void* stub) {
  cudaFunction_t f = nullptr;
  BENCH_CUDA(cudaGetFuncBySymbol(&f, stub));
  return reinterpret_cast<CUfunction>(f);
}

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// Host microseconds per launch for each of `batches` batches of `batch` launches, after a warm-up of up to
// 100 launches; the stream is drained between batches, outside the timed region.
template <class F>
std::vector<double> host_us_per_launch(F&& launch, int batch, int batches, cudaStream_t s) {
  std::vector<double> per;
  for (int b = -1; b < batches; ++b) {
    const int count = b < 0 ? std::min(batch, 100) : batch;
    const auto t0 = clock_type::now();
    for (int i = 0; i < count; ++i) launch();
    const double us = us_since(t0);
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(s));
    if (b >= 0) per.push_back(us / count);
  }
  return per;
}

struct variant {
  std::string name;
  std::string dims;
  int baseline = -1;     // index of the raw variant with the same grid and block (-1 for raw ones)
  double us_long = 0;    // 10,000-launch batches
  double us_short = 0;   // 100-launch batches
};

struct miss_row {
  std::string name;
  double median_us = 0;
  double p10_us = 0, p90_us = 0;
};

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", r);
  return buf;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

int run(int argc, char** argv) {
  const auto start = clock_type::now();
  const bench::args a(argc, argv);
  const bool quick = a.flag("--quick");
  const int batches = std::max(1, a.int_value("--batches", quick ? 2 : 10));
  const int long_batch = quick ? 1000 : 10000;
  const int short_batch = 100;
  const int short_batches = quick ? 20 : 200;
  const int miss_reps = quick ? 10 : 100;
  const std::string json_path = a.value("--json");
  // Checked before the GPU is touched.
  const std::string level = a.value("--profile-level");
  if (!level.empty() && level != "info" && level != "warn")
    throw std::invalid_argument("--profile-level is info or warn, not '" + level + "'");
  const bench::device_info dev = bench::open_device(a.int_value("--device", 0));
  int failures = 0;

  std::printf("# launchfit launch overhead\n\ndevice: %s\n", dev.describe().c_str());
  if (std::getenv("LAUNCHFIT_CACHE")) {
    std::printf("note: LAUNCHFIT_CACHE is set; cache misses may be answered from the cache file\n");
  }
  if (std::getenv("LAUNCHFIT_POLICY")) std::printf("note: LAUNCHFIT_POLICY is set; overrides apply\n");

  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::uint64_t n = std::uint64_t{1} << 16;

  // The very first launch through launchfit in this process: loads libcuda's entry points, queries the
  // device, resolves the kernel, computes and logs the plan.
  const auto logger = lf::logger();
  const spdlog::level::level_enum saved_level = logger->level();
  logger->set_level(spdlog::level::warn);
  double first_us = 0;
  {
    const auto t0 = clock_type::now();
    lf::launch(&empty_kernel, lf::max_occupancy().items(n).on(stream), 0);
    first_us = us_since(t0);
    BENCH_CUDA(cudaStreamSynchronize(stream));
  }
  logger->set_level(saved_level);

  // A profiler's target: misses and nothing else.
  if (const int seconds = a.int_value("--profile-miss", 0); seconds > 0) {
    logger->set_level(level == "warn" ? spdlog::level::warn : spdlog::level::info);
    const auto t0 = clock_type::now();
    long long misses = 0;
    while (bench::seconds_since(t0) < seconds) {
      for (int i = 0; i < 100; ++i, ++misses) {
        lf::cache().clear();
        lf::launch(&empty_kernel, lf::max_occupancy().items(n).on(stream), 0);
      }
      BENCH_CUDA(cudaStreamSynchronize(stream));
    }
    lf::logger()->flush();
    const double took = bench::seconds_since(t0);
    std::printf("profiled %lld misses in %.2f s: %.2f us each (clear, plan, launch)\n", misses, took,
                1e6 * took / static_cast<double>(misses));
    return 0;
  }

  const CUfunction empty_fn = function_of(reinterpret_cast<const void*>(&empty_kernel));
  const lf::kernel empty_driver(empty_fn);
  const lf::plan items_plan = lf::plan_for(&empty_kernel, lf::max_occupancy().items(n).on(stream));
  const unsigned items_block = items_plan.block.x;
  const unsigned items_grid = lf::grid_for(items_plan, lf::max_occupancy().items(n).work_shape()).x;
  const std::string items_dims = "<<<" + std::to_string(items_grid) + ", " + std::to_string(items_block) + ">>>";
  const std::string fixed_dims = "<<<1, 256>>>";
  // An smem_per_block rule: the hit path calls it once per launch to check the plan's bytes by value.
  const std::size_t smem_per_thread = 16;
  const auto smem_rule = [smem_per_thread](int block) { return smem_per_thread * static_cast<std::size_t>(block); };
  const lf::plan rule_plan = lf::plan_for(&empty_kernel, lf::max_occupancy().smem_per_block(smem_rule).items(n));
  const unsigned rule_block = rule_plan.block.x;
  const unsigned rule_grid = lf::grid_for(rule_plan, lf::max_occupancy().items(n).work_shape()).x;
  const std::size_t rule_smem = rule_plan.dynamic_smem_bytes;
  const std::string rule_dims = "<<<" + std::to_string(rule_grid) + ", " + std::to_string(rule_block) + ", " +
                                std::to_string(rule_smem) + ">>>";

  // Warm the cache for every launchfit variant (logs each new plan once).
  lf::launch(&empty_kernel, lf::fixed(256, 1).on(stream), 0);
  lf::launch(empty_driver, lf::fixed(256, 1).on(stream), 0);
  BENCH_CUDA(cudaStreamSynchronize(stream));

  int arg = 0;
  void* params[] = {&arg};
  CUlaunchConfig plain_config{};  // <<<1, 256>>> on the stream, no attributes
  plain_config.gridDimX = plain_config.gridDimY = plain_config.gridDimZ = 1;
  plain_config.blockDimX = 256;
  plain_config.blockDimY = plain_config.blockDimZ = 1;
  plain_config.hStream = stream;
  std::vector<variant> variants = {
      {"<<<>>>", items_dims, -1},
      {"cuLaunchKernel", items_dims, -1},
      {"launchfit max_occupancy().items(n)", items_dims, 0},
      {"<<<>>>", fixed_dims, -1},
      {"cuLaunchKernel", fixed_dims, -1},
      {"launchfit fixed(256, 1)", fixed_dims, 3},
      {"launchfit driver kernel fixed(256, 1)", fixed_dims, 4},
      {"cuLaunchKernelEx (no attributes)", fixed_dims, -1},
      {"<<<>>>", rule_dims, -1},
      {"launchfit max_occupancy().smem_per_block(rule).items(n)", rule_dims, 8},
  };
  // Each variant is timed in a plain loop (no type-erased call in the timed loop).
  auto measure = [&](int v, int batch, int nb) -> std::vector<double> {
    switch (v) {
      case 0:
        return host_us_per_launch([&] { empty_kernel<<<items_grid, items_block, 0, stream>>>(0); }, batch, nb,
                                  stream);
      case 1:
        return host_us_per_launch(
            [&] {
              check_cu(cuLaunchKernel(empty_fn, items_grid, 1, 1, items_block, 1, 1, 0, stream, params, nullptr),
                       "cuLaunchKernel");
            },
            batch, nb, stream);
      case 2:
        return host_us_per_launch([&] { lf::launch(&empty_kernel, lf::max_occupancy().items(n).on(stream), 0); },
                                  batch, nb, stream);
      case 3:
        return host_us_per_launch([&] { empty_kernel<<<1, 256, 0, stream>>>(0); }, batch, nb, stream);
      case 4:
        return host_us_per_launch(
            [&] {
              check_cu(cuLaunchKernel(empty_fn, 1, 1, 1, 256, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
            },
            batch, nb, stream);
      case 5:
        return host_us_per_launch([&] { lf::launch(&empty_kernel, lf::fixed(256, 1).on(stream), 0); }, batch, nb,
                                  stream);
      case 6:
        return host_us_per_launch([&] { lf::launch(empty_driver, lf::fixed(256, 1).on(stream), 0); }, batch, nb,
                                  stream);
      case 7:
        return host_us_per_launch(
            [&] { check_cu(cuLaunchKernelEx(&plain_config, empty_fn, params, nullptr), "cuLaunchKernelEx"); },
            batch, nb, stream);
      case 8:
        return host_us_per_launch([&] { empty_kernel<<<rule_grid, rule_block, rule_smem, stream>>>(0); }, batch,
                                  nb, stream);
      default:
        return host_us_per_launch(
            [&] { lf::launch(&empty_kernel, lf::max_occupancy().smem_per_block(smem_rule).items(n).on(stream), 0); },
            batch, nb, stream);
    }
  };

  // Interleaved: each round times one long batch and a few short ones of every variant, starting at a
  // different variant each round, so drift (clocks, other tenants) and order spread over all of them; the
  // median is over every batch of every round.
  std::vector<std::vector<double>> long_runs(variants.size()), short_runs(variants.size());
  const int shorts_per_round = std::max(1, short_batches / batches);
  for (int round = 0; round < batches; ++round) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::size_t v = (k + static_cast<std::size_t>(round)) % variants.size();
      for (double x : measure(static_cast<int>(v), long_batch, 1)) long_runs[v].push_back(x);
      for (double x : measure(static_cast<int>(v), short_batch, shorts_per_round)) short_runs[v].push_back(x);
    }
  }
  for (std::size_t v = 0; v < variants.size(); ++v) {
    variants[v].us_long = bench::median(long_runs[v]);
    variants[v].us_short = bench::median(short_runs[v]);
  }
  auto base_of = [&](const variant& v) -> const variant* {
    return v.baseline >= 0 ? &variants[static_cast<std::size_t>(v.baseline)] : nullptr;
  };

  // ---- every path really launches ----
  {
    bench::device_buffer<unsigned long long> counter(1);
    const CUfunction count_fn = function_of(reinterpret_cast<const void*>(&count_launch));
    const lf::kernel count_driver(count_fn);
    unsigned long long* cptr = counter.get();
    void* cparams[] = {&cptr};
    const int reps = 1000;
    const char* names[] = {"<<<>>>", "cuLaunchKernel", "launchfit items(n)", "launchfit fixed(256, 1)",
                           "launchfit driver kernel", "cuLaunchKernelEx"};
    CUlaunchConfig count_config = plain_config;
    count_config.gridDimX = items_grid;
    count_config.blockDimX = items_block;
    for (int path = 0; path < 6; ++path) {
      BENCH_CUDA(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned long long), stream));
      for (int i = 0; i < reps; ++i) {
        switch (path) {
          case 0:
            count_launch<<<items_grid, items_block, 0, stream>>>(cptr);
            break;
          case 1:
            check_cu(cuLaunchKernel(count_fn, items_grid, 1, 1, items_block, 1, 1, 0, stream, cparams, nullptr),
                     "cuLaunchKernel");
            break;
          case 2:
            lf::launch(&count_launch, lf::max_occupancy().items(n).on(stream), cptr);
            break;
          case 3:
            lf::launch(&count_launch, lf::fixed(256, 1).on(stream), cptr);
            break;
          case 4:
            lf::launch(count_driver, lf::fixed(256, 1).on(stream), cptr);
            break;
          default:
            check_cu(cuLaunchKernelEx(&count_config, count_fn, cparams, nullptr), "cuLaunchKernelEx");
        }
      }
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaStreamSynchronize(stream));
      const auto got = counter.download();
      if (got[0] != static_cast<unsigned long long>(reps)) {
        ++failures;
        std::printf("FAILED: %s ran %llu of %d launches\n", names[path], got[0], reps);
      }
    }
  }

  // ---- cache misses ----
  // Each repetition clears the plan cache and times one launch: kernel lookup, attribute and occupancy
  // queries, the policy, validation and the (suppressed) log line.
  std::vector<miss_row> misses;
  logger->set_level(spdlog::level::warn);
  auto time_miss = [&](const std::string& name, const std::function<void()>& launch) {
    std::vector<double> us;
    for (int r = 0; r < miss_reps; ++r) {
      BENCH_CUDA(cudaStreamSynchronize(stream));
      lf::cache().clear();
      const std::uint64_t builds_before = lf::detail::stats().builds;
      const auto t0 = clock_type::now();
      launch();
      us.push_back(us_since(t0));
      if (lf::detail::stats().builds != builds_before + 1) {
        ++failures;
        std::printf("FAILED: %s: the timed launch did not build exactly one plan\n", name.c_str());
        break;
      }
    }
    BENCH_CUDA(cudaStreamSynchronize(stream));
    misses.push_back({name, bench::median(us), percentile(us, 0.1), percentile(us, 0.9)});
  };
  time_miss("max_occupancy().items(n)",
            [&] { lf::launch(&empty_kernel, lf::max_occupancy().items(n).on(stream), 0); });
  time_miss("bytes_in_flight(16).items(n)",
            [&] { lf::launch(&empty_kernel, lf::bytes_in_flight(16).items(n).on(stream), 0); });
  time_miss("fixed(256, 1)", [&] { lf::launch(&empty_kernel, lf::fixed(256, 1).on(stream), 0); });
  time_miss("driver kernel fixed(256, 1)", [&] { lf::launch(empty_driver, lf::fixed(256, 1).on(stream), 0); });
  // The same miss at the default level (info): the plan's line is written (stderr, here a file) through the
  // asynchronous sink (the default) and synchronously (LAUNCHFIT_LOG_ASYNC=0).
  logger->set_level(spdlog::level::info);
  const bool async_default = lf::log_async();
  lf::set_log_async(true);
  time_miss("max_occupancy().items(n), plan logged at info, asynchronous (default)",
            [&] { lf::launch(&empty_kernel, lf::max_occupancy().items(n).on(stream), 0); });
  lf::set_log_async(false);
  time_miss("max_occupancy().items(n), plan logged at info, synchronous",
            [&] { lf::launch(&empty_kernel, lf::max_occupancy().items(n).on(stream), 0); });
  lf::set_log_async(async_default);
  logger->set_level(spdlog::level::warn);

  // Where a miss goes: the plan alone (plan_for after clear(), no launch) and its parts, per call.
  struct part_row {
    std::string name;
    double us = 0;
  };
  std::vector<part_row> parts;
  auto time_part = [&](const std::string& name, int reps, const std::function<void()>& f) {
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = clock_type::now();
      f();
      us.push_back(us_since(t0));
    }
    parts.push_back({name, bench::median(us)});
  };
  time_part("plan_for(max_occupancy().items(n)) after clear(): the miss without the launch", miss_reps, [&] {
    lf::cache().clear();
    (void)lf::plan_for(&empty_kernel, lf::max_occupancy().items(n));
  });
  time_part("plan_for(fixed(256, 1)) after clear()", miss_reps, [&] {
    lf::cache().clear();
    (void)lf::plan_for(&empty_kernel, lf::fixed(256, 1));
  });
  time_part("cache().clear() alone", miss_reps, [&] { lf::cache().clear(); });
  time_part("cudaGetFuncBySymbol (resolve the runtime kernel)", miss_reps, [&] { (void)function_of(reinterpret_cast<const void*>(&empty_kernel)); });
  time_part("query_resources (name, demangle, 8 attributes)", miss_reps, [&] { (void)lf::query_resources(empty_fn); });
  const std::string mangled = lf::query_resources(empty_fn).name;
  time_part("demangle the name (part of query_resources; a miss skips it unless the plan is logged)", miss_reps,
            [&] { (void)lf::demangle(mangled); });
  time_part("cuOccupancyMaxActiveBlocksPerMultiprocessor (one block size)", miss_reps, [&] {
    int blocks = 0;
    check_cu(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, empty_fn, 256, 0), "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  });
  time_part("cuCtxGetCurrent (the hit path's context)", miss_reps, [&] {
    CUcontext c = nullptr;
    check_cu(cuCtxGetCurrent(&c), "cuCtxGetCurrent");
  });
  time_part("cuCtxGetCurrent + cuCtxGetId (the hit path's context identity)", miss_reps, [&] {
    CUcontext c = nullptr;
    unsigned long long id = 0;
    check_cu(cuCtxGetCurrent(&c), "cuCtxGetCurrent");
    check_cu(cuCtxGetId(c, &id), "cuCtxGetId");
  });
  time_part("cuLaunchKernel <<<1, 256>>> (the launch a miss also does)", miss_reps, [&] {
    int arg = 0;
    void* args[] = {&arg};
    check_cu(cuLaunchKernel(empty_fn, 1, 1, 1, 256, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel");
  });
  BENCH_CUDA(cudaStreamSynchronize(stream));

  // First launches of kernels never launched before in this process (32 distinct template instances each):
  // both include the runtime's lazy loading of the kernel; the difference is launchfit's plan.
  const auto seq = std::make_integer_sequence<int, fresh_count>{};
  const std::vector<fresh_fn> fresh_raw = fresh_table<0>(seq);
  const std::vector<fresh_fn> fresh_lf = fresh_table<fresh_count>(seq);
  const std::vector<fresh_fn> fresh_steps = fresh_table<2 * fresh_count>(seq);
  // The same at the default level (info, the plan's line logged), asynchronous (the default) and synchronous.
  const std::vector<fresh_fn> fresh_info = fresh_table<3 * fresh_count>(seq);
  const std::vector<fresh_fn> fresh_info_sync = fresh_table<4 * fresh_count>(seq);
  std::vector<double> first_raw, first_lf, first_resolve, first_cu_launch, first_info, first_info_sync;
  const bool async_before = lf::log_async();
  for (int i = 0; i < fresh_count; ++i) {
    // The driver path step by step: resolving a never-launched kernel (the runtime loads it here), then its
    // first cuLaunchKernel.
    BENCH_CUDA(cudaStreamSynchronize(stream));
    auto t_resolve = clock_type::now();
    const CUfunction f = function_of(reinterpret_cast<const void*>(fresh_steps[i]));
    first_resolve.push_back(us_since(t_resolve));
    int arg = 0;
    void* args[] = {&arg};
    t_resolve = clock_type::now();
    check_cu(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel");
    first_cu_launch.push_back(us_since(t_resolve));

    BENCH_CUDA(cudaStreamSynchronize(stream));
    auto t0 = clock_type::now();
    fresh_raw[i]<<<1, 256, 0, stream>>>(0);
    first_raw.push_back(us_since(t0));
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(stream));
    const std::uint64_t builds_before = lf::detail::stats().builds;
    t0 = clock_type::now();
    lf::launch(fresh_lf[i], lf::max_occupancy().items(256).on(stream), 0);
    first_lf.push_back(us_since(t0));
    if (lf::detail::stats().builds != builds_before + 1) {
      ++failures;
      std::printf("FAILED: first launch of fresh kernel %d did not build exactly one plan\n", i);
    }
    for (const bool async : {true, false}) {
      logger->set_level(spdlog::level::info);
      lf::set_log_async(async);
      BENCH_CUDA(cudaStreamSynchronize(stream));
      t0 = clock_type::now();
      lf::launch(async ? fresh_info[i] : fresh_info_sync[i], lf::max_occupancy().items(256).on(stream), 0);
      (async ? first_info : first_info_sync).push_back(us_since(t0));
      lf::logger()->flush();  // the line is out before the next sample
      logger->set_level(spdlog::level::warn);
    }
    lf::set_log_async(async_before);
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));

  // Where a fresh kernel's first launch goes, at warn: the driver's answers for a never-launched kernel (its
  // resolution, the attributes and name a miss asks, one occupancy query, its first launch), and launchfit's
  // first launch split into the plan (plan_for: the miss without a launch) and the launch that follows (a hit
  // whose cuLaunchKernelEx is the kernel's first). Each set launches fresh kernels of its own.
  std::vector<double> fresh_q_resolve, fresh_q_resources, fresh_q_occupancy, fresh_q_launch, fresh_plan_only,
      fresh_then_launch;
  {
    const std::vector<fresh_fn> queried = fresh_table<11 * fresh_count>(seq);
    const std::vector<fresh_fn> planned = fresh_table<12 * fresh_count>(seq);
    for (int i = 0; i < fresh_count; ++i) {
      BENCH_CUDA(cudaStreamSynchronize(stream));
      auto t0 = clock_type::now();
      const CUfunction f = function_of(reinterpret_cast<const void*>(queried[i]));
      fresh_q_resolve.push_back(us_since(t0));
      t0 = clock_type::now();
      (void)lf::query_resources(f);
      fresh_q_resources.push_back(us_since(t0));
      t0 = clock_type::now();
      int blocks = 0;
      check_cu(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 256, 0, 0),
               "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
      fresh_q_occupancy.push_back(us_since(t0));
      int arg = 0;
      void* args[] = {&arg};
      t0 = clock_type::now();
      check_cu(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel");
      fresh_q_launch.push_back(us_since(t0));

      BENCH_CUDA(cudaStreamSynchronize(stream));
      t0 = clock_type::now();
      (void)lf::plan_for(planned[i], lf::max_occupancy().items(256).on(stream));
      fresh_plan_only.push_back(us_since(t0));
      t0 = clock_type::now();
      lf::launch(planned[i], lf::max_occupancy().items(256).on(stream), 0);
      fresh_then_launch.push_back(us_since(t0));
    }
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));

  // The attributes a miss asks of a fresh kernel (resolved, never launched): its name and nine
  // cuFuncGetAttribute calls (query_resources() without demangling), against the runtime's one call that answers
  // them all (cudaFuncGetAttributes) on another set; and the current context's identity in two calls (the handle,
  // then cuCtxGetId) and in one (cuCtxGetId(NULL)).
  std::vector<double> fresh_attr_driver, fresh_attr_runtime, ctx_two_calls, ctx_one_call;
  {
    const std::vector<fresh_fn> by_driver = fresh_table<13 * fresh_count>(seq);
    const std::vector<fresh_fn> by_runtime = fresh_table<14 * fresh_count>(seq);
    const CUfunction_attribute asked[] = {
        CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_FUNC_ATTRIBUTE_PTX_VERSION,
        CU_FUNC_ATTRIBUTE_BINARY_VERSION, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH};
    for (int i = 0; i < fresh_count; ++i) {
      const CUfunction f = function_of(reinterpret_cast<const void*>(by_driver[i]));
      auto t0 = clock_type::now();
      const char* name = nullptr;
      check_cu(cuFuncGetName(&name, f), "cuFuncGetName");
      int sum = 0;
      for (const CUfunction_attribute a : asked) {
        int v = 0;
        (void)cuFuncGetAttribute(&v, a, f);  // the cluster width may be unsupported: as the miss, ignored
        sum += v;
      }
      fresh_attr_driver.push_back(us_since(t0));
      (void)function_of(reinterpret_cast<const void*>(by_runtime[i]));
      t0 = clock_type::now();
      cudaFuncAttributes attrs{};
      BENCH_CUDA(cudaFuncGetAttributes(&attrs, reinterpret_cast<const void*>(by_runtime[i])));
      fresh_attr_runtime.push_back(us_since(t0));
      if (sum < 0 || attrs.maxThreadsPerBlock <= 0) ++failures;
      t0 = clock_type::now();
      CUcontext ctx = nullptr;
      unsigned long long id = 0, id_one = 0;
      check_cu(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
      check_cu(cuCtxGetId(ctx, &id), "cuCtxGetId");
      ctx_two_calls.push_back(us_since(t0));
      t0 = clock_type::now();
      check_cu(cuCtxGetId(nullptr, &id_one), "cuCtxGetId(NULL)");
      ctx_one_call.push_back(us_since(t0));
      if (id != id_one) {
        ++failures;
        std::printf("FAILED: cuCtxGetId(NULL) answered %llu, the current context's identity is %llu\n", id_one, id);
      }
    }
  }

  // The same first launch at info and at warn by what the logging thread is doing when the line comes (each
  // pair launches fresh kernels of its own, alternating, after the same wait): "quiet", 60 ms after the last
  // line (past the thread's fast looks: a build that parks it after 50 ms wakes it for the line, one that keeps
  // looking every 100 ms does not); "after a line", a random 0-2 ms after the previous line was
  // written (the thread looking for lines on its own schedule, which a real program's start-up meets at any
  // phase); "start-up burst", one launch after another with no wait, as a program's first launches come.
  struct by_state {
    const char* name;
    std::vector<double> info, warn;
  };
  std::vector<by_state> states = {{"quiet (60 ms since the last line)", {}, {}},
                                  {"0-2 ms after the last line was written", {}, {}},
                                  {"start-up burst (no wait)", {}, {}}};
  {
    const std::vector<std::vector<fresh_fn>> tables = {
        fresh_table<5 * fresh_count>(seq), fresh_table<6 * fresh_count>(seq), fresh_table<7 * fresh_count>(seq),
        fresh_table<8 * fresh_count>(seq), fresh_table<9 * fresh_count>(seq), fresh_table<10 * fresh_count>(seq)};
    std::uint64_t phase = 0x9e3779b97f4a7c15ull;
    for (std::size_t st = 0; st < states.size(); ++st) {
      for (int i = 0; i < fresh_count; ++i) {
        for (const bool info : {i % 2 == 0, i % 2 != 0}) {
          if (st == 0) {
            lf::logger()->flush();
            std::this_thread::sleep_for(std::chrono::milliseconds(60));
          } else if (st == 1) {
            lf::logger()->flush();
            phase ^= phase << 13, phase ^= phase >> 7, phase ^= phase << 17;
            std::this_thread::sleep_for(std::chrono::microseconds(phase % 2000));
          }
          logger->set_level(info ? spdlog::level::info : spdlog::level::warn);
          BENCH_CUDA(cudaStreamSynchronize(stream));
          const auto t0 = clock_type::now();
          lf::launch(tables[2 * st + (info ? 0 : 1)][i], lf::max_occupancy().items(256).on(stream), 0);
          (info ? states[st].info : states[st].warn).push_back(us_since(t0));
          logger->set_level(spdlog::level::warn);
        }
      }
      lf::logger()->flush();
    }
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  const double first_raw_us = bench::median(first_raw), first_lf_us = bench::median(first_lf);
  const double first_resolve_us = bench::median(first_resolve), first_cu_launch_us = bench::median(first_cu_launch);
  const double first_info_us = bench::median(first_info), first_info_sync_us = bench::median(first_info_sync);
  logger->set_level(saved_level);

  const double total_s = bench::seconds_since(start);
  if (!json_path.empty()) {
    std::ostringstream js;
    js << "{\n\"benchmark\":\"launch-overhead\",\n\"device\":" << dev.json() << ",\n\"long_batch\":" << long_batch
       << ",\n\"short_batch\":" << short_batch << ",\n\"variants\":[";
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const variant& v = variants[i];
      const variant* base = base_of(v);
      js << (i ? ",\n" : "\n") << "{\"name\":" << bench::json_string(v.name) << ",\"dims\":" << bench::json_string(v.dims)
         << ",\"us_per_launch_long\":" << bench::json_number(v.us_long)
         << ",\"us_per_launch_short\":" << bench::json_number(v.us_short)
         << ",\"ratio_long\":" << bench::json_number(base ? v.us_long / base->us_long : 1.0)
         << ",\"ratio_short\":" << bench::json_number(base ? v.us_short / base->us_short : 1.0) << "}";
    }
    js << "],\n\"first_launch_us\":" << bench::json_number(first_us) << ",\n\"misses\":[";
    for (std::size_t i = 0; i < misses.size(); ++i) {
      js << (i ? ",\n" : "\n") << "{\"name\":" << bench::json_string(misses[i].name)
         << ",\"median_us\":" << bench::json_number(misses[i].median_us)
         << ",\"p10_us\":" << bench::json_number(misses[i].p10_us)
         << ",\"p90_us\":" << bench::json_number(misses[i].p90_us) << "}";
    }
    js << "],\n\"miss_parts\":[";
    for (std::size_t i = 0; i < parts.size(); ++i) {
      js << (i ? ",\n" : "\n") << "{\"name\":" << bench::json_string(parts[i].name)
         << ",\"median_us\":" << bench::json_number(parts[i].us) << "}";
    }
    js << "],\n\"fresh_first_launch_raw_us\":" << bench::json_number(first_raw_us)
       << ",\n\"fresh_first_launch_launchfit_us\":" << bench::json_number(first_lf_us)
       << ",\n\"fresh_first_launch_launchfit_info_async_us\":" << bench::json_number(first_info_us)
       << ",\n\"fresh_first_launch_launchfit_info_sync_us\":" << bench::json_number(first_info_sync_us)
       << ",\n\"fresh_resolve_us\":" << bench::json_number(first_resolve_us)
       << ",\n\"fresh_first_cuLaunchKernel_us\":" << bench::json_number(first_cu_launch_us)
       << ",\n\"fresh_parts_us\":{\"cudaGetFuncBySymbol\":" << bench::json_number(bench::median(fresh_q_resolve))
       << ",\"query_resources\":" << bench::json_number(bench::median(fresh_q_resources))
       << ",\"occupancy_query\":" << bench::json_number(bench::median(fresh_q_occupancy))
       << ",\"first_cuLaunchKernel\":" << bench::json_number(bench::median(fresh_q_launch))
       << ",\"launchfit_plan_for\":" << bench::json_number(bench::median(fresh_plan_only))
       << ",\"launchfit_launch_after_plan_for\":" << bench::json_number(bench::median(fresh_then_launch))
       << ",\"name_and_9_cuFuncGetAttribute\":" << bench::json_number(bench::median(fresh_attr_driver))
       << ",\"cudaFuncGetAttributes\":" << bench::json_number(bench::median(fresh_attr_runtime))
       << ",\"cuCtxGetCurrent_and_cuCtxGetId\":" << bench::json_number(bench::median(ctx_two_calls))
       << ",\"cuCtxGetId_NULL\":" << bench::json_number(bench::median(ctx_one_call)) << "}"
       << ",\n\"fresh_first_launch_by_logging_state\":[";
    for (std::size_t i = 0; i < states.size(); ++i) {
      js << (i ? ",\n" : "\n") << "{\"state\":" << bench::json_string(states[i].name)
         << ",\"info_us\":" << bench::json_number(bench::median(states[i].info))
         << ",\"warn_us\":" << bench::json_number(bench::median(states[i].warn)) << "}";
    }
    js << "]";
    js << ",\n\"failures\":" << failures << ",\n\"total_s\":" << bench::json_number(total_s) << "\n}\n";
    bench::write_file(json_path, js.str());
    std::printf("\nwrote %s\n", json_path.c_str());
  }

  std::printf("\n## Cache miss: one launch right after cache().clear(), %d repetitions\n\n"
              "| spec | median us | p10 us | p90 us | target |\n|---|---:|---:|---:|---|\n",
              miss_reps);
  for (const auto& m : misses) {
    std::printf("| %s | %.2f | %.2f | %.2f | <= 3 us |\n", m.name.c_str(), m.median_us, m.p10_us, m.p90_us);
  }
  std::printf("\n### Where a miss goes (median us per call, %d calls)\n\n| part | us |\n|---|---:|\n", miss_reps);
  for (const auto& pr : parts) std::printf("| %s | %.2f |\n", pr.name.c_str(), pr.us);
  std::printf("\n### First launch of a kernel never launched before (median of %d distinct kernels)\n\n"
              "| launch | us |\n|---|---:|\n| <<<1, 256>>> (includes lazy loading) | %.2f |\n"
              "| launchfit max_occupancy().items(256) (includes lazy loading), logging at warn | %.2f |\n"
              "| difference: launchfit's first-launch cost at warn | %.2f |\n"
              "| launchfit, the plan logged at info, asynchronous (the default) | %.2f (+%.2f) |\n"
              "| launchfit, the plan logged at info, synchronous (LAUNCHFIT_LOG_ASYNC=0) | %.2f (+%.2f) |\n"
              "| parts of the driver path: `cudaGetFuncBySymbol` of a never-launched kernel (loads it) | %.2f |\n"
              "| then its first `cuLaunchKernel` <<<1, 256>>> | %.2f |\n",
              fresh_count, first_raw_us, first_lf_us, first_lf_us - first_raw_us, first_info_us,
              first_info_us - first_raw_us, first_info_sync_us, first_info_sync_us - first_raw_us, first_resolve_us,
              first_cu_launch_us);
  std::printf("\n### A fresh kernel's first launch in parts, at warn (median of %d distinct kernels per set)\n\n"
              "| part | us |\n|---|---:|\n"
              "| driver: `cudaGetFuncBySymbol` (loads the kernel) | %.2f |\n"
              "| driver: then `query_resources` (name, demangle, the attributes a miss asks) | %.2f |\n"
              "| driver: then one occupancy query | %.2f |\n"
              "| driver: then the first `cuLaunchKernel` | %.2f |\n"
              "| launchfit: `plan_for` of a fresh kernel (resolves it; the miss without a launch) | %.2f |\n"
              "| launchfit: then `launch` (a hit; the kernel's first launch) | %.2f |\n"
              "| driver: a resolved kernel's name and nine `cuFuncGetAttribute` (a miss's questions) | %.2f |\n"
              "| runtime: `cudaFuncGetAttributes` of a resolved kernel (one call, every attribute) | %.2f |\n"
              "| driver: `cuCtxGetCurrent` + `cuCtxGetId` | %.3f |\n"
              "| driver: `cuCtxGetId(NULL)` | %.3f |\n",
              fresh_count, bench::median(fresh_q_resolve), bench::median(fresh_q_resources),
              bench::median(fresh_q_occupancy), bench::median(fresh_q_launch), bench::median(fresh_plan_only),
              bench::median(fresh_then_launch), bench::median(fresh_attr_driver), bench::median(fresh_attr_runtime),
              bench::median(ctx_two_calls), bench::median(ctx_one_call));
  std::printf("\n### The same by what the logging thread is doing (median of %d kernels each, levels alternating)\n\n"
              "| logging thread | at info us | at warn us | info - warn us |\n|---|---:|---:|---:|\n",
              fresh_count);
  for (const auto& st : states) {
    const double i = bench::median(st.info), w = bench::median(st.warn);
    std::printf("| %s | %.2f | %.2f | %+.2f |\n", st.name, i, w, i - w);
  }
  std::printf("\nfirst launchfit launch in the process (one sample, includes loading the driver entry points and "
              "the device query): %.1f us\n",
              first_us);

  std::printf("\n## Summary: host time per launch, empty kernel (median; lower is better)\n\n"
              "| launch | grid, block | us/launch (%d-launch batches) | vs raw | us/launch (%d-launch batches) | "
              "vs raw |\n|---|---|---:|---:|---:|---:|\n",
              long_batch, short_batch);
  for (const auto& v : variants) {
    const variant* base = base_of(v);
    std::printf("| %s | %s | %.3f | %s | %.3f | %s |\n", v.name.c_str(), v.dims.c_str(), v.us_long,
                base ? ratio_text(v.us_long / base->us_long).c_str() : "-", v.us_short,
                base ? ratio_text(v.us_short / base->us_short).c_str() : "-");
  }
  std::printf("\ntargets: launchfit / raw <= 1.03 on a warm cache; miss <= 3 us. verification: %s; total time %.1f s\n",
              bench::verification_summary(failures, "every launch path ran every launch").c_str(),
              total_s);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("launch-overhead", run, argc, argv); }

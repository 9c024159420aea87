// SPDX-License-Identifier: MIT
// The autotune plugin on a real GPU: tuned launches leave results exactly as one launch would (a
// rerunnable kernel, and an accumulating one restored by .reset(f)), the tuned plan against an exhaustive
// sweep of block x blocks-per-SM (printed, never asserted), and the cache file serving a second process
// that then tunes nothing. Poisoned outputs, random inputs, every element checked.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "gpu_test.hpp"
#include "test_doubles.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/plugin.hpp"

extern char** environ;

namespace lf = launchfit;

namespace {

// Grid-stride streaming kernel: reads and writes one float4 per iteration; re-running it is harmless.
__global__ void stream_scale(const float4* in, float4* out, std::size_t n4, float a) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n4;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float4 v = in[i];
    out[i] = make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
  }
}

// Accumulates: every run adds a*x again, so tuning must restore y before each trial.
__global__ void saxpy_accumulate(float a, const float* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = a * x[i] + y[i];
}

// Its own kernel for the cache-file test, so no plan from another test is in memory.
__global__ void stream_offset(const float* x, float* y, std::size_t n, float b) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = x[i] + b;
}

// out = a * x + y over an image of nx x ny floats, one thread per pixel (any block shape covers it).
__global__ void axpy_image(const float* x, const float* y, float* out, unsigned nx, unsigned ny, float a) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < nx && j < ny) out[std::size_t(j) * nx + i] = a * x[std::size_t(j) * nx + i] + y[std::size_t(j) * nx + i];
}

constexpr const char* cache_env = "LAUNCHFIT_AUTOTUNE_TEST_CACHE";  // set for the second process only
constexpr const char* result_env = "LAUNCHFIT_AUTOTUNE_TEST_RESULT";
constexpr const char* trials_env = "LAUNCHFIT_AUTOTUNE_TEST_TRIALS";
constexpr const char* plan_env = "LAUNCHFIT_AUTOTUNE_TEST_PLAN";
constexpr const char* child_test = "AutotuneGpu.DISABLED_SecondProcessFindsThePlanInTheCacheFile";


using launchfit_test::autotune_plugin_path;
using launchfit_test::device_buffer;

// Small random integers as floats: every a*x + y below is exact, so results compare with ==.
std::vector<float> random_integers(std::size_t n, unsigned seed, int range = 100) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng));
  return v;
}

int sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  return sms;
}

// Median of 10 timed launches after one warm-up, with CUDA events on the default stream; -1 on a CUDA error.
double median_ms(const std::function<void()>& launch_once, int reps = 10) {
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    ADD_FAILURE() << "cudaEventCreate failed";
    return -1;
  }
  std::vector<float> times;
  launch_once();
  bool ok = cudaDeviceSynchronize() == cudaSuccess;
  for (int r = 0; ok && r < reps; ++r) {
    ok = cudaEventRecord(start, nullptr) == cudaSuccess;
    launch_once();
    ok = ok && cudaEventRecord(stop, nullptr) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess;
    float ms = 0;
    ok = ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    times.push_back(ms);
  }
  EXPECT_EQ(cudaEventDestroy(start), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(stop), cudaSuccess);
  if (!ok) {
    ADD_FAILURE() << "a CUDA call failed while timing: " << cudaGetErrorName(cudaGetLastError());
    return -1;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct sweep_result {
  double best_ms = -1;
  int best_block = 0;
  int best_blocks_per_sm = 0;
  int configurations = 0;
  long long launches = 0;  // every launch of the kernel, warm-ups included
};

// Every block size 32..1024 (step 32) x every resident-block count 1..what fits, as fixed grids of
// blocks_per_sm x SMs through launchfit::fixed, each the median of 10 launches.
template <class Kernel>
sweep_result exhaustive_sweep(Kernel kernel, const std::function<void(int block, int grid)>& launch_fixed) {
  sweep_result out;
  const int sms = sm_count();
  const auto level = lf::logger()->level();
  lf::logger()->set_level(spdlog::level::warn);  // one new plan per point: keep the log to warnings
  for (int block = 32; block <= 1024; block += 32) {
    int active = 0;
    const cudaError_t st = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, kernel, block, 0);
    if (st != cudaSuccess) {
      ADD_FAILURE() << "cudaOccupancyMaxActiveBlocksPerMultiprocessor(" << block
                    << "): " << cudaGetErrorName(st);
      break;
    }
    for (int bps = 1; bps <= active; ++bps) {
      const double ms = median_ms([&] { launch_fixed(block, bps * sms); });
      out.launches += 11;
      ++out.configurations;
      if (ms >= 0 && (out.best_ms < 0 || ms < out.best_ms)) {
        out.best_ms = ms;
        out.best_block = block;
        out.best_blocks_per_sm = bps;
      }
    }
  }
  lf::logger()->set_level(level);
  return out;
}

void print_comparison(const char* kernel, const lf::plan& tuned, double tuned_ms, const sweep_result& best) {
  const double ratio = best.best_ms > 0 ? tuned_ms / best.best_ms : 0;
  std::printf(
      "autotune vs exhaustive best: %.3f (%s: autotune block=%d blocks/SM=%d %.4f ms after %d trials "
      "in %.1f ms; exhaustive best block=%d blocks/SM=%d %.4f ms over %d configurations)\n",
      ratio, kernel, tuned.block_threads, tuned.blocks_per_sm, tuned_ms, tuned.trials, tuned.tuning_ms,
      best.best_block, best.best_blocks_per_sm, best.best_ms, best.configurations);
  std::fflush(stdout);
}

// Elements where y != y0 + times * (a * x): saxpy_accumulate applied `times` times. The inputs are small
// integers, so every expected value is exact in float.
std::size_t accumulate_mismatches(const std::vector<float>& y, const std::vector<float>& x,
                                  const std::vector<float>& y0, float a, float times) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < y.size(); ++i) bad += !(y[i] == y0[i] + times * (a * x[i]));
  return bad;
}

// saxpy_accumulate's data: y starts at y0 and every launch adds a*x. restore() puts y0 back with a
// synchronous copy on the legacy default stream, the trials' stream, so it is ordered before the next launch.
struct accumulating_saxpy {
  const std::size_t n;
  const float a = 3.0f;
  const std::vector<float> x, y0;
  device_buffer<float> dx, dy, dy0;
  std::atomic<int> restores{0}, restore_failures{0};

  accumulating_saxpy(std::size_t count, unsigned seed)
      : n(count), x(random_integers(count, seed)), y0(random_integers(count, seed + 1)), dx(count), dy(count),
        dy0(count) {
    dx.upload(x);
    dy0.upload(y0);
    copy_y0();
  }
  void restore() {
    ++restores;
    copy_y0();
  }
  // Elements of y that are not y0 + times * a * x.
  std::size_t mismatches(float times) const { return accumulate_mismatches(dy.download(), x, y0, a, times); }

 private:
  void copy_y0() {
    if (cudaMemcpy(dy.ptr, dy0.ptr, dy.bytes(), cudaMemcpyDeviceToDevice) != cudaSuccess) ++restore_failures;
  }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class AutotuneGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
#ifndef LAUNCHFIT_AUTOTUNE_PLUGIN
    if (!std::filesystem::exists(autotune_plugin_path()))
      GTEST_SKIP() << "built without the autotune plugin (LAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
    ASSERT_TRUE(std::filesystem::exists(autotune_plugin_path())) << autotune_plugin_path();
    const lf::plugin_info info = lf::load_plugin(autotune_plugin_path());
    ASSERT_EQ(info.name, "autotune");
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    sms_ = sm_count();
    ASSERT_GT(sms_, 0);
  }
  int sms_ = 0;
};

// Sizes that are no multiple of any block, in one size bucket each (floor(log2 n) + 1).
constexpr std::size_t stream_n4 = (std::size_t(1) << 23) + 12345;  // 128 MB in, 128 MB out
constexpr std::size_t saxpy_n = (std::size_t(1) << 25) + 3;        // 128 MB per vector

auto stream_spec(std::size_t n4) { return lf::use("autotune(max_trials=40)").grid_stride(n4).rerunnable(); }

}  // namespace

TEST_F(AutotuneGpu, RerunnableStreamingKernelIsTunedAndCorrect) {
  const std::size_t n4 = stream_n4;
  const auto h_in = random_integers(4 * n4, 11);
  device_buffer<float4> in(n4), out(n4);
  ASSERT_EQ(cudaMemcpy(in.ptr, h_in.data(), in.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  out.poison();

  const auto spec = stream_spec(n4);
  lf::launch(stream_scale, spec, static_cast<const float4*>(in.ptr), out.ptr, n4, 2.0f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> h_out(4 * n4);
  ASSERT_EQ(cudaMemcpy(h_out.data(), out.ptr, out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < h_out.size(); ++i) bad += !(h_out[i] == 2.0f * h_in[i]);
  EXPECT_EQ(bad, 0u) << "elements differ from 2 * in";

  const lf::plan& p = lf::plan_for(stream_scale, spec);  // the cached plan: no tuning, no launch
  std::printf("stream_scale: %s\n  reason: %s\n  trials=%d tuning_ms=%.2f match=%s\n", p.to_string().c_str(),
              p.reason.c_str(), p.trials, p.tuning_ms, p.match.c_str());
  EXPECT_GT(p.trials, 0);
  EXPECT_LE(p.trials, 40);
  EXPECT_GT(p.tuning_ms, 0.0);
  EXPECT_EQ(p.policy, "autotune(max_trials=40)");
  EXPECT_TRUE(p.match == "computed" || p.match == "cache-file")
      << p.match;                                             // cache-file under LAUNCHFIT_CACHE
  EXPECT_TRUE(contains(p.reason, "timed plan")) << p.reason;  // "1 timed plan" under a slow sanitizer
  EXPECT_EQ(p.block_threads % 32, 0);
  EXPECT_GE(p.blocks_per_sm, 1);

  // Another n in the same size bucket: the same plan, no tuning; the tail beyond n stays untouched.
  const std::size_t n4b = (std::size_t(1) << 23) + 1;
  out.poison();
  const auto spec_b = stream_spec(n4b);
  lf::launch(stream_scale, spec_b, static_cast<const float4*>(in.ptr), out.ptr, n4b, 2.0f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(&lf::plan_for(stream_scale, spec_b), &p);
  ASSERT_EQ(cudaMemcpy(h_out.data(), out.ptr, out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  bad = 0;
  std::size_t written_past_n = 0;
  for (std::size_t i = 0; i < h_out.size(); ++i) {
    if (i < 4 * n4b) {
      bad += !(h_out[i] == 2.0f * h_in[i]);
    } else {
      written_past_n += !std::isnan(h_out[i]);
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(written_past_n, 0u);
}

// 2-D work whose kernel indexes by blockDim (block_x_free()): autotune also times wider 2-D blocks of the
// fastest size; whichever block it keeps, the launch covers the image exactly (ragged edges: 3000 x 1999),
// and every pixel is checked.
TEST_F(AutotuneGpu, TwoDimensionalWorkTimesWiderBlocksAndCoversTheImage) {
  const unsigned nx = 3000, ny = 1999;
  const std::size_t n = std::size_t(nx) * ny;
  const auto hx = random_integers(n, 31), hy = random_integers(n, 32);
  device_buffer<float> x(n), y(n), out(n);
  ASSERT_EQ(cudaMemcpy(x.ptr, hx.data(), x.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y.ptr, hy.data(), y.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  out.poison();
  const auto spec = lf::use("autotune").items({nx, ny}).block_x_free().rerunnable();
  const lf::launched l =
      lf::launch(axpy_image, spec, static_cast<const float*>(x.ptr), static_cast<const float*>(y.ptr), out.ptr, nx,
                 ny, 3.0f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const lf::plan& p = l.plan();
  std::printf("axpy_image %ux%u: %s\n  reason: %s\n  trials=%d tuning_ms=%.2f\n", nx, ny, p.to_string().c_str(),
              p.reason.c_str(), p.trials, p.tuning_ms);
  EXPECT_TRUE(contains(p.reason, "wider 2-D block")) << p.reason;
  EXPECT_EQ(p.block.x % 32, 0u) << p.to_string();
  EXPECT_EQ(p.block.z, 1u) << p.to_string();
  EXPECT_EQ(l.grid.x, (nx + p.block.x - 1) / p.block.x);
  EXPECT_EQ(l.grid.y, (ny + p.block.y - 1) / p.block.y);
  std::vector<float> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), out.ptr, out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += !(h[i] == 3.0f * hx[i] + hy[i]);
  EXPECT_EQ(bad, 0u) << "pixels differ from 3 x + y";
}

// An accumulating kernel tuned with a reset is applied exactly once, however many trials ran; with
// rerunnable() as well, trials repeat it back to back between resets.
void expect_accumulation_applied_once(bool back_to_back) {
  accumulating_saxpy data(saxpy_n, 21);
  ASSERT_EQ(data.restore_failures.load(), 0);
  const std::size_t n = data.n;
  const float a = data.a;
  auto spec = lf::use(back_to_back ? "autotune(max_trials=40,max_ms=1000)" : "autotune(max_trials=40)").grid_stride(n);
  if (back_to_back) spec.rerunnable();
  spec.reset([&] { data.restore(); });
  lf::launch(saxpy_accumulate, spec, a, static_cast<const float*>(data.dx.ptr), data.dy.ptr, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(data.restore_failures.load(), 0);

  const lf::plan& p = lf::plan_for(saxpy_accumulate, spec);
  std::printf("saxpy_accumulate%s: %s\n  reason: %s\n  trials=%d tuning_ms=%.2f resets=%d\n",
              back_to_back ? " (rerunnable + reset)" : "", p.to_string().c_str(), p.reason.c_str(), p.trials,
              p.tuning_ms, data.restores.load());
  EXPECT_GT(p.trials, 0);
  EXPECT_LE(p.trials, 40);
  EXPECT_GT(data.restores.load(), 0);  // trials ran, each after a reset
  // Exactly one application, however many trials ran.
  EXPECT_EQ(data.mismatches(1.0f), 0u) << "y != y0 + 1 * a * x";

  // A cache hit neither tunes nor resets: a second launch adds a*x once more.
  const int resets_before = data.restores.load();
  lf::launch(saxpy_accumulate, spec, a, static_cast<const float*>(data.dx.ptr), data.dy.ptr, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(data.restores.load(), resets_before);
  EXPECT_EQ(data.mismatches(2.0f), 0u) << "y != y0 + 2 * a * x";
}

TEST_F(AutotuneGpu, AccumulatingKernelWithResetIsAppliedExactlyOnce) { expect_accumulation_applied_once(false); }

TEST_F(AutotuneGpu, RerunnableAccumulatingKernelWithResetIsAppliedExactlyOnce) {
  expect_accumulation_applied_once(true);
}

// Benchmark figures: the tuned plan's time over the best of every block x blocks-per-SM. Printed only.
TEST_F(AutotuneGpu, ExhaustiveSweepComparison) {
  {
    const std::size_t n4 = stream_n4;
    const auto h_in = random_integers(4 * n4, 31);
    device_buffer<float4> in(n4), out(n4);
    ASSERT_EQ(cudaMemcpy(in.ptr, h_in.data(), in.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    out.poison();
    const float4* cin = in.ptr;
    const auto spec = stream_spec(n4);
    const double tuned_ms = median_ms([&] { lf::launch(stream_scale, spec, cin, out.ptr, n4, 2.0f); });
    const lf::plan& tuned = lf::plan_for(stream_scale, spec);
    EXPECT_GT(tuned.trials, 0);
    const sweep_result best = exhaustive_sweep(stream_scale, [&](int block, int grid) {
      lf::launch(stream_scale, lf::fixed(block, grid).grid_stride(n4), cin, out.ptr, n4, 2.0f);
    });
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_GT(best.configurations, 32);
    EXPECT_GT(tuned_ms, 0.0);
    print_comparison("stream_scale", tuned, tuned_ms, best);
    std::vector<float> h_out(4 * n4);
    ASSERT_EQ(cudaMemcpy(h_out.data(), out.ptr, out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < h_out.size(); ++i) bad += !(h_out[i] == 2.0f * h_in[i]);
    EXPECT_EQ(bad, 0u);
  }
  {
    accumulating_saxpy data(saxpy_n, 41);
    ASSERT_EQ(data.restore_failures.load(), 0);
    const std::size_t n = data.n;
    const float a = data.a;
    const auto spec = lf::use("autotune(max_trials=40)").grid_stride(n).reset([&] { data.restore(); });
    const float* cx = data.dx.ptr;
    float* y = data.dy.ptr;
    long long launches = 0;
    const double tuned_ms = median_ms([&] {
      lf::launch(saxpy_accumulate, spec, a, cx, y, n);
      ++launches;
    });
    const lf::plan& tuned = lf::plan_for(saxpy_accumulate, spec);
    EXPECT_GT(tuned.trials, 0);
    const sweep_result best = exhaustive_sweep(saxpy_accumulate, [&](int block, int grid) {
      lf::launch(saxpy_accumulate, lf::fixed(block, grid).grid_stride(n), a, cx, y, n);
      ++launches;
    });
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(data.restore_failures.load(), 0);
    EXPECT_EQ(launches, 11 + best.launches);
    print_comparison("saxpy_accumulate", tuned, tuned_ms, best);
    // Every launch added a*x exactly once (integers below 2^24: exact in float).
    ASSERT_LT(100.0 + double(launches) * 300.0, double(1 << 24));
    EXPECT_EQ(data.mismatches(float(launches)), 0u) << "y != y0 + " << launches << " * a * x";
  }
}

// Tune once with a cache file, then run this binary again as a second process: the plan comes from the
// file and nothing is timed there.
TEST_F(AutotuneGpu, CacheFileServesASecondProcessWithoutTuning) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string tag = std::to_string(::getpid());
  const std::string file = dir + "/launchfit-autotune-gpu-" + tag + ".json";
  const std::string result = dir + "/launchfit-autotune-gpu-" + tag + ".result";
  const std::string log = dir + "/launchfit-autotune-gpu-" + tag + ".log";
  for (const auto& f : {file, result, log}) std::filesystem::remove(f);

  const std::size_t n = (std::size_t(1) << 24) + 5;
  const auto x = random_integers(n, 51);
  device_buffer<float> dx(n), dy(n);
  dx.upload(x);
  dy.poison();
  std::atomic<int> resets{0};
  const auto spec = lf::use("autotune(max_trials=24)").grid_stride(n).reset([&] {
    ++resets;
  });  // idempotent kernel: count only

  lf::set_cache_file(file);
  lf::launch(stream_offset, spec, static_cast<const float*>(dx.ptr), dy.ptr, n, 0.5f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const lf::plan& p = lf::plan_for(stream_offset, spec);
  EXPECT_EQ(p.match, "computed");
  EXPECT_GT(p.trials, 0);
  EXPECT_GT(resets.load(), 0);
  EXPECT_GE(lf::stored_plan_count(), 1u);
  lf::close_cache_file();
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_TRUE(contains(read_text(file), "autotune(max_trials=24)"));
  {
    const auto y = dy.download();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += !(y[i] == x[i] + 0.5f);
    EXPECT_EQ(bad, 0u);
  }

  // The second process: this binary, only the (disabled by default) child test, told where to look.
  char exe[4096] = {};
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(len, 0);
  const std::string filter = std::string("--gtest_filter=") + child_test;
  std::vector<std::string> args = {exe, filter, "--gtest_also_run_disabled_tests"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string plan_text = std::to_string(p.block_threads) + "x" + std::to_string(p.blocks_per_sm);
  ASSERT_EQ(::setenv(cache_env, file.c_str(), 1), 0);
  ASSERT_EQ(::setenv(result_env, result.c_str(), 1), 0);
  ASSERT_EQ(::setenv(trials_env, std::to_string(p.trials).c_str(), 1), 0);
  ASSERT_EQ(::setenv(plan_env, plan_text.c_str(), 1), 0);
  posix_spawn_file_actions_t actions;
  ASSERT_EQ(posix_spawn_file_actions_init(&actions), 0);
  ASSERT_EQ(posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
            0);
  ASSERT_EQ(posix_spawn_file_actions_adddup2(&actions, 1, 2), 0);
  pid_t child = 0;
  const int spawned = posix_spawn(&child, exe, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  for (const char* v : {cache_env, result_env, trials_env, plan_env}) ::unsetenv(v);
  ASSERT_EQ(spawned, 0) << "posix_spawn " << exe;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);

  std::string child_log = read_text(log);
  // The child's gtest summary is not this test's: keep ctest's skip pattern from matching it.
  for (std::size_t at; (at = child_log.find("[  SKIPPED ]")) != std::string::npos;)
    child_log.replace(at, 12, "[ skipped  ]");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "second process failed:\n" << child_log;
  EXPECT_EQ(read_text(result), "ok") << "second process did not confirm the plan came from the file:\n"
                                     << child_log;
  std::istringstream lines(child_log);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("second process:", 0) == 0) std::printf("%s\n", line.c_str());
  for (const auto& f : {file, result, log}) std::filesystem::remove(f);
}

// Runs only as the second process of CacheFileServesASecondProcessWithoutTuning.
TEST_F(AutotuneGpu, DISABLED_SecondProcessFindsThePlanInTheCacheFile) {
  const char* file = std::getenv(cache_env);
  const char* result = std::getenv(result_env);
  const char* trials = std::getenv(trials_env);
  const char* plan_text = std::getenv(plan_env);
  if (!file || !result || !trials || !plan_text)
    GTEST_SKIP() << "runs only as the second process of the cache-file test";

  lf::set_cache_file(file, lf::cache_file_mode::frozen);
  EXPECT_GE(lf::stored_plan_count(), 1u);
  const std::size_t n = (std::size_t(1) << 24) + 5;
  const auto x = random_integers(n, 51);
  device_buffer<float> dx(n), dy(n);
  dx.upload(x);
  dy.poison();
  std::atomic<int> resets{0};
  const auto spec = lf::use("autotune(max_trials=24)").grid_stride(n).reset([&] { ++resets; });
  lf::launch(stream_offset, spec, static_cast<const float*>(dx.ptr), dy.ptr, n, 0.5f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const lf::plan& p = lf::plan_for(stream_offset, spec);
  std::printf("second process: %s match=%s trials=%d\n", p.to_string().c_str(), p.match.c_str(), p.trials);
  EXPECT_EQ(p.match, "cache-file");
  EXPECT_EQ(std::to_string(p.trials), trials);  // the first process's tuning, recorded in the file
  EXPECT_EQ(std::to_string(p.block_threads) + "x" + std::to_string(p.blocks_per_sm), plan_text);
  EXPECT_EQ(resets.load(), 0);  // no trial ran here
  const auto y = dy.download();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += !(y[i] == x[i] + 0.5f);
  EXPECT_EQ(bad, 0u);
  lf::close_cache_file();
  if (!HasFailure()) std::ofstream(result) << "ok";
}

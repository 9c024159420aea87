// SPDX-License-Identifier: MIT
// logging — what launchfit tells production logs, and how to route it.
//
// Every NEW plan is logged once at info through the spdlog logger named "launchfit" (stderr by default):
// kernel, device, block, grid rule, smem, occupancy and its limiter, registers, spill bytes, policy and
// why. A plan is new once per (device, kernel, policy + parameters, smem rule); later launches log nothing
// at info. Warnings: a kernel that spills to local memory, and a policy that could not reach its goal.
//
//   build/demos/logging
//   LAUNCHFIT_LOG_FORMAT=json build/demos/logging     # JSON lines from the start
//   LAUNCHFIT_LOG_LEVEL=trace build/demos/logging     # also one line per launch (never in production)
//   SPDLOG_LEVEL=launchfit=warn build/demos/logging   # warnings only
//
// The demo itself writes to stdout; launchfit's lines are the ones on stderr, prefixed [launchfit].

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <launchfit/log.hpp>
#include <string>
#include <vector>

#include "demo.hpp"

using launchfit_demo::device_buffer;

// ---- kernels --------------------------------------------------------------------------------------------

__global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// 48 accumulators stay live across a loop whose trip count is only known at run time, but
// __launch_bounds__(1024, 2) caps the kernel at 32 registers per thread: the compiler spills to local memory
// (ptxas -v reports spill stores and loads), and launchfit warns about it once.
__global__ void __launch_bounds__(1024, 2) spilling_kernel(const float* x, float* y, int n, int rounds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc[48];
#pragma unroll
  for (int k = 0; k < 48; ++k) acc[k] = x[i] + static_cast<float>(k);
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = acc[k] * 0.5f + static_cast<float>(r + k);  // x 0.5 is exact
  }
  float s = 0;
#pragma unroll
  for (int k = 0; k < 48; ++k) s += acc[k];
  y[i] = s;
}

// One float in flight per thread: bytes_in_flight(4) cannot reach its target even at full occupancy.
__global__ void stream_sum(const float* x, long long n, double* total) {
  double acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc += x[i];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, acc);
}

namespace {

void step(const char* text) { std::printf("\n--- %s\n", text); }

int run_logging() {
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  LAUNCHFIT_DEMO_CHECK(cudaFree(nullptr));
  std::printf("logging: %s (%s); launchfit's log level is %s\n", dev.name.c_str(), dev.arch().c_str(),
              spdlog::level::to_string_view(launchfit::logger()->level()).data());
  bool ok = true;

  const int n = 1 << 20;
  std::vector<float> x(n), y0(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.25f;  // exact in float, sums exact in double
    y0[i] = static_cast<float>(i % 7);
  }
  device_buffer<float> dx(n), dy(n);
  device_buffer<double> dtotal(1);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  auto check_saxpy = [&](float a, const char* what) {
    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    std::vector<float> y(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += std::fabs(y[i] - (a * x[i] + y0[i])) > 1e-5f * (1.0f + std::fabs(y[i]));
    std::printf("    verified %s: %s\n", what, wrong ? "MISMATCH" : "OK");
    ok &= wrong == 0;
  };
  auto reset_y = [&] { LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice)); };

  // ---- 1. text lines ----------------------------------------------------------------------------------------
  step("1. text: the first launch of a (kernel, policy) logs its plan; the second logs nothing");
  reset_y();
  launchfit::launch(saxpy, launchfit::max_occupancy().items(n), 2.0f, dx.get(), dy.get(), n);
  launchfit::launch(saxpy, launchfit::max_occupancy().items(n), 1.0f, dx.get(), dy.get(), n);  // same plan: silent
  check_saxpy(3.0f, "saxpy twice (y = 3x + y)");

  step("2. text: a kernel that spills gets one warning");
  {
    const int rounds = 20;
    device_buffer<float> out(n);
    launchfit::launch(spilling_kernel, launchfit::max_occupancy().items(n), dx.get(), out.get(), n, rounds);
    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    cudaFuncAttributes attr{};
    LAUNCHFIT_DEMO_CHECK(cudaFuncGetAttributes(&attr, spilling_kernel));
    std::vector<float> got(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i += 97) {
      float acc[48];
      for (int k = 0; k < 48; ++k) acc[k] = x[i] + static_cast<float>(k);
      for (int r = 0; r < rounds; ++r)
        for (int k = 0; k < 48; ++k) acc[k] = acc[k] * 0.5f + static_cast<float>(r + k);
      float s = 0;
      for (int k = 0; k < 48; ++k) s += acc[k];
      wrong += std::fabs(got[i] - s) > 1e-4f * std::fabs(s);
    }
    std::printf("    the kernel: %d registers, %zu B local memory per thread; verified: %s\n", attr.numRegs,
                attr.localSizeBytes, wrong ? "MISMATCH" : "OK");
    ok &= wrong == 0 && attr.localSizeBytes > 0;
  }

  // ---- 2. JSON lines --------------------------------------------------------------------------------------
  step("3. JSON lines (set_log_format(json), or LAUNCHFIT_LOG_FORMAT=json): a policy that falls short warns");
  launchfit::set_log_format(launchfit::log_format::json);
  {
    const long long m = n;
    LAUNCHFIT_DEMO_CHECK(cudaMemset(dtotal.get(), 0, sizeof(double)));
    // 4 B per thread: 64 warps x 32 x 4 B = 8 KB in flight per SM at most, below the device's target.
    launchfit::launch(stream_sum, launchfit::bytes_in_flight(4).grid_stride(m), dx.get(), m, dtotal.get());
    double got = 0, want = 0;
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(&got, dtotal.get(), sizeof got, cudaMemcpyDeviceToHost));
    for (float v : x) want += v;
    std::printf("    verified stream_sum: GPU %.2f, CPU %.2f: %s\n", got, want, got == want ? "OK" : "MISMATCH");
    ok &= got == want;
    reset_y();
    launchfit::launch(saxpy, launchfit::fixed(256).items(n), 2.0f, dx.get(), dy.get(), n);  // new policy: new plan
    check_saxpy(2.0f, "saxpy under fixed(256)");
  }

  // ---- 3. your own sinks ----------------------------------------------------------------------------------
  step("4. custom sinks: set_logger() with stderr + an in-memory ring buffer (e.g. for a health endpoint)");
  {
    auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(128);
    ring->set_pattern("%v");  // JSON lines must be nothing but the object
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");
    auto mine = std::make_shared<spdlog::logger>("launchfit", spdlog::sinks_init_list{console, ring});
    mine->set_level(spdlog::level::info);
    launchfit::set_logger(mine);

    reset_y();
    for (int rep = 0; rep < 5; ++rep)  // one new plan, five launches
      launchfit::launch(saxpy, launchfit::fixed(512).items(n), 1.0f, dx.get(), dy.get(), n);
    check_saxpy(5.0f, "saxpy x5 under fixed(512)");

    const std::vector<std::string> lines = ring->last_formatted();
    int new_plans = 0;
    bool all_json = !lines.empty();
    for (const std::string& line : lines) {
      std::printf("    captured: %s", line.c_str());
      if (line.empty() || line.back() != '\n') std::printf("\n");
      all_json &= !line.empty() && line.front() == '{';
      new_plans += line.find("\"event\":\"new_plan\"") != std::string::npos;
    }
    const bool captured_ok = all_json && new_plans == 1;
    std::printf("    %zu line(s) captured, %d new plan for 5 launches, all JSON: %s\n", lines.size(), new_plans,
                captured_ok ? "OK" : "MISMATCH");
    ok &= captured_ok;
    launchfit::set_logger(nullptr);  // back to launchfit's default logger
    launchfit::set_log_format(launchfit::log_format::text);
  }

  std::printf("\nlogging: %s\n", ok ? "all results match the CPU and the log said what it should" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"launchfit's plan log: text and JSON lines, spill and shortfall warnings, custom spdlog sinks",
               "logging"};
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  return launchfit_demo::run("logging", run_logging);
}

// SPDX-License-Identifier: MIT
#pragma once
// Shared by the launchfit demos: every CUDA runtime status becomes a launchfit::error that names the call,
// one command-line and exit-code rule for every main(), random inputs and the checks the demos print.
//
// Exit codes, the same in every demo: 0 ok, 1 failed (a wrong result, a refused launch), 2 usage (a bad
// command line), 3 environment (no GPU or driver where one is required). Errors go to stderr, prefixed with
// the demo's name.

#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <launchfit/error.hpp>
#include <launchfit/occupancy.hpp>
#include <launchfit/plan.hpp>
#include <string>
#include <vector>

// Throws launchfit::error("<expr>", "<cudaError name>", "<description>") unless expr is cudaSuccess.
#define LAUNCHFIT_DEMO_CHECK(expr) ::launchfit_demo::check((expr), #expr)

namespace launchfit_demo {

enum exit_code : int { exit_ok = 0, exit_failed = 1, exit_usage = 2, exit_environment = 3 };

inline void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so the message below is the whole story
  throw launchfit::error(call, cudaGetErrorName(status), cudaGetErrorString(status));
}

// True for "there is no GPU or no driver here", from launchfit (driver API) or the CUDA runtime.
inline bool is_no_gpu(const launchfit::error& e) {
  const std::string& c = e.cuda_error();
  return c == "CUDA_ERROR_NO_DEVICE" || c == "CUDA_ERROR_STUB_LIBRARY" || c == "cudaErrorNoDevice" ||
         c == "cudaErrorInsufficientDriver" || c == "cudaErrorStubLibrary";
}

// LAUNCHFIT_REQUIRE_GPU=1 turns a missing GPU into a failure (set by the GPU test runs).
inline bool gpu_required() {
  const char* v = std::getenv("LAUNCHFIT_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

// A command line parsed with CLI11; make the app as CLI::App app{what, name}, so that the usage names the
// demo (never the path it was started from). Returns
// exit_ok after --help, exit_usage after a bad command line (said on stderr), -1 to go on.
inline int parse_command_line(CLI::App& app, int argc, char** argv) {
  app.footer(
      "Exit status: 0 ok, 1 failed, 2 usage, 3 no GPU or driver where one is required "
      "(LAUNCHFIT_REQUIRE_GPU=1).");
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return exit_ok;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", app.get_name().c_str(), e.what(),
                 app.get_name().c_str());
    return exit_usage;
  }
}

// Runs a demo body (returns the exit code). A launchfit::error ends the demo with its message on stderr:
// exit_environment when the machine has no CUDA device/driver and LAUNCHFIT_REQUIRE_GPU is 1, exit_ok (the
// demo says nothing was launched) when it is not, exit_failed otherwise. `no_gpu`, when given, is called
// instead of that message, to show what can be shown without a GPU (dropin's offline plans).
template <class Body>
int run(const char* name, Body body, const std::function<int()>& no_gpu = {}) {
  // launchfit logs to stderr; line-buffered stdout keeps both in order when they go to one file.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return body();
  } catch (const launchfit::error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    if (is_no_gpu(e)) {
      if (gpu_required()) {
        std::fprintf(stderr, "%s: FAILED: LAUNCHFIT_REQUIRE_GPU=1 but there is no usable CUDA device\n", name);
        return exit_environment;
      }
      if (no_gpu) return no_gpu();
      std::printf("%s: no CUDA device/driver on this machine, nothing was launched (exit 0; set "
                  "LAUNCHFIT_REQUIRE_GPU=1 to make this a failure)\n",
                  name);
      return exit_ok;
    }
    std::fprintf(stderr, "%s: FAILED\n", name);
    return exit_failed;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: FAILED: %s\n", name, e.what());
    return exit_failed;
  }
}

// Prints what a plan says, indented: the plan, its occupancy and the policy's reason.
inline void print_plan(const launchfit::plan& p, const launchfit::work& w) {
  const launchfit::dims grid = launchfit::grid_for(p, w);
  std::printf("    plan:      %s\n", p.to_string().c_str());
  std::printf("    grid:      %s blocks for this launch\n", grid.to_string().c_str());
  std::printf("    occupancy: %s\n", p.occupancy.summary().c_str());
  std::printf("    why:       %s\n", p.reason.c_str());
  if (!p.warning.empty()) std::printf("    warning:   %s\n", p.warning.c_str());
}

// Uniform in [-1, 1): a 64-bit LCG, cheap even in an unoptimised build.
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (float& f : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    f = static_cast<float>(static_cast<std::int32_t>(s >> 32)) * (1.0f / 2147483648.0f);
  }
  return v;
}

// saxpy's result y = a * x + y0 against a double-precision reference: the largest |y - want| / (1 + |want|).
inline double saxpy_max_relative_error(float a, const std::vector<float>& x, const std::vector<float>& y0,
                                       const std::vector<float>& y) {
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double want = static_cast<double>(a) * x[i] + y0[i];
    worst = std::max(worst, std::fabs(y[i] - want) / (1.0 + std::fabs(want)));
  }
  return worst;
}

// Runs `attempt`, which launchfit must refuse, and prints the refusal. False when it was not refused.
template <class Attempt>
bool expect_refusal(const char* what, Attempt attempt) {
  try {
    attempt();
    std::printf("    %s: NOT refused  MISMATCH\n", what);
    return false;
  } catch (const launchfit::error& e) {
    std::printf("    %s:\n      %s  OK\n", what, e.what());
    return true;
  }
}

// One device buffer, freed on scope exit (the demos throw on failure).
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n) : n_(n) {
    LAUNCHFIT_DEMO_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { (void)cudaFree(ptr_); }
  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return n_; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace launchfit_demo

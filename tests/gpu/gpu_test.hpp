// SPDX-License-Identifier: MIT
#pragma once
// Shared by the GPU tests: skip with a reason when no device is present, unless LAUNCHFIT_REQUIRE_GPU=1
// makes a missing GPU a failure (so a green run on a GPU machine means the tests really ran).

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace launchfit_test {

inline std::string gpu_absent_reason() {
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) return std::string("no CUDA device/driver: ") + cudaGetErrorName(st);
  if (count == 0) return "no CUDA device";
  return {};
}

// The line ctest reads as "skipped" (SKIP_REGULAR_EXPRESSION in tests/gpu/CMakeLists.txt): printed only where
// a test skips for want of a GPU, so a binary whose other tests skip for another reason (a child-process test,
// a missing plugin) and one of which fails still fails.
inline void say_skipped_without_gpu(const std::string& reason) {
  std::printf("launchfit-gpu-test: skipped without a GPU: %s\n", reason.c_str());
  std::fflush(stdout);
}

inline bool gpu_required() {
  const char* v = std::getenv("LAUNCHFIT_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

// A driver entry point through the runtime (the test binaries do not link libcuda).
template <class Fn>
Fn driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  // At 13.0, cuCtxGetDevice and cuCtxSynchronize resolve to their _v2 (an extra context parameter) although
  // cuda.h declares them without it: ask for the ABI the declarations have.
  const std::string n = name;
  const int version = n == "cuCtxGetDevice" || n == "cuCtxSynchronize" ? 12000 : 13000;
  const cudaError_t st = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q);
  if (st != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) return nullptr;
  return reinterpret_cast<Fn>(fn);
}

}  // namespace launchfit_test

#define LF_DRIVER(name) ::launchfit_test::driver_fn<decltype(&::name)>(#name)

#define LAUNCHFIT_REQUIRE_GPU_OR_SKIP()                                             \
  do {                                                                              \
    const std::string lf_reason_ = ::launchfit_test::gpu_absent_reason();           \
    if (!lf_reason_.empty()) {                                                      \
      if (::launchfit_test::gpu_required()) FAIL() << "GPU required: " << lf_reason_; \
      ::launchfit_test::say_skipped_without_gpu(lf_reason_);                        \
      GTEST_SKIP() << lf_reason_;                                                   \
    }                                                                               \
  } while (0)

#define LF_CUDA_CHECK(expr)                                                              \
  do {                                                                                   \
    const cudaError_t lf_st_ = (expr);                                                   \
    ASSERT_EQ(lf_st_, cudaSuccess) << #expr << ": " << cudaGetErrorName(lf_st_);          \
  } while (0)

// SPDX-License-Identifier: MIT
#pragma once
// Test doubles shared by the GPU tests, as spdlog's tests share test_sink.h: one typed device allocation
// instead of a copy per file.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "launchfit/plugin.hpp"

namespace launchfit_test {

// `count` elements of T in device memory (at least one byte is allocated, so a 0-element buffer still has
// a valid pointer to pass), freed on destruction. Transfers check their CUDA status as test assertions.
template <class T>
struct device_buffer {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count) : n(count) {
    const cudaError_t st = cudaMalloc(&ptr, std::max<std::size_t>(count, 1) * sizeof(T));
    if (st != cudaSuccess) throw std::runtime_error(std::string("cudaMalloc: ") + cudaGetErrorName(st));
  }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  std::size_t bytes() const { return n * sizeof(T); }
  void upload(const std::vector<T>& h) {
    ASSERT_EQ(h.size(), n);
    ASSERT_EQ(cudaMemcpy(ptr, h.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // Waits for the whole device first: kernels on non-blocking streams (which a plain cudaMemcpy does not
  // wait for) have finished before their output is read.
  std::vector<T> download() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void fill_bytes(int byte) { ASSERT_EQ(cudaMemset(ptr, byte, bytes()), cudaSuccess); }
  void poison() { fill_bytes(0xff); }  // NaN in every float, 0xffffffff in every unsigned
  void zero() { fill_bytes(0); }
};

// The autotune plugin this build made (LAUNCHFIT_AUTOTUNE_PLUGIN where the test's CMake names it).
inline std::string autotune_plugin_path() {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  return LAUNCHFIT_AUTOTUNE_PLUGIN;
#else
  return std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../../plugins/liblaunchfit-autotune.so";
#endif
}

// Loads the autotune plugin; false (with the reason in `why`) when this build has none.
inline bool load_autotune(std::string& why) {
  const std::string path = autotune_plugin_path();
  if (!std::filesystem::exists(path)) {
    why = "the autotune plugin is not built (" + path + ")";
    return false;
  }
  const launchfit::plugin_info info = launchfit::load_plugin(path);
  if (info.name != "autotune") {
    why = "plugin at " + path + " is '" + info.name + "'";
    return false;
  }
  return true;
}

}  // namespace launchfit_test

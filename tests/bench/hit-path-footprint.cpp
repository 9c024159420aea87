// SPDX-License-Identifier: MIT
// hit-path-footprint: the cache lines a cached launch touches, counted by a cache simulator. A launch on a real
// GPU host sits between driver calls that evict the caller's code and data, so every line the hit path touches
// is a miss there: on H100 hosts a hit cost 0.2-0.5 us more than a raw cuLaunchKernelEx, where the same code
// through the stub driver with warm caches costs 0.05 us. This program launches one driver-API kernel through
// the stub driver (tests/stub-driver) 2,000 times, each after running 2,048 other functions (about 100 KB of
// code) and reading 1 MB of other data, so that what a launch touches is out of the L1 caches; `raw` launches
// with the stub's cuLaunchKernelEx alone, `launchfit` with launchfit::launch (its spec written in the statement,
// as programs write it), `none` evicts and launches nothing (what the other two less it is their launches).
// hit-path-footprint.sh runs the three under Cachegrind and prints per launch the instructions, instruction-cache
// lines and data-cache lines (read and written) of each launch and what launchfit's hit path adds.
//
//   hit-path-footprint raw|launchfit|none [launches]

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "launchfit/launch.hpp"
#include "stub_driver.h"

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

namespace lf = launchfit;

namespace {

volatile unsigned sink;

// 2,048 distinct functions, each a few instructions of its own: running them all evicts the instruction cache.
template <unsigned I>
__attribute__((noinline)) void other_code(unsigned x) {
  sink = x * (I * 2654435761u + 1u) + I;
  sink = sink ^ (I << 3);
}
template <unsigned... I>
void run_other_code(std::integer_sequence<unsigned, I...>) {
  (other_code<I>(I), ...);
}
void evict_code() { run_other_code(std::make_integer_sequence<unsigned, 2048>{}); }

std::vector<unsigned char> other_data(1u << 20, 1);
__attribute__((noinline)) unsigned evict_data() {
  unsigned s = 0;
  for (std::size_t i = 0; i < other_data.size(); i += 64) s += other_data[i]++;
  return s;
}

const std::size_t params[] = {sizeof(float), sizeof(void*), sizeof(void*), sizeof(int)};
const CUstream stream = reinterpret_cast<CUstream>(0x30);
constexpr int n = 1 << 20;

__attribute__((noinline)) void launch_raw(decltype(&cuLaunchKernelEx) launch, const CUlaunchConfig* cfg, CUfunction f,
                                          void** args) {
  launch(cfg, f, args, nullptr);
}
__attribute__((noinline)) void launch_launchfit(const lf::kernel& k, float* x, float* y) {
  lf::launch(k, lf::max_occupancy().items(n).on(stream), 2.0f, x, y, n);
}

}  // namespace

int main(int argc, char** argv) {
  const bool raw = argc > 1 && std::strcmp(argv[1], "raw") == 0;
  const bool none = argc > 1 && std::strcmp(argv[1], "none") == 0;
  if (argc < 2 || (!raw && !none && std::strcmp(argv[1], "launchfit") != 0)) {
    std::fprintf(stderr, "usage: hit-path-footprint raw|launchfit|none [launches]\n");
    return 2;
  }
  const int launches = argc > 2 ? std::atoi(argv[2]) : 2000;
  const CUfunction f = launchfit_stub_function("_Z4axpyfPKfPfi", 16, 0, 1024, params, 4);
  void* fn = nullptr;
  if (cuGetProcAddress_v2("cuLaunchKernelEx", &fn, CUDA_VERSION, 0, nullptr) != CUDA_SUCCESS || !fn) return 1;
  const auto launch = reinterpret_cast<decltype(&cuLaunchKernelEx)>(fn);
  float* x = reinterpret_cast<float*>(0x1000);
  float* y = reinterpret_cast<float*>(0x2000);
  float a = 2.0f;
  int count = n;
  CUlaunchConfig cfg{};
  cfg.gridDimX = n / 256;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 256;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = stream;
  void* args[] = {&a, &x, &y, &count};
  const lf::kernel k(f);
  launch_launchfit(k, x, y);  // the miss, in both modes: the same start-up work
  unsigned s = 0;
  for (int i = 0; i < launches; ++i) {
    evict_code();
    s += evict_data();
    if (none) continue;
    if (raw) {
      launch_raw(launch, &cfg, f, args);
    } else {
      launch_launchfit(k, x, y);
    }
  }
  std::printf("%u launches (%u)\n", static_cast<unsigned>(launches), s);
  return 0;
}

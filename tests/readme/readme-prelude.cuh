// SPDX-License-Identifier: MIT
#pragma once
// What the README's examples use without declaring it, as the reader's own program would have it: the
// kernels (empty here: the examples are compiled, not run; tests/gpu/readme-test.cu runs the first one),
// the sizes and the device buffers. Names a block uses with another type are declared by an
// `<!-- example: ... -->` comment before that block (see extract-examples.sh).

#include <cuda_runtime.h>

#include <cstddef>
#include <launchfit/launchfit.hpp>
#include <map>
#include <string>

namespace lf = launchfit;

struct work_queue;

// The sizes, buffers and stream, as locals of every example (a lambda captures them as it would in the
// reader's function). Each example's body starts with them.
#define LAUNCHFIT_README_NAMES                                                                      \
  int n = 1 << 20, m = 1024, nx = 1024, ny = 1024, iters = 100;                                     \
  float a = 2.5f;                                                                                   \
  float *x = nullptr, *y = nullptr, *u = nullptr, *v = nullptr, *out = nullptr, *partial = nullptr; \
  const float *in = nullptr, *produced = nullptr;                                                   \
  unsigned* bins = nullptr;                                                                         \
  float4* bodies = nullptr;                                                                         \
  cudaStream_t stream = nullptr;                                                                    \
  work_queue* queue = nullptr

__global__ void sgemm_tiled(const float* a, const float* b, float* c, int n, int m, int k) {}
__global__ void stencil(const float* in, float* out, int nx, int ny) {}
__global__ void tree_reduce(const float* in, float* out, int n) {}
template <int BLOCK>
__global__ void reduce(const float* in, float* partial, unsigned n) {}
__global__ void nbody_tiles(float4* bodies, int tiles, int n) {}
__global__ void jacobi(float* u, float* v, int n, int iters) {}
__global__ void persistent(work_queue* queue) {}
__global__ void dsmem_histogram(const float* in, unsigned* bins, int n) {}
__global__ void consumer(const float* produced, float* out, int n) {}

// A metrics client of the kind a service already has (Prometheus-like counters with labels).
struct counter {
  void inc() {}
};
struct metrics_registry {
  counter counter(const std::string&, const std::map<std::string, std::string>&) { return {}; }
};
inline metrics_registry metrics;

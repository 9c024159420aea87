// SPDX-License-Identifier: MIT
// The README's "Using it" snippet, verbatim inside a test: it must compile in every build and give the right
// answers on a GPU.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpu_test.hpp"

// ---- README snippet (keep in sync with README.md) -------------------------------------------------------
#include <launchfit/launchfit.hpp>
namespace lf = launchfit;

__global__ void saxpy(float a, const float* x, float* y, int n);
__global__ void reduce(const float4* in, std::size_t n4, double* out);  // grid-stride, 2 x float4 per thread
__global__ void jacobi(float* u, float* v, int n, int iters);          // uses this_grid().sync()
// ----------------------------------------------------------------------------------------------------------

__global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void reduce(const float4* in, std::size_t n4, double* out) {
  double acc = 0;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  for (; i + stride < n4; i += 2 * stride) {
    const float4 a = in[i], b = in[i + stride];
    acc += double(a.x) + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
  }
  if (i < n4) acc += double(in[i].x) + in[i].y + in[i].z + in[i].w;
  atomicAdd(out, acc);
}

// iters sweeps of v[i] = (u[i-1] + u[i+1]) / 2 with fixed ends; the result ends in u when iters is even.
__global__ void jacobi(float* u, float* v, int n, int iters) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int it = 0; it < iters; ++it) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      v[i] = (i == 0 || i == n - 1) ? u[i] : 0.5f * (u[i - 1] + u[i + 1]);
    grid.sync();
    float* t = u;
    u = v;
    v = t;
  }
}

namespace {

template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

}  // namespace

TEST(Readme, UsingItSnippetRunsAndIsCorrect) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  const int n = 1 << 22;
  const int iters = 20;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> hx(n), hy(n), hu(n);
  for (int i = 0; i < n; ++i) hx[i] = dist(rng), hy[i] = dist(rng), hu[i] = dist(rng);
  const float a = 1.5f;
  float* x = to_device(hx);
  float* y = to_device(hy);
  float* u = to_device(hu);
  float* v = to_device(std::vector<float>(n, NAN));
  float4* in = reinterpret_cast<float4*>(x);
  double* out = to_device(std::vector<double>(1, 0.0));
  ASSERT_TRUE(x && y && u && v && out);
  cudaStream_t stream;
  LF_CUDA_CHECK(cudaStreamCreate(&stream));

  // ---- README snippet (keep in sync with README.md) -----------------------------------------------------
  // saxpy<<<(n + 255) / 256, 256>>>(a, x, y, n);
  lf::launch(saxpy, lf::max_occupancy().items(n), a, x, y, n);

  // 32 bytes in flight per thread: the fewest resident warps that keep 32 KB per SM in flight (50% on H200)
  lf::launch(reduce, lf::bytes_in_flight(32).grid_stride(n / 4).on(stream), in, n / 4, out);

  // exactly the co-resident grid, launched cooperatively; refused before launch if it cannot co-reside
  lf::launch(jacobi, lf::cooperative(), u, v, n, iters);

  // the plan without launching: exactly what launch() with the same spec runs (give it the work)
  const lf::plan& p = lf::plan_for(saxpy, lf::max_occupancy().items(n));   // p.block_threads, p.reason
  // ... arguments computed from p.block_threads, then that very plan launched
  lf::launch(saxpy, lf::planned(p).items(n), a, x, y, n);
  // ---------------------------------------------------------------------------------------------------------

  LF_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_GT(p.block_threads, 0);
  const auto ry = to_host(y, n);
  std::size_t bad = 0;
  for (int i = 0; i < n; ++i) bad += ry[i] != std::fma(a, hx[i], std::fma(a, hx[i], hy[i]));  // saxpy ran twice
  EXPECT_EQ(bad, 0u);
  double want = 0;
  for (float f : hx) want += f;
  EXPECT_NEAR(to_host(out, 1)[0], want, 1e-6 * n);
  std::vector<float> cu = hu, cv(n);
  for (int it = 0; it < iters; ++it) {
    for (int i = 0; i < n; ++i) cv[i] = (i == 0 || i == n - 1) ? cu[i] : 0.5f * (cu[i - 1] + cu[i + 1]);
    std::swap(cu, cv);
  }
  const auto ru = to_host(u, n);
  std::size_t off = 0;
  for (int i = 0; i < n; ++i) off += std::fabs(ru[i] - cu[i]) > 1e-5f;
  EXPECT_EQ(off, 0u);
  cudaStreamDestroy(stream);
  for (void* ptr : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(u), static_cast<void*>(v),
                    static_cast<void*>(out)})
    cudaFree(ptr);
}

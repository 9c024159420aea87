// SPDX-License-Identifier: MIT
// policy-quality: how close launchfit's policies come to the best launch configuration an exhaustive sweep
// finds, over kernels limited by different things (DRAM latency and bandwidth, registers, shared memory,
// atomics, launch overhead) and several problem sizes.
//
// For every kernel and size it times: the naive <<<ceil(n / (256 x items per thread)), 256>>>, launchfit's
// max_occupancy and bytes_in_flight (with the kernel's real bytes in flight per thread), the autotune plugin
// when it is loaded, and the oracle: the best of every block size {32, 64, ..., 1024} x resident blocks per
// SM {1 .. as many as fit} (grid = blocks/SM x SMs, capped by the work, for grid-stride kernels;
// one-item-per- thread kernels depend on the block size only), confirmed by re-timing its 3 fastest
// configurations together with every policy row (interleaved rounds; each row is the median of its rounds,
// pooled with those of rows and finalists that launch the same block and grid; the oracle is its finalists'
// own rounds).
// Every timed configuration is verified against a CPU reference on fresh random inputs, with outputs poisoned
// first. Grid-stride kernels are also swept at the full grid (one loop iteration per thread), which wins for
// wide elements.
//
// Rows fall in groups (streaming, narrow and wide grid-stride elements, small n, 2-D, other); the summary
// gives each policy's geometric mean of time/oracle over all rows and per group, and each policy's regret
// (time / the better of naive and max_occupancy on the same row). With --calibration FILE (written by
// launchfit-calibrate --out) a "calibrated" column runs bytes_in_flight with the measured target per SM.
//
// The 2-D group runs real 2-D kernels over nx x ny float images, one pixel per thread, launched through
// launchfit with items({nx, ny}) (launchfit shapes a policy's block of t threads as {32, t / 32}): a 5-point
// stencil reading through a shared-memory tile with a one-pixel halo ((bx + 2) x (by + 2) floats of dynamic
// shared memory, given to launchfit as an smem_per_block rule), and out = a x + y. Images of 1024x1024,
// 4096x4096 and 8192x8192 (--quick: 512x512; --sizes does not apply). Their naive launch is the classic
// dim3 block(16, 16) with grid ceil(nx / 16) x ceil(ny / 16); their oracle sweeps block shapes bx in {32, 64,
// 128, 256} x by in {1, 2, 4, 8, 16, 32} of at most the kernel's max threads, plus 16x16 (19 shapes), the
// grid covering the image. Their rows print blocks and grids as "32x8"; the JSON gives every row block_y,
// grid_y, nx and ny, and every sweep point [kernel, n, block, grid, blocks/SM, ms, block_y, grid_y].
//
//   policy-quality [--quick] [--json PATH] [--autotune-plugin PATH] [--autotune-policy STRING]
//                  [--calibration FILE] [--repeats N] [--sizes 20,24,26] [--only reduce1,stencil2d]
//                  [--device N]
//
// A full run takes about 2 minutes on an H200 (most of it the sweeps of the 2^26-element rows and preparing
// their inputs; the 2-D group adds about 10 s, most of it preparing the 8192x8192 images);
// --quick (2^16 and 2^18 elements, n-body at 16,384 bodies, 512x512 images, 2 repeats) well under a minute.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../../demos/calibrate/calibration.cpp"  // the calibration file's reader (pure C++)
#include "bench_common.cuh"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"

namespace lf = launchfit;

namespace {

// ---- kernels ----------------------------------------------------------------------------------------------

__global__ void copy4(const float4* __restrict__ in, float4* __restrict__ out, std::size_t count) {
#pragma unroll 1
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = in[i];
  }
}

__global__ void saxpy(float a, const float* __restrict__ x, const float* __restrict__ y,
                      float* __restrict__ z, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) z[i] = fmaf(a, x[i], y[i]);
}

// 1D stencil of radius 8 over a shared-memory tile of blockDim x 32 outputs plus halo: dynamic shared memory
// grows with the block (128 KB at 1024 threads), so it limits residency for large blocks.
constexpr int stencil_radius = 8;
constexpr int stencil_items = 32;
__constant__ float stencil_taps[2 * stencil_radius + 1];

struct stencil_smem {
  std::size_t operator()(int block) const {
    return (static_cast<std::size_t>(block) * stencil_items + 2 * stencil_radius) * sizeof(float);
  }
};

__global__ void stencil1d(const float* __restrict__ in, float* __restrict__ out, std::size_t n) {
  extern __shared__ float tile[];
  const std::size_t start = static_cast<std::size_t>(blockIdx.x) * blockDim.x * stencil_items;
  const long long base = static_cast<long long>(start) - stencil_radius;
  const long long nn = static_cast<long long>(n);
#pragma unroll
  for (int k = 0; k < stencil_items; ++k) {
    const unsigned j = threadIdx.x + k * blockDim.x;
    const long long g = base + j;
    tile[j] = (g >= 0 && g < nn) ? in[g] : 0.f;
  }
  for (unsigned h = threadIdx.x; h < 2 * stencil_radius; h += blockDim.x) {
    const unsigned j = blockDim.x * stencil_items + h;
    const long long g = base + j;
    tile[j] = (g >= 0 && g < nn) ? in[g] : 0.f;
  }
  __syncthreads();
#pragma unroll 4
  for (int k = 0; k < stencil_items; ++k) {
    const unsigned j = threadIdx.x + k * blockDim.x;
    const std::size_t i = start + j;
    if (i < n) {
      float s = 0.f;
#pragma unroll
      for (int t = 0; t <= 2 * stencil_radius; ++t) s = fmaf(stencil_taps[t], tile[j + t], s);
      out[i] = s;
    }
  }
}

// Register-heavy: each thread holds a 32-vector, applies w = M v, v = w (1 - w^2 / 4) twice (M in constant
// memory). 32 inputs and 32 partial outputs stay live, so registers limit residency.
constexpr int heavy_dim = 32;
constexpr int heavy_rounds = 2;
__constant__ float heavy_matrix[heavy_dim * heavy_dim];

__global__ void reg_heavy(const float4* __restrict__ in, float4* __restrict__ out, std::size_t groups) {
  const std::size_t g = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (g >= groups) return;
  float v[heavy_dim];
#pragma unroll
  for (int q = 0; q < heavy_dim / 4; ++q) {
    const float4 t = in[q * groups + g];
    v[4 * q] = t.x;
    v[4 * q + 1] = t.y;
    v[4 * q + 2] = t.z;
    v[4 * q + 3] = t.w;
  }
#pragma unroll
  for (int r = 0; r < heavy_rounds; ++r) {
    float w[heavy_dim];
#pragma unroll
    for (int i = 0; i < heavy_dim; ++i) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < heavy_dim; ++j) s = fmaf(heavy_matrix[i * heavy_dim + j], v[j], s);
      w[i] = s * (1.f - 0.25f * s * s);
    }
#pragma unroll
    for (int i = 0; i < heavy_dim; ++i) v[i] = w[i];
  }
#pragma unroll
  for (int q = 0; q < heavy_dim / 4; ++q) {
    out[q * groups + g] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  }
}

// 256-bin histogram: shared-memory bins per block, then one global atomic per non-empty bin (the epilogue).
constexpr int hist_bins = 256;
__global__ void histogram256(const uint4* __restrict__ keys, std::size_t count,
                             unsigned long long* __restrict__ bins) {
  __shared__ unsigned local[hist_bins];
  for (unsigned b = threadIdx.x; b < hist_bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
#pragma unroll 1
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 k = keys[i];
    atomicAdd(&local[k.x & (hist_bins - 1)], 1u);
    atomicAdd(&local[k.y & (hist_bins - 1)], 1u);
    atomicAdd(&local[k.z & (hist_bins - 1)], 1u);
    atomicAdd(&local[k.w & (hist_bins - 1)], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < hist_bins; b += blockDim.x) {
    if (local[b]) atomicAdd(&bins[b], static_cast<unsigned long long>(local[b]));
  }
}

// All-pairs n-body step: every body's acceleration from all others (softened gravity), one body per thread,
// the bodies streamed through shared-memory tiles of blockDim bodies. At 16,384 bodies a 256-thread block
// gives 64 blocks, fewer than an H200's 132 SMs: the block size must shrink for every SM to get work.
constexpr float nbody_soft2 = 0.05f * 0.05f;

struct nbody_smem {
  std::size_t operator()(int block) const { return static_cast<std::size_t>(block) * sizeof(float4); }
};

__global__ void nbody_accel(const float4* __restrict__ pos, float4* __restrict__ acc, int n) {
  extern __shared__ float4 bodies[];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const float4 me = i < n ? pos[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  float ax = 0.f, ay = 0.f, az = 0.f;
  for (int base = 0; base < n; base += static_cast<int>(blockDim.x)) {
    const int j = base + static_cast<int>(threadIdx.x);
    bodies[threadIdx.x] = j < n ? pos[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
    const int m = min(static_cast<int>(blockDim.x), n - base);
#pragma unroll 8
    for (int k = 0; k < m; ++k) {
      const float4 o = bodies[k];
      const float dx = o.x - me.x, dy = o.y - me.y, dz = o.z - me.z;
      const float inv = rsqrtf(fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, nbody_soft2))));
      const float s = o.w * inv * inv * inv;
      ax = fmaf(dx, s, ax);
      ay = fmaf(dy, s, ay);
      az = fmaf(dz, s, az);
    }
    __syncthreads();
  }
  if (i < n) acc[i] = make_float4(ax, ay, az, 0.f);
}

// Elements of S bytes for the element-map kernels: 1 and 2 B integers, and S / 4 floats aligned as a compiler
// aligns such structs (12 B: three 4-byte loads, 16 B: one 16-byte load, 24 B: three 8-byte loads, 32 B: two
// 16-byte loads).
template <int S>
struct alignas(S % 16 == 0  ? 16
               : S % 8 == 0 ? 8
                            : 4) floats {
  float v[S / 4];
};
template <int S>
struct element {
  using type = floats<S>;
};
template <>
struct element<1> {
  using type = unsigned char;
};
template <>
struct element<2> {
  using type = unsigned short;
};

// The map applied to every element, the same on the host (the reference) and the device. Integer results are
// even, float results finite: a poisoned (0xFF) output byte never passes for a written one.
__host__ __device__ inline unsigned char map_one(unsigned char x) {
  return static_cast<unsigned char>(x * 2u + 2u);
}
__host__ __device__ inline unsigned short map_one(unsigned short x) {
  return static_cast<unsigned short>(x * 2u + 2u);
}
template <int S>
__host__ __device__ inline floats<S> map_one(floats<S> e) {
#pragma unroll
  for (int k = 0; k < S / 4; ++k) e.v[k] = fmaf(e.v[k], 1.5f, 0.25f);
  return e;
}

// out[i] = map(in[i]) over a grid-stride loop: one element (one load of S bytes) per thread per iteration.
template <class E>
__global__ void map_elements(const E* __restrict__ in, E* __restrict__ out, std::size_t n) {
#pragma unroll 1
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = map_one(in[i]);
  }
}

// Counts 32-bit words that differ between out and ref, and the first such index.
__global__ void count_word_mismatches(const unsigned* __restrict__ out, const unsigned* __restrict__ ref,
                                      std::size_t words, unsigned long long* bad, unsigned long long* first) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if (out[i] != ref[i]) {
      atomicAdd(bad, 1ULL);
      atomicMin(first, static_cast<unsigned long long>(i));
    }
  }
}

// ---- 2-D kernels: nx x ny float images (row pitch in elements), one pixel per thread
// -----------------------

// 5-point stencil, out = c0 x centre + c1 x (left + right + up + down), zero outside the image; the same
// arithmetic on the host (the reference) and the device.
constexpr float stencil2d_c0 = 0.5f;
constexpr float stencil2d_c1 = 0.125f;
__host__ __device__ inline float stencil2d_point(float c, float l, float r, float u, float d) {
  return fmaf(stencil2d_c1, (l + r) + (u + d), stencil2d_c0 * c);
}

// Dynamic shared memory of a bx x by block: its tile plus a one-pixel halo on every side.
constexpr std::size_t stencil2d_tile_bytes(unsigned bx, unsigned by) {
  return static_cast<std::size_t>(bx + 2) * (by + 2) * sizeof(float);
}

// launchfit's rule: for 2-D work it shapes a block of t threads as {32, t / 32}.
struct stencil2d_smem {
  std::size_t operator()(int threads) const {
    return stencil2d_tile_bytes(32, static_cast<unsigned>((std::max(threads, 32) + 31) / 32));
  }
};

// Every block stages its tile and halo in shared memory (rows read whole, so the loads coalesce for any block
// shape), then each thread computes its pixel from the tile.
__global__ void stencil2d(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int pitch) {
  extern __shared__ float tile[];
  const int tw = static_cast<int>(blockDim.x) + 2;
  const int th = static_cast<int>(blockDim.y) + 2;
  const int x0 = static_cast<int>(blockIdx.x * blockDim.x) - 1;
  const int y0 = static_cast<int>(blockIdx.y * blockDim.y) - 1;
  for (int ty = static_cast<int>(threadIdx.y); ty < th; ty += static_cast<int>(blockDim.y)) {
    const int gy = y0 + ty;
    for (int tx = static_cast<int>(threadIdx.x); tx < tw; tx += static_cast<int>(blockDim.x)) {
      const int gx = x0 + tx;
      tile[ty * tw + tx] = (gx >= 0 && gx < nx && gy >= 0 && gy < ny)
                               ? in[static_cast<std::size_t>(gy) * static_cast<std::size_t>(pitch) + gx]
                               : 0.f;
    }
  }
  __syncthreads();
  const int x = x0 + 1 + static_cast<int>(threadIdx.x);
  const int y = y0 + 1 + static_cast<int>(threadIdx.y);
  if (x < nx && y < ny) {
    const float* t = tile + (static_cast<int>(threadIdx.y) + 1) * tw + static_cast<int>(threadIdx.x) + 1;
    out[static_cast<std::size_t>(y) * static_cast<std::size_t>(pitch) + x] =
        stencil2d_point(t[0], t[-1], t[1], t[-tw], t[tw]);
  }
}

// out = a x + y per pixel.
__global__ void axpy2d(float a, const float* __restrict__ x, const float* __restrict__ y,
                       float* __restrict__ out, int nx, int ny, int pitch) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int j = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (i < nx && j < ny) {
    const std::size_t k = static_cast<std::size_t>(j) * static_cast<std::size_t>(pitch) + i;
    out[k] = fmaf(a, x[k], y[k]);
  }
}

// ---- benchmark cases
// -----------------------------------------------------------------------------------------

enum class policy_kind {
  max_occupancy,
  max_occupancy_largest,
  max_occupancy_512,
  bytes_in_flight,
  calibrated,  // bytes_in_flight with the target per SM from a calibration file
  autotune
};

// A launch through launchfit, with its spec kept alive by the closures.
struct lf_runner {
  std::function<void()> launch;
  std::function<lf::plan()> plan;
  lf::work work;
};

struct case_base {
  std::string name;
  std::string group = "other";  // rows are summarised per group too
  bool grid_stride = false;
  int per_thread = 1;         // items per thread (per loop iteration for grid-stride kernels)
  int bytes_in_flight = 4;    // the kernel's real independent load bytes per thread
  double bytes_per_item = 0;  // DRAM traffic per item (read + write) for GB/s
  bool accumulates = false;   // the output is summed into; reset to zero before every sample
  const void* fn = nullptr;   // the __global__ function, for occupancy queries and attributes
  cudaStream_t stream = nullptr;
  std::size_t n = 0;
  int calibrated_target = 0;  // bytes in flight per SM for policy_kind::calibrated
  // 2: an nx x ny image (n = nx x ny pixels, one per thread), launched through launchfit with items({nx, ny})
  // and raw with launch_raw_2d; the size a case runs at is then the image's side.
  int rank = 1;
  std::size_t nx = 0, ny = 0;
  // rank 2: the kernel indexes by blockDim and sizes nothing by the block's shape, so its launches say
  // block_x_free() (autotune then times wider blocks too; static policies still shape {32, t/32}).
  bool any_block_x = false;

  virtual ~case_base() = default;
  // The sizes this case runs at, given the run's size list (a case with sizes of its own ignores it).
  virtual std::vector<std::size_t> sizes(const std::vector<std::size_t>& run_sizes, bool /*quick*/) const {
    return run_sizes;
  }
  virtual std::size_t smem(int /*block*/) const { return 0; }
  // Fresh random inputs and the CPU reference for n items.
  virtual void prepare(std::size_t items, std::uint64_t seed) = 0;
  virtual void poison() = 0;
  virtual void reset() {}
  virtual void launch_raw(unsigned grid, unsigned block) = 0;
  // rank 2: a launch of a bx x by block over a gx x gy grid, and that block's dynamic shared memory.
  virtual void launch_raw_2d(dim3 /*grid*/, dim3 /*block*/) {
    throw std::logic_error(name + ": not a 2-D case");
  }
  virtual std::size_t smem_2d(unsigned /*bx*/, unsigned /*by*/) const { return 0; }
  // Empty when the output of the last sample (`launches` back-to-back launches after a reset) is right.
  virtual std::string verify(int launches) = 0;
  virtual void release() = 0;
  virtual lf_runner runner(policy_kind k, const std::string& autotune_policy) = 0;
};

// Builds launchfit runners for a case whose derived class provides launch_with(spec) and plan_with(spec).
template <class Derived>
struct case_impl : case_base {
  template <class S>
  void add_smem_rule(S&) const {}

  template <class P>
  lf_runner make(lf::spec<P> s) {
    if (rank == 2) {
      s.items({nx, ny});
      if (any_block_x) s.block_x_free();
    } else if (grid_stride) {
      s.grid_stride(n);
    } else {
      s.items(n);
    }
    s.per_thread(static_cast<std::uint32_t>(per_thread)).on(stream);
    Derived* d = static_cast<Derived*>(this);
    d->add_smem_rule(s);
    auto sp = std::make_shared<lf::spec<P>>(std::move(s));
    return lf_runner{[sp, d] { d->launch_with(*sp); }, [sp, d] { return d->plan_with(*sp); },
                     sp->work_shape()};
  }

  lf_runner runner(policy_kind k, const std::string& autotune_policy) override {
    switch (k) {
      case policy_kind::max_occupancy:
        return make(lf::max_occupancy());
      case policy_kind::max_occupancy_largest:  // cuOccupancyMaxPotentialBlockSize's block
        return make(lf::max_occupancy(0));
      case policy_kind::max_occupancy_512:
        return make(lf::max_occupancy(512));
      case policy_kind::bytes_in_flight:
        return make(lf::bytes_in_flight(bytes_in_flight));
      case policy_kind::calibrated:
        return make(lf::bytes_in_flight(bytes_in_flight, calibrated_target));
      case policy_kind::autotune: {
        // Every kernel here may be re-run back to back (the accumulating ones only add to their output):
        // rerunnable(), plus a reset that restores the output where it accumulates.
        auto s = lf::use(autotune_policy);
        s.rerunnable();
        if (accumulates) s.reset([this] { reset(); });
        return make(std::move(s));
      }
    }
    throw std::logic_error("unknown policy kind");
  }
};

// A case whose kernel maps n input floats to n output floats, checked against a CPU reference.
template <class Derived>
struct float_map_case : case_impl<Derived> {
  bench::device_buffer<float> in, out, ref;
  bench::float_checker& checker;
  float abs_tol, rel_tol;

  float_map_case(bench::float_checker& c, float abs_tol_, float rel_tol_)
      : checker(c), abs_tol(abs_tol_), rel_tol(rel_tol_) {}
  // Uploads the inputs and the CPU reference, and allocates an output of the same size.
  void upload(const std::vector<float>& hin, const std::vector<float>& hout) {
    in = bench::device_buffer<float>(hin.size());
    out = bench::device_buffer<float>(hin.size());
    ref = bench::device_buffer<float>(hin.size());
    in.upload(hin);
    ref.upload(hout);
  }
  void poison() override { BENCH_CUDA(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), this->stream)); }
  std::string verify(int) override {
    return checker.compare(out.get(), ref.get(), this->n, abs_tol, rel_tol, this->stream);
  }
  void release() override {
    in = {};
    out = {};
    ref = {};
  }
};

template <class T, int U>
struct reduce_case : case_impl<reduce_case<T, U>> {
  static constexpr int floats_per_T = sizeof(T) / sizeof(float);
  bench::device_buffer<float> in;
  bench::device_buffer<unsigned long long> slots{bench::reduce_slots};
  unsigned long long expected = 0;

  reduce_case(const char* label, cudaStream_t s) {
    this->name = label;
    this->group = "streaming";
    this->grid_stride = true;
    this->per_thread = U * floats_per_T;
    this->bytes_in_flight = U * static_cast<int>(sizeof(T));
    this->bytes_per_item = sizeof(float);
    this->accumulates = true;
    this->fn = reinterpret_cast<const void*>(&bench::read_reduce<T, U>);
    this->stream = s;
  }
  std::size_t count() const { return this->n / floats_per_T; }
  void prepare(std::size_t items, std::uint64_t seed) override {
    this->n = items;
    const std::vector<float> host = bench::reduce_input(items, seed);
    expected = bench::exact_sum(host);
    in = bench::device_buffer<float>(items);
    in.upload(host);
  }
  void poison() override {}
  void reset() override { BENCH_CUDA(cudaMemsetAsync(slots.get(), 0, slots.bytes(), this->stream)); }
  void launch_raw(unsigned grid, unsigned block) override {
    bench::read_reduce<T, U>
        <<<grid, block, 0, this->stream>>>(reinterpret_cast<const T*>(in.get()), count(), slots.get());
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&bench::read_reduce<T, U>, s, reinterpret_cast<const T*>(in.get()), count(), slots.get());
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&bench::read_reduce<T, U>, s);
  }
  std::string verify(int launches) override {
    BENCH_CUDA(cudaStreamSynchronize(this->stream));
    unsigned long long total = 0;
    for (unsigned long long v : slots.download()) total += v;
    const unsigned long long want = expected * static_cast<unsigned long long>(launches);
    if (total == want) return {};
    return "sum " + std::to_string(total) + ", expected " + std::to_string(want);
  }
  void release() override { in = {}; }
};

struct copy_case : case_impl<copy_case> {
  bench::device_buffer<float> in, out;
  bench::float_checker& checker;

  copy_case(cudaStream_t s, bench::float_checker& c) : checker(c) {
    name = "copy";
    group = "streaming";
    grid_stride = true;
    per_thread = 4;
    bytes_in_flight = 16;
    bytes_per_item = 2 * sizeof(float);
    fn = reinterpret_cast<const void*>(&copy4);
    stream = s;
  }
  void prepare(std::size_t items, std::uint64_t seed) override {
    n = items;
    in = bench::device_buffer<float>(items);
    out = bench::device_buffer<float>(items);
    in.upload(bench::random_vector<float>(items, seed, bench::uniform_pm1));
  }
  void poison() override { BENCH_CUDA(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), stream)); }
  const float4* in4() const { return reinterpret_cast<const float4*>(in.get()); }
  float4* out4() const { return reinterpret_cast<float4*>(out.get()); }
  void launch_raw(unsigned grid, unsigned block) override {
    copy4<<<grid, block, 0, stream>>>(in4(), out4(), n / 4);
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&copy4, s, in4(), out4(), n / 4);
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&copy4, s);
  }
  std::string verify(int) override { return checker.compare(out.get(), in.get(), n, 0.f, 0.f, stream); }
  void release() override {
    in = {};
    out = {};
  }
};

struct saxpy_case : case_impl<saxpy_case> {
  static constexpr float a = 1.5f;
  bench::device_buffer<float> x, y, z, ref;
  bench::float_checker& checker;

  saxpy_case(const char* label, cudaStream_t s, bench::float_checker& c) : checker(c) {
    name = label;
    group = name == "saxpy-small" ? "small n" : "streaming";
    grid_stride = false;
    per_thread = 1;
    bytes_in_flight = 8;
    bytes_per_item = 3 * sizeof(float);
    fn = reinterpret_cast<const void*>(&saxpy);
    stream = s;
  }
  void prepare(std::size_t items, std::uint64_t seed) override {
    n = items;
    const auto hx = bench::random_vector<float>(items, seed, bench::uniform_pm1);
    const auto hy = bench::random_vector<float>(items, seed + 1, bench::uniform_pm1);
    std::vector<float> hz(items);
    bench::parallel_for(items, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) hz[i] = std::fma(a, hx[i], hy[i]);
    });
    x = bench::device_buffer<float>(items);
    y = bench::device_buffer<float>(items);
    z = bench::device_buffer<float>(items);
    ref = bench::device_buffer<float>(items);
    x.upload(hx);
    y.upload(hy);
    ref.upload(hz);
  }
  void poison() override { BENCH_CUDA(cudaMemsetAsync(z.get(), 0xFF, z.bytes(), stream)); }
  void launch_raw(unsigned grid, unsigned block) override {
    saxpy<<<grid, block, 0, stream>>>(a, x.get(), y.get(), z.get(), n);
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&saxpy, s, a, x.get(), y.get(), z.get(), n);
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&saxpy, s);
  }
  std::string verify(int) override { return checker.compare(z.get(), ref.get(), n, 0.f, 1e-6f, stream); }
  void release() override {
    x = {};
    y = {};
    z = {};
    ref = {};
  }
};

struct stencil_case : float_map_case<stencil_case> {
  float taps[2 * stencil_radius + 1];

  stencil_case(cudaStream_t s, bench::float_checker& c) : float_map_case(c, 1e-6f, 1e-5f) {
    name = "stencil";
    grid_stride = false;
    per_thread = stencil_items;
    bytes_in_flight = stencil_items * static_cast<int>(sizeof(float));
    bytes_per_item = 2 * sizeof(float);
    fn = reinterpret_cast<const void*>(&stencil1d);
    stream = s;
    std::uint64_t st = 12345;
    for (float& t : taps) t = bench::uniform_pm1(st) / (2 * stencil_radius + 1);
    BENCH_CUDA(cudaMemcpyToSymbol(stencil_taps, taps, sizeof taps));
    // Raw launches of large blocks need the opt-in dynamic shared memory limit (launchfit raises it itself).
    BENCH_CUDA(cudaFuncSetAttribute(&stencil1d, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(stencil_smem{}(1024))));
  }
  std::size_t smem(int block) const override { return stencil_smem{}(block); }
  template <class S>
  void add_smem_rule(S& s) const {
    s.smem_per_block(stencil_smem{});
  }
  void prepare(std::size_t items, std::uint64_t seed) override {
    n = items;
    const auto hin = bench::random_vector<float>(items, seed, bench::uniform_pm1);
    std::vector<float> hout(items);
    bench::parallel_for(items, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        float s = 0.f;
        for (int t = 0; t <= 2 * stencil_radius; ++t) {
          const long long g = static_cast<long long>(i) - stencil_radius + t;
          const float v =
              (g >= 0 && g < static_cast<long long>(items)) ? hin[static_cast<std::size_t>(g)] : 0.f;
          s = std::fma(taps[t], v, s);
        }
        hout[i] = s;
      }
    });
    upload(hin, hout);
  }
  void launch_raw(unsigned grid, unsigned block) override {
    stencil1d<<<grid, block, smem(static_cast<int>(block)), stream>>>(in.get(), out.get(), n);
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&stencil1d, s, in.get(), out.get(), n);
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&stencil1d, s);
  }
};

struct heavy_case : float_map_case<heavy_case> {
  std::vector<float> matrix;

  heavy_case(cudaStream_t s, bench::float_checker& c)
      : float_map_case(c, 1e-5f, 1e-4f), matrix(heavy_dim * heavy_dim) {
    name = "reg-heavy";
    grid_stride = false;
    per_thread = heavy_dim;
    bytes_in_flight = heavy_dim * static_cast<int>(sizeof(float));
    bytes_per_item = 2 * sizeof(float);
    fn = reinterpret_cast<const void*>(&reg_heavy);
    stream = s;
    std::uint64_t st = 777;
    for (float& m : matrix) m = bench::uniform_pm1(st) / heavy_dim;  // |M v| <= 1 for |v| <= 1
    BENCH_CUDA(cudaMemcpyToSymbol(heavy_matrix, matrix.data(), matrix.size() * sizeof(float)));
  }
  std::size_t groups() const { return n / heavy_dim; }
  void prepare(std::size_t items, std::uint64_t seed) override {
    n = items;
    const auto hin = bench::random_vector<float>(items, seed, bench::uniform_pm1);
    std::vector<float> hout(items);
    const std::size_t gs = groups();
    // Layout: float4 number (q * groups + g) holds elements 4q..4q+3 of group g.
    auto at = [gs](std::size_t g, int j) { return (static_cast<std::size_t>(j / 4) * gs + g) * 4 + j % 4; };
    bench::parallel_for(gs, [&](std::size_t b, std::size_t e) {
      for (std::size_t g = b; g < e; ++g) {
        double v[heavy_dim], w[heavy_dim];
        for (int j = 0; j < heavy_dim; ++j) v[j] = hin[at(g, j)];
        for (int r = 0; r < heavy_rounds; ++r) {
          for (int i = 0; i < heavy_dim; ++i) {
            double s = 0;
            for (int j = 0; j < heavy_dim; ++j) s += static_cast<double>(matrix[i * heavy_dim + j]) * v[j];
            w[i] = s * (1.0 - 0.25 * s * s);
          }
          for (int i = 0; i < heavy_dim; ++i) v[i] = w[i];
        }
        for (int j = 0; j < heavy_dim; ++j) hout[at(g, j)] = static_cast<float>(v[j]);
      }
    });
    upload(hin, hout);
  }
  const float4* in4() const { return reinterpret_cast<const float4*>(in.get()); }
  float4* out4() const { return reinterpret_cast<float4*>(out.get()); }
  void launch_raw(unsigned grid, unsigned block) override {
    reg_heavy<<<grid, block, 0, stream>>>(in4(), out4(), groups());
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&reg_heavy, s, in4(), out4(), groups());
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&reg_heavy, s);
  }
};

struct histogram_case : case_impl<histogram_case> {
  bench::device_buffer<unsigned> keys;
  bench::device_buffer<unsigned long long> bins{hist_bins};
  std::vector<unsigned long long> expected;

  explicit histogram_case(cudaStream_t s) {
    name = "histogram";
    grid_stride = true;
    per_thread = 4;
    bytes_in_flight = 16;
    bytes_per_item = sizeof(unsigned);
    accumulates = true;
    fn = reinterpret_cast<const void*>(&histogram256);
    stream = s;
  }
  void prepare(std::size_t items, std::uint64_t seed) override {
    n = items;
    const auto hk = bench::random_vector<unsigned>(items, seed, [](std::uint64_t& s) {
      return static_cast<unsigned>(bench::splitmix64(s) % hist_bins);
    });
    expected.assign(hist_bins, 0);
    for (unsigned k : hk) ++expected[k];
    keys = bench::device_buffer<unsigned>(items);
    keys.upload(hk);
  }
  void poison() override {}
  void reset() override { BENCH_CUDA(cudaMemsetAsync(bins.get(), 0, bins.bytes(), stream)); }
  const uint4* keys4() const { return reinterpret_cast<const uint4*>(keys.get()); }
  void launch_raw(unsigned grid, unsigned block) override {
    histogram256<<<grid, block, 0, stream>>>(keys4(), n / 4, bins.get());
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&histogram256, s, keys4(), n / 4, bins.get());
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&histogram256, s);
  }
  std::string verify(int launches) override {
    BENCH_CUDA(cudaStreamSynchronize(stream));
    const auto got = bins.download();
    for (int b = 0; b < hist_bins; ++b) {
      const unsigned long long want = expected[b] * static_cast<unsigned long long>(launches);
      if (got[b] != want) {
        return "bin " + std::to_string(b) + " = " + std::to_string(got[b]) + ", expected " +
               std::to_string(want);
      }
    }
    return {};
  }
  void release() override { keys = {}; }
};

// All-pairs n-body at its own sizes: 16,384 bodies (fewer 256-thread blocks than SMs) and 65,536.
struct nbody_case : case_impl<nbody_case> {
  bench::device_buffer<float> pos, acc, ref;
  bench::float_checker& checker;

  nbody_case(cudaStream_t s, bench::float_checker& c) : checker(c) {
    name = "nbody";
    group = "small n";
    grid_stride = false;
    per_thread = 1;
    bytes_in_flight = sizeof(float4);
    bytes_per_item = 2 * sizeof(float4);
    fn = reinterpret_cast<const void*>(&nbody_accel);
    stream = s;
  }
  std::vector<std::size_t> sizes(const std::vector<std::size_t>&, bool quick) const override {
    if (quick) return {16384};
    return {16384, 65536};
  }
  std::size_t smem(int block) const override { return nbody_smem{}(block); }
  template <class S>
  void add_smem_rule(S& s) const {
    s.smem_per_block(nbody_smem{});
  }
  void prepare(std::size_t items, std::uint64_t seed) override {
    n = items;
    group = items <= 16384 ? "small n" : "other";  // 16,384 bodies: 64 blocks of 256 threads, under 132 SMs
    // Bodies uniform in [-1, 1)^3, each of mass 1 / n: accelerations of order 1.
    std::vector<float> hp = bench::random_vector<float>(4 * items, seed, bench::uniform_pm1);
    for (std::size_t i = 0; i < items; ++i) hp[4 * i + 3] = 1.0f / static_cast<float>(items);
    std::vector<float> ha(4 * items, 0.f);
    bench::parallel_for(items, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        double ax = 0, ay = 0, az = 0;
        for (std::size_t j = 0; j < items; ++j) {
          const double dx = static_cast<double>(hp[4 * j]) - hp[4 * i];
          const double dy = static_cast<double>(hp[4 * j + 1]) - hp[4 * i + 1];
          const double dz = static_cast<double>(hp[4 * j + 2]) - hp[4 * i + 2];
          const double inv = 1.0 / std::sqrt(dx * dx + dy * dy + dz * dz + static_cast<double>(nbody_soft2));
          const double s = hp[4 * j + 3] * inv * inv * inv;
          ax += dx * s;
          ay += dy * s;
          az += dz * s;
        }
        ha[4 * i] = static_cast<float>(ax);
        ha[4 * i + 1] = static_cast<float>(ay);
        ha[4 * i + 2] = static_cast<float>(az);
      }
    });
    pos = bench::device_buffer<float>(4 * items);
    acc = bench::device_buffer<float>(4 * items);
    ref = bench::device_buffer<float>(4 * items);
    pos.upload(hp);
    ref.upload(ha);
  }
  void poison() override { BENCH_CUDA(cudaMemsetAsync(acc.get(), 0xFF, acc.bytes(), stream)); }
  const float4* pos4() const { return reinterpret_cast<const float4*>(pos.get()); }
  float4* acc4() const { return reinterpret_cast<float4*>(acc.get()); }
  void launch_raw(unsigned grid, unsigned block) override {
    nbody_accel<<<grid, block, smem(static_cast<int>(block)), stream>>>(pos4(), acc4(), static_cast<int>(n));
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&nbody_accel, s, pos4(), acc4(), static_cast<int>(n));
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&nbody_accel, s);
  }
  // Float sums of n terms in another order than the double reference: |a| is of order 1, a lost tile of 128
  // bodies moves it by ~1e-2.
  std::string verify(int) override {
    return checker.compare(acc.get(), ref.get(), 4 * n, 1e-4f, 1e-4f, stream);
  }
  void release() override {
    pos = {};
    acc = {};
    ref = {};
  }
};

// out[i] = map(in[i]) over n elements of S bytes: grid-stride ("mapS") or one element per thread ("scale4").
// Every output word is compared exactly with the CPU's.
template <int S>
struct map_case : case_impl<map_case<S>> {
  using E = typename element<S>::type;
  static_assert(sizeof(E) == S, "element size");
  bench::device_buffer<E> in, out, ref;
  bench::device_buffer<unsigned long long> counters{2};

  map_case(const std::string& label, bool grid_stride, cudaStream_t s) {
    this->name = label;
    this->group = !grid_stride ? "streaming" : S >= 12 ? "wide grid-stride" : "narrow grid-stride";
    this->grid_stride = grid_stride;
    this->per_thread = 1;
    this->bytes_in_flight = S;
    this->bytes_per_item = 2.0 * S;
    this->fn = reinterpret_cast<const void*>(&map_elements<E>);
    this->stream = s;
  }
  void prepare(std::size_t items, std::uint64_t seed) override {
    this->n = items;
    const std::vector<E> hin = bench::random_vector<E>(items, seed, [](std::uint64_t& st) {
      E e{};
      if constexpr (S <= 2) {
        e = static_cast<E>(bench::splitmix64(st));
      } else {
        for (float& f : e.v) f = bench::uniform_pm1(st);
      }
      return e;
    });
    std::vector<E> hout(items);
    bench::parallel_for(items, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) hout[i] = map_one(hin[i]);
    });
    in = bench::device_buffer<E>(items);
    out = bench::device_buffer<E>(items);
    ref = bench::device_buffer<E>(items);
    in.upload(hin);
    ref.upload(hout);
  }
  void poison() override { BENCH_CUDA(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), this->stream)); }
  void launch_raw(unsigned grid, unsigned block) override {
    map_elements<E><<<grid, block, 0, this->stream>>>(in.get(), out.get(), this->n);
    BENCH_CUDA(cudaGetLastError());
  }
  template <class Spec>
  void launch_with(const Spec& s) {
    lf::launch(&map_elements<E>, s, static_cast<const E*>(in.get()), out.get(), this->n);
  }
  template <class Spec>
  lf::plan plan_with(const Spec& s) {
    return lf::plan_for(&map_elements<E>, s);
  }
  std::string verify(int) override {
    const unsigned long long init[2] = {0, ~0ULL};
    BENCH_CUDA(cudaMemcpyAsync(counters.get(), init, sizeof init, cudaMemcpyHostToDevice, this->stream));
    const std::size_t words = out.bytes() / sizeof(unsigned);  // n * S is a multiple of 4 (n >= 4096)
    count_word_mismatches<<<1024, 256, 0, this->stream>>>(reinterpret_cast<const unsigned*>(out.get()),
                                                          reinterpret_cast<const unsigned*>(ref.get()), words,
                                                          counters.get(), counters.get() + 1);
    BENCH_CUDA(cudaGetLastError());
    unsigned long long got[2];
    BENCH_CUDA(cudaMemcpyAsync(got, counters.get(), sizeof got, cudaMemcpyDeviceToHost, this->stream));
    BENCH_CUDA(cudaStreamSynchronize(this->stream));
    if (got[0] == 0) return {};
    return std::to_string(got[0]) + " of " + std::to_string(words) + " output words differ; first at byte " +
           std::to_string(got[1] * sizeof(unsigned));
  }
  void release() override {
    in = {};
    out = {};
    ref = {};
  }
};

// A 2-D case: a side x side float image (pitch = side, a multiple of 32), one pixel per thread, checked
// against a CPU reference of the whole image. Its sizes are image sides, not the run's 1-D sizes.
template <class Derived>
struct image_case : case_impl<Derived> {
  bench::device_buffer<float> out, ref;
  bench::float_checker& checker;
  float abs_tol, rel_tol;

  image_case(const char* label, cudaStream_t s, bench::float_checker& c, float abs_tol_, float rel_tol_)
      : checker(c), abs_tol(abs_tol_), rel_tol(rel_tol_) {
    this->name = label;
    this->group = "2-D";
    this->rank = 2;
    this->grid_stride = false;
    this->per_thread = 1;
    this->stream = s;
  }
  std::vector<std::size_t> sizes(const std::vector<std::size_t>&, bool quick) const override {
    if (quick) return {512};
    return {1024, 4096, 8192};  // 8192 x 8192 floats: 256 MiB per image, >= 4x an H200's L2
  }
  int pitch() const { return static_cast<int>(this->nx); }
  // Sets the image's shape, makes its random input planes and uploads the reference computed from them.
  std::vector<std::vector<float>> make_image(std::size_t side, std::uint64_t seed, int planes) {
    this->nx = side;
    this->ny = side;
    this->n = side * side;
    std::vector<std::vector<float>> in;
    for (int p = 0; p < planes; ++p) {
      in.push_back(
          bench::random_vector<float>(this->n, seed + static_cast<std::uint64_t>(p), bench::uniform_pm1));
    }
    return in;
  }
  void upload_reference(const std::vector<float>& host_ref) {
    out = bench::device_buffer<float>(this->n);
    ref = bench::device_buffer<float>(this->n);
    ref.upload(host_ref);
  }
  void launch_raw(unsigned, unsigned) override {
    throw std::logic_error(this->name + ": a 2-D case launches with launch_raw_2d");
  }
  void poison() override { BENCH_CUDA(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), this->stream)); }
  std::string verify(int) override {
    return checker.compare(out.get(), ref.get(), this->n, abs_tol, rel_tol, this->stream);
  }
  void release_image() {
    out = {};
    ref = {};
  }
};

// 5-point stencil through a shared-memory tile with halo: dynamic smem (bx + 2) x (by + 2) floats.
struct stencil2d_case : image_case<stencil2d_case> {
  bench::device_buffer<float> in;

  stencil2d_case(cudaStream_t s, bench::float_checker& c) : image_case("stencil2d", s, c, 1e-6f, 1e-6f) {
    bytes_in_flight = sizeof(float);
    bytes_per_item = 2 * sizeof(float);
    fn = reinterpret_cast<const void*>(&stencil2d);
  }
  std::size_t smem_2d(unsigned bx, unsigned by) const override { return stencil2d_tile_bytes(bx, by); }
  template <class S>
  void add_smem_rule(S& s) const {
    s.smem_per_block(stencil2d_smem{});
  }
  void prepare(std::size_t side, std::uint64_t seed) override {
    const std::vector<std::vector<float>> planes = make_image(side, seed, 1);
    const std::vector<float>& hin = planes[0];
    std::vector<float> hout(n);
    const auto w = static_cast<long long>(nx), h = static_cast<long long>(ny);
    auto at = [&](long long x, long long y) {
      return x >= 0 && x < w && y >= 0 && y < h ? hin[static_cast<std::size_t>(y * w + x)] : 0.f;
    };
    bench::parallel_for(ny, [&](std::size_t b, std::size_t e) {
      for (auto y = static_cast<long long>(b); y < static_cast<long long>(e); ++y) {
        for (long long x = 0; x < w; ++x) {
          hout[static_cast<std::size_t>(y * w + x)] =
              stencil2d_point(at(x, y), at(x - 1, y), at(x + 1, y), at(x, y - 1), at(x, y + 1));
        }
      }
    });
    in = bench::device_buffer<float>(n);
    in.upload(hin);
    upload_reference(hout);
  }
  void launch_raw_2d(dim3 grid, dim3 block) override {
    stencil2d<<<grid, block, smem_2d(block.x, block.y), stream>>>(in.get(), out.get(), static_cast<int>(nx),
                                                                  static_cast<int>(ny), pitch());
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&stencil2d, s, static_cast<const float*>(in.get()), out.get(), static_cast<int>(nx),
               static_cast<int>(ny), pitch());
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&stencil2d, s);
  }
  void release() override {
    in = {};
    release_image();
  }
};

// out = a x + y per pixel: a streaming 2-D map with no shared memory.
struct axpy2d_case : image_case<axpy2d_case> {
  static constexpr float a = 1.5f;
  bench::device_buffer<float> x, y;

  axpy2d_case(cudaStream_t s, bench::float_checker& c) : image_case("axpy2d", s, c, 0.f, 1e-6f) {
    bytes_in_flight = 2 * sizeof(float);
    bytes_per_item = 3 * sizeof(float);
    fn = reinterpret_cast<const void*>(&axpy2d);
    any_block_x = true;
  }
  void prepare(std::size_t side, std::uint64_t seed) override {
    const std::vector<std::vector<float>> planes = make_image(side, seed, 2);
    const std::vector<float>& hx = planes[0];
    const std::vector<float>& hy = planes[1];
    std::vector<float> hout(n);
    bench::parallel_for(n, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) hout[i] = std::fma(a, hx[i], hy[i]);
    });
    x = bench::device_buffer<float>(n);
    y = bench::device_buffer<float>(n);
    x.upload(hx);
    y.upload(hy);
    upload_reference(hout);
  }
  void launch_raw_2d(dim3 grid, dim3 block) override {
    axpy2d<<<grid, block, 0, stream>>>(a, x.get(), y.get(), out.get(), static_cast<int>(nx),
                                       static_cast<int>(ny), pitch());
    BENCH_CUDA(cudaGetLastError());
  }
  template <class S>
  void launch_with(const S& s) {
    lf::launch(&axpy2d, s, a, static_cast<const float*>(x.get()), static_cast<const float*>(y.get()),
               out.get(), static_cast<int>(nx), static_cast<int>(ny), pitch());
  }
  template <class S>
  lf::plan plan_with(const S& s) {
    return lf::plan_for(&axpy2d, s);
  }
  void release() override {
    x = {};
    y = {};
    release_image();
  }
};

// ---- measurement
// -------------------------------------------------------------------------------------------

struct row {
  std::string kernel;
  std::string group;
  std::size_t n = 0;
  std::size_t nx = 0, ny = 1;  // the work's shape: n x 1, or an image's nx x ny (n = nx x ny)
  std::string policy;
  int block = 0;
  int block_y = 1;  // a 2-D block is block x block_y
  long long grid = 0;
  long long grid_y = 1;
  int blocks_per_sm = 0;
  double ms = 0;
  double ms_unpooled = 0;  // its own confirmation rounds' median, before pooling with the same launch's
  double gbps = 0;
  double ratio = 0;  // ms / oracle ms
  int samples = 0;
  int configs = 0;   // oracle: configurations swept
  std::string note;  // plan reason, tuning trials, or the error
  bool ok = true;
};

struct settings {
  int repeats = 10;
  double sample_target_ms = 0.2;  // back-to-back launches per sample: enough to fill this much GPU time
  int max_per_sample = 200;
  double prune_factor = 1.25;   // sweep: stop a configuration after 3 samples when this much slower than best
  int confirm_rounds = 3;       // re-timings of the policy rows and the sweep's 3 fastest configurations
  std::string autotune_policy;  // empty: no autotune column
  int calibrated_target = 0;    // bytes in flight per SM from --calibration; 0: no calibrated column
};

class runner_context {
 public:
  runner_context(const bench::device_info& d, cudaStream_t s, const settings& cfg)
      : dev(d), stream(s), timer(s), opts(cfg) {}

  const bench::device_info& dev;
  cudaStream_t stream;
  bench::stream_timer timer;
  settings opts;
  int failures = 0;
  std::vector<row> rows;
  struct sweep_point {
    std::string kernel;
    std::size_t n;
    unsigned block, grid;
    int bps;
    double ms;  // -1: pruned or failed
    unsigned block_y, grid_y;
  };
  std::vector<sweep_point> sweep_points;

  void fail(const std::string& what) {
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
    std::fflush(stdout);
  }
};

long long div_up(std::size_t a, std::size_t b) { return static_cast<long long>((a + b - 1) / b); }

std::string config_text(unsigned grid, unsigned block) {
  return "<<<" + std::to_string(grid) + ", " + std::to_string(block) + ">>>";
}

// A raw launch configuration: block x block_y threads, grid x grid_y blocks (y is 1 for 1-D cases).
struct config {
  unsigned block, grid;
  int bps;  // resident blocks per SM it runs with; 0: the full grid of a grid-stride kernel
  unsigned block_y = 1, grid_y = 1;
};

std::string config_text(const config& k) {
  if (k.block_y == 1 && k.grid_y == 1) return config_text(k.grid, k.block);
  return "<<<{" + std::to_string(k.grid) + ", " + std::to_string(k.grid_y) + "}, {" +
         std::to_string(k.block) + ", " + std::to_string(k.block_y) + "}>>>";
}

void launch_config(case_base& c, const config& k) {
  if (c.rank == 2) {
    c.launch_raw_2d(dim3(k.grid, k.grid_y), dim3(k.block, k.block_y));
  } else {
    c.launch_raw(k.grid, k.block);
  }
}

// The oracle's candidates for a 2-D case: blocks bx in {32, 64, 128, 256} x by in {1, 2, 4, 8, 16, 32} of at
// most the kernel's max threads, plus the naive 16 x 16 (so the oracle is never slower than it); the grid
// covers the image, one pixel per thread.
std::vector<config> image_configs(const bench::device_info& dev, const case_base& c,
                                  const cudaFuncAttributes& attr, const config& naive) {
  std::vector<config> configs;
  std::vector<std::pair<unsigned, unsigned>> shapes = {{naive.block, naive.block_y}};
  for (unsigned bx : {32u, 64u, 128u, 256u}) {
    for (unsigned by : {1u, 2u, 4u, 8u, 16u, 32u}) shapes.emplace_back(bx, by);
  }
  for (const auto& [bx, by] : shapes) {
    const int threads = static_cast<int>(bx * by);
    if (threads > std::min(1024, attr.maxThreadsPerBlock)) continue;
    const std::size_t smem = c.smem_2d(bx, by);
    if (smem + attr.sharedSizeBytes > static_cast<std::size_t>(dev.prop.sharedMemPerBlockOptin)) continue;
    int fit = 0;
    BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, c.fn, threads, smem));
    if (fit <= 0) continue;
    const long long gx = div_up(c.nx, bx), gy = div_up(c.ny, by);
    if (gx > dev.prop.maxGridSize[0] || gy > dev.prop.maxGridSize[1]) continue;
    configs.push_back({bx, static_cast<unsigned>(gx), fit, by, static_cast<unsigned>(gy)});
  }
  return configs;
}

// `size`: items, or a 2-D case's image side.
void run_case(runner_context& ctx, case_base& c, std::size_t size, std::uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  c.prepare(size, seed);
  const std::size_t n = c.rank == 2 ? c.n : size;  // items (pixels of an image)
  const auto reset = [&c] { c.reset(); };
  const std::string n_text =
      c.rank == 2 ? std::to_string(c.nx) + "x" + std::to_string(c.ny) : std::to_string(n);
  const std::string label = c.name + " n=" + n_text;
  const std::size_t per_block_items = static_cast<std::size_t>(c.per_thread);

  // Naive: today's <<<ceil(n / (256 x items per thread)), 256>>>, or for 2-D work the classic dim3 block(16,
  // 16) with grid ceil(nx / 16) x ceil(ny / 16).
  const config naive = c.rank == 2 ? config{16, static_cast<unsigned>(div_up(c.nx, 16)), 0, 16,
                                            static_cast<unsigned>(div_up(c.ny, 16))}
                                   : config{256, static_cast<unsigned>(div_up(n, 256 * per_block_items)), 0};

  // One sample = `per_sample` back-to-back launches, so short kernels are timed over >= ~0.2 ms.
  c.poison();
  const double pilot = ctx.timer.time([&] { launch_config(c, naive); }, reset, 1, 1).ms;
  const int per_sample =
      static_cast<int>(std::clamp(std::ceil(ctx.opts.sample_target_ms / std::max(pilot, 1e-4)), 1.0,
                                  static_cast<double>(ctx.opts.max_per_sample)));

  auto measure = [&](const std::string& what, const std::function<void()>& launch, int repeats,
                     double prune_ms) -> std::pair<bench::stream_timer::result, bool> {
    c.poison();
    const auto r = ctx.timer.time(launch, reset, per_sample, repeats, prune_ms);
    const std::string bad = c.verify(per_sample);
    if (!bad.empty()) {
      ctx.fail(label + " " + what + ": " + bad);
      return {r, false};
    }
    return {r, true};
  };

  std::vector<row> out;
  std::vector<std::function<void()>> launches;  // out[i]'s launch, re-timed in the confirmation round
  auto base_row = [&](const std::string& policy) {
    row r;
    r.kernel = c.name;
    r.group = c.group;
    r.n = n;
    r.nx = c.rank == 2 ? c.nx : n;
    r.ny = c.rank == 2 ? c.ny : 1;
    r.policy = policy;
    return r;
  };

  {
    row r = base_row("naive");
    r.block = static_cast<int>(naive.block);
    r.block_y = static_cast<int>(naive.block_y);
    r.grid = naive.grid;
    r.grid_y = naive.grid_y;
    const auto [t, ok] = measure(
        "naive " + config_text(naive), [&] { launch_config(c, naive); }, ctx.opts.repeats, 0);
    r.ms = t.ms;
    r.samples = t.samples;
    r.ok = ok;
    out.push_back(r);
    launches.push_back([&c, naive] { launch_config(c, naive); });
  }

  // launchfit policies.
  std::vector<std::pair<policy_kind, std::string>> policies = {
      {policy_kind::max_occupancy, "max_occupancy"},
      {policy_kind::max_occupancy_largest, "max_occupancy(0)"},
      {policy_kind::max_occupancy_512, "max_occupancy(512)"},
      {policy_kind::bytes_in_flight, "bytes_in_flight(" + std::to_string(c.bytes_in_flight) + ")"}};
  c.calibrated_target = ctx.opts.calibrated_target;
  if (ctx.opts.calibrated_target > 0) policies.push_back({policy_kind::calibrated, "calibrated"});
  if (!ctx.opts.autotune_policy.empty())
    policies.push_back({policy_kind::autotune, ctx.opts.autotune_policy});
  for (const auto& [kind, policy_name] : policies) {
    row r = base_row(policy_name);
    std::function<void()> launch;
    try {
      const lf_runner run = c.runner(kind, ctx.opts.autotune_policy);
      launch = run.launch;
      const auto [t, ok] = measure(policy_name, run.launch, ctx.opts.repeats, 0);
      const lf::plan p = run.plan();  // cached by the warm-up launch
      const lf::dims g = lf::grid_for(p, run.work);
      // 2-D work: the block as launchfit shaped it ({32, threads / 32} unless the policy chose a shape).
      r.block = c.rank == 2 ? static_cast<int>(p.block.x) : p.block_threads;
      r.block_y = c.rank == 2 ? static_cast<int>(p.block.y) : 1;
      r.grid = g.x;
      r.grid_y = g.y;
      r.blocks_per_sm = p.blocks_per_sm;
      r.ms = t.ms;
      r.samples = t.samples;
      r.ok = ok;
      r.note =
          p.trials > 0 ? std::to_string(p.trials) + " trials, " + std::to_string(p.tuning_ms) + " ms" : "";
    } catch (const lf::error& e) {
      ctx.fail(label + " " + policy_name + ": " + e.what());
      r.ok = false;
      r.note = e.what();
    }
    out.push_back(r);
    launches.push_back(launch);
  }

  // Oracle: every block size x resident blocks per SM (grid-stride) or every block size (one item per
  // thread); for 2-D work every block shape of image_configs.
  cudaFuncAttributes attr{};
  BENCH_CUDA(cudaFuncGetAttributes(&attr, c.fn));
  std::vector<config> configs;
  if (c.rank == 2) configs = image_configs(ctx.dev, c, attr, naive);
  std::set<std::pair<unsigned, unsigned>> seen;
  for (int block = 32; c.rank == 1 && block <= std::min(1024, attr.maxThreadsPerBlock); block += 32) {
    const std::size_t smem = c.smem(block);
    if (smem + attr.sharedSizeBytes > static_cast<std::size_t>(ctx.dev.prop.sharedMemPerBlockOptin)) continue;
    int fit = 0;
    BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, c.fn, block, smem));
    if (fit <= 0) continue;
    const long long needed = div_up(n, static_cast<std::size_t>(block) * per_block_items);
    if (!c.grid_stride) {
      configs.push_back({static_cast<unsigned>(block), static_cast<unsigned>(needed), fit});
      continue;
    }
    for (int bps = fit; bps >= 1; --bps) {
      const long long grid = std::min<long long>(needed, static_cast<long long>(bps) * ctx.dev.sm_count);
      if (seen.insert({static_cast<unsigned>(block), static_cast<unsigned>(grid)}).second) {
        configs.push_back({static_cast<unsigned>(block), static_cast<unsigned>(grid), bps});
      }
    }
    // The full grid (one loop iteration per thread; blocks/SM 0 in the sweep): for wide elements it beats
    // every resident grid, and bytes_in_flight launches it for per_thread >= 12 B.
    if (needed <= ctx.dev.prop.maxGridSize[0] &&
        seen.insert({static_cast<unsigned>(block), static_cast<unsigned>(needed)}).second) {
      configs.push_back({static_cast<unsigned>(block), static_cast<unsigned>(needed), 0});
    }
  }
  row best = base_row("oracle");
  best.ms = 0;
  best.configs = static_cast<int>(configs.size());
  best.note = std::to_string(configs.size()) + " configurations swept";
  std::vector<std::pair<double, std::size_t>> swept;  // (ms, config index) of every fully timed config
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const config& k = configs[i];
    const double prune = best.ms > 0 ? best.ms * ctx.opts.prune_factor : 0;
    const auto [t, ok] = measure(
        "sweep " + config_text(k) +
            " blocks/SM=" + (k.bps > 0 ? std::to_string(k.bps) : std::string("full grid")),
        [&] { launch_config(c, k); }, ctx.opts.repeats, prune);
    ctx.sweep_points.push_back({c.name, n, k.block, k.grid, k.bps,
                                ok && t.samples == ctx.opts.repeats ? t.ms : -1, k.block_y, k.grid_y});
    if (ok && t.samples == ctx.opts.repeats) {
      swept.emplace_back(t.ms, i);
      if (best.ms == 0 || t.ms < best.ms) best.ms = t.ms;
    }
  }
  if (swept.empty()) {
    ctx.fail(label + ": no swept configuration ran correctly");
    best.ok = false;
  }
  // Confirmation round: the best of a sweep of ~200 noisy medians is biased low (the luckiest sample wins),
  // so the 3 fastest swept configurations and every policy row are timed again, interleaved, `rounds` times;
  // each row's time is the median of its round medians (pooled with those of the same launch, below) and the
  // oracle is the fastest confirmed configuration.
  std::sort(swept.begin(), swept.end());
  const std::size_t finalists = std::min<std::size_t>(swept.size(), 3);
  std::vector<std::vector<double>> round_ms(out.size() + finalists);
  for (int round = 0; round < ctx.opts.confirm_rounds; ++round) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (!out[i].ok || !launches[i]) continue;
      const auto [t, ok] = measure(out[i].policy + " (confirm)", launches[i], ctx.opts.repeats, 0);
      if (ok) round_ms[i].push_back(t.ms);
    }
    for (std::size_t f = 0; f < finalists; ++f) {
      const config& k = configs[swept[f].second];
      const auto [t, ok] = measure(
          "finalist " + config_text(k), [&] { launch_config(c, k); }, ctx.opts.repeats, 0);
      if (ok) round_ms[out.size() + f].push_back(t.ms);
    }
  }
  // Timings of one configuration are one configuration's: a policy row that launches exactly a finalist's
  // block and grid (or another row's) reads the median of all their rounds together, so that two samples of
  // the same launch differ by nothing but the rounds' noise (timed apart, a row that chose the oracle's own
  // configuration read up to 1.024 of it). The oracle is the finalists' own rounds alone: a row launched
  // through launchfit never moves the yardstick it is judged by. Each row's own median stays in the JSON
  // (ms_unpooled).
  using launch_shape = std::tuple<long long, long long, long long, long long>;  // block, block_y, grid, grid_y
  std::vector<launch_shape> shape_of(out.size() + finalists);
  for (std::size_t i = 0; i < out.size(); ++i) shape_of[i] = {out[i].block, out[i].block_y, out[i].grid, out[i].grid_y};
  for (std::size_t f = 0; f < finalists; ++f) {
    const config& k = configs[swept[f].second];
    shape_of[out.size() + f] = {k.block, k.block_y, k.grid, k.grid_y};
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (round_ms[i].empty()) continue;
    out[i].ms_unpooled = bench::median(round_ms[i]);
    std::vector<double> pooled;
    for (std::size_t j = 0; j < shape_of.size(); ++j)
      if (shape_of[j] == shape_of[i]) pooled.insert(pooled.end(), round_ms[j].begin(), round_ms[j].end());
    out[i].ms = bench::median(pooled);
  }
  if (finalists > 0) {
    best.ms = 0;
    for (std::size_t f = 0; f < finalists; ++f) {
      const double ms = round_ms[out.size() + f].empty() ? swept[f].first : bench::median(round_ms[out.size() + f]);
      if (best.ms == 0 || ms < best.ms) {
        const config& k = configs[swept[f].second];
        best.ms = ms;
        best.block = static_cast<int>(k.block);
        best.block_y = static_cast<int>(k.block_y);
        best.grid = k.grid;
        best.grid_y = k.grid_y;
        best.blocks_per_sm = k.bps;
        best.samples = ctx.opts.repeats;
      }
    }
    // A policy row that is itself faster than every finalist is the oracle's equal, not better than it.
    for (const row& r : out)
      if (r.ok && r.ms > 0 && r.ms < best.ms && r.policy != "naive") best.ms = std::min(best.ms, r.ms);
  }
  out.push_back(best);

  for (row& r : out) {
    r.gbps = r.ms > 0 ? c.bytes_per_item * static_cast<double>(n) / (r.ms * 1e6) : 0;
    r.ratio = (best.ms > 0 && r.ms > 0) ? r.ms / best.ms : 0;
    ctx.rows.push_back(r);
  }
  c.release();
  std::printf("%-14s n=%-10s %4zu configs, %3d launches/sample, %6.1f s  |", c.name.c_str(), n_text.c_str(),
              configs.size(), per_sample, bench::seconds_since(t0));
  for (const row& r : out) {
    if (r.policy != "oracle") std::printf(" %s %.3f", r.policy.c_str(), r.ratio);
  }
  std::printf("  (oracle %.4f ms)\n", best.ms);
  std::fflush(stdout);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pow2_text(std::size_t n) {
  if (n && (n & (n - 1)) == 0) {
    int e = 0;
    while ((std::size_t{1} << e) != n) ++e;
    return "2^" + std::to_string(e);
  }
  return std::to_string(n);
}

// A row's size: "2^20" (items), or an image's "4096x4096".
std::string size_text(const row& r) {
  return r.ny > 1 ? std::to_string(r.nx) + "x" + std::to_string(r.ny) : pow2_text(r.n);
}

// "256", or "32x8" for a 2-D block (and "gx x gy" for its grid): rows of a 2-D case always have grid_y > 1.
std::string dims_text(long long x, long long y, const row& r) {
  return r.block_y > 1 || r.grid_y > 1 ? std::to_string(x) + "x" + std::to_string(y) : std::to_string(x);
}

struct policy_summary {
  std::vector<double> ratios;
  double worst = 0;
  std::string worst_row;
};

int run(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  const bench::args a(argc, argv);
  const bool quick = a.flag("--quick");
  settings opts;
  opts.repeats = std::max(1, a.int_value("--repeats", quick ? 2 : 10));
  opts.confirm_rounds = quick ? 1 : 3;
  const std::string json_path = a.value("--json");

  const bench::device_info dev = bench::open_device(a.int_value("--device", 0));
  std::printf("# launchfit policy quality\n\ndevice: %s\n", dev.describe().c_str());

  // Autotune: from --autotune-plugin, or already registered through LAUNCHFIT_PLUGINS.
  std::string autotune_note;
  const std::string plugin_path = a.value("--autotune-plugin");
  if (!plugin_path.empty()) {
    try {
      const lf::plugin_info info = lf::load_plugin(plugin_path);
      opts.autotune_policy = info.name;
      autotune_note = "autotune: plugin " + info.name + " " + info.version + " from " + plugin_path;
    } catch (const lf::error& e) {
      autotune_note = std::string("autotune: column skipped, plugin not loadable: ") + e.what();
    }
  } else {
    const auto names = lf::registered_policies();
    if (std::find(names.begin(), names.end(), "autotune") != names.end()) {
      opts.autotune_policy = "autotune";
      autotune_note = "autotune: registered through LAUNCHFIT_PLUGINS";
    } else {
      autotune_note = "autotune: column skipped (no --autotune-plugin PATH, not in LAUNCHFIT_PLUGINS)";
    }
  }
  if (!opts.autotune_policy.empty() && !a.value("--autotune-policy").empty()) {
    opts.autotune_policy = a.value("--autotune-policy");
  }
  std::printf("%s\n", autotune_note.c_str());

  // Calibrated column: bytes_in_flight with the target per SM that launchfit-calibrate measured.
  const std::string calibration_path = a.value("--calibration");
  if (!calibration_path.empty()) {
    const launchfit_calibrate::calibration cal = launchfit_calibrate::read_calibration(calibration_path);
    if (cal.target_bytes_per_sm > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument(calibration_path + ": target_bytes_per_sm too large for bytes_in_flight");
    }
    opts.calibrated_target = static_cast<int>(cal.target_bytes_per_sm);
    const int cc = dev.prop.major * 10 + dev.prop.minor;
    std::printf(
        "calibrated: bytes_in_flight(per_thread, target_per_sm=%d) from %s (%s, cc %d, %d SMs, %.0f GB/s "
        "best)\n",
        opts.calibrated_target, calibration_path.c_str(), cal.device_name.c_str(), cal.cc, cal.sm_count,
        cal.best_gbps);
    if (cal.cc != cc || cal.sm_count != dev.sm_count || cal.device_name != dev.prop.name) {
      std::printf("warning: the calibration was measured on another device model (%s, cc %d, %d SMs)\n",
                  cal.device_name.c_str(), cal.cc, cal.sm_count);
    }
  }

  std::vector<std::size_t> sizes;
  const std::string size_list = a.value("--sizes");
  if (!size_list.empty()) {
    std::stringstream ss(size_list);
    for (std::string item; std::getline(ss, item, ',');) {
      const int e = std::stoi(item);
      if (e < 12 || e > 31) throw std::invalid_argument("--sizes takes log2 sizes in [12, 31], got " + item);
      sizes.push_back(std::size_t{1} << e);
    }
  } else if (quick) {
    sizes = {std::size_t{1} << 16, std::size_t{1} << 18};
  } else {
    // The largest size streams buffers of at least 4x L2 so DRAM, not L2, is measured.
    std::size_t big = std::size_t{1} << 26;
    while (big * sizeof(float) < 4 * dev.l2_bytes) big <<= 1;
    sizes = {std::size_t{1} << 20, std::size_t{1} << 24, big};
  }
  const std::size_t small_n = 4096;

  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bench::float_checker checker;
  runner_context ctx(dev, stream, opts);

  std::vector<std::unique_ptr<case_base>> cases;
  cases.push_back(std::make_unique<reduce_case<float, 1>>("reduce1", stream));
  cases.push_back(std::make_unique<reduce_case<float4, 2>>("reduce8", stream));
  cases.push_back(std::make_unique<reduce_case<float4, 4>>("reduce16", stream));
  cases.push_back(std::make_unique<copy_case>(stream, checker));
  cases.push_back(std::make_unique<saxpy_case>("saxpy", stream, checker));
  cases.push_back(std::make_unique<stencil_case>(stream, checker));
  cases.push_back(std::make_unique<heavy_case>(stream, checker));
  cases.push_back(std::make_unique<histogram_case>(stream));
  cases.push_back(std::make_unique<map_case<4>>("scale4", false, stream));
  cases.push_back(std::make_unique<map_case<1>>("map1", true, stream));
  cases.push_back(std::make_unique<map_case<2>>("map2", true, stream));
  cases.push_back(std::make_unique<map_case<4>>("map4", true, stream));
  cases.push_back(std::make_unique<map_case<12>>("map12", true, stream));
  cases.push_back(std::make_unique<map_case<16>>("map16", true, stream));
  cases.push_back(std::make_unique<map_case<24>>("map24", true, stream));
  cases.push_back(std::make_unique<map_case<32>>("map32", true, stream));
  cases.push_back(std::make_unique<nbody_case>(stream, checker));
  cases.push_back(std::make_unique<stencil2d_case>(stream, checker));
  cases.push_back(std::make_unique<axpy2d_case>(stream, checker));
  saxpy_case small(("saxpy-small"), stream, checker);

  std::set<std::string> only;
  {
    std::stringstream ss(a.value("--only"));
    for (std::string item; std::getline(ss, item, ',');) {
      if (!item.empty()) only.insert(item);
    }
  }
  auto selected = [&](const std::string& name) { return only.empty() || only.count(name) > 0; };

  std::printf("\nkernel resources (regs/thread, static smem, max threads/block):\n");
  for (const auto& c : cases) {
    cudaFuncAttributes attr{};
    BENCH_CUDA(cudaFuncGetAttributes(&attr, c->fn));
    std::printf("  %-12s %3d regs, %5zu B static smem, %4zu B local, max block %4d, %3d B in flight/thread\n",
                c->name.c_str(), attr.numRegs, attr.sharedSizeBytes, attr.localSizeBytes,
                attr.maxThreadsPerBlock, c->bytes_in_flight);
  }
  std::printf("\nsizes:");
  for (std::size_t n : sizes) std::printf(" %s", pow2_text(n).c_str());
  std::printf(" (n-body: %s bodies; saxpy-small n=%zu; 2-D: %s images); %d repeats per configuration\n\n",
              quick ? "16384" : "16384 and 65536", small_n,
              quick ? "512x512" : "1024x1024, 4096x4096, 8192x8192", opts.repeats);
  std::fflush(stdout);

  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    if (!selected(c->name) || c->rank == 2) continue;
    for (std::size_t n : c->sizes(sizes, quick)) run_case(ctx, *c, n, 1000003ULL * (seed++));
  }
  if (selected(small.name)) run_case(ctx, small, small_n, 1000003ULL * (seed++));
  // The 2-D group last, so the 1-D rows keep their order and inputs.
  for (const auto& c : cases) {
    if (!selected(c->name) || c->rank != 2) continue;
    for (std::size_t side : c->sizes(sizes, quick)) run_case(ctx, *c, side, 1000003ULL * (seed++));
  }

  if (ctx.timer.any_timed_out()) {
    std::printf(
        "note: some samples could not queue all their launches while the stream was held; those "
        "include host launch time\n");
  }

  // ---- results ----
  std::printf(
      "\n## Results\n\n| kernel | group | n | policy | block | grid | blocks/SM | ms | GB/s | time/oracle | "
      "note |\n"
      "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|\n");
  std::map<std::string, policy_summary> by_policy;
  std::map<std::pair<std::string, std::string>, policy_summary> by_group;  // (group, policy)
  std::vector<std::string> policy_order, group_order;
  for (const row& r : ctx.rows) {
    // The oracle's blocks/SM 0 is the full grid (one loop iteration per thread).
    const std::string bps = r.policy == "oracle" && r.blocks_per_sm == 0 && r.block > 0
                                ? std::string("full")
                                : std::to_string(r.blocks_per_sm);
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.kernel.c_str(),
                r.group.c_str(), size_text(r).c_str(), r.policy.c_str(),
                dims_text(r.block, r.block_y, r).c_str(), dims_text(r.grid, r.grid_y, r).c_str(), bps.c_str(),
                r.ok ? fmt("%.4f", r.ms).c_str() : "FAILED", fmt("%.1f", r.gbps).c_str(),
                fmt("%.3f", r.ratio).c_str(), r.note.c_str());
    if (r.policy == "oracle" || !r.ok || r.ratio <= 0) continue;
    // Group the bytes_in_flight rows (parameter differs per kernel) under one name.
    const std::string key = r.policy.rfind("bytes_in_flight", 0) == 0 ? "bytes_in_flight" : r.policy;
    if (!by_policy.count(key)) policy_order.push_back(key);
    if (std::find(group_order.begin(), group_order.end(), r.group) == group_order.end()) {
      group_order.push_back(r.group);
    }
    const std::string where = r.kernel + " n=" + size_text(r);
    for (policy_summary* s : {&by_policy[key], &by_group[{r.group, key}]}) {
      s->ratios.push_back(r.ratio);
      if (r.ratio > s->worst) {
        s->worst = r.ratio;
        s->worst_row = where;
      }
    }
  }

  // Regret: each policy row against the better of the naive launch and max_occupancy on the same row (what a
  // user gets without launchfit's other policies). Target: every static policy <= 1.10 on every row.
  struct regret_summary {
    double worst = 0;
    std::string worst_row;
    int over = 0;  // rows above 1.10
    int rows = 0;
  };
  std::map<std::string, regret_summary> regret;
  {
    std::map<std::pair<std::string, std::size_t>, double> baseline;  // (kernel, n) -> ms
    for (const row& r : ctx.rows) {
      if (!r.ok || r.ms <= 0 || (r.policy != "naive" && r.policy != "max_occupancy")) continue;
      double& b = baseline[{r.kernel, r.n}];
      b = b > 0 ? std::min(b, r.ms) : r.ms;
    }
    for (const row& r : ctx.rows) {
      if (r.policy == "oracle" || !r.ok || r.ms <= 0) continue;
      const auto it = baseline.find({r.kernel, r.n});
      if (it == baseline.end()) continue;
      const std::string key = r.policy.rfind("bytes_in_flight", 0) == 0 ? "bytes_in_flight" : r.policy;
      regret_summary& s = regret[key];
      const double x = r.ms / it->second;
      ++s.rows;
      s.over += x > 1.10;
      if (x > s.worst) {
        s.worst = x;
        s.worst_row = r.kernel + " n=" + size_text(r);
      }
    }
  }

  const double total_s = bench::seconds_since(start);
  if (!json_path.empty()) {
    std::ostringstream js;
    js << "{\n\"benchmark\":\"policy-quality\",\n\"device\":" << dev.json()
       << ",\n\"repeats\":" << opts.repeats << ",\n\"quick\":" << (quick ? "true" : "false")
       << ",\n\"rows\":[\n";
    for (std::size_t i = 0; i < ctx.rows.size(); ++i) {
      const row& r = ctx.rows[i];
      js << "{\"kernel\":" << bench::json_string(r.kernel) << ",\"group\":" << bench::json_string(r.group)
         << ",\"n\":" << r.n << ",\"policy\":" << bench::json_string(r.policy) << ",\"block\":" << r.block
         << ",\"grid\":" << r.grid << ",\"blocks_per_sm\":" << r.blocks_per_sm << ",\"block_y\":" << r.block_y
         << ",\"grid_y\":" << r.grid_y << ",\"nx\":" << r.nx << ",\"ny\":" << r.ny
         << ",\"ms\":" << bench::json_number(r.ms) << ",\"ms_unpooled\":" << bench::json_number(r.ms_unpooled)
         << ",\"gbps\":" << bench::json_number(r.gbps)
         << ",\"time_over_oracle\":" << bench::json_number(r.ratio) << ",\"samples\":" << r.samples
         << ",\"configs\":" << r.configs << ",\"ok\":" << (r.ok ? "true" : "false")
         << ",\"note\":" << bench::json_string(r.note) << "}" << (i + 1 < ctx.rows.size() ? ",\n" : "\n");
    }
    js << "],\n\"summary\":{";
    for (std::size_t i = 0; i < policy_order.size(); ++i) {
      const policy_summary& s = by_policy[policy_order[i]];
      js << (i ? "," : "") << bench::json_string(policy_order[i])
         << ":{\"geomean\":" << bench::json_number(bench::geomean(s.ratios))
         << ",\"worst\":" << bench::json_number(s.worst)
         << ",\"worst_row\":" << bench::json_string(s.worst_row) << ",\"rows\":" << s.ratios.size() << "}";
    }
    js << "},\n\"groups\":{";
    for (std::size_t g = 0; g < group_order.size(); ++g) {
      js << (g ? ",\n" : "\n") << bench::json_string(group_order[g]) << ":{";
      bool first = true;
      for (const std::string& p : policy_order) {
        const auto it = by_group.find({group_order[g], p});
        if (it == by_group.end()) continue;
        js << (first ? "" : ",") << bench::json_string(p)
           << ":{\"geomean\":" << bench::json_number(bench::geomean(it->second.ratios))
           << ",\"worst\":" << bench::json_number(it->second.worst)
           << ",\"worst_row\":" << bench::json_string(it->second.worst_row)
           << ",\"rows\":" << it->second.ratios.size() << "}";
        first = false;
      }
      js << "}";
    }
    js << "},\n\"regret\":{";
    bool first_regret = true;
    for (const std::string& p : policy_order) {
      const auto it = regret.find(p);
      if (it == regret.end()) continue;
      js << (first_regret ? "" : ",") << bench::json_string(p) << ":{\"worst\":" << bench::json_number(it->second.worst)
         << ",\"worst_row\":" << bench::json_string(it->second.worst_row) << ",\"over_1_10\":" << it->second.over
         << ",\"rows\":" << it->second.rows << "}";
      first_regret = false;
    }
    js << "},\n\"calibrated_target_per_sm\":" << ctx.opts.calibrated_target << ",\n\"sweep\":[";
    for (std::size_t i = 0; i < ctx.sweep_points.size(); ++i) {
      const auto& sp = ctx.sweep_points[i];
      js << (i ? ",\n" : "\n") << "[" << bench::json_string(sp.kernel) << "," << sp.n << "," << sp.block
         << "," << sp.grid << "," << sp.bps << "," << bench::json_number(sp.ms) << "," << sp.block_y << ","
         << sp.grid_y << "]";
    }
    js << "],\n\"verification_failures\":" << ctx.failures << ",\n\"total_s\":" << bench::json_number(total_s)
       << "\n}\n";
    bench::write_file(json_path, js.str());
    std::printf("\nwrote %s\n", json_path.c_str());
  }

  std::printf(
      "\n## Summary: time / oracle (lower is better; 1.000 = best swept configuration)\n\n"
      "| policy | geomean | worst | worst row | rows | target |\n|---|---:|---:|---|---:|---|\n");
  for (const std::string& p : policy_order) {
    const policy_summary& s = by_policy[p];
    std::string target = "-";
    if (p == "max_occupancy" || p == "bytes_in_flight") target = "geomean <= 1.03, worst <= 1.10";
    if (p == ctx.opts.autotune_policy) target = "<= 1.02 every row";
    std::printf("| %s | %.3f | %.3f | %s | %zu | %s |\n", p.c_str(), bench::geomean(s.ratios), s.worst,
                s.worst_row.c_str(), s.ratios.size(), target.c_str());
  }
  std::printf(
      "\n## Regret: time / the better of naive and max_occupancy on the same row\n\n"
      "| policy | worst | worst row | rows above 1.10 | rows | target |\n|---|---:|---|---:|---:|---|\n");
  for (const std::string& p : policy_order) {
    const auto it = regret.find(p);
    if (it == regret.end()) continue;
    const bool is_static = p != ctx.opts.autotune_policy && p != "naive";
    std::printf("| %s | %.3f | %s | %d | %d | %s |\n", p.c_str(), it->second.worst, it->second.worst_row.c_str(),
                it->second.over, it->second.rows, is_static ? "<= 1.10 every row" : "-");
  }
  // Geometric means per group (columns) and policy (rows).
  std::printf("\n## Geomean of time / oracle per group\n\n| policy | all |");
  for (const std::string& g : group_order) std::printf(" %s |", g.c_str());
  std::printf("\n|---|---:|");
  for (std::size_t g = 0; g < group_order.size(); ++g) std::printf("---:|");
  std::printf("\n");
  for (const std::string& p : policy_order) {
    std::printf("| %s | %.3f |", p.c_str(), bench::geomean(by_policy[p].ratios));
    for (const std::string& g : group_order) {
      const auto it = by_group.find({g, p});
      if (it == by_group.end()) {
        std::printf(" - |");
      } else {
        std::printf(" %.3f (%zu) |", bench::geomean(it->second.ratios), it->second.ratios.size());
      }
    }
    std::printf("\n");
  }
  std::printf("\nverification: %s; total time %.1f s\n",
              bench::verification_summary(ctx.failures, "every timed configuration correct").c_str(),
              total_s);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return ctx.failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("policy-quality", run, argc, argv); }

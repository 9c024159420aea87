// SPDX-License-Identifier: MIT
// matmul_2d — a 32x32-tiled SGEMM launched over 2-D work with launchfit::items({n, m}).
//
// C (m x n) = A (m x k) * B (k x n), row-major, at sizes that are multiples of nothing (1000 x 777 x 513).
// items({n, m}) gives one thread per element of C: x along the columns, y along the rows. Two launches of the
// same kernel:
//   1. fixed({32, 32}): today's dim3(32, 32) block, the grid computed per dimension (ceil(n/32) x
//   ceil(m/32));
//   2. max_occupancy().blocks(multiple_of(128)): launchfit picks the block size by occupancy, shapes it as
//      rows of one warp, {32, threads / 32}, and computes the grid for that shape.
// The kernel handles any block of 32 x rows (rows 1..32): the 32-wide B tile is loaded in 32 / rows passes.
// Each result is checked against a double-precision CPU product with a rigorous float error bound.
//
//   build/demos/matmul_2d [m n k]

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <string>
#include <vector>

#include "demo.hpp"

using launchfit_demo::device_buffer;

namespace {
constexpr int tile = 32;  // the k-tile and the block's width: blockDim.x must be 32
}

// One thread per C element. Block {32, rows}: it covers columns [32 bx, 32 bx + 32) and rows
// [rows by, rows by + rows). A is staged as rows x 32, B as 32 x 32 per k-tile; padding avoids bank
// conflicts.
__global__ void sgemm_tiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                            int m, int n, int k) {
  __shared__ float as[tile][tile + 1];
  __shared__ float bs[tile][tile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int rows = static_cast<int>(blockDim.y);
  const int col = static_cast<int>(blockIdx.x) * tile + tx;
  const int row = static_cast<int>(blockIdx.y) * rows + ty;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += tile) {
    as[ty][tx] = (row < m && k0 + tx < k) ? a[static_cast<std::size_t>(row) * k + k0 + tx] : 0.0f;
    for (int r = ty; r < tile; r += rows) {
      bs[r][tx] = (k0 + r < k && col < n) ? b[static_cast<std::size_t>(k0 + r) * n + col] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < tile; ++kk) acc = fmaf(as[ty][kk], bs[kk][tx], acc);
    __syncthreads();
  }
  if (row < m && col < n) c[static_cast<std::size_t>(row) * n + col] = acc;
}

namespace {

struct reference {
  std::vector<double> c;      // exact-ish product, in double
  std::vector<double> bound;  // sum over k of |a_ik| |b_kj|: scales the float error bound per element
};

reference cpu_product(const std::vector<float>& a, const std::vector<float>& b, int m, int n, int k) {
  reference ref;
  ref.c.assign(static_cast<std::size_t>(m) * n, 0.0);
  ref.bound.assign(static_cast<std::size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i) {
    double* ci = &ref.c[static_cast<std::size_t>(i) * n];
    double* bi = &ref.bound[static_cast<std::size_t>(i) * n];
    for (int p = 0; p < k; ++p) {
      const double aip = a[static_cast<std::size_t>(i) * k + p];
      const float* bp = &b[static_cast<std::size_t>(p) * n];
      for (int j = 0; j < n; ++j) {
        ci[j] += aip * bp[j];
        bi[j] += std::fabs(aip * bp[j]);
      }
    }
  }
  return ref;
}

struct check_result {
  double worst_ratio = 0;    // max |c - ref| / bound: at most 1 is within the float error bound
  double frobenius_rel = 0;  // ||C - ref||_F / ||ref||_F, for information
  bool ok = false;
};

// A float dot product of length k (fma or not, any order) differs from the exact one by at most
// gamma_k * sum |a||b| with gamma_k = k u / (1 - k u), u = 2^-24: the limit used is 2 k u, a safe bound.
check_result check(const std::vector<float>& c, const reference& ref, int k) {
  const double u = std::ldexp(1.0, -24);
  const double limit = 2.0 * k * u;
  check_result r;
  double diff2 = 0, ref2 = 0;
  bool finite = true;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (!std::isfinite(c[i])) finite = false;
    const double d = std::fabs(static_cast<double>(c[i]) - ref.c[i]);
    r.worst_ratio = std::max(r.worst_ratio, d / (limit * ref.bound[i] + 1e-30));
    diff2 += d * d;
    ref2 += ref.c[i] * ref.c[i];
  }
  r.frobenius_rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  r.ok = finite && r.worst_ratio <= 1.0;
  return r;
}

template <class Spec>
bool run_one(const char* title, const char* call, const Spec& spec, const float* da, const float* db,
             float* dc, int m, int n, int k, const reference& ref) {
  std::printf("%s\n    call:      %s\n", title, call);
  // The kernel's tiles need a block 32 wide with at most 32 rows: checked on the plan before launching.
  const launchfit::plan& p = launchfit::plan_for(sgemm_tiled, spec);
  if (p.block.x != tile || p.block.y > tile || p.block.z != 1) {
    std::printf("    plan:      %s  MISMATCH: sgemm_tiled needs a block of 32 x (1..32)\n",
                p.to_string().c_str());
    return false;
  }
  LAUNCHFIT_DEMO_CHECK(cudaMemset(dc, 0xff, static_cast<std::size_t>(m) * n * sizeof(float)));  // NaN poison
  cudaEvent_t start = nullptr, stop = nullptr;
  LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&start));
  LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventRecord(start));
  const launchfit::launched ran = launchfit::launch(sgemm_tiled, spec, da, db, dc, m, n, k);
  LAUNCHFIT_DEMO_CHECK(cudaEventRecord(stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventSynchronize(stop));
  LAUNCHFIT_DEMO_CHECK(cudaGetLastError());
  float ms = 0;
  LAUNCHFIT_DEMO_CHECK(cudaEventElapsedTime(&ms, start, stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventDestroy(start));
  LAUNCHFIT_DEMO_CHECK(cudaEventDestroy(stop));

  launchfit_demo::print_plan(ran.plan(), spec.work_shape());
  std::printf("    launched:  grid %s x block %s, %.2f waves of %lld resident blocks\n",
              ran.grid.to_string().c_str(), ran.block.to_string().c_str(), ran.waves(),
              ran.plan().resident_blocks());
  const unsigned want_gx = static_cast<unsigned>((n + tile - 1) / tile);
  const unsigned want_gy =
      static_cast<unsigned>((m + static_cast<int>(ran.block.y) - 1) / static_cast<int>(ran.block.y));
  const bool grid_ok =
      ran.grid.x == want_gx && ran.grid.y == want_gy && ran.grid.z == 1 && ran.block == p.block;
  std::printf("    check:     grid == ceil(%d / 32) x ceil(%d / %u) = %u x %u  %s\n", n, m, ran.block.y,
              want_gx, want_gy, grid_ok ? "OK" : "MISMATCH");

  std::vector<float> c(static_cast<std::size_t>(m) * n);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const check_result r = check(c, ref, k);
  const double gflops = 2.0 * m * n * k / (ms * 1e6);
  std::printf("    ran:       %.3f ms (%.0f GFLOP/s, first launch: includes planning)\n", ms, gflops);
  std::printf(
      "    verified:  max |C - ref| / (2 k 2^-24 sum|a||b|) = %.3g (limit 1), ||C - ref||_F / ||ref||_F = "
      "%.3g  %s\n\n",
      r.worst_ratio, r.frobenius_rel, r.ok ? "OK" : "MISMATCH");
  return grid_ok && r.ok;
}

int run_matmul(int m, int n, int k) {
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  std::printf("matmul_2d: %s (%s, %d SMs)\n", dev.name.c_str(), dev.arch().c_str(), dev.sm_count);
  std::printf(
      "C (%d x %d) = A (%d x %d) * B (%d x %d), one thread per element of C: items({n, m}) = items({%d, "
      "%d})\n\n",
      m, n, m, k, k, n, n, m);

  const std::vector<float> a = launchfit_demo::random_floats(static_cast<std::size_t>(m) * k, 1);
  const std::vector<float> b = launchfit_demo::random_floats(static_cast<std::size_t>(k) * n, 2);
  device_buffer<float> da(a.size()), db(b.size()), dc(static_cast<std::size_t>(m) * n);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(da.get(), a.data(), da.bytes(), cudaMemcpyHostToDevice));
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(db.get(), b.data(), db.bytes(), cudaMemcpyHostToDevice));
  const reference ref = cpu_product(a, b, m, n, k);
  const launchfit::extent work{static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(m)};

  bool ok = true;
  // before: dim3 block(32, 32), grid((n + 31) / 32, (m + 31) / 32); sgemm_tiled<<<grid, block>>>(a, b, c, m,
  // n, k);
  ok &= run_one("1. fixed 32 x 32 block",
                "launchfit::launch(sgemm_tiled, launchfit::fixed({32, 32}).items({n, m}), a, b, c, m, n, k);",
                launchfit::fixed(launchfit::dims{32, 32, 1}).items(work), da.get(), db.get(), dc.get(), m, n,
                k, ref);
  // The B tile (32 rows) is loaded in 32 / rows passes: multiple_of(128) keeps rows a multiple of 4.
  ok &= run_one("2. block chosen by occupancy, a multiple of 128 threads (rows a multiple of 4)",
                "launchfit::launch(sgemm_tiled, launchfit::max_occupancy().blocks(launchfit::block_rule::"
                "multiple_of(128)).items({n, m}), a, b, c, m, n, k);",
                launchfit::max_occupancy().blocks(launchfit::block_rule::multiple_of(128)).items(work),
                da.get(), db.get(), dc.get(), m, n, k, ref);
  LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
  std::printf("matmul_2d: %s\n", ok ? "both launches match the CPU" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "a 32x32-tiled SGEMM over 2-D work: items({n, m}) with fixed({32, 32}) and with max_occupancy()",
      "matmul_2d"};
  int m = 1000, n = 777, k = 513;
  app.add_option("m", m, "rows of A and C")->check(CLI::Range(1, 16384))->capture_default_str();
  app.add_option("n", n, "columns of B and C")->check(CLI::Range(1, 16384))->capture_default_str();
  app.add_option("k", k, "columns of A, rows of B")->check(CLI::Range(1, 16384))->capture_default_str();
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  return launchfit_demo::run("matmul_2d", [&] { return run_matmul(m, n, k); });
}

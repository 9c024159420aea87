// SPDX-License-Identifier: MIT
// cooperative — a grid-synchronised kernel launched with launchfit::cooperative().
//
// A 2-D heat equation (Jacobi iterations) where ONE launch runs every time step and
// cooperative_groups::this_grid().sync() separates the steps. That is only safe when every block of the grid
// is resident at once; a grid one block too large deadlocks or is refused by the driver. launchfit sizes the
// grid to exactly the co-resident blocks (active blocks per SM x SMs, for this kernel, block size and shared
// memory), launches with the cooperative attribute, and refuses an oversized grid before launching.
// The result is checked against the same iterations on the CPU.
//
//   build/demos/cooperative

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <vector>

#include "demo.hpp"

namespace cg = cooperative_groups;
using launchfit_demo::device_buffer;

// `steps` Jacobi sweeps of u_t = alpha * laplacian(u) on an nx x ny grid with fixed boundary values.
// Grid-stride inside a step, so any co-resident grid covers all cells; grid.sync() between steps.
// Explicit _rn intrinsics keep the arithmetic identical to the CPU loop (no fused multiply-add).
__global__ void heat2d(float* u, float* v, int nx, int ny, int steps, float alpha) {
  cg::grid_group grid = cg::this_grid();
  const long long cells = static_cast<long long>(nx) * ny;
  for (int s = 0; s < steps; ++s) {
    for (long long i = grid.thread_rank(); i < cells; i += grid.size()) {
      const int y = static_cast<int>(i / nx), x = static_cast<int>(i % nx);
      if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
        v[i] = u[i];
        continue;
      }
      const float neighbours = __fadd_rn(__fadd_rn(u[i - 1], u[i + 1]), __fadd_rn(u[i - nx], u[i + nx]));
      const float laplacian = __fadd_rn(neighbours, __fmul_rn(-4.0f, u[i]));
      v[i] = __fadd_rn(u[i], __fmul_rn(alpha, laplacian));
    }
    grid.sync();  // every cell of step s is written before any cell of step s + 1 is read
    float* t = u;
    u = v;
    v = t;
  }
}

namespace {

void heat2d_cpu(std::vector<float>& u, std::vector<float>& v, int nx, int ny, int steps, float alpha) {
  for (int s = 0; s < steps; ++s) {
    for (int y = 0; y < ny; ++y) {
      for (int x = 0; x < nx; ++x) {
        const std::size_t i = static_cast<std::size_t>(y) * nx + x;
        if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
          v[i] = u[i];
          continue;
        }
        // One rounding per operation, as on the GPU: volatile stops a host compiler from fusing into FMA.
        volatile float neighbours = (u[i - 1] + u[i + 1]) + (u[i - nx] + u[i + nx]);
        volatile float centre = -4.0f * u[i];
        volatile float laplacian = neighbours + centre;
        volatile float scaled = alpha * laplacian;
        v[i] = u[i] + scaled;
      }
    }
    std::swap(u, v);
  }
}

// A hot square and a hot boundary edge on a cold plate.
std::vector<float> initial_plate(int nx, int ny) {
  std::vector<float> u(static_cast<std::size_t>(nx) * ny, 0.0f);
  for (int x = 0; x < nx; ++x) u[x] = 1.0f;  // top edge held at 1
  for (int y = ny / 3; y < ny / 2; ++y)
    for (int x = nx / 3; x < nx / 2; ++x) u[static_cast<std::size_t>(y) * nx + x] = 1.0f;
  return u;
}

int run_cooperative() {
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  LAUNCHFIT_DEMO_CHECK(cudaFree(nullptr));
  int coop = 0, sms = 0;
  LAUNCHFIT_DEMO_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  LAUNCHFIT_DEMO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("cooperative: %s (%s, %d SMs, cooperative launch %s)\n\n", dev.name.c_str(), dev.arch().c_str(), sms,
              coop ? "supported" : "NOT supported");
  bool ok = true;

  const int nx = 512, ny = 384, steps = 300;
  const float alpha = 0.2f;  // stable for alpha <= 0.25
  const std::vector<float> u0 = initial_plate(nx, ny);
  const std::size_t cells = u0.size();
  device_buffer<float> du(cells), dv(cells);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(du.get(), u0.data(), du.bytes(), cudaMemcpyHostToDevice));
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dv.get(), u0.data(), dv.bytes(), cudaMemcpyHostToDevice));

  // ---- the plan: exactly the co-resident grid ------------------------------------------------------------
  // before: int per_sm; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, heat2d, 256, 0);
  //         void* args[] = {&u, &v, &nx, &ny, &steps, &alpha};
  //         cudaLaunchCooperativeKernel(heat2d, per_sm * num_sms, 256, args);
  auto spec = launchfit::cooperative();
  const launchfit::plan& p = launchfit::plan_for(heat2d, spec);
  const launchfit::dims grid = launchfit::grid_for(p, spec.work_shape());
  int per_sm = 0;
  LAUNCHFIT_DEMO_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, heat2d, p.block_threads,
                                                                     p.dynamic_smem_bytes));
  std::printf("heat2d, %d x %d cells, %d steps in one launch\n", nx, ny, steps);
  std::printf("    after:     launchfit::launch(heat2d, launchfit::cooperative(), u, v, nx, ny, steps, alpha);\n");
  launchfit_demo::print_plan(p, spec.work_shape());
  const bool grid_ok = p.options.cooperative && grid.x == static_cast<unsigned>(per_sm * sms) && grid.y == 1 && grid.z == 1;
  std::printf("    check:     launchfit grid %u == cudaOccupancyMaxActiveBlocksPerMultiprocessor(block %d) %d x %d "
              "SMs = %d  %s\n",
              grid.x, p.block_threads, per_sm, sms, per_sm * sms, grid_ok ? "OK" : "MISMATCH");
  ok &= grid_ok;

  // ---- run it ----------------------------------------------------------------------------------------------
  cudaEvent_t start = nullptr, stop = nullptr;
  LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&start));
  LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventRecord(start));
  launchfit::launch(heat2d, spec, du.get(), dv.get(), nx, ny, steps, alpha);
  LAUNCHFIT_DEMO_CHECK(cudaEventRecord(stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  LAUNCHFIT_DEMO_CHECK(cudaEventElapsedTime(&ms, start, stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventDestroy(start));
  LAUNCHFIT_DEMO_CHECK(cudaEventDestroy(stop));
  std::vector<float> gpu(cells);
  // After an even number of swaps the latest step is in u, after an odd number in v.
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(gpu.data(), steps % 2 == 0 ? du.get() : dv.get(), du.bytes(),
                                  cudaMemcpyDeviceToHost));
  std::vector<float> cpu_u = u0, cpu_v = u0;
  heat2d_cpu(cpu_u, cpu_v, nx, ny, steps, alpha);
  double worst = 0, heat = 0;
  for (std::size_t i = 0; i < cells; ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(gpu[i] - cpu_u[i])));
    heat += cpu_u[i];
  }
  const bool result_ok = worst <= 1e-5;
  std::printf("    ran:       %.3f ms, %.2f us per grid-synchronised step\n", ms, 1000.0 * ms / steps);
  std::printf("    verified:  max |GPU - CPU| = %.3g over %zu cells (limit 1e-5; total heat %.3f)  %s\n", worst, cells,
              heat, result_ok ? "OK" : "MISMATCH");
  ok &= result_ok;

  // ---- what launchfit refuses, before anything reaches the GPU ---------------------------------------------
  std::printf("\nrefused before launch:\n");
  auto expect_refusal = [&](const char* what, auto attempt) {
    ok &= launchfit_demo::expect_refusal(what, attempt);
  };
  const std::uint64_t resident_threads = static_cast<std::uint64_t>(grid.x) * p.block_threads;
  expect_refusal("items(co-resident threads + 1): one block more than co-resides", [&] {
    launchfit::launch(heat2d, launchfit::cooperative().items(resident_threads + 1), du.get(), dv.get(), nx, ny,
                      steps, alpha);
  });
  expect_refusal("one block per SM more than fits", [&] {
    launchfit::launch(heat2d, launchfit::cooperative(per_sm + 1, p.block_threads), du.get(), dv.get(), nx, ny,
                      steps, alpha);
  });
  LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());

  std::printf("\ncooperative: %s\n", ok ? "grid sized to co-residency and result matches the CPU"
                                        : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a grid-synchronised kernel sized by launchfit::cooperative() to exactly the co-resident grid",
               "cooperative"};
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  return launchfit_demo::run("cooperative", run_cooperative);
}

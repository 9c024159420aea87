// dropin — launchfit as a drop-in replacement for kernel<<<grid, block>>>(args...).
//
// Three everyday kernels, each shown with the launch line it replaces. launchfit picks the block from the
// kernel's real register and shared-memory use on this device, computes the grid from the work, logs each
// new plan once (logger "launchfit", stderr) and checks every launch. Every result is verified on the CPU.
//
//   build/demos/dropin                            # on a machine without a GPU: prints why, exits 0
//   LAUNCHFIT_REQUIRE_GPU=1 build/demos/dropin    # a missing GPU is a failure (exit 1)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <launchfit/cache.hpp>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <vector>

#include "demo.hpp"

using launchfit_demo::device_buffer;
using launchfit_demo::random_floats;

// ---- the kernels: unchanged CUDA, nothing launchfit-specific ------------------------------------------

__global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// out (cols x rows) = transpose of in (rows x cols). launchfit plans 1-D blocks, so the 2-D shape is
// handled in the kernel: one thread per element, flat index -> (row, col).
__global__ void transpose(const float* in, float* out, int rows, int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * cols) return;
  const int r = static_cast<int>(i / cols), c = static_cast<int>(i % cols);
  out[static_cast<long long>(c) * rows + r] = in[i];
}

// Grid-stride sum: any grid covers all n items; one atomic per warp. Blocks are whole warps (launchfit
// plans blocks in warp steps), so the full-mask shuffle is safe.
__global__ void sum(const float* x, long long n, double* total) {
  double acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc += x[i];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, acc);
}

namespace {

bool report(const char* what, bool ok, const char* detail) {
  std::printf("    verified:  %s %s  %s\n", what, detail, ok ? "OK" : "MISMATCH");
  return ok;
}

int run_dropin() {
  // The first launchfit call loads the driver: without one this throws "no CUDA driver/device".
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  LAUNCHFIT_DEMO_CHECK(cudaFree(nullptr));  // make the primary context current
  std::printf("dropin: device 0 = %s (%s, %d SMs, %d threads/SM)\n\n", dev.name.c_str(), dev.arch().c_str(),
              dev.sm_count, dev.max_threads_per_sm);
  bool ok = true;
  char detail[160];

  // ---- 1. saxpy: one thread per item -------------------------------------------------------------------
  {
    const int n = (1 << 24) + 7;
    const float a = 2.5f;
    const std::vector<float> x = random_floats(n, 1), y0 = random_floats(n, 2);
    device_buffer<float> dx(n), dy(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice));

    // before: saxpy<<<(n + 255) / 256, 256>>>(a, x, y, n);
    auto spec = launchfit::max_occupancy().items(n);
    launchfit::launch(saxpy, spec, a, dx.get(), dy.get(), n);

    LAUNCHFIT_DEMO_CHECK(cudaGetLastError());
    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    std::printf("1. saxpy, n=%d\n", n);
    std::printf("    before:    saxpy<<<(n + 255) / 256, 256>>>(a, x, y, n);\n");
    std::printf("    after:     launchfit::launch(saxpy, launchfit::max_occupancy().items(n), a, x, y, n);\n");
    launchfit_demo::print_plan(launchfit::plan_for(saxpy, spec), spec.work_shape());
    std::vector<float> y(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
    const double worst = launchfit_demo::saxpy_max_relative_error(a, x, y0, y);
    std::snprintf(detail, sizeof detail, "max relative error %.2e (limit 1e-6) over %d elements", worst, n);
    ok &= report("y = a*x + y:", worst <= 1e-6, detail);
  }

  // ---- 2. transpose: a 2-D shape as items(rows * cols) --------------------------------------------------
  {
    const int rows = 3001, cols = 4099;  // deliberately not multiples of any block size
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    const std::vector<float> in = random_floats(n, 3);
    device_buffer<float> din(n), dout(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(din.get(), in.data(), din.bytes(), cudaMemcpyHostToDevice));
    LAUNCHFIT_DEMO_CHECK(cudaMemset(dout.get(), 0, dout.bytes()));

    // before: dim3 block(16, 16), grid((cols + 15) / 16, (rows + 15) / 16);
    //         transpose<<<grid, block>>>(in, out, rows, cols);
    auto spec = launchfit::max_occupancy().items(n);
    launchfit::launch(transpose, spec, din.get(), dout.get(), rows, cols);

    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    std::printf("\n2. transpose, %d x %d\n", rows, cols);
    std::printf("    before:    transpose<<<dim3((cols + 15) / 16, (rows + 15) / 16), dim3(16, 16)>>>(in, out, rows, cols);\n");
    std::printf("    after:     launchfit::launch(transpose, launchfit::max_occupancy().items(rows * cols), in, out, rows, cols);\n");
    launchfit_demo::print_plan(launchfit::plan_for(transpose, spec), spec.work_shape());
    std::vector<float> out(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(out.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost));
    std::size_t wrong = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        wrong += out[static_cast<std::size_t>(c) * rows + r] != in[static_cast<std::size_t>(r) * cols + c];
    std::snprintf(detail, sizeof detail, "%zu of %zu elements differ", wrong, n);
    ok &= report("out[c][r] == in[r][c]:", wrong == 0, detail);
  }

  // ---- 3. grid-stride sum with atomics: the grid is capped at what is resident ---------------------------
  {
    const long long n = (1LL << 26) + 12345;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n), 4);
    device_buffer<float> dx(static_cast<std::size_t>(n));
    device_buffer<double> dtotal(1);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
    LAUNCHFIT_DEMO_CHECK(cudaMemset(dtotal.get(), 0, sizeof(double)));

    // before: sum<<<4 * num_sms, 256>>>(x, n, total);
    auto spec = launchfit::max_occupancy().grid_stride(n);
    launchfit::launch(sum, spec, dx.get(), n, dtotal.get());

    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    std::printf("\n3. grid-stride sum, n=%lld\n", n);
    std::printf("    before:    sum<<<4 * num_sms, 256>>>(x, n, total);\n");
    std::printf("    after:     launchfit::launch(sum, launchfit::max_occupancy().grid_stride(n), x, n, total);\n");
    const launchfit::plan& p = launchfit::plan_for(sum, spec);
    launchfit_demo::print_plan(p, spec.work_shape());
    double got = 0;
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(&got, dtotal.get(), sizeof got, cudaMemcpyDeviceToHost));
    double want = 0, magnitude = 0;
    for (float v : x) {
      want += v;
      magnitude += std::fabs(v);
    }
    const double err = std::fabs(got - want);
    std::snprintf(detail, sizeof detail, "GPU %.9g, CPU %.9g, |diff| %.2e (limit %.2e)", got, want, err,
                  1e-12 * magnitude);
    ok &= report("sum:", err <= 1e-12 * magnitude && p.block_threads % 32 == 0, detail);
  }

  // ---- the plan cache: one plan per (device, kernel, policy, smem rule), reused by every later launch ----
  std::printf("\nplan cache (%zu plans; a second launch of the same kernel and policy reuses its plan and "
              "logs nothing):\n",
              launchfit::cache().size());
  for (const launchfit::cached_plan& c : launchfit::cache().plans()) {
    std::printf("    %-45s %s\n", c.kernel.c_str(), c.plan.to_string().c_str());
  }

  std::printf("\ndropin: %s\n", ok ? "all results match the CPU" : "FAILED: results differ from the CPU");
  return ok ? 0 : 1;
}

}  // namespace

int main() { return launchfit_demo::run("dropin", run_dropin); }

// SPDX-License-Identifier: MIT
// dropin — launchfit as a drop-in replacement for kernel<<<grid, block>>>(args...).
//
// Three everyday kernels, each shown with the launch line it replaces. launchfit picks the block from the
// kernel's real register and shared-memory use on this device, computes the grid from the work, logs each
// new plan once (logger "launchfit", stderr) and checks every launch. Every result is verified on the CPU.
//
// Without a GPU it shows, offline, the plans launchfit would choose for the same three launches on a device
// model from its built-in table (--device-model, default H200): the kernels' registers and shared memory
// as compiled into this program, occupancy from the offline calculator instead of the driver.
//
//   dropin                                  # without a GPU: the offline plans, exit 0
//   dropin --offline --device-model A100    # the offline plans, GPU or not
//   LAUNCHFIT_REQUIRE_GPU=1 dropin          # a missing GPU is a failure (exit 3)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <launchfit/cache.hpp>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <launchfit/policy.hpp>
#include <string>
#include <vector>

#include "cubin_report.hpp"
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

// The three launches' specs: launched on a GPU, planned offline without one.
launchfit::spec<launchfit::max_occupancy_policy> saxpy_spec(int n) {
  return launchfit::max_occupancy().items(n);
}
launchfit::spec<launchfit::max_occupancy_policy> transpose_spec(std::size_t n) {
  return launchfit::max_occupancy().items(n);
}
launchfit::spec<launchfit::max_occupancy_policy> sum_spec(long long n) {
  return launchfit::max_occupancy().grid_stride(n);
}
constexpr int saxpy_n = (1 << 24) + 7;
constexpr int transpose_rows = 3001, transpose_cols = 4099;  // deliberately not multiples of any block size
constexpr long long sum_n = (1LL << 26) + 12345;

// The kernel named `name` as ptxas compiled it into this program (the image for the device's architecture,
// else the newest one), as the offline calculator takes it.
launchfit::kernel_resources compiled_kernel(const launchfit::calc::cubin_contents& own, int sm,
                                            const char* name, int& image_sm) {
  const launchfit::calc::cubin_image* image = nullptr;
  for (const auto& i : own.images)
    if (!image || i.sm == sm || (image->sm != sm && i.sm > image->sm)) image = &i;
  if (!image) throw std::runtime_error("this program holds no readable cubin (built without device code?)");
  image_sm = image->sm;
  const std::string prefix = std::string(name) + "(";
  for (const auto& k : image->kernels) {
    if (k.demangled.compare(0, prefix.size(), prefix) != 0) continue;
    launchfit::kernel_resources r = launchfit::kernel_resources::manual(
        k.regs_per_thread, k.static_smem_bytes, k.max_threads_per_block, k.name);
    r.demangled = k.demangled;
    r.local_bytes_per_thread = k.local_bytes_per_thread;
    return r;
  }
  throw std::runtime_error(std::string("kernel ") + name + " is not in this program's sm_" +
                           std::to_string(image->sm) + " cubin");
}

// What launchfit would choose for the three launches on a device model of the built-in table, computed
// offline: the same specs, their policy asked with the calculator as its occupancy oracle (a query without
// the driver's), no GPU touched.
int show_offline_plans(const std::string& model) {
  const launchfit::device_limits dev = launchfit::device_limits::for_arch(model);
  const launchfit::calc::cubin_contents own = launchfit::calc::read_cubin_file("/proc/self/exe");
  const int sm = dev.cc();
  struct shown {
    const char* title;
    const char* kernel;
    launchfit::spec<launchfit::max_occupancy_policy> spec;
    const char* after;
  };
  char saxpy_title[64], transpose_title[64], sum_title[64];
  std::snprintf(saxpy_title, sizeof saxpy_title, "1. saxpy, n=%d", saxpy_n);
  std::snprintf(transpose_title, sizeof transpose_title, "2. transpose, %d x %d", transpose_rows,
                transpose_cols);
  std::snprintf(sum_title, sizeof sum_title, "3. grid-stride sum, n=%lld", sum_n);
  const shown launches[] = {
      {saxpy_title, "saxpy", saxpy_spec(saxpy_n),
       "launchfit::launch(saxpy, launchfit::max_occupancy().items(n), a, x, y, n);"},
      {transpose_title, "transpose",
       transpose_spec(static_cast<std::size_t>(transpose_rows) * transpose_cols),
       "launchfit::launch(transpose, launchfit::max_occupancy().items(rows * cols), in, out, rows, cols);"},
      {sum_title, "sum", sum_spec(sum_n),
       "launchfit::launch(sum, launchfit::max_occupancy().grid_stride(n), x, n, total);"},
  };
  std::printf(
      "dropin: OFFLINE, nothing launched: the plans launchfit would choose on %s (%s, %d SMs, %d "
      "threads/SM), from its built-in device table and the offline occupancy calculator\n",
      model.c_str(), dev.arch().c_str(), dev.sm_count, dev.max_threads_per_sm);
  for (const shown& l : launches) {
    int image_sm = 0;
    launchfit::query q;
    q.device = dev;
    q.kernel = compiled_kernel(own, sm, l.kernel, image_sm);
    q.work_hint = l.spec.work_shape();
    q.blocks = l.spec.block_sizes();
    q.bytes_in_flight_per_sm = launchfit::default_bytes_in_flight_per_sm(dev);
    const launchfit::plan p = l.spec.get_policy().choose(q);
    std::printf("\n%s\n", l.title);
    std::printf("    after:     %s\n", l.after);
    std::printf("    kernel:    %s: %d registers/thread, %zu B static smem (sm_%d code in this program%s)\n",
                q.kernel.demangled.c_str(), q.kernel.regs_per_thread, q.kernel.static_smem_bytes, image_sm,
                image_sm == sm ? "" : ", not this device's architecture");
    launchfit_demo::print_plan(p, l.spec.work_shape());
  }
  std::printf(
      "\ndropin: offline plans for %s shown; on a GPU the driver is asked instead and the results "
      "are verified\n",
      model.c_str());
  return launchfit_demo::exit_ok;
}

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
    const int n = saxpy_n;
    const float a = 2.5f;
    const std::vector<float> x = random_floats(n, 1), y0 = random_floats(n, 2);
    device_buffer<float> dx(n), dy(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice));

    // before: saxpy<<<(n + 255) / 256, 256>>>(a, x, y, n);
    const auto spec = saxpy_spec(n);
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
    const int rows = transpose_rows, cols = transpose_cols;
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    const std::vector<float> in = random_floats(n, 3);
    device_buffer<float> din(n), dout(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(din.get(), in.data(), din.bytes(), cudaMemcpyHostToDevice));
    LAUNCHFIT_DEMO_CHECK(cudaMemset(dout.get(), 0, dout.bytes()));

    // before: dim3 block(16, 16), grid((cols + 15) / 16, (rows + 15) / 16);
    //         transpose<<<grid, block>>>(in, out, rows, cols);
    const auto spec = transpose_spec(n);
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
    const long long n = sum_n;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n), 4);
    device_buffer<float> dx(static_cast<std::size_t>(n));
    device_buffer<double> dtotal(1);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
    LAUNCHFIT_DEMO_CHECK(cudaMemset(dtotal.get(), 0, sizeof(double)));

    // before: sum<<<4 * num_sms, 256>>>(x, n, total);
    const auto spec = sum_spec(n);
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

int main(int argc, char** argv) {
  CLI::App app{
      "launchfit::launch in place of kernel<<<grid, block>>>: three kernels launched and verified; "
      "without a GPU, the plans launchfit would choose on a device model, computed offline",
      "dropin"};
  std::string model = "H200";
  bool offline = false;
  app.add_option("--device-model", model,
                 "device model of launchfit's built-in table for the offline plans: a part (H200, A100, L4, "
                 "...) or an architecture (sm_90)")
      ->capture_default_str()
      ->check([](const std::string& m) -> std::string {
        try {
          (void)launchfit::device_limits::for_arch(m);
          return {};
        } catch (const launchfit::error& e) {
          return e.message();
        }
      });
  app.add_flag("--offline", offline, "show the offline plans without touching a GPU");
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  const auto offline_plans = [&] { return show_offline_plans(model); };
  if (offline) return launchfit_demo::run("dropin", offline_plans);
  return launchfit_demo::run("dropin", run_dropin, offline_plans);
}

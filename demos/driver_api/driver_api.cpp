// SPDX-License-Identifier: MIT
// driver_api — kernels loaded at run time from PTX or a cubin, launched with launchfit.
//
// The kernels live in driver_api/kernels.cu, compiled at build time to driver_api_kernels.ptx and
// driver_api_kernels.cubin (next to this program). This program is plain C++: no nvcc, no <<<>>>.
// It loads the PTX file (JIT-compiled by the driver), the cubin file, and the PTX text from memory, and
// launches the same saxpy from each, with variadic arguments and with one aggregate struct whose fields
// are the arguments (packed with Boost.PFR). launchfit checks the arguments against the parameter sizes
// the driver reports and refuses a wrong count or size before launching.
//
//   driver_api [PTX_FILE CUBIN_FILE]    (default: the files built next to the program)

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <launchfit/args.hpp>
#include <launchfit/device.hpp>
#include <launchfit/kernel.hpp>
#include <launchfit/launch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "demo.hpp"

using launchfit_demo::device_buffer;
using launchfit_demo::random_floats;

// The kernel's parameters, in order: launch(k, spec, args(saxpy_args{...})) passes each field as one
// argument.
struct saxpy_args {
  float a;
  const float* x;
  float* y;
  int n;
};

namespace {

// A file built next to this program, else where the build wrote it.
std::string module_path(const std::string& file_name, const char* build_path) {
  char exe[4096] = {};
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    std::string dir(exe, static_cast<std::size_t>(len));
    dir.erase(dir.find_last_of('/') + 1);
    if (std::ifstream(dir + file_name).good()) return dir + file_name;
  }
  return build_path;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw launchfit::error("read", "CUDA_ERROR_FILE_NOT_FOUND", "cannot open '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int run_driver_api(std::string ptx_path, std::string cubin_path) {
  if (ptx_path.empty()) ptx_path = module_path("driver_api_kernels.ptx", LAUNCHFIT_DEMO_PTX);
  if (cubin_path.empty()) cubin_path = module_path("driver_api_kernels.cubin", LAUNCHFIT_DEMO_CUBIN);
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  LAUNCHFIT_DEMO_CHECK(cudaFree(nullptr));  // the runtime's primary context is the one launchfit launches in
  std::printf("driver_api: %s (%s)\n  PTX:   %s\n  cubin: %s\n\n", dev.name.c_str(), dev.arch().c_str(),
              ptx_path.c_str(), cubin_path.c_str());
  bool ok = true;

  const int n = (1 << 22) + 3;
  const float a = -1.5f;
  const std::vector<float> x = random_floats(n, 11), y0 = random_floats(n, 12);
  device_buffer<float> dx(n), dy(n);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  auto reset_y = [&] { LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice)); };
  auto verify_y = [&](const char* what) {
    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    std::vector<float> y(n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
    const double worst = launchfit_demo::saxpy_max_relative_error(a, x, y0, y);
    const bool good = worst <= 1e-6;
    std::printf("    %-44s max relative error %.2e  %s\n", what, worst, good ? "OK" : "MISMATCH");
    ok &= good;
  };

  // ---- three ways to load the same kernels ------------------------------------------------------------------
  const std::string ptx_text = read_text(ptx_path);
  struct loaded {
    const char* how;
    launchfit::module module;
  };
  loaded modules[] = {
      {"module::from_file(PTX)   (JIT by the driver)", launchfit::module::from_file(ptx_path)},
      {"module::from_file(cubin)", launchfit::module::from_file(cubin_path)},
      {"module::from_ptx(text in memory)", launchfit::module::from_ptx(ptx_text)},
  };
  for (const loaded& m : modules) {
    const launchfit::kernel saxpy = m.module.get("saxpy");
    const launchfit::kernel_resources res = saxpy.resources();
    std::printf("%s: kernel %s, %d registers, PTX %d, binary sm_%d\n", m.how, res.demangled.c_str(),
                res.regs_per_thread, res.ptx_version, res.binary_version);

    // Variadic: each argument's size must equal the parameter's (float, pointer, pointer, int).
    reset_y();
    auto spec = launchfit::max_occupancy().items(n);
    launchfit::launch(saxpy, spec, a, static_cast<const float*>(dx.get()), dy.get(), n);
    std::printf("    plan: %s\n", launchfit::plan_for(saxpy, spec).to_string().c_str());
    verify_y("launch(k, max_occupancy().items(n), a, x, y, n)");

    // One aggregate: args() passes its fields as the arguments, in order.
    reset_y();
    launchfit::launch(saxpy, launchfit::fixed(256).items(n),
                      launchfit::args(saxpy_args{a, dx.get(), dy.get(), n}));
    verify_y("launch(k, fixed(256).items(n), args(saxpy_args{...}))");
  }

  // ---- what launchfit refuses ----------------------------------------------------------------------------
  std::printf("\nrefused before launch:\n");
  auto expect_refusal = [&](const char* what, auto attempt) {
    ok &= launchfit_demo::expect_refusal(what, attempt);
  };
  expect_refusal("a kernel name the module does not have", [&] { (void)modules[1].module.get("sxapy"); });

  const launchfit::kernel fill = modules[1].module.get("fill");  // fill(float* out, unsigned long long n, float v)
  const auto sizes = fill.param_sizes();
  if (!sizes) {
    std::printf("    (this driver does not report parameter sizes (cuFuncGetParamInfo): argument checks skipped)\n");
  } else {
    std::printf("    fill's parameter sizes from the driver:");
    for (std::size_t s : *sizes) std::printf(" %zu", s);
    std::printf(" bytes\n");
    const int m = 1000;
    device_buffer<float> out(m);
    LAUNCHFIT_DEMO_CHECK(cudaMemset(out.get(), 0, out.bytes()));
    auto spec = launchfit::fixed(128).items(m);
    expect_refusal("2 arguments for 3 parameters", [&] {
      launchfit::launch(fill, spec, out.get(), static_cast<unsigned long long>(m));
    });
    expect_refusal("an int (4 bytes) for the unsigned long long parameter", [&] {
      launchfit::launch(fill, spec, out.get(), m, 2.5f);
    });
    // Nothing ran; then the correct call.
    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    std::vector<float> h(m);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(h.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
    const bool untouched = std::all_of(h.begin(), h.end(), [](float v) { return v == 0.0f; });
    launchfit::launch(fill, spec, out.get(), static_cast<unsigned long long>(m), 2.5f);
    LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(h.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
    const bool filled = std::all_of(h.begin(), h.end(), [](float v) { return v == 2.5f; });
    std::printf("    output untouched by the refused calls: %s; correct call fills it: %s\n", untouched ? "OK" : "NO",
                filled ? "OK" : "NO");
    ok &= untouched && filled;
  }

  std::printf("\ndriver_api: %s\n", ok ? "all results match the CPU" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kernels loaded at run time from PTX and a cubin, launched with launchfit (variadic and lf::args)",
      "driver_api"};
  std::string ptx, cubin;
  // No default shown: it is a path of the build, found next to the program first.
  app.add_option("ptx", ptx,
                 "PTX file of driver_api/kernels.cu (default: driver_api_kernels.ptx next to the program)")
      ->check(CLI::ExistingFile);
  app.add_option("cubin", cubin, "its cubin (default: driver_api_kernels.cubin next to the program)")
      ->check(CLI::ExistingFile);
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  if (ptx.empty() != cubin.empty()) {
    std::fprintf(
        stderr, "driver_api: error: give both PTX_FILE and CUBIN_FILE, or neither (see driver_api --help)\n");
    return launchfit_demo::exit_usage;
  }
  return launchfit_demo::run("driver_api", [&] { return run_driver_api(ptx, cubin); });
}

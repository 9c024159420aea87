// SPDX-License-Identifier: MIT
// A launch from a static destructor, after main has returned: launchfit's singletons (the plan store, the
// override table, the logger, the driver) are never destroyed, so a first launch then (a plan miss that
// reads the LAUNCHFIT_POLICY overrides and logs its plan) works. Exit code 0 only when the kernel ran.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {

struct at_exit_launch {
  lf::module* m = nullptr;
  CUcontext ctx = nullptr;
  CUdeviceptr out = 0;
  bool armed = false;
  // Resolved in main: the runtime that resolves them is gone by the time this destructor runs.
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuCtxSynchronize) sync = nullptr;
  decltype(&::cuMemcpyDtoH) copy = nullptr;

  ~at_exit_launch() {
    if (!armed) return;
    int rc = 1;
    try {
      set_current(ctx);
      const lf::kernel k = m->get("fill_sized");
      lf::launch(k, lf::max_occupancy().items(512), reinterpret_cast<float*>(out), 512ULL, 3.0f);
      std::vector<float> h(512);
      if (sync() == CUDA_SUCCESS && copy(h.data(), out, h.size() * sizeof(float)) == CUDA_SUCCESS) {
        rc = 0;
        for (float v : h) rc |= v != 3.0f;
      }
      const lf::plan& p = lf::plan_for(k, lf::max_occupancy().items(512));
      std::printf("static-destructor launch: %s, plan %s\n", rc == 0 ? "ran" : "wrong result", p.to_string().c_str());
      if (p.block_threads != 96) rc = 1;  // the override set in main decided
    } catch (const std::exception& e) {
      std::printf("static-destructor launch threw: %s\n", e.what());
    }
    std::fflush(stdout);
    std::_Exit(rc);
  }
};

at_exit_launch& the_launch() {
  static at_exit_launch l;  // destroyed after main returns
  return l;
}

}  // namespace

int main() {
  const std::string absent = launchfit_test::gpu_absent_reason();
  if (!absent.empty()) {
    std::printf("skipped: %s\n", absent.c_str());
    return launchfit_test::gpu_required() ? 1 : 0;
  }
  if (cudaFree(nullptr) != cudaSuccess) return 1;
  // Made after the driver and the runtime started: destroyed before their own exit handlers run (static
  // objects and exit handlers end in the reverse order of their making).
  at_exit_launch& l = the_launch();
  auto ctx_create = LF_DRIVER(cuCtxCreate);
  auto mem_alloc = LF_DRIVER(cuMemAlloc);
  l.set_current = LF_DRIVER(cuCtxSetCurrent);
  l.sync = LF_DRIVER(cuCtxSynchronize);
  l.copy = LF_DRIVER(cuMemcpyDtoH);
  if (cudaFree(nullptr) != cudaSuccess || !ctx_create || !mem_alloc || !l.set_current || !l.sync || !l.copy) return 1;
  if (ctx_create(&l.ctx, nullptr, 0, 0) != CUDA_SUCCESS) return 1;
  if (mem_alloc(&l.out, 512 * sizeof(float)) != CUDA_SUCCESS) return 1;
  l.m = new lf::module(lf::module::from_file(LAUNCHFIT_TEST_CUBIN));  // outlives every destructor
  lf::set_policy_overrides("fill_sized=fixed(block=96)");
  l.armed = true;
  return 0;
}

// SPDX-License-Identifier: MIT
#include "driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "launchfit/error.hpp"

namespace launchfit::detail {
namespace {

struct loaded {
  driver_api api;
  std::string failure;  // empty when usable
};

// cuGetProcAddress returns the newest ABI of a name for the CUDA version asked. CUDA 13.0 gave
// cuCtxGetDevice and cuCtxSynchronize a context parameter (their _v2) without mapping the names in cuda.h
// to it, so asking for them at 13.0 returns a function that reads a context argument the declared
// prototype never passes. Ask for the ABI the declarations have.
int abi_version(const char* name) {
  if (std::strcmp(name, "cuCtxGetDevice") == 0 || std::strcmp(name, "cuCtxSynchronize") == 0) return 12000;
  return CUDA_VERSION;
}

loaded load() {
  loaded out;
  const char* lib_name = "libcuda.so.1";
  void* handle = dlopen(lib_name, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) handle = dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    out.failure = std::string("no CUDA driver: cannot load libcuda.so.1 (") + (why ? why : "unknown") + ")";
    return out;
  }
  // Leaked on purpose: the driver must outlive every static destructor that may still call it.
  using get_proc_t = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<get_proc_t>(dlsym(handle, "cuGetProcAddress_v2"));
  if (!get_proc) {
    out.failure = "no CUDA driver: libcuda.so.1 lacks cuGetProcAddress_v2 (driver older than CUDA 12.0)";
    return out;
  }
  driver_api& api = out.api;
#define LAUNCHFIT_DRIVER_LOAD(name)                                                              \
  {                                                                                              \
    void* fn = nullptr;                                                                          \
    CUdriverProcAddressQueryResult status{};                                                     \
    if (get_proc(#name, &fn, abi_version(#name), CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && \
        status == CU_GET_PROC_ADDRESS_SUCCESS)                                                   \
      api.name = reinterpret_cast<decltype(api.name)>(fn);                                       \
  }
  LAUNCHFIT_DRIVER_FUNCTIONS(LAUNCHFIT_DRIVER_LOAD)
#undef LAUNCHFIT_DRIVER_LOAD
  if (!api.cuInit || !api.cuLaunchKernelEx || !api.cuFuncGetAttribute || !api.cuCtxGetCurrent) {
    out.failure = "no CUDA driver: libcuda.so.1 lacks required entry points (cuLaunchKernelEx needs CUDA 12.0+)";
    return out;
  }
  const CUresult init = api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    // Named here: the driver is not published while it loads (error_name would not ask it).
    const char* name = nullptr;
    if (!api.cuGetErrorName || api.cuGetErrorName(init, &name) != CUDA_SUCCESS || !name) name = nullptr;
    out.failure = "no CUDA device: cuInit failed with " + (name ? std::string(name) : error_name(init));
    return out;
  }
  if (api.cuDriverGetVersion) api.cuDriverGetVersion(&api.version);
  return out;
}

// The driver once instance() has loaded it (whether or not it is usable): error names ask it without
// loading it.
std::atomic<const loaded*> published{nullptr};

const loaded& instance() {
  static const loaded& l = []() -> const loaded& {
    const loaded* made = new loaded(load());  // never destroyed, as every launchfit singleton
    published.store(made, std::memory_order_release);
    return *made;
  }();
  return l;
}

}  // namespace

// The usable driver once loaded: every launch asks twice, and a function-local static's guard and the failure
// text are one more branch and cache line each.

const driver_api& driver() {
  if (const driver_api* api = hot.driver.load(std::memory_order_acquire)) return *api;
  const loaded& l = instance();
  if (!l.failure.empty()) {
    throw error(CUDA_ERROR_NO_DEVICE, "cuInit", l.failure);
  }
  hot.driver.store(&l.api, std::memory_order_release);
  return l.api;
}

bool driver_available() noexcept {
  try {
    return instance().failure.empty();
  } catch (...) {
    return false;
  }
}

const char* loaded_driver_error_name(CUresult r) noexcept {
  const loaded* l = published.load(std::memory_order_acquire);
  if (!l || !l->api.cuGetErrorName) return nullptr;
  const char* name = nullptr;
  return l->api.cuGetErrorName(r, &name) == CUDA_SUCCESS ? name : nullptr;
}

std::string error_string(CUresult r) {
  const loaded& l = instance();
  if (l.api.cuGetErrorString) {
    const char* s = nullptr;
    if (l.api.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
  }
  return error_name(r);
}

void throw_driver_error(CUresult r, const char* call, const std::string& kernel, const std::string& config) {
  throw error(r, call, error_string(r), kernel, config);
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// The CUDA driver, loaded at run time (dlopen + cuGetProcAddress) so that programs using launchfit start on
// machines without a driver and get a launchfit::error on first use instead of a loader failure.

#include <cuda.h>

#include <atomic>

#include <string>

#include "hot_words.hpp"

namespace launchfit::detail {

// X(name): every driver entry point launchfit uses. Optional ones (newer drivers) may be null.
// The first three, which every launch that hits calls, share a cache line.
#define LAUNCHFIT_DRIVER_FUNCTIONS(X)                                                                      \
  X(cuLaunchKernelEx) X(cuCtxGetId) X(cuCtxGetCurrent)                                                     \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)                     \
  X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceGetUuid)                        \
  X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)            \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncGetName) X(cuFuncGetParamInfo)                       \
  X(cuKernelGetFunction) X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                           \
  X(cuOccupancyMaxPotentialBlockSize) X(cuLibraryLoadData)                                                 \
  X(cuLibraryLoadFromFile) X(cuLibraryGetKernel) X(cuLibraryUnload) X(cuEventCreate)                       \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)                           \
  X(cuStreamSynchronize) X(cuCtxSynchronize) X(cuCtxGetDevResource) X(cuStreamIsCapturing)                 \
  X(cuMemHostAlloc) X(cuMemHostGetDevicePointer) X(cuMemFreeHost) X(cuStreamWaitValue32)                   \
  X(cuOccupancyMaxActiveClusters) X(cuOccupancyMaxPotentialClusterSize) X(cuStreamGetCaptureInfo)          \
  X(cuGraphAddNode) X(cuGraphKernelNodeSetAttribute) X(cuGraphKernelNodeGetParams)                         \
  X(cuGraphKernelNodeSetParams) X(cuGraphExecKernelNodeSetParams) X(cuGraphGetNodes) X(cuGraphNodeGetType) \
  X(cuGraphDestroyNode)                                                                                    \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)            \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuStreamCreate) X(cuStreamDestroy)

struct alignas(64) driver_api {
#define LAUNCHFIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  LAUNCHFIT_DRIVER_FUNCTIONS(LAUNCHFIT_DRIVER_MEMBER)
#undef LAUNCHFIT_DRIVER_MEMBER
  int version = 0;  // cuDriverGetVersion
};

// The loaded driver, initialised once (cuInit(0)). Throws launchfit::error "no CUDA driver" when libcuda
// cannot be loaded or initialised; the error is remembered and rethrown on every later call.
const driver_api& driver();
// The driver's entry points once driver() has loaded them; null before (never loads, never throws). Inline:
// every launch that hits asks.
inline const driver_api* loaded_driver() noexcept { return hot.driver.load(std::memory_order_acquire); }
// True when a driver loaded and cuInit succeeded (never throws).
bool driver_available() noexcept;

// The driver's name for r (cuGetErrorName), "CUDA_ERROR_INVALID_VALUE", when a driver is loaded already;
// null when none is (this never loads one) or the driver does not know r.
const char* loaded_driver_error_name(CUresult r) noexcept;
// "CUDA_ERROR_INVALID_VALUE": the loaded driver's name, else cuda.h's for the statuses launchfit reports
// itself (see lib/error.cpp), else "CUresult <n>". Never loads the driver, so it works without one.
std::string error_name(CUresult r);
std::string error_string(CUresult r);

// Throws launchfit::error(call, error name, description, kernel, config).
[[noreturn]] void throw_driver_error(CUresult r, const char* call, const std::string& kernel,
                                     const std::string& config);
// The same unless r is CUDA_SUCCESS; inline, so that a call that succeeds (every launch makes two) makes no
// strings.
inline void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw_driver_error(r, call, {}, {});
}
inline void check(CUresult r, const char* call, const std::string& kernel, const std::string& config = {}) {
  if (r != CUDA_SUCCESS) throw_driver_error(r, call, kernel, config);
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup devices
/// \brief What a kernel uses (launchfit::kernel_resources), and driver-API kernels and modules
/// (launchfit::kernel, launchfit::module).
///
// launchfit::kernel_resources — what a kernel uses; launchfit::kernel — a driver-API kernel handle.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/export.hpp"

// Under -std=c++20 nvcc's front end warns (#3189) that "module" is parsed as an identifier wherever this header
// names the class launchfit::module, which is its name on purpose: not here.
#if defined(__NVCC_DIAG_PRAGMA_SUPPORT__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 3189
#endif

namespace launchfit {
namespace detail {
class kernel_id_set;
}

// What a kernel uses, as the driver (or a cubin, or the caller) states it: what occupancy depends on.
struct LAUNCHFIT_API kernel_resources {
  std::string name;              // mangled, as the driver reports it
  std::string demangled;         // readable name; equals name when it is not mangled
  int regs_per_thread = 0;       // registers per thread, as compiled
  std::size_t static_smem_bytes = 0;       // __shared__ arrays of fixed size, per block
  std::size_t local_bytes_per_thread = 0;  // local memory per thread: stack frame and/or register spills
  std::size_t const_bytes = 0;             // __constant__ memory the kernel uses
  int max_threads_per_block = 1024;        // reflects __launch_bounds__ and register use
  int ptx_version = 0;                     // e.g. 90
  int binary_version = 0;                  // e.g. 90
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as the program set it (a policy's query: launchfit's own
  // raise for another plan is not counted, so a plan never depends on what launchfit planned before)
  std::size_t max_dynamic_smem_bytes = 0;
  unsigned required_cluster[3] = {0, 0, 0};  // compile-time __cluster_dims__ (0: none)

  // A kernel_resources for the offline calculator.
  static kernel_resources manual(int regs_per_thread, std::size_t static_smem_bytes = 0,
                                 int max_threads_per_block = 1024, std::string name = "kernel");
};

// A driver-API kernel: a CUfunction (bound to one context) or a CUkernel (context-independent, from a
// library). Cheap to copy; does not own the module.
class LAUNCHFIT_API kernel {
 public:
  kernel() = default;
  // A function of one context (cuModuleGetFunction, cuLibraryGetKernel + cuKernelGetFunction).
  explicit kernel(CUfunction f) noexcept : function_(f) {}
  // A context-independent kernel (cuLibraryGetKernel): resolved in the current context at launch.
  explicit kernel(CUkernel k) noexcept : kernel_(k) {}

  // Holds a function or kernel (false for a default-constructed one).
  bool valid() const noexcept { return function_ || kernel_; }
  // Identity used in plan-cache keys.
  std::uintptr_t id() const noexcept {
    return kernel_ ? reinterpret_cast<std::uintptr_t>(kernel_) : reinterpret_cast<std::uintptr_t>(function_);
  }
  // The CUfunction to launch in the current context (a CUkernel is resolved per context).
  CUfunction function() const;
  // Attributes queried from the driver (in the current context).
  kernel_resources resources() const;
  // Parameter sizes in bytes from cuFuncGetParamInfo; nullopt when the driver cannot report them.
  std::optional<std::vector<std::size_t>> param_sizes() const;
  // Whether the kernel ever executes griddepcontrol.wait (cudaGridDependencySynchronize), as its module's PTX
  // says: false for a kernel of a PTX module that never waits (launched with .pdl() it starts before its
  // predecessor ends and nothing holds it back: the launch's plan carries a warning), nullopt when launchfit
  // has not read the kernel's PTX (a cubin or fatbin module, a CUfunction from elsewhere).
  std::optional<bool> waits_for_predecessor() const;

 private:
  CUfunction function_ = nullptr;
  CUkernel kernel_ = nullptr;
};

// Resources of any CUfunction (also used for runtime-API kernels resolved with cudaGetFuncBySymbol).
LAUNCHFIT_API kernel_resources query_resources(CUfunction f);
// Parameter sizes in bytes of any CUfunction (cuFuncGetParamInfo); nullopt when the driver cannot say.
LAUNCHFIT_API std::optional<std::vector<std::size_t>> query_param_sizes(CUfunction f);

// A loaded CUDA library (cuLibraryLoad*): cubin, fatbin or PTX (JIT-compiled by the driver), from a file
// or from memory. Owns the library; unloading forgets every cached plan of its kernels.
class LAUNCHFIT_API module {
 public:
  // Throws launchfit::error naming the file (missing, unreadable, wrong format, no driver).
  static module from_file(const std::string& path);
  // image: a cubin or fatbin in memory, or NUL-terminated PTX text.
  static module from_memory(const void* image);
  // PTX text, JIT-compiled by the driver.
  static module from_ptx(const std::string& ptx) { return from_memory(ptx.c_str()); }

  // Moves the loaded library; `other` is left empty.
  module(module&& other) noexcept;
  // Unloads this module's library (forgetting its plans) and takes `other`'s.
  module& operator=(module&& other) noexcept;
  module(const module&) = delete;
  module& operator=(const module&) = delete;
  ~module();

  // Throws launchfit::error naming the kernel when the library has no such (mangled) name. Thread-safe.
  kernel get(const std::string& name) const;
  // The CUlibrary, for driver calls launchfit does not wrap.
  CUlibrary handle() const noexcept { return library_; }

 private:
  module(CUlibrary l, std::string origin);
  CUlibrary library_ = nullptr;
  std::string origin_;
  // The kernels get() has handed out, each once; behind a pointer so a module stays movable.
  std::unique_ptr<detail::kernel_id_set> handed_out_;
};

// Demangles an Itanium C++ name; returns it unchanged when it is not mangled.
LAUNCHFIT_API std::string demangle(std::string_view mangled);

}  // namespace launchfit

#if defined(__NVCC_DIAG_PRAGMA_SUPPORT__)
#pragma nv_diagnostic pop
#endif

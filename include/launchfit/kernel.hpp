#pragma once
// launchfit::kernel_resources — what a kernel uses; launchfit::kernel — a driver-API kernel handle.

#include <cstddef>
#include <string>
#include <string_view>

namespace launchfit {

struct kernel_resources {
  std::string name;              // mangled, as the driver reports it
  std::string demangled;         // readable name; equals name when it is not mangled
  int regs_per_thread = 0;
  std::size_t static_smem_bytes = 0;
  std::size_t local_bytes_per_thread = 0;  // spill / stack frame
  std::size_t const_bytes = 0;
  int max_threads_per_block = 1024;        // reflects __launch_bounds__ and register use
  int ptx_version = 0;                     // e.g. 90
  int binary_version = 0;                  // e.g. 90
  std::size_t max_dynamic_smem_bytes = 0;  // current CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

  // A kernel_resources for the offline calculator.
  static kernel_resources manual(int regs_per_thread, std::size_t static_smem_bytes = 0,
                                 int max_threads_per_block = 1024, std::string name = "kernel");
};

// Demangles an Itanium C++ name; returns it unchanged when it is not mangled.
std::string demangle(std::string_view mangled);

}  // namespace launchfit

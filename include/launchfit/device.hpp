// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup devices
/// \brief What a GPU offers (launchfit::device_limits), from the driver or from the built-in per-architecture
/// table.
///
// launchfit::device_limits — what a GPU offers, from the driver or from a built-in per-architecture table.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/export.hpp"

namespace launchfit {

// What launchfit needs to know about a device: from the driver (query) or the built-in table (for_arch).
struct LAUNCHFIT_API device_limits {
  std::string name;             // "NVIDIA H200", or "sm_90 (table)" for a built-in entry
  std::string uuid;             // "GPU-xxxxxxxx-...", empty for a table entry
  int ordinal = -1;             // CUdevice ordinal, -1 for a table entry
  int cc_major = 0;             // compute capability, major (9 on an H200)
  int cc_minor = 0;             // compute capability, minor
  int sm_count = 0;             // SMs usable by the current context (MIG/green contexts may have fewer)

  int regs_per_sm = 0;          // 32-bit registers per SM
  int regs_per_block = 0;       // max registers one block may use
  int max_regs_per_thread = 0;  // 255 on every architecture launchfit supports
  int reg_alloc_unit = 0;       // registers are allocated per warp in units of this many (256)
  int warp_alloc_granularity = 0;  // warps are allocated to register sub-partitions in groups of this many

  std::size_t smem_per_sm_bytes = 0;           // shared memory per SM available to blocks
  std::size_t smem_per_block_bytes = 0;        // without opt-in (48 KB)
  std::size_t smem_per_block_optin_bytes = 0;  // with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES raised
  std::size_t smem_reserved_per_block_bytes = 0;  // system reserve per block (1 KB on cc >= 8.0)
  std::size_t smem_alloc_unit_bytes = 0;          // allocation granularity (128 B on cc >= 8.0)

  int max_threads_per_sm = 0;        // resident threads per SM
  int max_warps_per_sm = 0;          // resident warps per SM
  int max_blocks_per_sm = 0;         // resident blocks per SM
  int max_threads_per_block = 0;     // largest block the device runs (1024)
  int warp_size = 32;                // threads per warp
  int max_block_dim[3] = {0, 0, 0};  // largest block per dimension
  int max_grid_dim[3] = {0, 0, 0};   // largest grid per dimension

  std::size_t l2_bytes = 0;       // L2 cache size
  int memory_bus_width_bits = 0;  // DRAM bus width
  int memory_clock_khz = 0;       // DRAM clock (peak_bandwidth_bytes_per_s() is computed from both)

  bool cooperative_launch = false;  // the device can launch cooperative grids
  bool cluster_launch = false;      // the device can launch thread-block clusters (sm_90+)

  // Peak DRAM bandwidth from bus width and clock (2 transfers per clock), 0 when unknown.
  double peak_bandwidth_bytes_per_s() const noexcept;
  // "sm_90"
  std::string arch() const;
  // Compute capability as one number: 90 for 9.0.
  int cc() const noexcept { return cc_major * 10 + cc_minor; }

  // Built-in table entry, no GPU needed: "sm_90", "90", "9.0", or a part name ("H200", "H100", "A100",
  // "RTX 4090", "L4", ...). Throws launchfit::error for an unknown name.
  static device_limits for_arch(std::string_view arch_or_part);
  // Every architecture in the built-in table (sm_50 ... sm_120), one entry each.
  static std::vector<device_limits> builtin_table();
  // Queried from the driver for the device of the current context (or, without one, ordinal 0's
  // primary context is NOT created: ordinal must then be given). Throws when no driver/device.
  static device_limits query(int ordinal);
  // The same for the device of the current context. Throws when there is none, or no driver.
  static device_limits query_current();
};

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
// launchfit-calc --cubin: every kernel's resources as the compiled code states them, read from a cubin, a
// fatbin, or a host object/executable/shared library with an embedded fatbin, and the kernels' occupancy
// on launchfit's built-in architectures. Pure: bytes in, report out; no CUDA, no cuobjdump.
//
// Any input is bounded in time and memory (linear in its size) and either reads or throws one
// cubin_error whose message says which part is wrong and where (offsets in the file).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/device.hpp"
#include "launchfit/occupancy.hpp"

namespace launchfit::calc {

// A file that is not what it claims to be, or more than the reader takes; what() names the part.
class cubin_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file that could not be opened or read at all (missing, no permission, an I/O error): the machine's
// answer, not the file's contents, so launchfit-calc exits 3 for it where a malformed file exits 2.
class cubin_file_error : public cubin_error {
 public:
  using cubin_error::cubin_error;
};

struct cubin_kernel {
  std::string name;         // as the symbol table has it (mangled)
  std::string demangled;    // readable; equals name when it is not mangled (or too long to demangle)
  int regs_per_thread = 0;  // EIATTR_REGCOUNT
  std::size_t static_smem_bytes = 0;       // .nv.shared.<kernel>, less the toolkit's reserve on sm_90+
  std::size_t local_bytes_per_thread = 0;  // EIATTR_FRAME_SIZE: the stack frame, spills included
  std::size_t stack_bytes_per_thread = 0;  // EIATTR_MIN_STACK_SIZE: the stack with the callees' frames
  // ptxas could not bound the stack (recursion, calls through pointers): EIATTR_MIN_STACK_SIZE 0xffffffff.
  // stack_bytes_per_thread is then the kernel's own frame; the driver's default stack size applies.
  bool stack_undetermined = false;
  int max_threads_per_block = 1024;          // __launch_bounds__ (maxntid) or reqntid, else 1024
  const char* max_threads_from = "default";  // "maxntid", "reqntid" or "default"
  int max_reg_count = 0;                     // EIATTR_MAXREG_COUNT (the register cap ptxas had), 0 if none
  // Whether the kernel's sm_90 machine code executes griddepcontrol.wait (cudaGridDependencySynchronize):
  // false means a .pdl() launch of it waits for nothing. nullopt for other architectures (their encoding is
  // not read), and "true" whenever a device function of the cubin waits (the kernel may call it).
  std::optional<bool> waits_for_predecessor;
};

// One cubin: a bare file, or one fatbin entry.
struct cubin_image {
  int sm = 0;         // 90 for sm_90
  std::string where;  // "the file", or "section .nv_fatbin at 0x9b0, fatbin entry 2 at 0x4c70"
  std::vector<cubin_kernel> kernels;
};

struct cubin_contents {
  std::string format;  // "cubin", "fatbin" or "host ELF"
  std::vector<cubin_image> images;
  std::vector<std::string> skipped;  // fatbin entries not read, and why (PTX, LZ4-compressed cubins, ...)
};

// The local memory column: "1024 B", "0 B+256" (the stack the callees add), or "0 B+?" when the stack
// size cannot be determined (recursion, calls through pointers).
std::string local_memory_text(const cubin_kernel& k);

struct cubin_limits {
  std::uint64_t max_file_bytes = std::uint64_t{1} << 30;  // read_cubin_file refuses larger files
  std::uint64_t max_sections = std::uint64_t{1} << 20;    // per ELF
  std::uint64_t max_kernels = 1000000;                    // over every image
  std::uint64_t max_images = 100000;
  // zstd-compressed cubins in fatbins (nvcc 13's default for -rdc objects) are inflated up to this many
  // bytes each and in all; a larger one (or a header that says so) is refused before it is allocated.
  std::uint64_t max_decompressed_bytes = std::uint64_t{256} << 20;
  // Bytes the reader may look at in all, as a multiple of the input's size (plus 1 MiB): sections that
  // overlap or share one string table cannot make the work grow faster than the file.
  std::uint64_t work_per_byte = 8;
};

// Reads bytes that hold a cubin, a fatbin, or a host ELF with .nv_fatbin / __nv_relfatbin sections.
// Throws cubin_error, "<name>: <which part> <what is wrong>"; never reads outside `bytes`.
cubin_contents read_cubin(std::string_view bytes, const cubin_limits& limits = {},
                          const std::string& name = "the input");

// Reads a regular file (at most limits.max_file_bytes) and its contents; errors start "--cubin '<path>'".
// Throws cubin_file_error when the file cannot be opened or read, cubin_error for anything else.
cubin_contents read_cubin_file(const std::string& path, const cubin_limits& limits = {});

// ---- occupancy rows and CI gates ----

// Which architectures each kernel is shown on:
//   empty        each cubin on its own architecture (sm_80 cubin on sm_80's table entry);
//   "all"        every table architecture some cubin of the file runs on;
//   an arch/part that architecture, with the cubin the driver would load there (same major version, the
//                highest minor at or below the device's).
struct row_options {
  std::string arch;
  int block_threads = 256;
  std::size_t dynamic_smem_bytes = 0;
};

struct kernel_row {
  const cubin_kernel* kernel = nullptr;
  int cubin_sm = 0;
  std::string image_where;
  std::optional<device_limits> device;  // empty: the table has no entry for cubin_sm
  // The most threads a block of this kernel may have on `device`, as the driver states it
  // (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK): the least of the kernel's launch bounds, the device's limit
  // and what its registers allow (registers_per_block_limit). Without a table entry: the launch bounds.
  int max_threads_per_block = 0;
  const char* max_threads_from = "default";   // "maxntid", "reqntid", "registers", "device" or "default"
  int block_threads = 0;                      // the block used: the requested one, or the kernel's maximum
  bool block_clamped = false;                 // the requested block is larger than the kernel allows
  std::optional<occupancy_result> occupancy;  // empty when the calculator refuses (see refusal)
  std::string refusal;  // why there is no occupancy: no table entry, smem too large, ...
};

// One row per kernel and architecture. Throws cubin_error when --arch names an architecture none of the
// file's cubins runs on, and launchfit::error for an unknown architecture name.
std::vector<kernel_row> occupancy_rows(const cubin_contents& contents, const row_options& options);

struct gates {
  bool fail_on_spill = false;               // local memory per thread > 0 (own frame or callees' stack)
  std::optional<double> min_occupancy_pct;  // occupancy below this (a row without one counts as 0%)
  std::optional<int> max_regs;              // registers per thread above this
};

// One line per crossed gate, naming the kernel, the architecture and the figure; empty when all pass.
std::vector<std::string> gate_failures(const std::vector<kernel_row>& rows, const gates& g);

}  // namespace launchfit::calc

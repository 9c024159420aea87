// SPDX-License-Identifier: MIT
// The built-in per-architecture limits, so the calculator and the policies work without a GPU.
//
// Per-SM and per-block limits follow the CUDA C++ Programming Guide, "Compute Capabilities", table
// "Technical Specifications per Compute Capability", in the units the driver reports them
// (cudaDeviceProp::sharedMemPerMultiprocessor, sharedMemPerBlockOptin, reservedSharedMemPerBlock), and agree
// with the architecture switches in the toolkit's cuda_occupancy.h (tests/device-test.cpp checks that).
// SM count, L2 and memory bus are those of one representative part per architecture, plus the named parts
// users ask about most; they only seed grid sizes and bandwidth estimates, a real device is queried.

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/device.hpp"
#include "launchfit/error.hpp"

namespace launchfit {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

struct arch_spec {
  int cc_major, cc_minor;
  int regs_per_block;       // 32 K on the Tegra parts sm_53 and sm_62
  int sub_partitions;       // 2 on GP100, 4 everywhere else
  std::size_t smem_per_sm;  // largest carveout
  std::size_t smem_optin;   // per block, after raising the function attribute
  int max_threads_per_sm;
  int max_blocks_per_sm;
  const char* representative;  // part whose SM count / L2 / bus the arch entry uses
};

// Programming Guide table, one column per compute capability.
constexpr std::array<arch_spec, 17> arch_specs{{
    {5, 0, 64 * 1024, 4, 64 * KiB, 48 * KiB, 2048, 32, "GTX 750 Ti"},
    {5, 2, 64 * 1024, 4, 96 * KiB, 48 * KiB, 2048, 32, "GTX 980"},
    {5, 3, 32 * 1024, 4, 64 * KiB, 48 * KiB, 2048, 32, "Jetson TX1"},
    {6, 0, 64 * 1024, 2, 64 * KiB, 48 * KiB, 2048, 32, "P100"},
    {6, 1, 64 * 1024, 4, 96 * KiB, 48 * KiB, 2048, 32, "GTX 1080"},
    {6, 2, 32 * 1024, 4, 64 * KiB, 48 * KiB, 2048, 32, "Jetson TX2"},
    {7, 0, 64 * 1024, 4, 96 * KiB, 96 * KiB, 2048, 32, "V100"},
    {7, 2, 64 * 1024, 4, 96 * KiB, 96 * KiB, 2048, 32, "Jetson AGX Xavier"},
    {7, 5, 64 * 1024, 4, 64 * KiB, 64 * KiB, 1024, 16, "T4"},
    {8, 0, 64 * 1024, 4, 164 * KiB, 163 * KiB, 2048, 32, "A100"},
    {8, 6, 64 * 1024, 4, 100 * KiB, 99 * KiB, 1536, 16, "RTX 3090"},
    {8, 7, 64 * 1024, 4, 164 * KiB, 163 * KiB, 1536, 16, "Jetson AGX Orin"},
    {8, 9, 64 * 1024, 4, 100 * KiB, 99 * KiB, 1536, 24, "RTX 4090"},
    {9, 0, 64 * 1024, 4, 228 * KiB, 227 * KiB, 2048, 32, "H100"},
    {10, 0, 64 * 1024, 4, 228 * KiB, 227 * KiB, 2048, 32, "B200"},
    {10, 3, 64 * 1024, 4, 228 * KiB, 227 * KiB, 2048, 32, "B300"},
    // The guide lists 32 resident blocks for 12.0; the driver and cuda_occupancy.h say 24, and the
    // calculator must agree with the driver.
    {12, 0, 64 * 1024, 4, 100 * KiB, 99 * KiB, 1536, 24, "RTX 5090"},
}};

struct part_spec {
  const char* name;
  int cc;  // major * 10 + minor
  int sm_count;
  std::size_t l2_bytes;
  int bus_width_bits;
  int memory_clock_khz;  // as cudaDevAttrMemoryClockRate reports it: peak = 2 x clock x bus
  bool named;            // looked up by name; the others only stand in for their architecture
};

constexpr std::array<part_spec, 19> part_specs{{
    {"H200", 90, 132, 60 * MiB, 6016, 3201000, true},  // as an H200 SXM reports them: 4.8 TB/s
    {"H100", 90, 132, 50 * MiB, 5120, 2619000, true},  // SXM5, 3.35 TB/s
    {"A100", 80, 108, 40 * MiB, 5120, 1215000, true},  // SXM4 40 GB, 1.56 TB/s
    {"RTX 4090", 89, 128, 72 * MiB, 384, 10501000, true},
    {"L4", 89, 58, 48 * MiB, 192, 6251000, true},
    {"V100", 70, 80, 6 * MiB, 4096, 877000, true},
    {"B200", 100, 148, 126 * MiB, 8192, 3900000, true},  // 8 TB/s
    {"RTX 5090", 120, 170, 96 * MiB, 512, 14001000, true},
    {"T4", 75, 40, 4 * MiB, 256, 5001000, true},
    {"P100", 60, 56, 4 * MiB, 4096, 715000, true},
    {"RTX 3090", 86, 82, 6 * MiB, 384, 9751000, true},
    {"GTX 750 Ti", 50, 5, 2 * MiB, 128, 2700000, false},
    {"GTX 980", 52, 16, 2 * MiB, 256, 3505000, false},
    {"Jetson TX1", 53, 2, 256 * KiB, 64, 1600000, false},
    {"GTX 1080", 61, 20, 2 * MiB, 256, 5005000, false},
    {"Jetson TX2", 62, 2, 512 * KiB, 128, 1866000, false},
    {"Jetson AGX Xavier", 72, 8, 512 * KiB, 256, 2133000, false},
    {"Jetson AGX Orin", 87, 16, 4 * MiB, 256, 3200000, false},
    {"B300", 103, 148, 126 * MiB, 8192, 3900000, false},
}};

const part_spec& part_named(std::string_view name) {
  for (const part_spec& p : part_specs)
    if (name == p.name) return p;
  throw error(errc::internal, "device_limits::for_arch", "no part " + std::string(name) + " in the table");
}

device_limits make_limits(const arch_spec& a, const part_spec& part, std::string name) {
  device_limits d;
  d.name = std::move(name);
  d.cc_major = a.cc_major;
  d.cc_minor = a.cc_minor;
  d.sm_count = part.sm_count;

  d.regs_per_sm = 64 * 1024;
  d.regs_per_block = a.regs_per_block;
  d.max_regs_per_thread = 255;
  d.reg_alloc_unit = 256;
  d.warp_alloc_granularity = a.sub_partitions;

  const bool ampere_or_newer = a.cc_major >= 8;
  d.smem_per_sm_bytes = a.smem_per_sm;
  d.smem_per_block_bytes = 48 * KiB;
  d.smem_per_block_optin_bytes = a.smem_optin;
  d.smem_reserved_per_block_bytes = ampere_or_newer ? 1 * KiB : 0;
  d.smem_alloc_unit_bytes = ampere_or_newer ? 128 : 256;

  d.max_threads_per_sm = a.max_threads_per_sm;
  d.warp_size = 32;
  d.max_warps_per_sm = a.max_threads_per_sm / d.warp_size;
  d.max_blocks_per_sm = a.max_blocks_per_sm;
  d.max_threads_per_block = 1024;
  d.max_block_dim[0] = 1024;
  d.max_block_dim[1] = 1024;
  d.max_block_dim[2] = 64;
  d.max_grid_dim[0] = 2147483647;
  d.max_grid_dim[1] = 65535;
  d.max_grid_dim[2] = 65535;

  d.l2_bytes = part.l2_bytes;
  d.memory_bus_width_bits = part.bus_width_bits;
  d.memory_clock_khz = part.memory_clock_khz;

  d.cooperative_launch = a.cc_major >= 6;  // grid-wide sync needs Pascal or newer
  d.cluster_launch = a.cc_major >= 9;
  return d;
}

device_limits arch_entry(const arch_spec& a) {
  return make_limits(a, part_named(a.representative),
                     "sm_" + std::to_string(a.cc_major * 10 + a.cc_minor) + " (table)");
}

std::string lowercase(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "RTX-4090", "rtx 4090", "NVIDIA GeForce RTX 4090" -> "rtx4090".
std::string part_key(std::string_view s) {
  std::string key;
  for (char c : lowercase(s))
    if (std::isalnum(static_cast<unsigned char>(c))) key += c;
  for (std::string_view prefix : {"nvidia", "geforce", "tesla"})
    if (key.compare(0, prefix.size(), prefix) == 0) key.erase(0, prefix.size());
  return key;
}

// "sm_90", "sm90", "SM_90a", "compute_90", "90", "9.0", "10.3" -> 90, 90, 90, 90, 90, 90, 103; -1 otherwise.
int parse_cc(std::string_view text) {
  std::string s = lowercase(text);
  for (std::string_view prefix : {"sm_", "sm", "compute_"}) {
    if (s.compare(0, prefix.size(), prefix) == 0) {
      s.erase(0, prefix.size());
      break;
    }
  }
  // Arch-specific ("a") and family ("f") variants have the limits of their base architecture.
  if (!s.empty() && (s.back() == 'a' || s.back() == 'f')) s.pop_back();
  if (s.empty() || s.size() > 5) return -1;
  const auto dot = s.find('.');
  std::string digits = s;
  if (dot != std::string::npos) {
    if (dot == 0 || dot + 2 != s.size()) return -1;  // exactly one minor digit: "9.0", "10.3"
    digits = s.substr(0, dot) + s.substr(dot + 1);
  }
  if (digits.size() < 2 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(digits);
}

std::string known_names() {
  std::string names;
  for (const arch_spec& a : arch_specs) names += "sm_" + std::to_string(a.cc_major * 10 + a.cc_minor) + ", ";
  for (const part_spec& p : part_specs)
    if (p.named) names += std::string(p.name) + ", ";
  names.resize(names.size() - 2);
  return names;
}

const arch_spec* find_arch(int cc) {
  for (const arch_spec& a : arch_specs)
    if (a.cc_major * 10 + a.cc_minor == cc) return &a;
  return nullptr;
}

}  // namespace

double device_limits::peak_bandwidth_bytes_per_s() const noexcept {
  if (memory_bus_width_bits <= 0 || memory_clock_khz <= 0) return 0;
  // Double data rate: two transfers per memory clock, bus width in bits.
  return 2.0 * memory_clock_khz * 1e3 * (memory_bus_width_bits / 8.0);
}

std::string device_limits::arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }

device_limits device_limits::for_arch(std::string_view arch_or_part) {
  if (const arch_spec* a = find_arch(parse_cc(arch_or_part))) return arch_entry(*a);

  const std::string key = part_key(arch_or_part);
  for (const part_spec& p : part_specs) {
    if (!p.named || key.empty() || part_key(p.name) != key) continue;
    return make_limits(*find_arch(p.cc), p, "NVIDIA " + std::string(p.name) + " (table)");
  }
  throw error(errc::unknown_arch, "device_limits::for_arch",
              "unknown architecture or part '" + std::string(arch_or_part) + "'; known: " + known_names());
}

std::vector<device_limits> device_limits::builtin_table() {
  std::vector<device_limits> table;
  table.reserve(arch_specs.size());
  for (const arch_spec& a : arch_specs) table.push_back(arch_entry(a));
  return table;
}

}  // namespace launchfit

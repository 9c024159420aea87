// SPDX-License-Identifier: MIT
#pragma once
// Internal: what tuning can read of a GPU's conditions without changing any of them, through NVML loaded at
// run time (dlopen "libnvidia-ml.so.1", as libcuda and hiredis are): other compute processes on the GPU, the
// SM clock against its maximum, and the reasons the clocks are held down. Only queries are made: launchfit
// never locks clocks, never changes a setting, and never calls nvmlShutdown (NVML stays loaded for the
// process, its state owned by the library). Where NVML cannot be loaded or cannot find the device, the
// conditions are unknown, and say why.

#include <cstdint>
#include <string>

namespace launchfit::detail::nvml {

// NVML's own types, as its ABI has them (nvml.h is not needed to build launchfit).
using result = int;    // nvmlReturn_t: 0 success, 7 insufficient size
using device = void*;  // nvmlDevice_t
inline constexpr result success = 0;
inline constexpr result insufficient_size = 7;
inline constexpr unsigned clock_sm = 1;  // NVML_CLOCK_SM
// nvmlProcessInfo_t as _v3 fills it (the _v2 entry point fills the first four fields of a smaller struct).
struct process_info_v3 {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};
// nvmlProcessUtilizationSample_t.
struct process_utilization_sample {
  unsigned pid;
  unsigned long long time_stamp;  // CPU time stamp, microseconds since the epoch
  unsigned sm_util;               // percent
  unsigned mem_util, enc_util, dec_util;
};
// Another process that kept the SMs busy at least this share of a sample (percent) contends with a tuning; an
// idle context of another process (a rank waiting for a plan, a process between phases) does not.
inline constexpr unsigned busy_sm_percent = 10;
struct process_info_v2 {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
// Throttle reasons (nvmlClocksThrottleReason*) that make a timing unrepresentative of the model: the GPU
// slowed itself down (hardware slowdown, thermal, power brake). Power capping and idle are normal operation.
inline constexpr unsigned long long slowdown_reasons = 0x8ull | 0x20ull | 0x40ull | 0x80ull;

// The entry points used, null where the library lacks one. Tests give a table of fakes (set_table()).
struct function_table {
  result (*init)() = nullptr;                                      // nvmlInit_v2
  result (*handle_by_uuid)(const char*, device*) = nullptr;        // nvmlDeviceGetHandleByUUID
  result (*handle_by_pci_bus_id)(const char*, device*) = nullptr;  // nvmlDeviceGetHandleByPciBusId_v2
  result (*compute_processes_v3)(device, unsigned*, process_info_v3*) = nullptr;
  result (*compute_processes_v2)(device, unsigned*, process_info_v2*) = nullptr;
  result (*clock)(device, unsigned, unsigned*) = nullptr;      // nvmlDeviceGetClockInfo
  result (*max_clock)(device, unsigned, unsigned*) = nullptr;  // nvmlDeviceGetMaxClockInfo
  // nvmlDeviceGetCurrentClocksThrottleReasons
  result (*throttle_reasons)(device, unsigned long long*) = nullptr;
  // nvmlDeviceGetProcessUtilization: samples since a time stamp (microseconds since the epoch).
  result (*process_utilization)(device, process_utilization_sample*, unsigned*, unsigned long long) = nullptr;
};

// What was read of one GPU.
struct gpu_conditions {
  bool known = false;        // NVML answered for this device
  std::string unknown;       // why not, when !known ("libnvidia-ml.so.1 not found", "no NVML device ...")
  int other_processes = -1;  // compute processes on the GPU besides this one; -1: could not be read
  // Of those, the ones that kept the SMs busy (busy_sm_percent or more in a sample since the reading's time
  // stamp); -1: NVML keeps no utilization samples here (then every other process counts as busy).
  int busy_processes = -1;
  unsigned sm_clock_mhz = 0, max_sm_clock_mhz = 0;  // 0: could not be read
  unsigned long long throttle = 0;                  // nvmlClocksThrottleReason bits
  bool throttle_read = false;
  // Contexts on the device are shared through MPS (the driver's CU_DEVICE_ATTRIBUTE_MPS_ENABLED, set by the
  // tuning's reader): other processes' kernels then run beside the trials instead of between their samples.
  bool mps = false;
};

// Reads the conditions of the GPU with this UUID ("GPU-..." or "MIG-...", as cuDeviceGetUuid formats it), or
// with this PCI bus id ("0000:3b:00.0") when the UUID is not found; busy processes by their utilization
// samples since `since_us` (microseconds since the epoch). Loads NVML on first use (once per process; never
// unloaded). Never throws, never changes a setting; bounded by NVML's own calls.
gpu_conditions read(const std::string& uuid, std::uint64_t since_us, const std::string& pci_bus_id = {});
// Loads and initialises NVML now (once per process; later calls return at once), so that the first read()
// does not pay for it: a tuning calls this before its time budget starts (nvmlInit took most of a 50 ms
// budget on an H100, leaving the tuning one trial).
void load_now();
// Now, in NVML's time stamps (microseconds since the epoch).
std::uint64_t now_us();

// Whether this reading makes a measurement unfit to share, and why ("" when fit): another compute process
// keeping the SMs busy (any other compute process where NVML keeps no utilization samples), or the GPU
// slowing itself down (thermal, hardware slowdown, power brake). Unknown conditions are not a reason (a store
// without NVML still shares; the measurement records that they were unknown).
std::string contention(const gpu_conditions& c);
// Its two parts: other processes busy ("2 other processes busy on the GPU"), the GPU slowed down ("the GPU
// slowed itself down (throttle reasons 0x40)"); "" for none.
std::string busy(const gpu_conditions& c);
std::string slowdown(const gpu_conditions& c);
// One line for the measurement's record: "2 other processes; SM 1980/1980 MHz; throttle 0x4" or why
// unknown.
std::string describe(const gpu_conditions& c);

// True once per process: the first caller says that conditions are unknown (the log says it once).
bool first_unknown_notice() noexcept;

// Tests: replace the loaded library by `fake` (nullptr: back to the real one, loaded again on next use),
// or load `library` instead of libnvidia-ml.so.1 (a name that does not exist gives the absent path).
void set_table_for_tests(const function_table* fake);
void set_library_for_tests(const char* library);

}  // namespace launchfit::detail::nvml

// SPDX-License-Identifier: MIT
// GPU conditions through NVML loaded at run time (nvml.hpp): queries only, never a setting changed.

#include "nvml.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

namespace launchfit::detail::nvml {
namespace {

constexpr const char* default_library = "libnvidia-ml.so.1";
// At most this many processes are read: beyond it the count alone says enough (contention).
constexpr unsigned max_processes = 256;

// Never destroyed: read() may run from any thread at any time (the state outlives exit, as every launchfit
// singleton does).
struct state {
  std::mutex m;
  bool tried = false;    // the library was loaded (or failed to load) for the current table
  function_table table;  // the entry points in use
  std::string failure;   // why NVML is unusable, "" when usable
  const function_table* fake = nullptr;
  const char* library = default_library;
  std::atomic<bool> unknown_said{false};
};

state& the_state() {
  static state& s = *new state;
  return s;
}

template <class F>
void bind(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
}

// Loads the library (or takes the fake) and initialises NVML; s.failure says why not. Under s.m.
void load(state& s) {
  s.tried = true;
  s.failure.clear();
  if (s.fake) {
    s.table = *s.fake;
  } else {
    // RTLD_LOCAL: NVML's symbols stay out of the process's namespace. Never dlclosed: NVML keeps threads.
    void* lib = dlopen(s.library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      s.failure = std::string(s.library) + " could not be loaded (no NVIDIA driver's NVML here)";
      s.table = {};
      return;
    }
    function_table t;
    bind(lib, "nvmlInit_v2", t.init);
    bind(lib, "nvmlDeviceGetHandleByUUID", t.handle_by_uuid);
    bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", t.handle_by_pci_bus_id);
    bind(lib, "nvmlDeviceGetComputeRunningProcesses_v3", t.compute_processes_v3);
    bind(lib, "nvmlDeviceGetComputeRunningProcesses_v2", t.compute_processes_v2);
    bind(lib, "nvmlDeviceGetClockInfo", t.clock);
    bind(lib, "nvmlDeviceGetMaxClockInfo", t.max_clock);
    bind(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", t.throttle_reasons);
    bind(lib, "nvmlDeviceGetProcessUtilization", t.process_utilization);
    s.table = t;
  }
  if (!s.table.init || (!s.table.handle_by_uuid && !s.table.handle_by_pci_bus_id)) {
    s.failure = std::string(s.library) + " lacks nvmlInit_v2 or a device lookup";
    return;
  }
  const result r = s.table.init();
  if (r != success) s.failure = "nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")";
}

// Compute processes on the device other than this one, or -1. A process in a PID namespace (a container)
// sees NVML's host PIDs: when no entry carries this process's PID, one entry is taken as this process's own
// (tuning runs in a context this process holds on the device, so it is always listed).
int other_processes(const function_table& t, device d, bool& self_listed) {
  const unsigned self = static_cast<unsigned>(getpid());
  std::vector<unsigned> pids;
  unsigned count = max_processes;
  if (t.compute_processes_v3) {
    std::vector<process_info_v3> info(max_processes);
    const result r = t.compute_processes_v3(d, &count, info.data());
    if (r == insufficient_size) return static_cast<int>(count > 0 ? count - 1 : 0);
    if (r != success) return -1;
    for (unsigned i = 0; i < count && i < max_processes; ++i) pids.push_back(info[i].pid);
  } else if (t.compute_processes_v2) {
    std::vector<process_info_v2> info(max_processes);
    const result r = t.compute_processes_v2(d, &count, info.data());
    if (r == insufficient_size) return static_cast<int>(count > 0 ? count - 1 : 0);
    if (r != success) return -1;
    for (unsigned i = 0; i < count && i < max_processes; ++i) pids.push_back(info[i].pid);
  } else {
    return -1;
  }
  int others = 0;
  bool found_self = false;
  for (unsigned pid : pids) {
    if (pid == self) {
      found_self = true;
    } else {
      ++others;
    }
  }
  self_listed = found_self;
  if (!found_self && others > 0) --others;
  return others;
}

// Other processes with a utilization sample of busy_sm_percent or more since `since_us`, or -1 when NVML
// keeps no samples. NVML answers "not found" when no process ran since then: none busy. In a PID namespace,
// where NVML lists no process under this one's PID, one busy process is taken as this one (its own trials).
int busy_processes(const function_table& t, device d, std::uint64_t since_us, bool self_listed) {
  if (!t.process_utilization) return -1;
  unsigned count = max_processes;
  std::vector<process_utilization_sample> samples(max_processes);
  const result r = t.process_utilization(d, samples.data(), &count, since_us);
  constexpr result not_found = 6;  // NVML_ERROR_NOT_FOUND
  if (r == not_found) return 0;
  if (r == insufficient_size) return static_cast<int>(count);  // a crowded GPU: count them all busy
  if (r != success) return -1;
  const unsigned self = static_cast<unsigned>(getpid());
  std::vector<unsigned> busy;
  for (unsigned i = 0; i < count && i < max_processes; ++i) {
    const process_utilization_sample& s = samples[i];
    if (s.pid == self) self_listed = true;
    if (s.pid == self || s.sm_util < busy_sm_percent) continue;
    if (std::find(busy.begin(), busy.end(), s.pid) == busy.end()) busy.push_back(s.pid);
  }
  const int n = static_cast<int>(busy.size());
  return !self_listed && n > 0 ? n - 1 : n;
}

}  // namespace

std::uint64_t now_us() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

gpu_conditions read(const std::string& uuid, std::uint64_t since_us, const std::string& pci_bus_id) {
  gpu_conditions c;
  state& s = the_state();
  std::lock_guard<std::mutex> lock(s.m);
  if (!s.tried) load(s);
  if (!s.failure.empty()) {
    c.unknown = s.failure;
    return c;
  }
  const function_table& t = s.table;
  device d = nullptr;
  bool found = !uuid.empty() && t.handle_by_uuid && t.handle_by_uuid(uuid.c_str(), &d) == success;
  if (!found && !pci_bus_id.empty() && t.handle_by_pci_bus_id)
    found = t.handle_by_pci_bus_id(pci_bus_id.c_str(), &d) == success;
  if (!found) {
    c.unknown = "NVML has no device " + (uuid.empty() ? pci_bus_id : uuid);
    return c;
  }
  c.known = true;
  bool self_listed = false;
  c.other_processes = other_processes(t, d, self_listed);
  c.busy_processes = busy_processes(t, d, since_us, self_listed);
  unsigned mhz = 0;
  if (t.clock && t.clock(d, clock_sm, &mhz) == success) c.sm_clock_mhz = mhz;
  if (t.max_clock && t.max_clock(d, clock_sm, &mhz) == success) c.max_sm_clock_mhz = mhz;
  unsigned long long reasons = 0;
  if (t.throttle_reasons && t.throttle_reasons(d, &reasons) == success) {
    c.throttle = reasons;
    c.throttle_read = true;
  }
  return c;
}

void load_now() {
  state& s = the_state();
  std::lock_guard<std::mutex> lock(s.m);
  if (!s.tried) load(s);
}

std::string busy(const gpu_conditions& c) {
  if (!c.known) return {};
  // Without utilization samples every other compute process counts as busy.
  const int n = c.busy_processes >= 0 ? c.busy_processes : c.other_processes;
  if (n <= 0) return {};
  return std::to_string(n) + (n == 1 ? " other process" : " other processes") + " busy on the GPU";
}

std::string slowdown(const gpu_conditions& c) {
  if (!c.known || !c.throttle_read || (c.throttle & slowdown_reasons) == 0) return {};
  char buf[96];
  std::snprintf(buf, sizeof buf, "the GPU slowed itself down (throttle reasons 0x%llx)", c.throttle & slowdown_reasons);
  return buf;
}

std::string contention(const gpu_conditions& c) {
  const std::string b = busy(c), s = slowdown(c);
  return b.empty() ? s : s.empty() ? b : b + ", " + s;
}

std::string describe(const gpu_conditions& c) {
  if (!c.known) return "GPU conditions unknown: " + c.unknown;
  std::string s = c.other_processes < 0 ? std::string("other processes unknown")
                                        : std::to_string(c.other_processes) + " other processes";
  if (c.busy_processes >= 0) s += " (" + std::to_string(c.busy_processes) + " busy)";
  if (c.sm_clock_mhz > 0 || c.max_sm_clock_mhz > 0)
    s += "; SM " + std::to_string(c.sm_clock_mhz) + "/" + std::to_string(c.max_sm_clock_mhz) + " MHz";
  if (c.throttle_read) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "; throttle 0x%llx", c.throttle);
    s += buf;
  }
  return s;
}

bool first_unknown_notice() noexcept { return !the_state().unknown_said.exchange(true); }

void set_table_for_tests(const function_table* fake) {
  state& s = the_state();
  std::lock_guard<std::mutex> lock(s.m);
  s.fake = fake;
  s.tried = false;
}

void set_library_for_tests(const char* library) {
  state& s = the_state();
  std::lock_guard<std::mutex> lock(s.m);
  s.library = library ? library : default_library;
  s.fake = nullptr;
  s.tried = false;
}

}  // namespace launchfit::detail::nvml

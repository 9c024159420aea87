// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup plans
/// \brief The plan cache: plans per device context, kernel, policy and smem rule, in memory, in a cache file
/// shared by processes, and the remote plan store.
///
// launchfit::cache — plans per (device context, kernel, policy + parameters, smem rule[, size bucket]),
// in memory and, optionally, in a versioned JSON file shared by processes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launchfit/export.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

// What a cached plan was made for; a plan is reused only for exactly this.
struct plan_key {
  std::uint64_t context = 0;    // the context's identity for its lifetime (cuCtxGetId), never a reused handle
  std::uintptr_t kernel = 0;    // host stub address, CUfunction or CUkernel
  std::uint64_t policy = 0;     // policy::hash() of the spec's policy (an override is resolved under it)
  std::uint64_t smem_rule = 0;  // fixed bytes, or the rule's identity (checked against rule(block) per launch)
  std::uint64_t bucket = 0;     // policy::work_bucket()
  std::uint64_t launch = 0;     // what the launch requires: cooperative, cluster dims, PDL (detail::launch_bits)
  std::uint64_t shape = 0;      // block constraint, work rank and SM budget (detail::shape_bits); 0: none
  // The generation of the process-wide inputs a plan depends on beyond the fields above (policy overrides,
  // bytes-in-flight defaults and calibrations, the plan store's configuration and contents, loaded plugins):
  // any change to one of them makes a new generation, so a plan made under other inputs is never reused.
  std::uint64_t inputs = 0;
  friend bool operator==(const plan_key& a, const plan_key& b) noexcept {
    return a.context == b.context && a.kernel == b.kernel && a.policy == b.policy &&
           a.smem_rule == b.smem_rule && a.bucket == b.bucket && a.launch == b.launch && a.shape == b.shape &&
           a.inputs == b.inputs;
  }
};

// One plan in the cache, with what it was made for (plan_cache::plans()).
struct cached_plan {
  plan_key key;             // what the plan is keyed by
  std::string kernel;       // demangled
  std::string device;       // "NVIDIA H200 #0"
  std::string device_uuid;  // "GPU-..."
  launchfit::plan plan;     // the plan itself
};

// The process's plans, one per (context, kernel, policy, smem rule, launch options); see cache().
class LAUNCHFIT_API plan_cache {
 public:
  // A snapshot of every plan made under the current inputs (plan_key::inputs), for reports.
  std::vector<cached_plan> plans() const;
  // Plans made under the current inputs.
  std::size_t size() const;
  // Drops every plan: after changing a kernel attribute such as the smem carveout, and after unloading code
  // whose kernels were launched by other means than launchfit::module (dlclose of a library holding
  // __global__ functions, cuModuleUnload): plans are keyed by the kernel's handle, which such code may reuse.
  void clear();
};

// The process-wide plan cache.
LAUNCHFIT_API plan_cache& cache();

// ---- persistent cache file ----------------------------------------------------------------------------

enum class cache_file_mode {
  read_write,  // load at start, merge and write new plans atomically
  frozen,      // read only: production jobs where every rank must use the same plans
};

// Opens (or creates on first write) the cache file; LAUNCHFIT_CACHE=PATH and LAUNCHFIT_CACHE_MODE=frozen
// do the same at first launch. A corrupt, truncated or foreign file, a special file (FIFO, device,
// directory, socket), a dangling symbolic link or a file above LAUNCHFIT_CACHE_MAX_BYTES (default 16 MiB)
// is not used, with one warning; plans are then kept in memory. A symbolic link is followed once: its
// target is the file written. Plans of a previously open file are flushed first (bounded wait).
LAUNCHFIT_API void set_cache_file(const std::string& path, cache_file_mode mode = cache_file_mode::read_write);
// Flushes (bounded wait) and stops using the cache file.
LAUNCHFIT_API void close_cache_file();
// Whether a cache file is in use (set_cache_file or LAUNCHFIT_CACHE).
LAUNCHFIT_API bool cache_file_open();
// Writes the plans stored so far, waiting at most max_wait_ms (another process may hold the file's lock);
// true when every one of them is in the file (or there is nothing to write). New plans are written in the
// background within about 20 ms and at a normal exit; plans stored just before _exit or SIGKILL are lost.
LAUNCHFIT_API bool flush_cache_file(unsigned max_wait_ms = 5000);

// Which stored plans a launch may use when its own GPU has none.
enum class cache_match {
  model,  // default: also a plan stored on another GPU of the same model (same name, compute capability,
          // SM count of the context, L2 size, MIG slice or not, same major driver version), logged with
          // match "cache-file-same-model"
  exact,  // only plans stored on this GPU (UUID) with this driver version
};

// Sets the match level for every later lookup; LAUNCHFIT_CACHE_MATCH=exact|model does the same at first
// use (another value: exact, with one warning). Plans already cached in memory are kept.
LAUNCHFIT_API void set_cache_match(cache_match m);
// The match level in force.
LAUNCHFIT_API cache_match cache_file_match();

// ---- calibration ---------------------------------------------------------------------------------------

// A bytes-in-flight target measured on the current device (launchfit-calibrate): stored in the cache file
// for the device's model, so bytes_in_flight() uses it by default on every GPU of that model (unless
// set_bytes_in_flight_per_sm() set one for the architecture). Nothing without a cache file or in frozen
// mode. Throws launchfit::error for 0 or above 4 MiB, or without a driver.
LAUNCHFIT_API void store_bytes_in_flight_calibration(std::size_t bytes_per_sm);
// The stored target for the current device (its own, else its model's), if any.
LAUNCHFIT_API std::optional<std::size_t> bytes_in_flight_calibration();

// ---- remote plan store (Redis) ---------------------------------------------------------------------------

// Shares plans among the processes and hosts of a fleet through Redis: looked up when neither memory nor
// the cache file has a plan (never on a cache hit), and written back in the background (a stored plan is
// replaced only by one measured better beyond noise, compare-and-set; an invalid value under a key is
// replaced; entries expire LAUNCHFIT_REMOTE_TTL seconds, default 30 days, after they were last written or
// read). A plan is shared by every GPU of one model (name, compute capability, SM count,
// L2, driver and toolkit versions) and is validated like an entry of the cache file; its match level is
// "remote". Off by default; LAUNCHFIT_REMOTE=redis://host:port[/db] (Redis or Valkey) does the same at
// first use. A malformed URL is refused with one warning and the store stays off. The store fails open: a
// lookup ends within 200 ms (connect 100 ms), whatever the store answers; one that is down, hangs, is slow
// or misbehaves is dropped for the process after one warning, and launches go on with local planning.
// libhiredis is loaded at run time: a machine without it gets one warning. A store set before is flushed
// (at most 1 s) and replaced.
LAUNCHFIT_API void set_remote_store(const std::string& url);
// Flushes (at most 1 s) and stops using the remote store.
LAUNCHFIT_API void close_remote_store();
// Waits at most max_wait_ms for queued writes; true when everything stored since the previous flush was
// written (or another process had written that key first). A normal exit waits at most 1 s.
LAUNCHFIT_API bool flush_remote_store(unsigned max_wait_ms = 1000);

// What the remote store did in this process (since it was configured).
struct remote_store_stats {
  bool enabled = false;              // a remote store is configured
  bool dead = false;                 // dropped for the process after a failure (fail open)
  std::uint64_t lookups = 0;         // lookups that reached it
  std::uint64_t hits = 0;            // entries it returned (each validated)
  std::uint64_t refused = 0;         // entries it held that failed validation (forged, torn, another format)
  std::uint64_t loaded = 0;          // valid entries read (a device model's in bulk, at its first lookup)
  std::uint64_t writes = 0;          // entries written
  std::uint64_t already_stored = 0;  // writes another writer had made first (kept as they are)
  std::uint64_t write_drops = 0;     // not written: queue full, store dead, too large, no device model
  std::uint64_t failures = 0;        // operations that failed (connect, timeout, error or wrong-type reply)
  std::uint64_t replaced = 0;        // invalid values (garbage, forged, torn) under its keys replaced by its plans
  std::uint64_t busy = 0;            // lookups that stopped waiting for another thread's lookup (fail open)
  std::uint64_t superseded = 0;      // stored plans replaced by its plans measured better beyond noise
  std::uint64_t ttl_refreshes = 0;   // keys whose time to live a read of theirs renewed (once an hour a key)
};
// The remote plan store's counters since the process started (all 0 without LAUNCHFIT_REMOTE).
LAUNCHFIT_API remote_store_stats remote_store_statistics();

}  // namespace launchfit

#pragma once
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
  friend bool operator==(const plan_key& a, const plan_key& b) noexcept {
    return a.context == b.context && a.kernel == b.kernel && a.policy == b.policy &&
           a.smem_rule == b.smem_rule && a.bucket == b.bucket && a.launch == b.launch && a.shape == b.shape;
  }
};

struct cached_plan {
  plan_key key;
  std::string kernel;       // demangled
  std::string device;       // "NVIDIA H200 #0"
  std::string device_uuid;
  launchfit::plan plan;
};

class LAUNCHFIT_API plan_cache {
 public:
  // A snapshot of every plan, for reports.
  std::vector<cached_plan> plans() const;
  std::size_t size() const;
  // Drops every plan (tests; after changing a kernel attribute such as the smem carveout).
  void clear();
};

// The process-wide plan cache.
LAUNCHFIT_API plan_cache& cache();

// ---- persistent cache file ----------------------------------------------------------------------------

enum class cache_file_mode {
  read_write,  // load at start, merge and write new plans atomically
  frozen,      // read only: production jobs where every rank must use the same plans
};

// Opens (or creates on first write) the cache file; LAUNCHFIT_CACHE=<path> and LAUNCHFIT_CACHE_MODE=frozen
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
LAUNCHFIT_API cache_match cache_file_match();

// ---- calibration ---------------------------------------------------------------------------------------

// A bytes-in-flight target measured on the current device (launchfit-calibrate): stored in the cache file
// for the device's model, so bytes_in_flight() uses it by default on every GPU of that model (unless
// set_bytes_in_flight_per_sm() set one for the architecture). Nothing without a cache file or in frozen
// mode. Throws launchfit::error for 0 or above 4 MiB, or without a driver.
LAUNCHFIT_API void store_bytes_in_flight_calibration(std::size_t bytes_per_sm);
// The stored target for the current device (its own, else its model's), if any.
LAUNCHFIT_API std::optional<std::size_t> bytes_in_flight_calibration();

}  // namespace launchfit

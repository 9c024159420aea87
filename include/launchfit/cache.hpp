#pragma once
// launchfit::cache — plans per (device context, kernel, policy + parameters, smem rule[, size bucket]),
// in memory and, optionally, in a versioned JSON file shared by processes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  std::uint64_t launch = 0;     // what the launch requires: cooperative, cluster dims (detail::launch_bits)
  friend bool operator==(const plan_key& a, const plan_key& b) noexcept {
    return a.context == b.context && a.kernel == b.kernel && a.policy == b.policy &&
           a.smem_rule == b.smem_rule && a.bucket == b.bucket && a.launch == b.launch;
  }
};

struct cached_plan {
  plan_key key;
  std::string kernel;       // demangled
  std::string device;       // "NVIDIA H200 #0"
  std::string device_uuid;
  launchfit::plan plan;
};

class plan_cache {
 public:
  // A snapshot of every plan, for reports.
  std::vector<cached_plan> plans() const;
  std::size_t size() const;
  // Drops every plan (tests; after changing a kernel attribute such as the smem carveout).
  void clear();
};

// The process-wide plan cache.
plan_cache& cache();

// ---- persistent cache file ----------------------------------------------------------------------------

// Identity of a plan across processes: a rebuilt kernel or a new driver never reuses a stale plan.
struct stored_key {
  std::string device_uuid;   // includes MIG instance where present
  int cc = 0;
  int sm_count = 0;
  int driver_version = 0;
  std::string kernel;        // kernel_fingerprint()
  std::string policy;        // policy::to_string()
  std::string smem_rule;     // "bytes=4096" or "fn=<type>"
  std::uint64_t bucket = 0;
};

// name|regs|static smem|local bytes|max threads|ptx|binary version
std::string kernel_fingerprint(const kernel_resources& k);

enum class cache_file_mode {
  read_write,  // load at start, merge and write new plans atomically
  frozen,      // read only: production jobs where every rank must use the same plans
};

// Opens (or creates on first write) the cache file; LAUNCHFIT_CACHE=<path> and LAUNCHFIT_CACHE_MODE=frozen
// do the same at first launch. A corrupt, truncated or foreign file is ignored with one warning.
void set_cache_file(const std::string& path, cache_file_mode mode = cache_file_mode::read_write);
// Stops using a cache file (tests).
void close_cache_file();
// Looks up a stored plan; an entry for another size bucket is returned with match "cache-file-other-bucket"
// only when exact is false.
std::optional<plan> find_stored_plan(const stored_key& key, bool exact = true);
// Records a plan and writes the file atomically (temp + rename, merged with what other processes wrote).
// Does nothing in frozen mode.
void store_plan(const stored_key& key, const plan& p);
// Entries currently loaded from / written to the file.
std::size_t stored_plan_count();
// Whether a cache file is in use (set_cache_file or LAUNCHFIT_CACHE).
bool cache_file_open();

}  // namespace launchfit

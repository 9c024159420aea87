#pragma once
// Internal: the plan-cache file. The launch path's side of it (stored_key, find_stored_plan, store_plan)
// and the file format, parsed and written without touching the file system (fuzzed).
//
//   {"format": "launchfit-plan-cache", "version": 1, "entries": [
//   {"key": {stored_key fields}, "plan": {plan_to_json() but match}, "stored_at": <ms since the epoch>},
//   ...
//   ]}
//
// "device_name" and "l2_bytes" in a key (the device model) were added within version 1: a reader that does
// not know them ignores them, and an entry without them (an older writer) is used for its own GPU only.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

// Identity of a plan across processes: a rebuilt kernel or a new driver never reuses a stale plan.
struct stored_key {
  std::string device_uuid;  // includes MIG instance where present
  int cc = 0;
  int sm_count = 0;
  int driver_version = 0;
  std::string kernel;     // kernel_fingerprint()
  std::string policy;     // policy::to_string()
  std::string smem_rule;  // "bytes=4096" or "fn=<type>"
  std::uint64_t bucket = 0;
  // The device model, so that a plan serves every GPU of the model. Not part of the key's identity (one
  // GPU has one model); empty / 0 in entries of older writers, which then serve their own GPU only.
  std::string device_name;     // "NVIDIA H200"; a MIG device's name holds its profile ("... MIG 1g.18gb")
  std::uint64_t l2_bytes = 0;  // the L2 the device (or MIG slice) reports
};

// name|regs|static smem|local bytes|max threads|ptx|binary version
std::string kernel_fingerprint(const kernel_resources& k);

// The key of a plan for this device (as queried: its SM count is the context's, so a green context or a
// MIG slice is its own model), driver, kernel, policy text, smem rule text and size bucket.
stored_key stored_key_for(const device_limits& dev, int driver_version, const kernel_resources& kernel,
                          std::string policy, std::string smem_rule, std::uint64_t bucket);

// Whether two drivers (cuDriverGetVersion: 1000 x major + 10 x minor) may share plans across GPUs of one
// model: the same major version. (The exact key still holds the exact driver version.)
bool compatible_driver(int stored_version, int wanted_version) noexcept;
// Whether a plan stored under `stored` may serve `wanted` as another GPU of the same model: the same
// non-empty device name, compute capability, SM count and L2 size, both MIG slices or neither (a UUID
// "MIG-..." or " MIG " in the name), and a compatible driver. Kernel, policy, smem rule and bucket are
// not compared here.
bool same_device_model(const stored_key& stored, const stored_key& wanted) noexcept;

// Looks up a stored plan, best first:
//   "cache-file"                          this GPU (UUID), driver and size bucket;
//   "cache-file-same-model"               another GPU of the same model (unless cache_match::exact): the
//                                         same driver first, then the nearest compatible one;
//   "cache-file-other-bucket"             this GPU, another size bucket (only when exact_bucket is false);
//   "cache-file-same-model-other-bucket"  both (only when exact_bucket is false, unless cache_match::exact).
// Ties go to the nearest bucket, then the newest entry, then the smallest UUID. Never waits for file I/O,
// except that the first call of a process reads the LAUNCHFIT_CACHE file (bounded in size, never a special
// file). A stored plan is untrusted input: the caller validates it for the launch.
std::optional<plan> find_stored_plan(const stored_key& key, bool exact_bucket = true);
// Records a plan: lookups see it at once; a background writer merges it into the file within about
// 20 ms (flush_cache_file(), set_cache_file(), close_cache_file() and a normal exit wait for it). Never
// waits for file I/O or another process's lock. Does nothing in frozen mode or for a "fallback" plan.
void store_plan(const stored_key& key, const plan& p);
// Entries currently loaded from / stored to the file.
std::size_t stored_plan_count();

// A measured bytes-in-flight target (launchfit-calibrate) for this device's model, stored beside the plans
// under a reserved kernel key: this GPU's own first, then the newest of another GPU of the same model
// (unless cache_match::exact). nullopt without a cache file or a calibration.
std::optional<std::size_t> find_calibration(const device_limits& dev, int driver_version);
// Records one (nothing in frozen mode); written with the plans.
void store_calibration(const device_limits& dev, int driver_version, std::size_t bytes_in_flight_per_sm);

namespace detail {

inline constexpr const char* cache_file_format = "launchfit-plan-cache";
inline constexpr int cache_file_version = 1;
// A file above this size is not read (LAUNCHFIT_CACHE_MAX_BYTES overrides it for the library).
inline constexpr std::size_t cache_file_default_max_bytes = std::size_t(16) << 20;
// At most this many problems are kept in cache_file_contents::problems (skipped counts them all).
inline constexpr std::size_t cache_file_max_problems = 100;

struct stored_entry {
  stored_key key;
  launchfit::plan plan;
  std::uint64_t stored_at_ms = 0;  // when it was stored (ms since the epoch; 0: unknown): the oldest go first
  // A calibration entry (key.kernel == calibration_kernel): the measured target, "calibration" in the file.
  std::uint64_t bytes_in_flight_per_sm = 0;
};

// The reserved kernel key of calibration entries (no kernel fingerprint has this form: they hold '|').
inline constexpr const char* calibration_kernel = "launchfit:calibration";
inline constexpr const char* calibration_policy = "bytes_in_flight_target";

enum class cache_file_status {
  ok,             // a launchfit cache (possibly with bad entries skipped)
  empty,          // empty or whitespace only: a new file
  corrupt,        // a launchfit cache that is not valid JSON or not the expected shape: replaced on write
  foreign,        // not a launchfit cache: never overwritten
  wrong_version,  // another format version: never overwritten
};

struct cache_file_contents {
  cache_file_status status = cache_file_status::empty;
  std::vector<stored_entry> entries;  // later entries for the same key win
  std::size_t skipped = 0;            // bad entries left out
  std::string problem;                // why status is not ok, or why the first entry was skipped
  std::vector<std::string> problems;  // "entry <i>: <why>" for the first cache_file_max_problems skipped
};

// Never throws for any input.
cache_file_contents parse_cache_file(std::string_view text);
// Invalid UTF-8 in strings is replaced, so this never throws either. One entry per line.
std::string serialize_cache_file(const std::vector<stored_entry>& entries);
// The line serialize_cache_file() writes for one entry (without the separating ",\n").
std::string cache_file_line(const stored_entry& e);
// Fast path for files in serialize_cache_file()'s layout: entry lines for which `known` is true are not
// parsed; the others are appended to `out`. Returns false (out unspecified) for any other layout or a
// bad entry line; parse_cache_file() then decides.
bool parse_cache_file_lines(std::string_view text, const std::function<bool(std::string_view)>& known,
                            std::vector<stored_entry>& out);

enum class cache_file_read { ok, missing, refused };

// Reads a cache file the way the library does: a regular file (never a FIFO, device or directory; a symbolic
// link is not followed) of at most max_bytes. `why` says why it was refused.
cache_file_read read_cache_file(const std::string& path, std::size_t max_bytes, std::string& text,
                                std::string& why);

// Replaces the cache file at `path` (a symbolic link: its target) with what `update` returns for its current
// contents, under the lock the library's writers take ("<file>.lock"; waits at most lock_wait_ms), written to
// a temp file and renamed over it, so a process writing the file at the same time loses nothing and readers
// never see a partial file. A missing file is given as empty; `update` returning nullopt leaves the file as
// it is. A foreign file or another format version is never replaced. Returns an empty string, or why not.
std::string update_cache_file(
    const std::string& path, std::size_t max_bytes, unsigned lock_wait_ms,
    const std::function<std::optional<std::vector<stored_entry>>(const cache_file_contents&)>& update);

}  // namespace detail
}  // namespace launchfit

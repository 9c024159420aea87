// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan file's format, parsed and written without touching the file system (fuzzed), and the
// one check every stored entry passes wherever it comes from (the file, launchfit-plans, a remote store).
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
#include <string>
#include <string_view>
#include <vector>

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
  std::string kernel;  // kernel_fingerprint()
  // The deciding policy's text, then what the launch requires and its shape, as words: " cooperative",
  // " cluster=2x1x1", " pdl", " blocks=...", " rows=32", " sms=N", " family=..." (parse_key_text()).
  std::string policy;
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

namespace detail {

inline constexpr const char* cache_file_format = "launchfit-plan-cache";
inline constexpr int cache_file_version = 1;
// A file above this size is not read (LAUNCHFIT_CACHE_MAX_BYTES overrides it for the library).
inline constexpr std::size_t cache_file_default_max_bytes = std::size_t(16) << 20;
// At most this many problems are kept in cache_file_contents::problems (skipped counts them all).
inline constexpr std::size_t cache_file_max_problems = 100;
// Longest key text read back: mangled template kernel names run to several KB.
inline constexpr std::size_t max_key_text_bytes = 64 * 1024;

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
// A measured target above what any SM holds (every byte of its registers and shared memory) is not one.
inline constexpr std::uint64_t max_calibration_bytes_per_sm = std::uint64_t(1) << 22;
// Nor one below four warps of 4-byte loads (the least launchfit-calibrate measures): no GPU reaches a
// useful read bandwidth with less in flight per SM, so such a target is a corrupt or forged file.
inline constexpr std::uint64_t min_calibration_bytes_per_sm = 4 * 32 * 4;

// Why a target of `bytes` in flight per SM cannot be a measurement on `dev`, or "": it must lie between
// min_calibration_bytes_per_sm and what one of its SMs holds (its registers and shared memory, when known).
std::string implausible_calibration(std::uint64_t bytes, const device_limits& dev);

// Why a stored entry must not be used, or an empty string. Every entry from any store passes through here
// after it is parsed: its key text is clean and bounded; a calibration entry holds a plausible target
// (512 B..4 MiB per SM, and at most what an SM of its key's compute capability holds); a plan entry's key text is well formed and its plan launches exactly as the key says
// (cooperative, cluster dims and PDL are the key's, its policy text the key's policy). Never throws but
// std::bad_alloc.
std::string validate_stored_entry(const stored_entry& e);

// How problems name an entry: "entry 3 (kernel _Z5saxpyfPKfPfi)", the kernel's name escaped and cut.
std::string entry_label(std::size_t index, const stored_key& key);

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
  // Of the skipped: entries that were read whole but failed validate_stored_entry() (a plan that does not
  // launch as its key says), each named in `refusals` as in `problems` (the first cache_file_max_problems).
  std::size_t refused = 0;
  std::vector<std::string> refusals;
};

// Never throws for any input.
cache_file_contents parse_cache_file(std::string_view text);
// Invalid UTF-8 in strings is replaced, so this never throws either. One entry per line.
std::string serialize_cache_file(const std::vector<stored_entry>& entries);
// The line serialize_cache_file() writes for one entry (without the separating ",\n").
std::string cache_file_line(const stored_entry& e);
// Fast path for files in serialize_cache_file()'s layout: entry lines for which `known` is true are not
// parsed; the others are appended to `out`. Returns false (out unspecified) for any other layout or a
// bad entry line (one validate_stored_entry() refuses included); parse_cache_file() then decides.
bool parse_cache_file_lines(std::string_view text, const std::function<bool(std::string_view)>& known,
                            std::vector<stored_entry>& out);
// One entry as cache_file_line() writes it (any JSON layout), parsed and validated exactly as an entry of
// the file. Empty when `out` holds it, else why not (`out` unspecified). Never throws but std::bad_alloc.
std::string parse_stored_entry(std::string_view json_text, stored_entry& out);

}  // namespace detail
}  // namespace launchfit

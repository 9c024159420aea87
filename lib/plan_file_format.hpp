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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/plan.hpp"
#include "store/device_match.hpp"

namespace launchfit {

// Identity of a plan across processes: a rebuilt kernel or a new driver never reuses a stale plan.
struct stored_key {
  std::string device_uuid;  // includes MIG instance where present
  int cc = 0;
  int sm_count = 0;
  int driver_version = 0;
  std::string kernel;  // kernel_fingerprint()
  // The deciding policy's text, then what the launch requires and its shape, as words: " cooperative",
  // " cluster=2x1x1", " pdl", " blocks=...", " rows=32", " shape=...", " sms=N", " work=<kind>" (every key
  // written since 0.4), " waves=K" (grid-stride work), " family=..." (parse_key_text()).
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
// kernel_fingerprint() read back: the kernel as a stored key states it, or nullopt when `text` is not one
// kernel_fingerprint() writes (a non-empty name, then six numbers taken from the right, since a hostile name
// may hold '|': registers 0..255, static smem and local bytes at most 1 GiB, max threads 1..1024, versions
// 0..9999). The name is not demangled (demangled == name).
std::optional<kernel_resources> kernel_from_fingerprint(std::string_view text);

// The key of a plan for this device (as queried: its SM count is the context's, so a green context or a
// MIG slice is its own model), driver, kernel, policy text, smem rule text and size bucket.
stored_key stored_key_for(const device_limits& dev, int driver_version, const kernel_resources& kernel,
                          std::string policy, std::string smem_rule, std::uint64_t bucket);

// Which stored plans may serve a GPU (compatible_driver, same_device_model): store/device_match.hpp.

namespace detail {

inline constexpr const char* cache_file_format = "launchfit-plan-cache";
inline constexpr int cache_file_version = 1;
// A file above this size is not read (LAUNCHFIT_CACHE_MAX_BYTES overrides it for the library).
inline constexpr std::size_t cache_file_default_max_bytes = std::size_t(16) << 20;
// At most this many problems are kept in cache_file_contents::problems (skipped counts them all).
inline constexpr std::size_t cache_file_max_problems = 100;
// Longest key text read back: mangled template kernel names run to several KB.
inline constexpr std::size_t max_key_text_bytes = 64 * 1024;

// How a tuned plan was measured: what decides whether a later plan replaces it (better_measured()). A
// plan without one (a policy's static plan, or an untuned one) loses to every measured plan. Read from a
// file or a store it is untrusted input: parse_cache_file() and validate_stored_entry() refuse an entry
// whose measurement is out of these ranges.
//   "measurement": {"time_ms": 0.225, "spread": 0.012, "trials": 16, "clean": true, "conditions": ""}
struct plan_measurement {
  double best_ms = 0;  // the best time of the chosen plan, ms: measurement_min_ms..measurement_max_ms
  // The relative noise of that time, e.g. the confirmation round's (max - min) / min:
  // 0..measurement_max_spread.
  double spread = 0;
  std::uint32_t trials = 0;  // timed runs behind the choice (all candidates): 1..measurement_max_trials
  bool clean = false;        // measured without contention and within the spread bound: may be shared
  // Why not clean ("other processes on the GPU", "spread 7% above the 3% bound"), or what was not known;
  // clean text of at most measurement_max_conditions bytes (store_plan() cleans and cuts what it is given).
  std::string conditions;
};

// The ranges of a measurement read back. The least time is 100 ns: no launch completes faster, so a smaller
// one is a forgery made to win every comparison.
inline constexpr double measurement_min_ms = 1e-4;
inline constexpr double measurement_max_ms = 1e6;
inline constexpr double measurement_max_spread = 10;
inline constexpr std::uint32_t measurement_max_trials = 1000000;
inline constexpr std::size_t measurement_max_conditions = 256;
// Longest origin text ("redis://host:port/db"): never a user or password.
inline constexpr std::size_t max_origin_bytes = 300;
// The largest epoch read back (exact in a double, as JSON readers hold numbers).
inline constexpr std::uint64_t max_epoch = std::uint64_t(1) << 53;

struct stored_entry {
  stored_key key;
  launchfit::plan plan;
  // When it was stored (ms since the epoch; 0: unknown): the newest wins a ranking or a merge, the oldest is
  // dropped first. Read from a file or a store, a stamp more than max_stored_at_skew_ms ahead of the
  // reader's clock is read as 0 (parse_cache_file).
  std::uint64_t stored_at_ms = 0;
  // A calibration entry (key.kernel == calibration_kernel): the measured target, "calibration" in the file.
  std::uint64_t bytes_in_flight_per_sm = 0;
  // How the plan was measured; none for a static or untuned plan ("measurement" in the file).
  std::optional<plan_measurement> measurement;
  // How many times the plan under this key was replaced by a better one in a shared store (0: the first
  // plan stored there). Set by the store's writer, never by a tuner ("epoch" in the file).
  std::uint64_t epoch = 0;
  // Where the entry came from when it was copied from another layer: "redis://host:port/db" (never with a
  // user or password); empty for a plan made here ("origin" in the file).
  std::string origin;
};

// The one rule of supersession: whether `candidate` may replace `stored` under the same key. A measured plan
// replaces an unmeasured one; an unmeasured one never replaces a measured one (nor another unmeasured one:
// the first stays, so that every process keeps one plan); of two measured plans the candidate must be faster
// beyond the noise of both: candidate.best_ms < stored.best_ms * (1 - max(stored.spread, candidate.spread,
// 0.01)). Equal, within noise or slower: the stored plan stays.
bool better_measured(const std::optional<plan_measurement>& candidate,
                     const std::optional<plan_measurement>& stored) noexcept;
// The same rule where the newest store of a plan wins otherwise (the plan file): whether `candidate` may
// replace `stored` there. A calibration replaces one; an entry replaces an unmeasured one; a plan measured
// clean replaces one measured under contention (provisional: only this node's file ever holds one); a
// measured one is replaced otherwise only as better_measured() says (so an unmeasured plan never replaces a
// measured one).
bool replaces_in_file(const stored_entry& candidate, const stored_entry& stored) noexcept;
// Why a measurement read back is not one (out of range, not clean text), or "".
std::string invalid_measurement(const plan_measurement& m);

// The reserved kernel key of calibration entries (no kernel fingerprint has this form: they hold '|').
inline constexpr const char* calibration_kernel = "launchfit:calibration";
inline constexpr const char* calibration_policy = "bytes_in_flight_target";
// A measured target above what any SM holds (every byte of its registers and shared memory) is not one.
inline constexpr std::uint64_t max_calibration_bytes_per_sm = std::uint64_t(1) << 22;
// Nor one below four warps of 4-byte loads (the least launchfit-calibrate measures): no GPU reaches a
// useful read bandwidth with less in flight per SM, so such a target is a corrupt or forged file.
inline constexpr std::uint64_t min_calibration_bytes_per_sm = 4 * 32 * 4;

// Whether no launch finds a plan under this key: its policy text names no work kind (written by launchfit 0.3
// or before, when items, grid-stride and no-work plans were keyed alike). A calibration is not a plan: false.
bool key_names_no_work_kind(const stored_key& k);

// Why a target of `bytes` in flight per SM cannot be a measurement on `dev`, or "": it must lie between
// min_calibration_bytes_per_sm and what one of its SMs holds (its registers and shared memory, when known).
std::string implausible_calibration(std::uint64_t bytes, const device_limits& dev);

// How far ahead of the reader's clock a stored_at may be (clocks of hosts under NTP differ by far less).
// A later stamp is a broken clock or a forgery made to win every ranking and merge: the entry is kept (its
// plan passed every check) but read as of unknown age, 0, so that it loses to every dated entry.
inline constexpr std::uint64_t max_stored_at_skew_ms = 5 * 60 * 1000;

// How many stored_at stamps this process's readers (the plan file, a remote store, the tools) have read as
// unknown because they lay beyond max_stored_at_skew_ms, counted each time an entry is read.
std::uint64_t future_stamps_cleared() noexcept;

// Why a stored entry must not be used, or an empty string: the one check of an entry, which every reader
// (the plan file, a remote store) and `launchfit-plans check` call, so that a lookup serves exactly the
// entries check passes. Every entry from any store passes through here after it is parsed:
// - its key text is clean and bounded;
// - a calibration entry holds a plausible target (512 B..4 MiB per SM, and at most what an SM of its key's
//   compute capability holds);
// - a plan entry's key text is well formed and its plan launches exactly as the key says (cooperative,
//   cluster dims and PDL are the key's, its policy text the key's policy);
// - what a plan entry states holds together: its key's kernel is a fingerprint (kernel_from_fingerprint)
//   and its sm_count at least 1; the block has every dimension >= 1, block_threads threads (their product)
//   and at most the fingerprint's max threads per block;
// - where the built-in table knows its key's compute capability, the plan is valid on that architecture
//   with the key's SM count for the kernel the fingerprint describes (validate_plan: block dimensions,
//   shared memory, a block that fits an SM, grid, co-residency of a cooperative plan, PDL on sm_90+), and
//   its blocks_per_sm within the architecture's resident blocks and threads per SM. An architecture the
//   table does not know (a newer GPU) is held to the format's bounds only.
// What needs the live kernel and device (its real maxThreadsPerBlock, the driver's residency) is checked by
// the planner before a stored plan is used. Never throws but std::bad_alloc.
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
  // Of the skipped: entries that were read whole but failed validate_stored_entry(), the stored-entry check,
  // each named in `refusals` as in `problems` (the first cache_file_max_problems).
  std::size_t refused = 0;
  std::vector<std::string> refusals;
  // Of the entries kept: those whose stored_at lay beyond max_stored_at_skew_ms and was read as 0, each
  // named in `clamps` ("entry 3 (kernel ...): 'stored_at' ... is ..."; the first cache_file_max_problems).
  std::size_t clamped = 0;
  std::vector<std::string> clamps;
};

// Never throws for any input. A stored_at beyond max_stored_at_skew_ms of the system clock is read as 0.
cache_file_contents parse_cache_file(std::string_view text);
// Invalid UTF-8 in strings is replaced, so this never throws either. One entry per line.
std::string serialize_cache_file(const std::vector<stored_entry>& entries);
// The line serialize_cache_file() writes for one entry (without the separating ",\n").
std::string cache_file_line(const stored_entry& e);
// Fast path for files in serialize_cache_file()'s layout: entry lines for which `known` is true are not
// parsed; the others are appended to `out`. Returns false (out unspecified) for any other layout or a
// bad entry line (one validate_stored_entry() refuses included, or one whose stored_at is read as 0);
// parse_cache_file() then decides and counts.
bool parse_cache_file_lines(std::string_view text, const std::function<bool(std::string_view)>& known,
                            std::vector<stored_entry>& out);
// One entry as cache_file_line() writes it (any JSON layout), parsed, validated and its stored_at bounded
// exactly as an entry of the file. Empty when `out` holds it, else why not (`out` unspecified). Never
// throws but std::bad_alloc.
std::string parse_stored_entry(std::string_view json_text, stored_entry& out);

}  // namespace detail
}  // namespace launchfit

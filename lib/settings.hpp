// SPDX-License-Identifier: MIT
#pragma once
// Internal: every environment variable launchfit reads, read once into one immutable value.
//
// The environment is read at the first call of current_settings() (from any thread; one thread reads, the
// others wait for it) and never again: a variable changed later changes nothing, so two modules can never
// disagree about it. The value is never destroyed (a thread still running at exit may read it). A public
// setter (set_cache_file(), set_remote_store(), set_policy_overrides(), set_log_async(), ...) overrides
// what its variable said; the settings keep what the environment said.
//
// Every variable goes through one of three readers: text (a path, a URL, a list, a policy string: kept as
// set, the module that uses it validates it), a number (decimal digits only, within the variable's range)
// and an enumeration (a fixed list of words, any case, spaces and tabs around ignored; a switch is the
// enumeration 1/0, true/false, yes/no, on/off). An empty variable is an unset one (`VAR= command`). A
// number or a word that is not valid falls back to the variable's safe value (for a cache mode that is
// `frozen`, for a match level `exact`: a typo never makes a production job write or accept more) and
// leaves one warning:
//
//   LAUNCHFIT_CACHE_MATCH='modle\x1b[31m' is neither exact nor model; using exact
//
// the value escaped and bounded (text.hpp). The warnings are logged once per value read, on the logger's
// first use (report_settings_warnings()).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/log.hpp"

namespace launchfit::detail {

// spdlog's levels in spdlog's order (log.cpp converts), so that this header does not include spdlog.
enum class log_level_setting : std::uint8_t { trace, debug, info, warn, err, critical, off };

// One variable whose value was refused, as logged: the message names the variable, shows the value escaped
// and says what is used instead.
struct setting_warning {
  std::string variable;  // "LAUNCHFIT_CACHE_MATCH" (for SPDLOG_LEVEL, the entry refused is in `value`)
  std::string value;     // as set, at most setting_value_cap bytes (a JSON log line carries it as a field)
  std::string message;   // "LAUNCHFIT_CACHE_MATCH='modle' is neither exact nor model; using exact"
};

// Bytes of a refused value shown in a warning (then "...(N bytes)") and kept in setting_warning::value.
inline constexpr std::size_t setting_shown_bytes = 128;
inline constexpr std::size_t setting_value_cap = 1024;

// Ranges of the numeric variables.
inline constexpr std::uint64_t cache_max_bytes_limit = std::uint64_t(1) << 40;  // 1 TiB
inline constexpr std::uint64_t cache_max_entries_limit = 0xffffffffULL;
inline constexpr std::uint64_t remote_ttl_limit_s = 10ULL * 365 * 24 * 3600;  // ten years
inline constexpr std::size_t remote_password_file_bytes = 4096;

struct settings {
  struct plugin_settings {
    std::string paths;      // LAUNCHFIT_PLUGINS: shared objects separated by ':' (empty: none)
    bool fallback = false;  // LAUNCHFIT_PLUGIN_FALLBACK (switch): a failing plugin falls back to the built-in
  } plugins;
  std::string policy_overrides;  // LAUNCHFIT_POLICY: "glob=policy;..." (empty: none)
  struct cache_settings {
    std::string file;                                    // LAUNCHFIT_CACHE (empty: no file)
    cache_file_mode mode = cache_file_mode::read_write;  // LAUNCHFIT_CACHE_MODE: read_write | frozen
    cache_match match = cache_match::model;              // LAUNCHFIT_CACHE_MATCH: model | exact
    std::size_t max_bytes = 0;  // LAUNCHFIT_CACHE_MAX_BYTES: 1..cache_max_bytes_limit (default: the format's)
    std::size_t max_entries =
        0;  // LAUNCHFIT_CACHE_MAX_ENTRIES: 1..cache_max_entries_limit (default: merge's)
  } cache;
  struct remote_settings {
    std::string url;          // LAUNCHFIT_REMOTE: "redis://..." (empty: no remote store)
    std::uint64_t ttl_s = 0;  // LAUNCHFIT_REMOTE_TTL: 1..remote_ttl_limit_s (default: the store's)
    // LAUNCHFIT_REDIS_PASSWORD, else the one line of the file LAUNCHFIT_REDIS_PASSWORD_FILE names (a regular
    // file of at most remote_password_file_bytes): the store's password when its URL holds none. A secret:
    // never logged, never in a warning (a refused file is named, its text never shown).
    std::string password;
  } remote;
  struct log_settings {
    log_level_setting level = log_level_setting::info;  // LAUNCHFIT_LOG_LEVEL, else SPDLOG_LEVEL, else info
    log_format format = log_format::text;               // LAUNCHFIT_LOG_FORMAT: text | json
    bool async = true;                                  // LAUNCHFIT_LOG_ASYNC (switch)
    bool async_set = false;  // LAUNCHFIT_LOG_ASYNC said so (then it holds for a user's logger too)
  } log;
  bool nvtx = true;                       // LAUNCHFIT_NVTX (switch)
  bool nvtx_tool_attached = false;        // NVTX_INJECTION64_PATH is set (Nsight tools set it)
  bool cuda_launch_blocking = false;      // CUDA_LAUNCH_BLOCKING is set and not "0"
  std::vector<setting_warning> warnings;  // one per refused value, in the order of the fields above
};

// The process's settings: the environment as it was at the first call. Thread-safe; the reference is valid
// for the process's lifetime (also after settings_reload_for_tests(), which leaves older values alive).
const settings& current_settings();

// Logs the current value's warnings, once per value (later calls do nothing). log.cpp calls it on the
// logger's first use; safe from any thread. Never throws.
void report_settings_warnings() noexcept;

// Tests only: reads the environment again into a new value that current_settings() returns from now on,
// whose warnings are logged again. References to the previous value stay valid. Not for production code:
// a module that cached a setting keeps what it cached.
const settings& settings_reload_for_tests();
// Tests only: how many times the environment was read (first use and reloads).
std::uint64_t settings_reads_for_tests() noexcept;

// ---- the readers, for the tests of every variable -----------------------------------------------------

// Reads every variable through `lookup` (returns the value or nullptr when unset), as current_settings()
// does through the process environment.
using environment_lookup = const char* (*)(const char* name, void* context);
settings read_settings(environment_lookup lookup, void* context);

// A number: decimal digits only (no sign, no space, no "0x"), in [min, max]; nullopt otherwise, overflow
// included.
std::optional<std::uint64_t> parse_number(std::string_view text, std::uint64_t min,
                                          std::uint64_t max) noexcept;

// A word of `words` (ASCII case ignored, spaces and tabs around ignored): its index; nullopt otherwise.
std::optional<std::size_t> parse_word(std::string_view text,
                                      std::initializer_list<std::string_view> words) noexcept;

// The warning's text: "<variable>='<value escaped, bounded>' <why>; using <fallback>".
std::string setting_warning_text(std::string_view variable, std::string_view value, std::string_view why,
                                 std::string_view fallback);

}  // namespace launchfit::detail

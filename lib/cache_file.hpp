#pragma once
// Internal: the plan-cache file format, parsed and written without touching the file system (fuzzed).
//
//   {"format": "launchfit-plan-cache", "version": 1,
//    "entries": [{"key": {stored_key fields}, "plan": {plan fields, occupancy as an object}}, ...]}

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/cache.hpp"

namespace launchfit::detail {

inline constexpr const char* cache_file_format = "launchfit-plan-cache";
inline constexpr int cache_file_version = 1;

struct stored_entry {
  stored_key key;
  launchfit::plan plan;
};

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

}  // namespace launchfit::detail

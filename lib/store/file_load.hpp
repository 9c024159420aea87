// SPDX-License-Identifier: MIT
#pragma once
// Internal: reading a plan file when it is opened (set_cache_file, LAUNCHFIT_CACHE): bounded in size, never
// a special file, every entry validated; what was refused or skipped becomes warnings.

#include <cstddef>
#include <string>
#include <vector>

#include "../file_lock.hpp"
#include "../plan_merge.hpp"
#include "launchfit/cache.hpp"

namespace launchfit::detail::plan_file {

// What set_cache_file found, before it is installed.
struct loaded_file {
  disk_view view;  // for the writer: the file as read here, so its first write need not read it again
  file_identity id;
  std::string real;
  bool writable = true;
  std::size_t max_bytes = cache_file_default_max_bytes;
  std::size_t max_entries = default_max_entries;
  std::vector<stored_entry> entries;
  std::size_t refused = 0;
  std::vector<std::string> warnings;
};

// Reads the file at `path` for opening in `mode`.
loaded_file load(const std::string& path, cache_file_mode mode);

}  // namespace launchfit::detail::plan_file

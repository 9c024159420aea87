// SPDX-License-Identifier: MIT
// Reading a plan file when it is opened (file_load.hpp).

#include "file_load.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>

#include "../settings.hpp"
#include "file_store.hpp"
#include "future_stamps.hpp"

namespace launchfit::detail::plan_file {
namespace {

// The warnings for a file's bad entries: one naming each refused entry (it failed the stored-entry check,
// validate_stored_entry(), which an operator wants to see, with why), and one counting the others.
void note_bad_entries(const cache_file_contents& c, std::vector<std::string>& warnings) {
  if (c.refused == 0) {
    if (c.skipped) {
      warnings.push_back("skipped " + std::to_string(c.skipped) + " bad entr" +
                         (c.skipped == 1 ? "y" : "ies") + " (" + c.problem + ")");
    }
    return;
  }
  for (std::size_t i = 0; i < c.refusals.size() && i < refusals_named; ++i)
    warnings.push_back(c.refusals[i] + "; the entry is not used");
  if (c.refused > refusals_named) {
    const std::size_t more = c.refused - refusals_named;
    warnings.push_back(std::to_string(more) +
                       (more == 1 ? " more entry refused: it fails" : " more entries refused: they fail") +
                       " the stored-entry check (launchfit-plans check names each and why)");
  }
  const std::size_t others = c.skipped - c.refused;
  if (others == 0) return;
  // The first problem that is not a refusal (refusals are problems too, in order).
  std::string first;
  for (std::size_t p = 0, r = 0; p < c.problems.size() && first.empty(); ++p) {
    if (r < c.refusals.size() && c.problems[p] == c.refusals[r]) {
      ++r;
    } else {
      first = c.problems[p];
    }
  }
  warnings.push_back("skipped " + std::to_string(others) + " bad entr" + (others == 1 ? "y" : "ies") +
                     (first.empty() ? std::string() : " (" + first + ")"));
}

}  // namespace

loaded_file load(const std::string& path, cache_file_mode mode) {
  loaded_file out;
  const settings::cache_settings& set = current_settings().cache;
  out.max_bytes = limit_or(set.max_bytes, cache_file_default_max_bytes);
  out.max_entries = limit_or(set.max_entries, default_max_entries);
  // A path that begins or ends with white space (a blank, a newline) is a mistake of quoting (a file named
  // "plans.json " or "plans.json\n" was made beside the one meant): not used. Inside a name anything goes, and
  // the log escapes it.
  if (!path.empty() &&
      (std::isspace(static_cast<unsigned char>(path.front())) || std::isspace(static_cast<unsigned char>(path.back())))) {
    out.warnings.push_back("not used: the path begins or ends with white space; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  const resolved_path where = resolve(path);
  out.real = where.real;
  if (!where.problem.empty()) {
    out.warnings.push_back(where.problem + "; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  std::string text, why;
  const read_result r = read_bounded(out.real, out.max_bytes, text, why, out.id);
  if (r == read_result::missing) return out;  // created on first write
  if (r == read_result::refused) {
    out.warnings.push_back((why.rfind("cannot", 0) == 0 ? why : "ignored and left untouched: " + why) +
                           "; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  // A file this user may read but not write (another user's, or made read-only) is read, never replaced: a
  // writable directory let the rename put this user's file in its place, owner and mode included.
  if (mode != cache_file_mode::frozen && ::access(out.real.c_str(), W_OK) != 0 && errno == EACCES) {
    out.warnings.push_back("read-only for this process (not replaced: its plans are read, new ones kept in memory)");
    out.writable = false;
  }
  entry_lines disk;
  const cache_file_contents contents = read_entries(text, nullptr, disk, nullptr);
  note_future_stamps(stamp_reader::file, "plan cache file " + path, contents.clamped,
                     contents.clamps.empty() ? std::string_view() : contents.clamps.front());
  switch (contents.status) {
    case cache_file_status::ok:
    case cache_file_status::empty:
      note_bad_entries(contents, out.warnings);
      out.refused = contents.refused;
      out.entries.reserve(disk.size());
      for (const auto& [k, h] : disk) out.entries.push_back(h.entry);
      out.view = {std::move(disk), out.id, true, {}};
      break;
    case cache_file_status::corrupt:
      // What still reads (launchfit's layout, line by line) is used and kept when the file is replaced.
      out.warnings.push_back(contents.problem + (contents.problems.empty() ? std::string() : " (" + contents.problems.front() + ")") +
                             (mode == cache_file_mode::frozen ? "" : "; it will be replaced with what was read"));
      out.refused = contents.refused;
      out.entries.reserve(disk.size());
      for (const auto& [k, h] : disk) out.entries.push_back(h.entry);
      break;
    case cache_file_status::foreign:
    case cache_file_status::wrong_version:
      out.warnings.push_back("ignored and left untouched: " + contents.problem +
                             "; plans are kept in memory only");
      out.writable = false;
      break;
  }
  return out;
}

}  // namespace launchfit::detail::plan_file

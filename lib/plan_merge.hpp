// SPDX-License-Identifier: MIT
#pragma once
// Internal: what a write of the plan file keeps. Under the file's lock the writer reads the file as it is
// now, keeps every entry as the disk has it except those this process stored since its last write (they
// win), drops its own oldest entries beyond the limits (never another process's: the file is shared, and
// only an operator's command, launchfit-plans prune, removes what others wrote), and replaces the file. A process reading the file
// without writing (the refresh of its loaded table) takes what changed on disk the same way.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "file_lock.hpp"
#include "plan_file_format.hpp"

namespace launchfit::detail {

// A write keeps at most this many entries unless LAUNCHFIT_CACHE_MAX_ENTRIES says otherwise (and at most
// the file's byte limit), dropping this process's oldest first.
inline constexpr std::size_t default_max_entries = 8192;

// One entry per key in the file: every field of stored_key but the device model.
using key_tuple =
    std::tuple<std::string, int, int, int, std::string, std::string, std::string, std::uint64_t>;
key_tuple tie_key(const stored_key& k);

// One entry per key, in the order each key first appears, each the one launchfit keeps of a key written more
// than once (a file edited by hand or concatenated), folding in file order: where either was measured, a later
// entry replaces the kept one only as replaces_in_file() says (a measured plan over an unmeasured one, the
// faster of two measured ones beyond their noise: on a measured tie the earlier stays); else the newer
// (stored_at), the later on a tie. What every reader and launchfit-plans keep. `dropped`, when given, counts
// the entries left out.
std::vector<stored_entry> one_entry_per_key(std::vector<stored_entry> entries, std::size_t* dropped = nullptr);

struct held {
  stored_entry entry;
  std::string line;  // as in the file
};
using entry_lines = std::map<key_tuple, held>;

// The file as this process last read or wrote it (the writer thread's own).
// The lines this process wrote, per key: what a limit may drop (while the file still holds that line).
using own_lines = std::map<key_tuple, std::string>;

struct disk_view {
  entry_lines entries;
  file_identity id;
  bool valid = false;
  own_lines own;  // of this file, kept across reads: another process's later line for a key is theirs
};

// One version of the file's text into `disk`, later entries of a key winning: lines that `known` holds (the
// file as last seen; null: none) are taken from it unparsed. Entries whose line `known` does not hold for
// their key are also appended to `changed` (null: not collected). The result says how the text parsed; its
// entries are in `disk`, not in it.
cache_file_contents read_entries(std::string_view text, const disk_view* known, entry_lines& disk,
                                 std::vector<stored_entry>* changed);

// Drops entries no launch finds (keys that do not name the work's kind, written by launchfit 0.3 and
// before), then the oldest (stored_at) of the entries whose line `own` holds, until at most max_entries
// remain and the file is at most max_bytes. False when that is not enough: the rest was written by other
// processes, and a limit never evicts their findable entries.
bool keep_within_limits(entry_lines& disk, std::size_t max_entries, std::size_t max_bytes,
                        const own_lines& own);

// The file's text for these entries: serialize_cache_file()'s layout, in key order.
std::string file_text(const entry_lines& disk);

struct write_job {
  std::string path;  // resolved (file_lock.hpp: resolve)
  std::size_t max_bytes = cache_file_default_max_bytes;
  std::size_t max_entries = default_max_entries;
  bool sweep_temps = false;
  std::chrono::milliseconds lock_wait{1000};
};

// lock_busy: the lock is held elsewhere; retry: an error that may pass (transient_errno(), no memory for the
// merge); both keep the plans and try again later. failed: the file is not written again.
enum class write_status { written, lock_busy, retry, failed };

struct write_outcome {
  write_status status = write_status::failed;
  std::string why;
  std::vector<stored_entry> others;  // entries other processes wrote or changed since our last look
};

// Merges `mine` (what this process stored since its last write) into the file under its lock; `view` is
// the file as written afterwards (invalid when the write failed).
write_outcome write_file(const write_job& job, const std::vector<stored_entry>& mine, disk_view& view);

enum class reread_status { unchanged, read, missing, refused };

// Reads the file without its lock (every write renames a whole file into place) when its identity is not
// `seen`; `seen` becomes the identity found. `view` then holds the file as read, the entries new or
// changed since `view` are appended to `changed`, and `refused` counts the entries validate_stored_entry()
// refused. A file that cannot be read or is not a good plan cache (refused) changes nothing but `seen` and
// `view`'s validity: the next write says what is wrong with it.
reread_status reread_file(const std::string& path, std::size_t max_bytes, disk_view& view,
                          file_identity& seen, std::vector<stored_entry>& changed, std::size_t& refused);

}  // namespace launchfit::detail

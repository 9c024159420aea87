// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan file on disk. Bounded reads that never block on a special file or follow a symbolic
// link, the lock every writer takes ("<file>.lock", flock), and atomic replacement (a temp file next to the
// file, fsynced, renamed over it), so concurrent writers lose nothing and readers never see a partial file.

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan_file_format.hpp"

namespace launchfit::detail {

// Which version of a file: every write renames a new inode into place, so an unchanged identity means
// nobody wrote since. A missing file has the default identity.
struct file_identity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  long long mtime_ns = -1;
  friend bool operator==(const file_identity& a, const file_identity& b) noexcept {
    return a.dev == b.dev && a.ino == b.ino && a.size == b.size && a.mtime_ns == b.mtime_ns;
  }
  friend bool operator!=(const file_identity& a, const file_identity& b) noexcept { return !(a == b); }
};

file_identity identity_of(const struct stat& st) noexcept;
// The identity of the file at `path` now (one stat, following links): the default one when it is missing
// or cannot be looked at.
file_identity identity_now(const std::string& path) noexcept;

std::string errno_text(int e);
// Whether an error of a file operation may pass by itself: a full disk or quota (ENOSPC, EDQUOT, EFBIG), the
// process's or the system's open files (EMFILE, ENFILE), memory (ENOMEM), an I/O error (EIO), an
// interruption (EINTR, EAGAIN, EBUSY). A write that met one is tried again later; any other (EACCES, EROFS, a
// path that is not a directory) stops writing the file.
bool transient_errno(int e) noexcept;

enum class read_result { ok, missing, refused };

// Reads a regular file of at most max_bytes into `text`, and its identity. Never blocks on a FIFO or
// device (O_NONBLOCK, then the file type is checked on the opened descriptor) and never follows a symbolic
// link (paths are resolved first). `why` says why it was refused.
read_result read_bounded(const std::string& path, std::size_t max_bytes, std::string& text, std::string& why,
                         file_identity& id);

struct resolved_path {
  std::string real;     // the file to read, lock and replace
  std::string problem;  // set when it cannot be used
};

// A symbolic link is resolved once: its target is the file written (a rename onto the link's name would
// replace the link). A relative path becomes absolute, so a later chdir() changes nothing.
resolved_path resolve(const std::string& path);

// An open descriptor, closed (and any flock on it released) at the end of its scope.
struct fd_closer {
  int fd = -1;
  fd_closer() = default;
  explicit fd_closer(int f) : fd(f) {}
  fd_closer(const fd_closer&) = delete;
  fd_closer& operator=(const fd_closer&) = delete;
  ~fd_closer();
};

// busy: held by another process; retry: not takeable for now (transient_errno(): no descriptor left, a full
// disk); both: try again later.
enum class lock_result { held, busy, retry, failed };

// Takes the lock on "<path>.lock" with non-blocking attempts until `wait` has passed; `lock` then holds
// it. `why` says why not.
lock_result take_lock(const std::string& path, fd_closer& lock, std::string& why,
                      std::chrono::milliseconds wait);

// The name of a temp file replace_file() writes for `path`: "<path>.launchfit-tmp.<pid>.<16 hex digits>", a
// name no user picks. is_temp_file_name() says whether `name` (a directory entry) is exactly such a name
// for the file named `base`, and its pid.
std::string temp_file_name(const std::string& path, long pid, unsigned long long random);
bool is_temp_file_name(std::string_view name, std::string_view base, long long& pid);

// Under the lock, every temp file of this cache is a leftover (writers only write one while they hold the
// lock): removed when its owner is dead, is this process's pid (an earlier process with the same pid), or
// is older than ten minutes (a live pid may be a reused one). Only names is_temp_file_name() accepts are
// touched: a user's "plans.json.tmp.1" or "plans.json.launchfit-tmp.backup" stays.
void sweep_temp_files(const std::string& path);

// Writes text to a new temp file next to path and renames it over path; `id` is then the new file's
// identity. The directory is not fsynced: after a crash the file is the old or the new version, never a
// mix, and may lose its newest plans. False with `why` when it was not replaced, and `error` the errno of the
// step that failed.
bool replace_file(const std::string& path, const std::string& text, file_identity& id, std::string& why,
                  int* error = nullptr);

enum class cache_file_read { ok, missing, refused };

// Reads a cache file the way the library does: a symbolic link resolved as resolve() does, then a regular
// file (never a FIFO, device or directory) of at most max_bytes. `why` says why it was refused.
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

}  // namespace launchfit::detail

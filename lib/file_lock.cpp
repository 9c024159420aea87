// SPDX-License-Identifier: MIT
// The plan file on disk: bounded reads, the writers' lock, temp files and the atomic rename.

#include "file_lock.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <system_error>
#include <thread>

#include "lifecycle.hpp"
#include "text.hpp"

namespace launchfit::detail {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Paths in messages: escaped, long enough for any real path.
constexpr std::size_t path_text_bytes = 4096;
constexpr std::chrono::minutes stale_temp_age{10};

std::string shown(const std::string& path) { return escape_text(path, path_text_bytes); }

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a file";
}

std::string too_large(unsigned long long size, std::size_t max_bytes) {
  return std::to_string(size) + " bytes is above LAUNCHFIT_CACHE_MAX_BYTES=" + std::to_string(max_bytes);
}

std::uint64_t random_u64() {
  thread_local std::mt19937_64 gen = [] {
    std::random_device rd;
    return std::mt19937_64((std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(::getpid()));
  }();
  return gen();
}

}  // namespace

file_identity identity_of(const struct stat& st) noexcept {
  return {st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
}

file_identity identity_now(const std::string& path) noexcept {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return identity_of(st);
}

std::string errno_text(int e) { return std::system_category().message(e); }

namespace {

// The plan-file locks this process holds or is taking, by descriptor (+ 1; 0: a free slot) and the thread
// holding each. A
// flock belongs to the open file description, so a child of fork() holds the parent's lock as long as its copy
// of the descriptor is open, whatever the parent does: the child closes the copies of locks another thread
// held (that thread is not in the child, and its descriptor would never be closed there).
constexpr int max_held_locks = 8;
std::atomic<int> held_lock_fd[max_held_locks]{};
std::atomic<pthread_t> held_lock_by[max_held_locks]{};

void note_held(int fd) noexcept {
  for (int i = 0; i < max_held_locks; ++i) {
    int free_slot = 0;  // claimed (-1), its holder written, then published
    if (!held_lock_fd[i].compare_exchange_strong(free_slot, -1, std::memory_order_acquire)) continue;
    held_lock_by[i].store(::pthread_self(), std::memory_order_relaxed);
    held_lock_fd[i].store(fd + 1, std::memory_order_release);
    return;
  }
}

void note_closed(int fd) noexcept {
  for (int i = 0; i < max_held_locks; ++i) {
    int held = fd + 1;
    if (held_lock_fd[i].compare_exchange_strong(held, 0, std::memory_order_acq_rel)) return;
  }
}

void close_inherited_locks() noexcept {
  const pthread_t self = ::pthread_self();
  for (int i = 0; i < max_held_locks; ++i) {
    const int held = held_lock_fd[i].load(std::memory_order_acquire);
    if (held <= 0 || ::pthread_equal(held_lock_by[i].load(std::memory_order_relaxed), self)) continue;
    ::close(held - 1);
    held_lock_fd[i].store(0, std::memory_order_relaxed);
  }
}

// Registered at load time (never from a static's initialiser: see lifecycle.cpp).
const bool inherited_locks_closed = lifecycle::on_fork({nullptr, nullptr, close_inherited_locks});

// A lock file's descriptor is noted from the moment it is opened, under this guard, which a fork waits for: a
// child forked between open() and the note would otherwise keep a copy nobody closes, and the flock the parent
// took on it afterwards (the open file description is shared) would be held for the child's whole life.
std::mutex opening_mutex;  // constant-initialised, trivially destroyed
std::mutex& opening_guard() noexcept { return opening_mutex; }
const bool opening_guarded = lifecycle::on_fork_leaf_mutex<opening_guard>();

}  // namespace

fd_closer::~fd_closer() {
  if (fd < 0) return;
  // Under the guard: a child forked between the two would keep a locked copy it never closes (note dropped
  // first), or close a number another thread's open() was given meanwhile (closed first).
  std::lock_guard<std::mutex> closing(opening_guard());
  note_closed(fd);
  ::close(fd);
}

read_result read_bounded(const std::string& path, std::size_t max_bytes, std::string& text, std::string& why,
                         file_identity& id) {
  text.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return read_result::missing;  // ENOTDIR: the write says why
    struct stat st {};
    if ((e == ENXIO || e == ELOOP) && ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      why = std::string("not a regular file (") + kind_of(st.st_mode) + ")";
    } else {
      why = "cannot read it (" + errno_text(e) + ")";
    }
    return read_result::refused;
  }
  fd_closer closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    why = "cannot read it (" + errno_text(errno) + ")";
    return read_result::refused;
  }
  if (!S_ISREG(st.st_mode)) {
    why = std::string("not a regular file (") + kind_of(st.st_mode) + ")";
    return read_result::refused;
  }
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    why = too_large(static_cast<unsigned long long>(st.st_size), max_bytes);
    return read_result::refused;
  }
  try {
    text.resize(static_cast<std::size_t>(st.st_size) + 1);
  } catch (const std::bad_alloc&) {  // a limit raised far above the memory there is: refused, never a crash
    why = "cannot read it (no memory for its " + std::to_string(st.st_size) + " bytes)";
    return read_result::refused;
  }
  std::size_t done = 0;
  for (;;) {
    if (done == text.size()) {  // it grew since fstat
      if (text.size() > max_bytes) {
        why = too_large(text.size(), max_bytes);
        return read_result::refused;
      }
      text.resize(std::min(max_bytes + 1, text.size() * 2 + 4096));
    }
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = "cannot read it (" + errno_text(errno) + ")";
      return read_result::refused;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  id = identity_of(st);
  return read_result::ok;
}

resolved_path resolve(const std::string& path) {
  struct stat st {};
  char buf[PATH_MAX];
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return {path, ""};  // e.g. ENOTDIR: the write says why
    // Created on first write: resolve its directory.
    const std::size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (!::realpath(dir.c_str(), buf)) return {path, ""};
    const std::string d = buf;
    return {d == "/" ? "/" + base : d + "/" + base, ""};
  }
  if (!::realpath(path.c_str(), buf)) {
    const int e = errno;
    if (S_ISLNK(st.st_mode) && e == ENOENT)
      return {path, "a dangling symbolic link (its target does not exist)"};
    return {path, "cannot resolve it (" + errno_text(e) + ")"};
  }
  return {buf, ""};
}

lock_result take_lock(const std::string& path, fd_closer& lock, std::string& why, milliseconds wait) {
  // A target that is there and is not a file (a directory, a FIFO) is refused before its lock is made: no
  // write replaces it, and a lock file left beside it is litter in someone else's directory.
  struct stat target {};
  if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode)) {
    why = std::string("not a regular file (") + kind_of(target.st_mode) + ")";
    return lock_result::failed;
  }
  const std::string lock_path = path + ".lock";
  {
    std::lock_guard<std::mutex> opening(opening_guard());
    lock.fd =
        ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0666);
    if (lock.fd >= 0) note_held(lock.fd);  // before its flock: a child forked from here on closes its copy
  }
  if (lock.fd < 0) {
    const int e = errno;
    why = shown(lock_path) + ": " + errno_text(e);
    return transient_errno(e) ? lock_result::retry : lock_result::failed;
  }
  struct stat st {};
  if (::fstat(lock.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = shown(lock_path) + ": not a regular file";
    return lock_result::failed;
  }
  const auto deadline = steady::now() + wait;
  auto pause = milliseconds(2);
  for (;;) {
    if (::flock(lock.fd, LOCK_EX | LOCK_NB) == 0) return lock_result::held;
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) {
      why = shown(lock_path) + ": flock: " + errno_text(e);
      return lock_result::failed;
    }
    if (steady::now() >= deadline) {
      why = "its lock " + shown(lock_path) + " is held by another process" +
            (wait.count() > 0 ? " (waited " + std::to_string(wait.count()) + " ms)" : std::string()) +
            "; the write is retried later and plans stay in memory";
      return lock_result::busy;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(50));
  }
}

std::string temp_file_name(const std::string& path, long pid, unsigned long long random) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".launchfit-tmp.%ld.%016llx", pid, random);
  return path + suffix;
}

bool is_temp_file_name(std::string_view name, std::string_view base, long long& pid) {
  constexpr std::string_view marker = ".launchfit-tmp.";
  if (name.size() <= base.size() + marker.size() || name.substr(0, base.size()) != base) return false;
  name.remove_prefix(base.size());
  if (name.substr(0, marker.size()) != marker) return false;
  name.remove_prefix(marker.size());
  // <pid>: 1 to 10 decimal digits, no leading zero (as %ld writes it).
  std::size_t i = 0;
  pid = 0;
  while (i < name.size() && i < 11 && name[i] >= '0' && name[i] <= '9') pid = pid * 10 + (name[i++] - '0');
  if (i == 0 || i > 10 || name[0] == '0') return false;
  name.remove_prefix(i);
  // .<16 lowercase hex digits>, and nothing after.
  if (name.size() != 17 || name[0] != '.') return false;
  for (const char c : name.substr(1))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A process in another pid namespace looks dead; it does not hold the lock either.
void sweep_temp_files(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const int dfd = ::dirfd(d);
  const auto now = std::chrono::system_clock::now();
  while (const dirent* ent = ::readdir(d)) {
    long long pid = 0;
    if (!is_temp_file_name(ent->d_name, base, pid)) continue;
    struct stat st {};
    if (::fstatat(dfd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    const bool dead = pid > INT_MAX || (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
    const bool ours = pid == ::getpid();
    const auto mtime = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
    if (dead || ours || now - mtime > stale_temp_age) ::unlinkat(dfd, ent->d_name, 0);
  }
  ::closedir(d);
}

bool transient_errno(int e) noexcept {
  switch (e) {
    case ENOSPC: case EDQUOT: case EFBIG: case EMFILE: case ENFILE: case ENOMEM: case EIO: case EINTR:
    case EAGAIN: case EBUSY:
      return true;
    default:
      return false;
  }
}

bool replace_file(const std::string& path, const std::string& text, file_identity& id, std::string& why,
                  int* error) {
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temp = temp_file_name(path, static_cast<long>(::getpid()), static_cast<unsigned long long>(random_u64()));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    if (error) *error = errno;
    why = shown(temp) + ": " + errno_text(errno);
    return false;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::fchmod(fd, st.st_mode & 07777);
  std::size_t done = 0;
  bool ok = true;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0 && ::fstat(fd, &st) == 0;
  int saved = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    if (error) *error = saved;
    why = errno_text(saved);
    return false;
  }
  id = identity_of(st);
  return true;
}

cache_file_read read_cache_file(const std::string& path, std::size_t max_bytes, std::string& text,
                                std::string& why) {
  // A symbolic link is followed as the library's own store follows LAUNCHFIT_CACHE (resolve()): a tool
  // reads the file the library reads.
  const resolved_path where = resolve(path);
  if (!where.problem.empty()) {
    why = where.problem;
    return cache_file_read::refused;
  }
  file_identity id;
  switch (read_bounded(where.real, max_bytes, text, why, id)) {
    case read_result::ok:
      return cache_file_read::ok;
    case read_result::missing:
      return cache_file_read::missing;
    case read_result::refused:
      break;
  }
  return cache_file_read::refused;
}

std::string update_cache_file(
    const std::string& path, std::size_t max_bytes, unsigned lock_wait_ms,
    const std::function<std::optional<std::vector<stored_entry>>(const cache_file_contents&)>& update) {
  const resolved_path where = resolve(path);
  if (!where.problem.empty()) return where.problem;
  fd_closer lock;
  std::string why;
  const lock_result locked = take_lock(where.real, lock, why, milliseconds(lock_wait_ms));
  if (locked == lock_result::busy) {
    return "its lock " + shown(where.real + ".lock") + " is held by another process (waited " +
           std::to_string(lock_wait_ms) + " ms)";
  }
  if (locked != lock_result::held) return why;
  std::string text;
  file_identity id;
  const read_result r = read_bounded(where.real, max_bytes, text, why, id);
  if (r == read_result::refused) return why;
  const cache_file_contents contents = parse_cache_file(text);  // missing: empty
  if (contents.status == cache_file_status::foreign || contents.status == cache_file_status::wrong_version) {
    return "not replaced: " + contents.problem;
  }
  const std::optional<std::vector<stored_entry>> next = update(contents);
  if (!next) return "";
  const std::string out = serialize_cache_file(*next);
  if (out.size() > max_bytes) {
    return std::to_string(out.size()) + " bytes would be above the limit of " + std::to_string(max_bytes);
  }
  if (!replace_file(where.real, out, id, why)) return why;
  return "";
}

}  // namespace launchfit::detail

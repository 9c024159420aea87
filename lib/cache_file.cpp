// The persistent plan cache: a versioned JSON file shared by processes (LAUNCHFIT_CACHE).
//
// Launches never wait for the file: lookups read an in-memory table under a mutex that is never held
// across I/O, and store_plan() only queues. One background writer per process takes the queue in
// batches, locks "<real file>.lock" (non-blocking attempts up to a deadline, then a later retry), merges
// with what is on disk (the disk wins for every key this process did not itself store since its last
// write), writes a temp file next to the real file, fsyncs it and renames it over the file, so
// concurrent writers lose nothing and readers never see a partial file.

#include "cache_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "driver.hpp"
#include "launchfit/error.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "plan_json.hpp"

namespace launchfit {
namespace detail {
namespace {

using nlohmann::json;

struct bad_entry : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Longest key text read back: mangled template kernel names run to several KB.
constexpr std::size_t max_key_text_bytes = 64 * 1024;

std::string key_text(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw bad_entry(std::string("missing '") + key + "'");
  if (!it->is_string()) throw bad_entry(std::string("'") + key + "' is not a string");
  const auto& s = it->get_ref<const std::string&>();
  // Refused, not cleaned: a cleaned key could match another kernel's.
  if (s.size() > max_key_text_bytes || safe_text(s, max_key_text_bytes) != s) {
    throw bad_entry(std::string("'") + key + "' is too long or holds control characters");
  }
  return s;
}

template <class T>
T key_int(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw bad_entry(std::string("missing '") + key + "'");
  if (!it->is_number_integer()) throw bad_entry(std::string("'") + key + "' is not an integer");
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!it->is_number_unsigned()) throw bad_entry(std::string("'") + key + "' is not in range");
    return it->template get<std::uint64_t>();
  } else {
    const auto i = it->template get<std::int64_t>();
    if (it->is_number_unsigned() && it->template get<std::uint64_t>() > std::uint64_t(INT_MAX)) {
      throw bad_entry(std::string("'") + key + "' is not in range");
    }
    if (i < 0 || i > INT_MAX) throw bad_entry(std::string("'") + key + "' is not in range");
    return static_cast<T>(i);
  }
}

stored_entry parse_entry(const json& e) {
  if (!e.is_object()) throw bad_entry("entry is not an object");
  stored_entry out;
  const auto k = e.find("key");
  if (k == e.end() || !k->is_object()) throw bad_entry("'key' is not an object");
  out.key.device_uuid = key_text(*k, "device_uuid");
  out.key.cc = key_int<int>(*k, "cc");
  out.key.sm_count = key_int<int>(*k, "sm_count");
  out.key.driver_version = key_int<int>(*k, "driver_version");
  out.key.kernel = key_text(*k, "kernel");
  out.key.policy = key_text(*k, "policy");
  out.key.smem_rule = key_text(*k, "smem_rule");
  out.key.bucket = key_int<std::uint64_t>(*k, "bucket");
  // The device model: absent in entries of older writers (then used for their own GPU only).
  if (k->contains("device_name")) out.key.device_name = key_text(*k, "device_name");
  if (k->contains("l2_bytes")) out.key.l2_bytes = key_int<std::uint64_t>(*k, "l2_bytes");
  const auto p = e.find("plan");
  if (p == e.end() || !p->is_object()) throw bad_entry("'plan' is not an object");
  out.plan = plan_from_json(*p);
  if (const auto c = e.find("calibration"); c != e.end()) {
    if (out.key.kernel != calibration_kernel || !c->is_object()) throw bad_entry("'calibration' out of place");
    const auto b = key_int<std::uint64_t>(*c, "bytes_in_flight_per_sm");
    // A target above what any SM holds (every byte of its registers and shared memory) is not a measurement.
    if (b == 0 || b > (std::uint64_t(1) << 22)) throw bad_entry("'bytes_in_flight_per_sm' is not in 1..4 MiB");
    out.bytes_in_flight_per_sm = b;
  } else if (out.key.kernel == calibration_kernel) {
    throw bad_entry("a calibration entry without 'calibration'");
  }
  if (const auto t = e.find("stored_at"); t != e.end()) {
    if (!t->is_number_unsigned() || t->get<std::uint64_t>() > (std::uint64_t(1) << 53)) {
      throw bad_entry("'stored_at' is not a time in milliseconds");
    }
    out.stored_at_ms = t->get<std::uint64_t>();
  }
  return out;
}

json entry_json(const stored_entry& e) {
  const stored_key& k = e.key;
  json plan = plan_to_json(e.plan);
  plan.erase("match");  // never read back: the reader says where a plan came from
  json out = {{"key",
           {{"device_uuid", k.device_uuid},
            {"cc", k.cc},
            {"sm_count", k.sm_count},
            {"driver_version", k.driver_version},
            {"kernel", k.kernel},
            {"policy", k.policy},
            {"smem_rule", k.smem_rule},
            {"bucket", k.bucket},
            {"device_name", k.device_name},
            {"l2_bytes", k.l2_bytes}}},
          {"plan", std::move(plan)},
          {"stored_at", e.stored_at_ms}};
  if (e.bytes_in_flight_per_sm > 0) out["calibration"] = {{"bytes_in_flight_per_sm", e.bytes_in_flight_per_sm}};
  return out;
}

}  // namespace

cache_file_contents parse_cache_file(std::string_view text) {
  cache_file_contents out;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return out;  // empty: a new file
  const bool mentions_format = text.find(cache_file_format) != std::string_view::npos;
  // nlohmann::json stops at a NUL byte and ignores the rest; crashes leave zero-filled blocks behind.
  const bool has_nul = text.find('\0') != std::string_view::npos;
  const json doc =
      has_nul ? json(json::value_t::discarded) : json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) {
    // Ours if it names our format (a truncated launchfit file): replaceable. Otherwise leave it alone.
    out.status = mentions_format ? cache_file_status::corrupt : cache_file_status::foreign;
    out.problem = mentions_format ? "not valid JSON (truncated?)" : "not a launchfit plan cache (not JSON)";
    return out;
  }
  const auto format = doc.is_object() ? doc.find("format") : doc.end();
  if (!doc.is_object() || format == doc.end() || *format != cache_file_format) {
    out.status = cache_file_status::foreign;
    out.problem = "not a launchfit plan cache (no \"format\": \"launchfit-plan-cache\")";
    return out;
  }
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || *version != cache_file_version) {
    out.status = cache_file_status::wrong_version;
    out.problem = "format version " + (version == doc.end() ? std::string("missing") : version->dump()) +
                  ", this launchfit reads version " + std::to_string(cache_file_version);
    return out;
  }
  const auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_array()) {
    out.status = cache_file_status::corrupt;
    out.problem = "\"entries\" is not an array";
    return out;
  }
  out.status = cache_file_status::ok;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    try {
      out.entries.push_back(parse_entry((*entries)[i]));
    } catch (const std::exception& e) {  // bad_entry, or a nlohmann type error we did not foresee
      std::string why = "entry " + std::to_string(i) + ": " + e.what();
      if (out.problems.size() < cache_file_max_problems) out.problems.push_back(why);
      if (out.skipped++ == 0) out.problem = std::move(why);
    }
  }
  return out;
}

namespace {

// One entry per line between these: compact, yet readable and diffable.
const std::string& file_head() {
  static const std::string head = std::string("{\"format\": \"") + cache_file_format +
                                  "\", \"version\": " + std::to_string(cache_file_version) +
                                  ", \"entries\": [\n";
  return head;
}
constexpr std::string_view file_tail = "]}\n";

}  // namespace

std::string cache_file_line(const stored_entry& e) {
  return entry_json(e).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string serialize_cache_file(const std::vector<stored_entry>& entries) {
  std::string out = file_head();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out += cache_file_line(entries[i]);
    out += i + 1 < entries.size() ? ",\n" : "\n";
  }
  out += file_tail;
  return out;
}

bool parse_cache_file_lines(std::string_view text, const std::function<bool(std::string_view)>& known,
                            std::vector<stored_entry>& out) {
  const std::string& head = file_head();
  if (text.size() < head.size() + file_tail.size() || text.compare(0, head.size(), head) != 0 ||
      text.compare(text.size() - file_tail.size(), file_tail.size(), file_tail) != 0) {
    return false;
  }
  std::string_view body = text.substr(head.size(), text.size() - head.size() - file_tail.size());
  while (!body.empty()) {
    const std::size_t end = body.find('\n');
    if (end == std::string_view::npos) return false;
    std::string_view line = body.substr(0, end);
    body.remove_prefix(end + 1);
    const bool last = body.empty();
    if (last == (!line.empty() && line.back() == ',')) return false;  // a comma on all lines but the last
    if (!last) line.remove_suffix(1);
    if (known && known(line)) continue;
    if (line.find('\0') != std::string_view::npos) return false;
    const json entry = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (entry.is_discarded()) return false;
    try {
      out.push_back(parse_entry(entry));
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}

}  // namespace detail

std::string kernel_fingerprint(const kernel_resources& k) {
  std::ostringstream os;
  os << k.name << '|' << k.regs_per_thread << '|' << k.static_smem_bytes << '|' << k.local_bytes_per_thread
     << '|' << k.max_threads_per_block << '|' << k.ptx_version << '|' << k.binary_version;
  return os.str();
}

stored_key stored_key_for(const device_limits& dev, int driver_version, const kernel_resources& kernel,
                          std::string policy, std::string smem_rule, std::uint64_t bucket) {
  stored_key k;
  k.device_uuid = dev.uuid;
  k.cc = dev.cc();
  k.sm_count = dev.sm_count;
  k.driver_version = driver_version;
  k.kernel = kernel_fingerprint(kernel);
  k.policy = std::move(policy);
  k.smem_rule = std::move(smem_rule);
  k.bucket = bucket;
  // Cleaned so the entry reads back (the reader refuses control characters in key text).
  k.device_name = detail::safe_text(dev.name, 256);
  k.l2_bytes = dev.l2_bytes;
  return k;
}

bool compatible_driver(int stored_version, int wanted_version) noexcept {
  return stored_version > 0 && wanted_version > 0 && stored_version / 1000 == wanted_version / 1000;
}

namespace {

bool is_mig(const stored_key& k) {
  return k.device_uuid.rfind("MIG-", 0) == 0 || k.device_name.find(" MIG ") != std::string::npos;
}

}  // namespace

bool same_device_model(const stored_key& stored, const stored_key& wanted) noexcept {
  return !stored.device_name.empty() && stored.device_name == wanted.device_name && stored.cc == wanted.cc &&
         stored.sm_count == wanted.sm_count && stored.l2_bytes == wanted.l2_bytes &&
         is_mig(stored) == is_mig(wanted) && compatible_driver(stored.driver_version, wanted.driver_version);
}

namespace {

using detail::cache_file_status;
using detail::stored_entry;
using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Limits (README, "Plan cache file"). A file above max_bytes is not read at all; a write keeps at most
// max_entries entries and max_bytes bytes, dropping the oldest entries first.
constexpr std::size_t default_max_bytes = detail::cache_file_default_max_bytes;
constexpr std::size_t default_max_entries = 8192;
constexpr milliseconds batch_delay{20};         // stores this close together share one write
constexpr milliseconds lock_wait{1000};         // per attempt at the file's lock
constexpr milliseconds lock_retry_after{1000};  // after a failed attempt, unless a flush is waiting
constexpr milliseconds close_wait{2000};        // set_cache_file / close_cache_file flush this long at most
constexpr milliseconds exit_wait{2000};         // the flush at exit
constexpr std::chrono::minutes stale_temp_age{10};
constexpr std::chrono::seconds temp_sweep_every{60};

using key_tuple =
    std::tuple<std::string, int, int, int, std::string, std::string, std::string, std::uint64_t>;

key_tuple tie_key(const stored_key& k) {
  return {k.device_uuid, k.cc, k.sm_count, k.driver_version, k.kernel, k.policy, k.smem_rule, k.bucket};
}

bool same_but_bucket(const stored_key& a, const stored_key& b) {
  return a.device_uuid == b.device_uuid && a.cc == b.cc && a.sm_count == b.sm_count &&
         a.driver_version == b.driver_version && a.kernel == b.kernel && a.policy == b.policy &&
         a.smem_rule == b.smem_rule;
}

bool same_launch_key(const stored_key& a, const stored_key& b) {
  return a.kernel == b.kernel && a.policy == b.policy && a.smem_rule == b.smem_rule;
}

// The match level, read from LAUNCHFIT_CACHE_MATCH at first use unless set_cache_match() came first.
struct match_setting {
  std::mutex m;
  std::atomic<int> value{-1};  // a cache_match, or -1 before the first use
};

match_setting& match_state() {
  static match_setting& s = *new match_setting;
  return s;
}

cache_match current_match() {
  match_setting& s = match_state();
  int v = s.value.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<cache_match>(v);
  std::string warning;
  {
    std::lock_guard lock(s.m);
    v = s.value.load(std::memory_order_relaxed);
    if (v < 0) {
      const char* env = std::getenv("LAUNCHFIT_CACHE_MATCH");
      const std::string name = env ? env : "";
      cache_match m = cache_match::model;
      if (name == "exact") {
        m = cache_match::exact;
      } else if (!name.empty() && name != "model") {
        m = cache_match::exact;  // a typo must not widen what a production job accepts
        warning = "LAUNCHFIT_CACHE_MATCH='" + detail::escaped_text(name.substr(0, 64)) +
                  "' is neither exact nor model; using exact";
      }
      v = static_cast<int>(m);
      s.value.store(v, std::memory_order_release);
    }
  }
  if (!warning.empty()) detail::logger()->warn("{}", warning);
  return static_cast<cache_match>(v);
}

std::string errno_text(int e) { return std::system_category().message(e); }

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void warn(const std::string& path, const std::string& what) {
  detail::logger()->warn("plan cache file {}: {}", detail::escaped_text(path), what);
}

// A limit from the environment: a positive integer, else the default (with a note for the warning).
std::size_t env_limit(const char* name, std::size_t fallback, std::vector<std::string>& notes) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || n == 0 || *v == '-' || *v == '+' || *v == ' ') {
    notes.push_back(std::string(name) + "='" + detail::safe_text(v, 64) +
                    "' is not a positive integer; using " + std::to_string(fallback));
    return fallback;
  }
  return static_cast<std::size_t>(n);
}

// Which version of the file we last read or wrote: every write renames a new inode into place, so an
// unchanged identity means nobody else wrote since, and the merge can skip reading the file again.
struct file_identity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  long long mtime_ns = -1;
  friend bool operator==(const file_identity& a, const file_identity& b) {
    return a.dev == b.dev && a.ino == b.ino && a.size == b.size && a.mtime_ns == b.mtime_ns;
  }
};

file_identity identity_of(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);  // also releases a flock
  }
};

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

enum class read_result { ok, missing, refused };

// Reads a regular file of at most max_bytes. Never blocks on a FIFO or device (O_NONBLOCK, then the file
// type is checked on the opened descriptor) and never follows a symbolic link (paths are resolved first).
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
  text.resize(static_cast<std::size_t>(st.st_size) + 1);
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

struct resolved_path {
  std::string real;     // the file to read, lock and replace
  std::string problem;  // set when it cannot be used
};

// A symbolic link is resolved once: its target is the file written (a rename onto the link's name would
// replace the link). A relative path becomes absolute, so a later chdir() changes nothing.
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

struct held {
  stored_entry entry;
  std::string line;  // as in the file
};
using entry_lines = std::map<key_tuple, held>;

// The file as this process last read or wrote it (the writer thread's own).
struct disk_view {
  entry_lines entries;
  file_identity id;
  bool valid = false;
};

enum class write_status { written, lock_busy, failed };

struct write_outcome {
  write_status status = write_status::failed;
  std::string why;
  std::vector<stored_entry> others;  // entries other processes wrote or changed since our last look
};

struct write_job {
  std::string path;
  std::size_t max_bytes = default_max_bytes;
  std::size_t max_entries = default_max_entries;
  bool sweep_temps = false;
};

// Takes the lock on "<path>.lock" with non-blocking attempts until the deadline.
write_status take_lock(const std::string& path, int& lock_fd, std::string& why, milliseconds wait) {
  const std::string lock_path = path + ".lock";
  lock_fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0666);
  if (lock_fd < 0) {
    why = detail::escaped_text(lock_path) + ": " + errno_text(errno);
    return write_status::failed;
  }
  struct stat st {};
  if (::fstat(lock_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = detail::escaped_text(lock_path) + ": not a regular file";
    return write_status::failed;
  }
  const auto deadline = steady::now() + wait;
  auto pause = milliseconds(2);
  for (;;) {
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) == 0) return write_status::written;
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) {
      why = detail::escaped_text(lock_path) + ": flock: " + errno_text(e);
      return write_status::failed;
    }
    if (steady::now() >= deadline) {
      why = "its lock " + detail::escaped_text(lock_path) + " is held by another process (waited " +
            std::to_string(wait.count()) + " ms); the write is retried later and plans stay in memory";
      return write_status::lock_busy;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(50));
  }
}

write_status take_lock(const std::string& path, int& lock_fd, std::string& why) {
  return take_lock(path, lock_fd, why, lock_wait);
}

// Under the lock, every temp file of this cache is a leftover (writers only write one while they hold the
// lock): removed when its owner is dead, is this process's pid (an earlier process with the same pid), or
// is older than stale_temp_age (a live pid may be a reused one). A process in another pid namespace looks
// dead; it does not hold the lock either.
void sweep_temp_files(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const int dfd = ::dirfd(d);
  const auto now = std::chrono::system_clock::now();
  while (const dirent* ent = ::readdir(d)) {
    const std::string_view name = ent->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    long long pid = 0;
    std::size_t i = prefix.size();
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && pid <= INT_MAX)
      pid = pid * 10 + (name[i++] - '0');
    struct stat st {};
    if (::fstatat(dfd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    const bool dead = pid > INT_MAX || (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
    const bool ours = pid == ::getpid();
    const auto mtime = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
    if (dead || ours || now - mtime > stale_temp_age) ::unlinkat(dfd, ent->d_name, 0);
  }
  ::closedir(d);
}

std::uint64_t random_u64() {
  thread_local std::mt19937_64 gen = [] {
    std::random_device rd;
    return std::mt19937_64((std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(::getpid()));
  }();
  return gen();
}

// Writes text to a new temp file next to path and renames it over path. The directory is not fsynced:
// after a crash the file is the old or the new version, never a mix, and may lose its newest plans.
write_status replace_file(const std::string& path, const std::string& text, file_identity& id,
                          std::string& why) {
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%016llx", static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(random_u64()));
    temp = path + suffix;
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    why = detail::escaped_text(temp) + ": " + errno_text(errno);
    return write_status::failed;
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
    why = errno_text(saved);
    return write_status::failed;
  }
  id = identity_of(st);
  return write_status::written;
}

// Merges `mine` (what this process stored since its last write) into the file under its lock.
write_outcome write_file(const write_job& job, const std::vector<stored_entry>& mine, disk_view& view) {
  write_outcome out;
  int lock_fd = -1;
  out.status = take_lock(job.path, lock_fd, out.why);
  fd_closer unlock{lock_fd};
  if (out.status != write_status::written) return out;
  out.status = write_status::failed;
  if (job.sweep_temps) sweep_temp_files(job.path);

  // The file now. Lines we saw before need no parsing (the common case when several processes write).
  std::string text;
  file_identity id;
  const read_result r = read_bounded(job.path, job.max_bytes, text, out.why, id);
  if (r == read_result::refused) return out;
  entry_lines disk;
  if (r == read_result::missing) {
    view.valid = false;
  } else if (view.valid && id == view.id) {
    disk = std::move(view.entries);
  } else {
    std::unordered_map<std::string_view, const held*> known;
    if (view.valid) {
      for (const auto& [k, h] : view.entries) known.emplace(h.line, &h);
    }
    std::vector<stored_entry> parsed;
    std::vector<std::string_view> raw;  // the line of each parsed entry
    const bool lines_ok = detail::parse_cache_file_lines(
        text,
        [&](std::string_view line) {
          const auto it = known.find(line);
          if (it == known.end()) {
            raw.push_back(line);
            return false;
          }
          disk.insert_or_assign(tie_key(it->second->entry.key), *it->second);
          return true;
        },
        parsed);
    if (!lines_ok) {
      disk.clear();
      raw.clear();
      auto contents = detail::parse_cache_file(text);
      if (contents.status == cache_file_status::foreign ||
          contents.status == cache_file_status::wrong_version) {
        out.why = "it was replaced by something else: " + contents.problem;
        return out;
      }
      parsed = std::move(contents.entries);  // empty for a corrupt file: replaced
    }
    for (std::size_t i = 0; i < parsed.size(); ++i) {
      stored_entry& e = parsed[i];
      std::string line = i < raw.size() ? std::string(raw[i]) : detail::cache_file_line(e);
      auto k = tie_key(e.key);
      const auto seen = view.valid ? view.entries.find(k) : view.entries.end();
      if (seen == view.entries.end() || seen->second.line != line) out.others.push_back(e);
      disk.insert_or_assign(std::move(k), held{std::move(e), std::move(line)});
    }
  }
  view.valid = false;

  // What this process stored wins over the disk; everything else on disk stays as it is.
  for (const auto& e : mine) disk.insert_or_assign(tie_key(e.key), held{e, detail::cache_file_line(e)});

  // Caps: the oldest entries go first.
  const std::size_t frame = std::strlen(detail::cache_file_format) + 64;
  std::size_t bytes = frame;
  for (const auto& [k, h] : disk) bytes += h.line.size() + 2;
  if (disk.size() > job.max_entries || bytes > job.max_bytes) {
    std::vector<std::pair<std::uint64_t, const key_tuple*>> by_age;
    by_age.reserve(disk.size());
    for (const auto& [k, h] : disk) by_age.emplace_back(h.entry.stored_at_ms, &k);
    std::sort(by_age.begin(), by_age.end());
    std::vector<key_tuple> drop;
    std::size_t left = disk.size();
    for (const auto& [t, k] : by_age) {
      if (left <= job.max_entries && bytes <= job.max_bytes) break;
      bytes -= disk.at(*k).line.size() + 2;
      drop.push_back(*k);
      --left;
    }
    for (const auto& k : drop) disk.erase(k);
  }

  std::vector<std::string_view> lines;
  lines.reserve(disk.size());
  for (const auto& [k, h] : disk) lines.push_back(h.line);
  const std::string doc = detail::serialize_cache_file({});  // the frame: head + tail
  const std::size_t head = doc.find('[') + 2;
  std::string body = doc.substr(0, head);
  for (std::size_t i = 0; i < lines.size(); ++i)
    body.append(lines[i]).append(i + 1 < lines.size() ? ",\n" : "\n");
  body.append(doc, head, std::string::npos);

  out.status = replace_file(job.path, body, view.id, out.why);
  if (out.status == write_status::written) {
    view.entries = std::move(disk);
    view.valid = true;
  }
  return out;
}

}  // namespace

detail::cache_file_read detail::read_cache_file(const std::string& path, std::size_t max_bytes,
                                                std::string& text, std::string& why) {
  file_identity id;
  switch (read_bounded(path, max_bytes, text, why, id)) {
    case read_result::ok:
      return cache_file_read::ok;
    case read_result::missing:
      return cache_file_read::missing;
    case read_result::refused:
      break;
  }
  return cache_file_read::refused;
}

std::string detail::update_cache_file(
    const std::string& path, std::size_t max_bytes, unsigned lock_wait_ms,
    const std::function<std::optional<std::vector<stored_entry>>(const cache_file_contents&)>& update) {
  const resolved_path where = resolve(path);
  if (!where.problem.empty()) return where.problem;
  int lock_fd = -1;
  std::string why;
  const write_status locked = take_lock(where.real, lock_fd, why, milliseconds(lock_wait_ms));
  fd_closer unlock{lock_fd};
  if (locked == write_status::lock_busy) {
    return "its lock " + detail::escaped_text(where.real + ".lock") + " is held by another process (waited " +
           std::to_string(lock_wait_ms) + " ms)";
  }
  if (locked != write_status::written) return why;
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
  if (replace_file(where.real, out, id, why) != write_status::written) return why;
  return "";
}

namespace {

struct cache_file;
cache_file& state();
void writer_loop();
void flush_at_exit();

// One per process, never destroyed (a launch from a static destructor still finds its plans).
struct cache_file {
  std::mutex config;  // set/close and the first look at LAUNCHFIT_CACHE; never the writer's
  std::atomic<bool> env_checked{false};

  std::mutex memory;             // all below; never held across I/O or logging
  std::condition_variable work;  // to the writer: something to write, or a flush waits
  std::condition_variable done;  // from the writer: a batch ended
  bool open = false;
  bool writable = false;
  cache_file_mode mode = cache_file_mode::read_write;
  std::string path;  // as given (for messages)
  std::string real;  // symbolic links resolved: what is read, locked and replaced
  std::size_t max_bytes = default_max_bytes;
  std::size_t max_entries = default_max_entries;
  unsigned generation = 0;  // a new file (or none) since a batch was taken: its result is dropped
  std::map<key_tuple, stored_entry> entries;    // what lookups see
  std::map<key_tuple, stored_entry> pending;    // stored since the last write, not yet taken by the writer
  std::map<key_tuple, stored_entry> in_flight;  // taken by the writer
  disk_view seed;                         // the file as set_cache_file read it, for the writer's first batch
  std::uint64_t stored = 0, written = 0;  // store sequence numbers: the last stored, the last written
  steady::time_point not_before{};        // the writer waits until then (a batch gathering, a busy lock)
  int flushing = 0;                       // flush calls waiting: retry a busy lock at once
  bool lock_warned = false;
  std::string failure;   // why this file is not written (empty while it is)
  pid_t writer_pid = 0;  // the process whose writer thread runs (none after a fork)
  bool exit_registered = false;
  bool exiting = false;

  cache_file() {
    // A child of fork() has no writer thread and must not inherit a locked mutex.
    ::pthread_atfork(
        [] {
          state().config.lock();
          state().memory.lock();
        },
        [] {
          state().memory.unlock();
          state().config.unlock();
        },
        [] {
          cache_file& f = state();
          new (&f.work) std::condition_variable;
          new (&f.done) std::condition_variable;
          for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));
          f.in_flight.clear();
          f.writer_pid = 0;
          f.flushing = 0;
          f.memory.unlock();
          f.config.unlock();
        });
  }

  // Under memory. Starts this process's writer thread if it has none.
  void ensure_writer() {
    if (writer_pid == ::getpid()) return;
    try {
      std::thread(writer_loop).detach();
      writer_pid = ::getpid();
    } catch (const std::system_error&) {
      return;  // no thread: plans stay queued; flush_cache_file() says so
    }
    if (!exit_registered) exit_registered = std::atexit(flush_at_exit) == 0;
  }

  // Under memory.
  bool all_written() const { return written >= stored; }
};

cache_file& state() {
  static cache_file& f = *new cache_file;
  return f;
}

void writer_loop() {
  cache_file& f = state();
  disk_view view;
  unsigned view_generation = ~0u;
  steady::time_point last_sweep{};
  std::unique_lock lk(f.memory);
  const pid_t me = ::getpid();
  for (;;) {
    if (f.writer_pid != me) return;
    if (!f.open || !f.writable || f.pending.empty()) {
      if (f.exiting) {
        f.writer_pid = 0;
        return;
      }
      f.work.wait(lk);
      continue;
    }
    if (f.flushing == 0 && !f.exiting && steady::now() < f.not_before) {
      f.work.wait_until(lk, f.not_before);
      continue;
    }
    f.in_flight = std::move(f.pending);
    f.pending.clear();
    std::vector<stored_entry> batch;
    batch.reserve(f.in_flight.size());
    for (const auto& [k, e] : f.in_flight) batch.push_back(e);
    const std::uint64_t seq = f.stored;
    const unsigned generation = f.generation;
    write_job job{f.real, f.max_bytes, f.max_entries, false};
    if (generation != view_generation) {
      view = std::move(f.seed);
      f.seed = disk_view{};
      view_generation = generation;
      job.sweep_temps = true;
    }
    if (steady::now() - last_sweep > temp_sweep_every) job.sweep_temps = true;
    if (job.sweep_temps) last_sweep = steady::now();
    lk.unlock();
    write_outcome out = write_file(job, batch, view);
    lk.lock();
    std::string warning;
    if (generation == f.generation) {
      switch (out.status) {
        case write_status::written:
          f.written = seq;
          for (auto& e : out.others) {
            auto k = tie_key(e.key);
            if (!f.pending.count(k)) f.entries.insert_or_assign(std::move(k), std::move(e));
          }
          break;
        case write_status::lock_busy:
          for (auto& [k, e] : f.in_flight) f.pending.emplace(k, std::move(e));  // a newer store wins
          f.not_before = steady::now() + lock_retry_after;
          if (!f.lock_warned) warning = out.why;
          f.lock_warned = true;
          break;
        case write_status::failed:
          f.writable = false;
          f.failure = out.why;
          f.pending.clear();
          warning = "cannot write it (" + out.why + "); plans are kept in memory only";
          break;
      }
      f.in_flight.clear();
    }
    if (!warning.empty() && !f.exiting) {  // before a waiting flush returns: its caller may look
      const std::string path = f.path;
      lk.unlock();
      warn(path, warning);
      lk.lock();
    }
    f.done.notify_all();
  }
}

// Under memory (lk). Waits for everything stored so far to be written; false when it was not.
bool flush_locked(cache_file& f, std::unique_lock<std::mutex>& lk, milliseconds max_wait) {
  if (!f.open || f.mode == cache_file_mode::frozen || f.all_written()) return true;
  if (!f.writable) return false;  // plans stored, kept in memory only
  const std::uint64_t target = f.stored;
  const unsigned generation = f.generation;
  f.ensure_writer();
  ++f.flushing;
  f.work.notify_all();
  f.done.wait_for(lk, max_wait,
                  [&] { return f.written >= target || !f.writable || f.generation != generation; });
  --f.flushing;
  return f.generation == generation && f.writable && f.written >= target;
}

void flush_at_exit() {
  cache_file& f = state();
  std::unique_lock lk(f.memory);
  if (!flush_locked(f, lk, exit_wait) && f.writable && (!f.pending.empty() || !f.in_flight.empty())) {
    const std::string path = f.path;
    const std::size_t left = f.pending.size() + f.in_flight.size();
    f.exiting = true;
    lk.unlock();
    warn(path,
         std::to_string(left) + " plan(s) not written at exit: the file stayed locked by another process");
    lk.lock();
  }
  f.exiting = true;
  f.work.notify_all();
}

// What set_cache_file found, before it is installed.
struct loaded_file {
  disk_view view;  // for the writer: the file as read here, so its first write need not read it again
  std::string real;
  bool writable = true;
  std::size_t max_bytes = default_max_bytes;
  std::size_t max_entries = default_max_entries;
  std::map<key_tuple, stored_entry> entries;
  std::vector<std::string> warnings;
};

loaded_file load(const std::string& path, cache_file_mode mode) {
  loaded_file out;
  out.max_bytes = env_limit("LAUNCHFIT_CACHE_MAX_BYTES", default_max_bytes, out.warnings);
  out.max_entries = env_limit("LAUNCHFIT_CACHE_MAX_ENTRIES", default_max_entries, out.warnings);
  const resolved_path where = resolve(path);
  out.real = where.real;
  if (!where.problem.empty()) {
    out.warnings.push_back(where.problem + "; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  std::string text, why;
  file_identity id;
  const read_result r = read_bounded(out.real, out.max_bytes, text, why, id);
  if (r == read_result::missing) return out;  // created on first write
  if (r == read_result::refused) {
    out.warnings.push_back((why.rfind("cannot", 0) == 0 ? why : "ignored and left untouched: " + why) +
                           "; plans are kept in memory only");
    out.writable = false;
    return out;
  }
  std::vector<stored_entry> lines;
  std::vector<std::string_view> raw;
  detail::cache_file_contents contents;
  const auto each_line = [&](std::string_view line) {
    raw.push_back(line);
    return false;
  };
  if (detail::parse_cache_file_lines(text, each_line, lines)) {  // one entry at a time: less memory
    contents.status = cache_file_status::ok;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      out.view.entries.insert_or_assign(tie_key(lines[i].key), held{lines[i], std::string(raw[i])});
    }
    out.view.id = id;
    out.view.valid = true;
    contents.entries = std::move(lines);
  } else {
    contents = detail::parse_cache_file(text);
  }
  switch (contents.status) {
    case cache_file_status::ok:
    case cache_file_status::empty:
      if (contents.skipped) {
        out.warnings.push_back("skipped " + std::to_string(contents.skipped) + " bad entr" +
                               (contents.skipped == 1 ? "y" : "ies") + " (" + contents.problem + ")");
      }
      for (auto& e : contents.entries) {
        auto k = tie_key(e.key);
        out.entries.insert_or_assign(std::move(k), std::move(e));
      }
      break;
    case cache_file_status::corrupt:
      out.warnings.push_back("ignored: " + contents.problem +
                             (mode == cache_file_mode::frozen ? "" : "; it will be replaced"));
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

// Under config. Writes what the file in use still has pending (bounded wait), before another file (or
// the same one again) is read.
void flush_before_switch(cache_file& f) {
  std::unique_lock lk(f.memory);
  if (!f.open || flush_locked(f, lk, close_wait) || !f.writable) return;
  const std::string path = f.path;
  const std::size_t left = f.pending.size() + f.in_flight.size();
  lk.unlock();
  warn(path, std::to_string(left) + " plan(s) not written before the file was closed: its lock stayed held");
}

// Under config. Installs `next` (or no file). Returns the warnings of the load.
std::vector<std::string> switch_file(cache_file& f, const std::string& path, cache_file_mode mode,
                                     loaded_file* next) {
  std::unique_lock lk(f.memory);
  ++f.generation;
  f.pending.clear();
  f.in_flight.clear();
  f.stored = f.written = 0;
  f.not_before = {};
  f.lock_warned = false;
  f.failure.clear();
  f.open = next != nullptr;
  if (next) {
    f.path = path;
    f.real = std::move(next->real);
    f.mode = mode;
    f.writable = next->writable && mode == cache_file_mode::read_write;
    f.max_bytes = next->max_bytes;
    f.max_entries = next->max_entries;
    f.entries = std::move(next->entries);
    f.seed = f.writable ? std::move(next->view) : disk_view{};
  } else {
    f.seed = disk_view{};
    f.path.clear();
    f.real.clear();
    f.entries.clear();
    f.writable = false;
  }
  f.done.notify_all();
  f.work.notify_all();
  lk.unlock();
  return next ? std::move(next->warnings) : std::vector<std::string>{};
}

void open_locked(cache_file& f, const std::string& path, cache_file_mode mode,
                 std::vector<std::string> extra = {}) {
  flush_before_switch(f);
  loaded_file next = load(path, mode);
  for (auto& w : extra) next.warnings.push_back(std::move(w));
  for (const auto& w : switch_file(f, path, mode, &next)) warn(path, w);
}

void ensure_env(cache_file& f) {
  if (f.env_checked.load(std::memory_order_acquire)) return;
  std::lock_guard lock(f.config);
  if (f.env_checked.load(std::memory_order_relaxed)) return;
  const char* file = std::getenv("LAUNCHFIT_CACHE");
  if (file && *file) {
    cache_file_mode m = cache_file_mode::read_write;
    const char* mode_env = std::getenv("LAUNCHFIT_CACHE_MODE");
    const std::string mode_name = mode_env ? mode_env : "";
    std::vector<std::string> extra;
    if (mode_name == "frozen") {
      m = cache_file_mode::frozen;
    } else if (!mode_name.empty() && mode_name != "read_write") {
      m = cache_file_mode::frozen;  // a typo must not start writing to a file meant to be read only
      extra.push_back("LAUNCHFIT_CACHE_MODE='" + detail::safe_text(mode_name, 64) +
                      "' is neither read_write nor frozen; using frozen");
    }
    open_locked(f, file, m, std::move(extra));
  }
  f.env_checked.store(true, std::memory_order_release);
}

}  // namespace

namespace {

// Whether the open file holds a calibration: bytes_in_flight's default target, which no plan key holds.
bool holds_calibration(cache_file& f) {
  std::lock_guard lock(f.memory);
  for (const auto& [k, e] : f.entries)
    if (e.bytes_in_flight_per_sm != 0) return true;
  return false;
}

}  // namespace

void set_cache_file(const std::string& path, cache_file_mode mode) {
  auto& f = state();
  std::lock_guard lock(f.config);
  f.env_checked.store(true, std::memory_order_release);
  const bool had = holds_calibration(f);
  open_locked(f, path, mode);
  // Plans made under another bytes-in-flight default would be stale: planned again.
  if (had || holds_calibration(f)) detail::forget_all_plans();
}

void close_cache_file() {
  auto& f = state();
  std::lock_guard lock(f.config);
  f.env_checked.store(true, std::memory_order_release);
  flush_before_switch(f);
  const bool had = holds_calibration(f);
  switch_file(f, "", cache_file_mode::read_write, nullptr);
  if (had) detail::forget_all_plans();  // plans made with its calibrated target
}

bool flush_cache_file(unsigned max_wait_ms) {
  auto& f = state();
  ensure_env(f);
  std::unique_lock lk(f.memory);
  return flush_locked(f, lk, milliseconds(max_wait_ms));
}

void set_cache_match(cache_match m) {
  match_setting& s = match_state();
  std::lock_guard lock(s.m);
  s.value.store(static_cast<int>(m), std::memory_order_release);
}

cache_match cache_file_match() { return current_match(); }

namespace {

// The best entry `accept` allows: the nearest bucket, then the nearest driver (an older one on a tie),
// then the newest entry, then the smallest UUID, so every process picks the same plan from the same file.
template <class Accept>
const stored_entry* best_entry(const std::map<key_tuple, stored_entry>& entries, const stored_key& key,
                               Accept accept) {
  using rank = std::tuple<std::uint64_t, long long, bool, std::uint64_t, std::string_view>;
  auto rank_of = [&](const stored_entry& e) {
    const std::uint64_t b = e.key.bucket > key.bucket ? e.key.bucket - key.bucket : key.bucket - e.key.bucket;
    const long long d = static_cast<long long>(e.key.driver_version) - key.driver_version;
    return rank{b, d < 0 ? -d : d, d > 0, ~e.stored_at_ms, e.key.device_uuid};
  };
  const stored_entry* best = nullptr;
  rank best_rank{};
  for (const auto& [k, e] : entries) {
    if (!accept(e.key)) continue;
    const rank r = rank_of(e);
    if (!best || r < best_rank) {
      best = &e;
      best_rank = r;
    }
  }
  return best;
}

}  // namespace

std::optional<plan> find_stored_plan(const stored_key& key, bool exact_bucket) {
  auto& f = state();
  ensure_env(f);
  const bool model = current_match() == cache_match::model;
  std::lock_guard lock(f.memory);
  if (!f.open) return std::nullopt;
  auto found = [](const stored_entry* e, const char* match) -> std::optional<plan> {
    if (!e) return std::nullopt;
    plan p = e->plan;
    p.match = match;
    return p;
  };
  if (const auto it = f.entries.find(tie_key(key)); it != f.entries.end())
    return found(&it->second, "cache-file");
  if (model) {
    const stored_entry* e = best_entry(f.entries, key, [&](const stored_key& k) {
      return k.bucket == key.bucket && same_launch_key(k, key) && same_device_model(k, key);
    });
    if (e) return found(e, "cache-file-same-model");
  }
  if (exact_bucket) return std::nullopt;
  // Another size bucket of the same kernel and policy: the nearest bucket is the best guess.
  if (const stored_entry* e =
          best_entry(f.entries, key, [&](const stored_key& k) { return same_but_bucket(k, key); })) {
    return found(e, "cache-file-other-bucket");
  }
  if (!model) return std::nullopt;
  return found(
      best_entry(f.entries, key,
                 [&](const stored_key& k) { return same_launch_key(k, key) && same_device_model(k, key); }),
      "cache-file-same-model-other-bucket");
}

namespace {

// Makes an entry visible to lookups at once and queues it for the writer. False where nothing is stored
// (no file, or a frozen one).
bool enqueue(cache_file& f, detail::stored_entry e) {
  auto k = tie_key(e.key);
  std::lock_guard lock(f.memory);
  if (!f.open || f.mode == cache_file_mode::frozen) return false;
  f.entries.insert_or_assign(k, e);
  ++f.stored;
  if (!f.writable) return true;
  const bool first = f.pending.empty();
  f.pending.insert_or_assign(std::move(k), std::move(e));
  const auto soon = steady::now() + batch_delay;
  if (first && f.not_before < soon) f.not_before = soon;
  f.ensure_writer();
  f.work.notify_one();
  return true;
}

stored_key calibration_key(const device_limits& dev, int driver_version) {
  stored_key k = stored_key_for(dev, driver_version, kernel_resources{}, detail::calibration_policy, "", 0);
  k.kernel = detail::calibration_kernel;
  return k;
}

}  // namespace

std::optional<std::size_t> find_calibration(const device_limits& dev, int driver_version) {
  auto& f = state();
  ensure_env(f);
  const stored_key key = calibration_key(dev, driver_version);
  const bool model = current_match() == cache_match::model;
  std::lock_guard lock(f.memory);
  if (!f.open) return std::nullopt;
  if (const auto it = f.entries.find(tie_key(key)); it != f.entries.end() && it->second.bytes_in_flight_per_sm)
    return static_cast<std::size_t>(it->second.bytes_in_flight_per_sm);
  const stored_entry* e = best_entry(f.entries, key, [&](const stored_key& k) {
    return k.kernel == detail::calibration_kernel && k.policy == detail::calibration_policy &&
           (k.device_uuid == key.device_uuid || (model && same_device_model(k, key)));
  });
  if (!e || e->bytes_in_flight_per_sm == 0) return std::nullopt;
  return static_cast<std::size_t>(e->bytes_in_flight_per_sm);
}

void store_calibration(const device_limits& dev, int driver_version, std::size_t bytes_in_flight_per_sm) {
  if (bytes_in_flight_per_sm == 0 || bytes_in_flight_per_sm > (std::size_t(1) << 22)) {
    throw error("store_calibration", "LAUNCHFIT_INVALID_ARGUMENT",
                "bytes in flight per SM " + std::to_string(bytes_in_flight_per_sm) + " is not in 1..4 MiB");
  }
  auto& f = state();
  ensure_env(f);
  const stored_key key = calibration_key(dev, driver_version);
  detail::stored_entry e{key, plan{}, now_ms(), bytes_in_flight_per_sm};
  e.plan.block = dims{1, 1, 1};
  e.plan.block_threads = 1;
  e.plan.reason = "measured by launchfit-calibrate: " + std::to_string(bytes_in_flight_per_sm) + " B in flight per SM";
  if (enqueue(f, std::move(e))) detail::forget_all_plans();  // plans made under the previous default target
}

void store_bytes_in_flight_calibration(std::size_t bytes_per_sm) {
  store_calibration(device_limits::query_current(), detail::driver().version, bytes_per_sm);
}

std::optional<std::size_t> bytes_in_flight_calibration() {
  return find_calibration(device_limits::query_current(), detail::driver().version);
}

void store_plan(const stored_key& key, const plan& p) {
  auto& f = state();
  ensure_env(f);
  // A fallback plan (a plugin declined or failed) is not the policy's decision: stored, it would stop the
  // policy from being asked again in later runs (autotune declines launches it may not re-run).
  if (p.match == "fallback") return;
  stored_entry e{key, p, now_ms()};
  e.plan.match = "computed";
  enqueue(f, std::move(e));
}

bool cache_file_open() {
  auto& f = state();
  ensure_env(f);
  std::lock_guard lock(f.memory);
  return f.open;
}

std::size_t stored_plan_count() {
  auto& f = state();
  ensure_env(f);
  std::lock_guard lock(f.memory);
  return f.open ? f.entries.size() : 0;
}

}  // namespace launchfit

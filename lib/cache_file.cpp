// The persistent plan cache: a versioned JSON file shared by processes (LAUNCHFIT_CACHE).
//
// Writers take an advisory lock on "<file>.lock", merge what is on disk with what they hold, write a temp
// file in the same directory, fsync it and rename it over the file, so concurrent writers lose nothing
// and readers never see a partial file.

#include "cache_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_set>

#include "log_internal.hpp"
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
  const auto p = e.find("plan");
  if (p == e.end() || !p->is_object()) throw bad_entry("'plan' is not an object");
  out.plan = plan_from_json(*p);
  return out;
}

json entry_json(const stored_entry& e) {
  const stored_key& k = e.key;
  json plan = plan_to_json(e.plan);
  plan.erase("match");  // never read back: the reader says where a plan came from
  return {{"key",
           {{"device_uuid", k.device_uuid},
            {"cc", k.cc},
            {"sm_count", k.sm_count},
            {"driver_version", k.driver_version},
            {"kernel", k.kernel},
            {"policy", k.policy},
            {"smem_rule", k.smem_rule},
            {"bucket", k.bucket}}},
          {"plan", std::move(plan)}};
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
      if (out.skipped++ == 0) out.problem = "entry " + std::to_string(i) + ": " + e.what();
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

namespace {

using detail::cache_file_status;
using detail::stored_entry;

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

enum class read_result { ok, missing, unreadable };

// Which version of the file we last read or wrote: every write renames a new inode into place, so an
// unchanged identity means nobody else wrote since, and the merge can skip parsing the file again.
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

read_result read_file(const std::string& path, std::string& text, std::string& why, file_identity& id) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return read_result::missing;
    why = std::strerror(errno);
    return read_result::unreadable;
  }
  text.clear();
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::strerror(errno);
      ::close(fd);
      return read_result::unreadable;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  struct stat st {};
  id = ::fstat(fd, &st) == 0 ? identity_of(st) : file_identity{};
  ::close(fd);
  return read_result::ok;
}

struct cache_file {
  std::mutex mutex;
  bool env_checked = false;  // LAUNCHFIT_CACHE is consulted once, unless set_cache_file/close came first
  bool open = false;
  std::string path;
  cache_file_mode mode = cache_file_mode::read_write;
  bool writable = true;  // false after a failed write or for a file that is not ours to replace
  struct held {
    stored_entry entry;
    std::string line;  // as written to the file
  };
  std::map<key_tuple, held> entries;
  unsigned temp_counter = 0;
  file_identity known;  // the file as we last read or wrote it

  void warn(const std::string& what) { detail::logger()->warn("plan cache file {}: {}", path, what); }

  void add(stored_entry&& e, bool overwrite) {
    auto key = tie_key(e.key);
    if (!overwrite && entries.count(key)) return;
    std::string line = detail::cache_file_line(e);
    entries.insert_or_assign(std::move(key), held{std::move(e), std::move(line)});
  }
  void merge(std::vector<stored_entry>&& loaded, bool overwrite) {
    for (auto& e : loaded) add(std::move(e), overwrite);
  }

  void open_file(const std::string& file, cache_file_mode m) {
    path = file;
    mode = m;
    open = true;
    writable = true;
    entries.clear();
    known = {};
    std::string text, why;
    const read_result r = read_file(path, text, why, known);
    if (r == read_result::missing) return;  // created on first write
    if (r == read_result::unreadable) {
      warn("cannot read it (" + why + "); plans are kept in memory only");
      writable = false;
      return;
    }
    auto contents = detail::parse_cache_file(text);
    switch (contents.status) {
      case cache_file_status::ok:
      case cache_file_status::empty:
        if (contents.skipped) {
          warn("skipped " + std::to_string(contents.skipped) + " bad entr" +
               (contents.skipped == 1 ? "y" : "ies") + " (" + contents.problem + ")");
        }
        merge(std::move(contents.entries), true);
        return;
      case cache_file_status::corrupt:
        warn("ignored: " + contents.problem +
             (mode == cache_file_mode::frozen ? "" : "; it will be replaced"));
        return;
      case cache_file_status::foreign:
      case cache_file_status::wrong_version:
        warn("ignored and left untouched: " + contents.problem + "; plans are kept in memory only");
        writable = false;
        return;
    }
  }

  void ensure_env() {
    if (env_checked) return;
    env_checked = true;
    const char* file = std::getenv("LAUNCHFIT_CACHE");
    if (!file || !*file) return;
    cache_file_mode m = cache_file_mode::read_write;
    const char* mode_env = std::getenv("LAUNCHFIT_CACHE_MODE");
    const std::string mode_name = mode_env ? mode_env : "";
    if (mode_name == "frozen") {
      m = cache_file_mode::frozen;
    } else if (!mode_name.empty() && mode_name != "read_write") {
      m = cache_file_mode::frozen;  // a typo must not start writing to a file meant to be read only
      open_file(file, m);
      warn("LAUNCHFIT_CACHE_MODE='" + mode_name + "' is neither read_write nor frozen; using frozen");
      return;
    }
    open_file(file, m);
  }

  // Merges with the file under its lock and replaces it atomically. On failure: one warning, and plans
  // stay in memory from then on.
  void write() {
    auto give_up = [&](const std::string& why) {
      warn("cannot write it (" + why + "); plans are kept in memory only");
      writable = false;
    };
    const std::string lock_path = path + ".lock";
    const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock_fd < 0) return give_up(lock_path + ": " + std::strerror(errno));
    struct unlocker {
      int fd;
      ~unlocker() { ::close(fd); }  // also releases the flock
    } unlock{lock_fd};
    while (::flock(lock_fd, LOCK_EX) != 0) {
      if (errno != EINTR) return give_up(std::string("flock: ") + std::strerror(errno));
    }

    struct stat st {};
    const bool unchanged = ::stat(path.c_str(), &st) == 0 && identity_of(st) == known;
    std::string text, why;
    const read_result r = unchanged ? read_result::missing : read_file(path, text, why, known);
    if (r == read_result::unreadable) return give_up(why);
    if (r == read_result::ok) {
      // What we hold wins for the same key. Lines we hold already need no parsing (the common case
      // when several processes write the same file).
      std::unordered_set<std::string_view> lines;
      for (const auto& [key, h] : entries) lines.insert(h.line);
      std::vector<stored_entry> added;
      if (detail::parse_cache_file_lines(
              text, [&](std::string_view line) { return lines.count(line) > 0; }, added)) {
        merge(std::move(added), false);
      } else {
        auto contents = detail::parse_cache_file(text);
        if (contents.status == cache_file_status::foreign ||
            contents.status == cache_file_status::wrong_version) {
          return give_up("it was replaced by something else: " + contents.problem);
        }
        merge(std::move(contents.entries), false);
      }
    }

    // serialize_cache_file(), from the lines we keep.
    std::string out = detail::file_head();
    std::size_t i = 0;
    for (const auto& [key, h] : entries) out.append(h.line).append(++i < entries.size() ? ",\n" : "\n");
    out += detail::file_tail;

    const std::string temp =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter++);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return give_up(temp + ": " + std::strerror(errno));
    std::size_t done = 0;
    bool ok = true;
    while (ok && done < out.size()) {
      const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += static_cast<std::size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0 && ::fstat(fd, &st) == 0;
    const int saved = errno;
    ok = (::close(fd) == 0) && ok;
    if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
      const std::string reason = std::strerror(ok ? errno : saved);
      ::unlink(temp.c_str());
      return give_up(reason);
    }
    // The directory is not fsynced: after a crash the file is the old or the new version, never a
    // mix, and a cache may lose its newest plans.
    known = identity_of(st);
  }
};

cache_file& state() {
  static cache_file f;
  return f;
}

}  // namespace

void set_cache_file(const std::string& path, cache_file_mode mode) {
  auto& f = state();
  std::lock_guard lock(f.mutex);
  f.env_checked = true;
  f.open_file(path, mode);
}

void close_cache_file() {
  auto& f = state();
  std::lock_guard lock(f.mutex);
  f.env_checked = true;
  f.open = false;
  f.entries.clear();
  f.path.clear();
}

std::optional<plan> find_stored_plan(const stored_key& key, bool exact) {
  auto& f = state();
  std::lock_guard lock(f.mutex);
  f.ensure_env();
  if (!f.open) return std::nullopt;
  if (const auto it = f.entries.find(tie_key(key)); it != f.entries.end()) {
    plan p = it->second.entry.plan;
    p.match = "cache-file";
    return p;
  }
  if (exact) return std::nullopt;
  // Another size bucket of the same kernel and policy: the nearest bucket is the best guess.
  const stored_entry* best = nullptr;
  auto distance = [&](std::uint64_t b) { return b > key.bucket ? b - key.bucket : key.bucket - b; };
  for (const auto& [k, h] : f.entries) {
    const stored_key& other = h.entry.key;
    if (same_but_bucket(other, key) && (!best || distance(other.bucket) < distance(best->key.bucket))) {
      best = &h.entry;
    }
  }
  if (!best) return std::nullopt;
  plan p = best->plan;
  p.match = "cache-file-other-bucket";
  return p;
}

void store_plan(const stored_key& key, const plan& p) {
  auto& f = state();
  std::lock_guard lock(f.mutex);
  f.ensure_env();
  // A fallback plan (a plugin declined or failed) is not the policy's decision: stored, it would stop the
  // policy from being asked again in later runs (autotune declines launches it may not re-run).
  if (!f.open || f.mode == cache_file_mode::frozen || p.match == "fallback") return;
  stored_entry e{key, p};
  e.plan.match = "computed";
  f.add(std::move(e), true);
  if (f.writable) f.write();
}

bool cache_file_open() {
  auto& f = state();
  std::lock_guard lock(f.mutex);
  f.ensure_env();
  return f.open;
}

std::size_t stored_plan_count() {
  auto& f = state();
  std::lock_guard lock(f.mutex);
  f.ensure_env();
  return f.open ? f.entries.size() : 0;
}

}  // namespace launchfit

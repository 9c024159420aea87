// SPDX-License-Identifier: MIT
// The one place launchfit reads its environment (settings.hpp). tests/lint/getenv.cmake keeps it so.

#include "settings.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "env_switch.hpp"
#include "log_internal.hpp"
#include "plan_file_format.hpp"
#include "plan_merge.hpp"
#include "store/kv_scheme.hpp"  // remote_default_ttl_s: LAUNCHFIT_REMOTE_TTL's default
#include "text.hpp"

namespace launchfit::detail {
namespace {

constexpr std::string_view level_words = "trace, debug, info, warn, error, critical, off";

// Each value read is kept whole with its own flag, so that a reload for tests never touches a value another
// thread may be reading. Never destroyed.
struct settings_holder {
  settings value;
  std::atomic<bool> reported{false};    // its warnings were logged
  settings_holder* replaced = nullptr;  // the value it replaced (tests), kept reachable: a reader may hold it
};

// Constant-initialised and trivially destructible: valid at any point of the process's life.
std::atomic<settings_holder*> current_holder{nullptr};
std::once_flag first_read;
std::atomic<std::uint64_t> reads{0};

const char* process_environment(const char* name, void*) { return std::getenv(name); }

settings_holder* read_environment() {
  auto* h = new settings_holder{read_settings(&process_environment, nullptr), {false}, nullptr};
  reads.fetch_add(1, std::memory_order_relaxed);
  return h;
}

std::string_view trimmed(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool same_word(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

// A password file: a regular file of at most remote_password_file_bytes holding one line (its end of line
// dropped), read without following a FIFO or a device. nullopt with `why` (never quoting the file's text).
std::optional<std::string> read_password_file(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    why = "cannot be opened (" + errno_text(errno) + ")";
    return std::nullopt;
  }
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "is not a regular file";
  } else {
    char buf[remote_password_file_bytes + 1];
    std::size_t got = 0;
    while (got < sizeof buf) {
      const ssize_t n = ::read(fd, buf + got, sizeof buf - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    if (got > remote_password_file_bytes) {
      why = "is larger than " + std::to_string(remote_password_file_bytes) + " bytes";
    } else {
      text.assign(buf, got);
    }
  }
  ::close(fd);
  if (!why.empty()) return std::nullopt;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) {
    why = "is empty";
    return std::nullopt;
  }
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      why = "holds more than one line or a control character";
      return std::nullopt;
    }
  }
  return text;
}

// Reads the variables one at a time, collecting the warnings.
class reader {
 public:
  reader(environment_lookup lookup, void* context, std::vector<setting_warning>& warnings)
      : lookup_(lookup), context_(context), warnings_(warnings) {}

  // The variable's value; nullopt when unset or empty.
  std::optional<std::string_view> value(const char* name) const {
    const char* v = lookup_(name, context_);
    if (!v || !*v) return std::nullopt;
    return std::string_view(v);
  }

  std::string text(const char* name) const {
    const auto v = value(name);
    return v ? std::string(*v) : std::string();
  }

  std::uint64_t number(const char* name, std::uint64_t fallback, std::uint64_t max, const char* unit) {
    const auto v = value(name);
    if (!v) return fallback;
    if (const auto n = parse_number(*v, 1, max)) return *n;
    warn(name, *v, "is not a number of " + std::string(unit) + " in 1.." + std::to_string(max),
         std::to_string(fallback));
    return fallback;
  }

  bool on_off(const char* name, bool fallback) {
    const auto v = value(name);
    if (!v) return fallback;
    if (const auto on = parse_switch(*v)) return *on;
    warn(name, *v, "is not a switch (valid: " + std::string(switch_words) + ")", fallback ? "on" : "off");
    return fallback;
  }

  // One of two words; unset: `unset`; anything else: `safe` (which must be one of them).
  template <class E>
  E either(const char* name, E unset, std::string_view word0, E value0, std::string_view word1, E value1,
           E safe) {
    const auto v = value(name);
    if (!v) return unset;
    if (const auto i = parse_word(*v, {word0, word1})) return *i == 0 ? value0 : value1;
    warn(name, *v, "is neither " + std::string(word0) + " nor " + std::string(word1),
         std::string(safe == value0 ? word0 : word1));
    return safe;
  }

  void warn(std::string_view name, std::string_view v, const std::string& why, const std::string& fallback) {
    warnings_.push_back({std::string(name), std::string(v.substr(0, setting_value_cap)),
                         setting_warning_text(name, v, why, fallback)});
  }

 private:
  environment_lookup lookup_;
  void* context_;
  std::vector<setting_warning>& warnings_;
};

std::optional<log_level_setting> parse_level(std::string_view v) {
  using L = log_level_setting;
  static constexpr L levels[] = {L::trace, L::debug, L::info,     L::warn, L::warn,
                                 L::err,   L::err,   L::critical, L::off};
  const auto i =
      parse_word(v, {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"});
  if (!i) return std::nullopt;
  return levels[*i];
}

std::string level_text(log_level_setting l) {
  static constexpr std::string_view names[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  return std::string(names[static_cast<std::size_t>(l)]);
}

// LAUNCHFIT_LOG_LEVEL, else SPDLOG_LEVEL's entry for the launchfit logger ("info,launchfit=debug"), else its
// bare level. A refused value is named once its fallback is known.
void read_log_level(reader& r, settings& s) {
  std::optional<log_level_setting> level;
  std::vector<std::pair<std::string_view, std::string>> refused;  // variable's value, why
  const auto ours = r.value("LAUNCHFIT_LOG_LEVEL");
  if (ours) {
    level = parse_level(*ours);
    if (!level) refused.emplace_back(*ours, "");
  }
  const auto spdlog_level = r.value("SPDLOG_LEVEL");
  if (spdlog_level && !level) {
    std::optional<log_level_setting> bare, named;
    std::string_view rest = *spdlog_level;
    while (true) {
      const std::size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        if (!trimmed(item).empty()) {
          if (const auto l = parse_level(item)) {
            bare = l;
          } else {
            refused.emplace_back(*spdlog_level, std::string(item));
          }
        }
      } else if (same_word(trimmed(item.substr(0, eq)), "launchfit")) {
        if (const auto l = parse_level(item.substr(eq + 1))) {
          named = l;
        } else {
          refused.emplace_back(*spdlog_level, std::string(item));
        }
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    level = named ? named : bare;
  }
  s.log.level = level.value_or(log_level_setting::info);
  // The first few refused items are named, one warning each; the rest counted in one (10,000 bad items logged
  // 10,000 warnings).
  constexpr std::size_t named_at_most = 4;
  if (refused.size() > named_at_most) {
    const std::size_t more = refused.size() - named_at_most;
    refused.resize(named_at_most);
    r.warn("SPDLOG_LEVEL", *spdlog_level,
           std::to_string(more) + " more items are not levels (the first " + std::to_string(named_at_most) +
               " are named)",
           level_text(s.log.level));
  }
  for (const auto& [v, entry] : refused) {
    if (entry.empty()) {
      r.warn("LAUNCHFIT_LOG_LEVEL", v, "is not a level (valid: " + std::string(level_words) + ")",
             level_text(s.log.level));
    } else {
      r.warn("SPDLOG_LEVEL", v,
             "holds " + quote_text(entry, setting_shown_bytes, '\'') +
                 ", which is not a level (valid: " + std::string(level_words) + ")",
             level_text(s.log.level));
    }
  }
}

}  // namespace

std::optional<std::uint64_t> parse_number(std::string_view text, std::uint64_t min,
                                          std::uint64_t max) noexcept {
  if (text.empty()) return std::nullopt;
  std::uint64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (digit > max || n > (max - digit) / 10) return std::nullopt;  // above max, so never past 2^64
    n = n * 10 + digit;
  }
  if (n < min) return std::nullopt;
  return n;
}

std::optional<std::size_t> parse_word(std::string_view text,
                                      std::initializer_list<std::string_view> words) noexcept {
  const std::string_view t = trimmed(text);
  std::size_t i = 0;
  for (const std::string_view w : words) {
    if (same_word(t, w)) return i;
    ++i;
  }
  return std::nullopt;
}

std::string setting_warning_text(std::string_view variable, std::string_view value, std::string_view why,
                                 std::string_view fallback) {
  std::string out = escape_text(variable, setting_shown_bytes);
  out += '=';
  out += quote_text(value, setting_shown_bytes, '\'');
  out += ' ';
  out += why;
  out += "; using ";
  out += fallback;
  return out;
}

settings read_settings(environment_lookup lookup, void* context) {
  settings s;
  reader r(lookup, context, s.warnings);
  s.plugins.paths = r.text("LAUNCHFIT_PLUGINS");
  s.plugins.fallback = r.on_off("LAUNCHFIT_PLUGIN_FALLBACK", false);
  s.policy_overrides = r.text("LAUNCHFIT_POLICY");
  s.cache.file = r.text("LAUNCHFIT_CACHE");
  // A typo must not start writing to a file meant to be read only, nor widen what a production job accepts.
  s.cache.mode =
      r.either("LAUNCHFIT_CACHE_MODE", cache_file_mode::read_write, "read_write", cache_file_mode::read_write,
               "frozen", cache_file_mode::frozen, cache_file_mode::frozen);
  s.cache.match = r.either("LAUNCHFIT_CACHE_MATCH", cache_match::model, "exact", cache_match::exact, "model",
                           cache_match::model, cache_match::exact);
  s.cache.max_bytes = static_cast<std::size_t>(
      r.number("LAUNCHFIT_CACHE_MAX_BYTES", cache_file_default_max_bytes, cache_max_bytes_limit, "bytes"));
  s.cache.max_entries = static_cast<std::size_t>(
      r.number("LAUNCHFIT_CACHE_MAX_ENTRIES", default_max_entries, cache_max_entries_limit, "entries"));
  s.remote.url = r.text("LAUNCHFIT_REMOTE");
  s.remote.ttl_s = r.number("LAUNCHFIT_REMOTE_TTL", remote_default_ttl_s, remote_ttl_limit_s, "seconds");
  // The store's password kept out of the URL. Never in a warning: a warning names the file, not its text.
  s.remote.password = r.text("LAUNCHFIT_REDIS_PASSWORD");
  if (const auto file = r.value("LAUNCHFIT_REDIS_PASSWORD_FILE"); file && s.remote.password.empty()) {
    std::string why;
    if (std::optional<std::string> pw = read_password_file(std::string(*file), why)) {
      s.remote.password = std::move(*pw);
    } else {
      r.warn("LAUNCHFIT_REDIS_PASSWORD_FILE", *file, why, "no password");
    }
  }
  read_log_level(r, s);
  s.log.format = r.either("LAUNCHFIT_LOG_FORMAT", log_format::text, "text", log_format::text, "json",
                          log_format::json, log_format::text);
  if (r.value("LAUNCHFIT_LOG_ASYNC")) {
    const std::size_t before = s.warnings.size();
    s.log.async = r.on_off("LAUNCHFIT_LOG_ASYNC", true);
    s.log.async_set = s.warnings.size() == before;
  }
  s.nvtx = r.on_off("LAUNCHFIT_NVTX", true);
  s.nvtx_tool_attached = r.value("NVTX_INJECTION64_PATH").has_value();
  // With blocking launches (CUDA_LAUNCH_BLOCKING, or a profiler that serialises them) a stream held by a
  // tuning gate would wait for ever: any value but 0 means blocking, as the CUDA runtime reads it.
  const auto blocking = r.value("CUDA_LAUNCH_BLOCKING");
  s.cuda_launch_blocking = blocking && *blocking != "0";
  return s;
}

const settings& current_settings() {
  if (const settings_holder* h = current_holder.load(std::memory_order_acquire)) return h->value;
  std::call_once(first_read, [] { current_holder.store(read_environment(), std::memory_order_release); });
  return current_holder.load(std::memory_order_acquire)->value;
}

void report_settings_warnings() noexcept {
  settings_holder* h = current_holder.load(std::memory_order_acquire);
  if (!h) {
    try {
      (void)current_settings();
    } catch (...) {  // out of memory: nothing was read, nothing to say
      return;
    }
    h = current_holder.load(std::memory_order_acquire);
  }
  if (h->reported.load(std::memory_order_acquire) || h->reported.exchange(true)) return;
  if (h->value.warnings.empty()) return;
  // The text line names the variable and shows the value already; a JSON line carries them as fields too.
  bool json = false;
  try {
    json = current_log_format() == log_format::json;
  } catch (...) {
  }
  for (const setting_warning& w : h->value.warnings) {
    if (json) {
      log_event(spdlog::level::warn, "bad_environment", w.message,
                {{"variable", w.variable}, {"value", w.value}});
    } else {
      log_event(spdlog::level::warn, "bad_environment", w.message);
    }
  }
}

const settings& settings_reload_for_tests() {
  (void)current_settings();  // the first read is done, so it cannot replace this one later
  settings_holder* h = read_environment();
  h->replaced = current_holder.load(std::memory_order_acquire);
  while (!current_holder.compare_exchange_weak(h->replaced, h, std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
  }
  return h->value;
}

std::uint64_t settings_reads_for_tests() noexcept { return reads.load(std::memory_order_relaxed); }

}  // namespace launchfit::detail

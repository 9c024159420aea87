// SPDX-License-Identifier: MIT
// launchfit's logger: a front logger named "launchfit" whose one sink makes every message one safe line
// (escaped text, or one JSON object) and routes it to stderr or to the user's logger, synchronously or
// through a bounded queue drained by a logging thread.

#include "launchfit/log.hpp"

#include <pthread.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "async_sink.hpp"
#include "env_switch.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "stderr_sink.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {
namespace {

constexpr const char* logger_name = "launchfit";
// Text lines are logfmt: key=value, one quoting rule (logfmt_value), the message in msg. %* and %~ are
// launchfit's flags (below): the RFC 3339 time and the quoted message.
constexpr const char* text_pattern = "time=%* level=%l logger=%n pid=%P msg=%~";
constexpr const char* json_pattern = "%v";
// A message that is already one launchfit JSON object carries this file name (compared by address, so no
// message text can claim it); line 0 keeps it out of any %s/%@ pattern field.
constexpr const char json_marker[] = "launchfit:json";
constexpr std::size_t line_cap = 64 * 1024;        // any one message, escaped or wrapped
// A wait for the logging thread (at exit and fork, or in flush()) gives up only on a stuck output, never on
// a slow one or a thread short of CPU: when the thread has written no line for this long, or after wait_cap
// in all.
constexpr auto exit_write_wait = std::chrono::milliseconds(500);
constexpr auto flush_wait = std::chrono::seconds(1);
constexpr auto wait_cap = std::chrono::seconds(10);
constexpr const char* valid_levels = "trace, debug, info, warn, error, critical, off";

std::string dump_json(const nlohmann::json& j) {
  // ensure_ascii: no raw control, bidirectional or other non-ASCII character reaches a terminal.
  return j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

// RFC 3339 in UTC with microseconds: 2026-12-03T20:41:07.123456Z.
std::string rfc3339_utc(spdlog::log_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000 - (us % 1000000 < 0 ? 1 : 0));
  const long frac = static_cast<long>(((us % 1000000) + 1000000) % 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char out[96];  // room for any int year, so the compiler sees nothing cut
  std::snprintf(out, sizeof out, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return out;
}

// %*: the line's time, RFC 3339 (spdlog's own time flags are local time and at most nanoseconds as digits).
class rfc3339_flag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& m, const std::tm&, spdlog::memory_buf_t& out) override {
    const std::string t = rfc3339_utc(m.time);
    out.append(t.data(), t.data() + t.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<rfc3339_flag>(); }
};

// %~: the message as one logfmt value.
class logfmt_message_flag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& m, const std::tm&, spdlog::memory_buf_t& out) override {
    // Capped already (render()): quoted whole, so the "...(N bytes)" it may end in stays the full length.
    const std::string v = logfmt_value(std::string_view(m.payload.data(), m.payload.size()), 2 * line_cap);
    out.append(v.data(), v.data() + v.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<logfmt_message_flag>();
  }
};

std::unique_ptr<spdlog::formatter> make_formatter(log_format f) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<rfc3339_flag>('*').add_flag<logfmt_message_flag>('~');
  formatter->set_pattern(f == log_format::json ? json_pattern : text_pattern);
  return formatter;
}

std::string level_name(spdlog::level::level_enum l) {
  const auto v = spdlog::level::to_string_view(l);
  return std::string(v.data(), v.size());
}

// A message that is not a launchfit JSON object, as one.
std::string wrap_json(spdlog::level::level_enum level, std::string_view payload) {
  return dump_json(
      {{"level", level_name(level)}, {"logger", logger_name}, {"msg", valid_utf8(payload, line_cap)}});
}

// Text value of a key=value field: quoted when it holds a space, '"', '=' or nothing.
std::string field_value(std::string_view v) {
  std::string e = escape_text(v, log_field_cap);
  if (e.empty() || e.find_first_of(" \"=") != std::string::npos) return quote_text(v, log_field_cap);
  return e;
}

struct event_payload {
  std::string text;
  bool json = false;
};

event_payload build_event(spdlog::level::level_enum level, std::string_view event, std::string_view message,
                          std::initializer_list<log_field> fields, log_format f) {
  if (f == log_format::json) {
    nlohmann::json j = {{"level", level_name(level)},
                        {"logger", logger_name},
                        {"event", valid_utf8(event, log_field_cap)},
                        {"msg", valid_utf8(message, log_field_cap)}};
    for (const auto& [k, v] : fields) {
      const std::string key = valid_utf8(k, 256);
      if (!j.contains(key) && key != "time" && key != "pid") j[key] = valid_utf8(v, log_field_cap);
    }
    return {dump_json(j), true};
  }
  std::string s = escape_line(message, log_field_cap);  // launchfit wrote it, escaping what it quotes
  for (const auto& [k, v] : fields) s += " " + escape_text(k, 256) + "=" + field_value(v);
  return {std::move(s), false};
}

// ---- environment ----

std::string lower_trimmed(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  std::string s(v);
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::optional<spdlog::level::level_enum> parse_level(std::string_view v) {
  const std::string s = lower_trimmed(v);
  using namespace spdlog::level;
  if (s == "trace") return trace;
  if (s == "debug") return debug;
  if (s == "info") return info;
  if (s == "warn" || s == "warning") return warn;
  if (s == "error" || s == "err") return err;
  if (s == "critical") return critical;
  if (s == "off") return off;
  return std::nullopt;
}

struct env_warning {
  std::string variable, value, message;
};

struct env_config {
  spdlog::level::level_enum level = spdlog::level::info;
  log_format format = log_format::text;
  bool async = true;  // a launch never formats nor writes a line: LAUNCHFIT_LOG_ASYNC=0 writes on the caller
  bool async_set = false;  // LAUNCHFIT_LOG_ASYNC said so (then it holds for a user's logger too)
  std::vector<env_warning> warnings;
};

const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;  // empty means unset (VAR= command)
}

env_config read_env() {
  env_config c;
  std::vector<std::pair<std::string, std::string>> bad_levels;  // variable, value as written
  std::optional<spdlog::level::level_enum> level;
  if (const char* v = env_value("LAUNCHFIT_LOG_LEVEL")) {
    level = parse_level(v);
    if (!level) bad_levels.emplace_back("LAUNCHFIT_LOG_LEVEL", v);
  }
  // SPDLOG_LEVEL="info,launchfit=debug": our entry (the last one), else the bare default level.
  if (const char* v = env_value("SPDLOG_LEVEL"); v && !level) {
    std::optional<spdlog::level::level_enum> bare, ours;
    const std::string s(v);
    std::size_t pos = 0;
    while (pos <= s.size()) {
      const std::size_t comma = std::min(s.find(',', pos), s.size());
      const std::string item = s.substr(pos, comma - pos);
      pos = comma + 1;
      const std::size_t eq = item.find('=');
      if (eq == std::string::npos) {
        if (lower_trimmed(item).empty()) continue;
        if (auto l = parse_level(item)) {
          bare = l;
        } else {
          bad_levels.emplace_back("SPDLOG_LEVEL", item);
        }
      } else if (lower_trimmed(item.substr(0, eq)) == logger_name) {
        if (auto l = parse_level(item.substr(eq + 1))) {
          ours = l;
        } else {
          bad_levels.emplace_back("SPDLOG_LEVEL", item);
        }
      }
    }
    level = ours ? ours : bare;
  }
  c.level = level.value_or(spdlog::level::info);
  for (const auto& [var, value] : bad_levels) {
    c.warnings.push_back({var, value,
                          var + (var == "SPDLOG_LEVEL" ? " entry " : "=") + quote_text(value) +
                              " is not a level (valid: " + valid_levels + "); ignored, launchfit logs at " +
                              level_name(c.level)});
  }
  if (const char* v = env_value("LAUNCHFIT_LOG_FORMAT")) {
    const std::string s = lower_trimmed(v);
    if (s == "json") {
      c.format = log_format::json;
    } else if (s != "text") {
      c.warnings.push_back({"LAUNCHFIT_LOG_FORMAT", v,
                            "LAUNCHFIT_LOG_FORMAT=" + quote_text(v) +
                                " is not a format (valid: text, json); ignored, launchfit logs text"});
    }
  }
  if (const char* v = env_value("LAUNCHFIT_LOG_ASYNC")) {
    if (const std::optional<bool> on = parse_switch(v)) {
      c.async = *on;
      c.async_set = true;
    } else {
      c.warnings.push_back({"LAUNCHFIT_LOG_ASYNC", v,
                            "LAUNCHFIT_LOG_ASYNC=" + quote_text(v, 64) + " is not a switch (valid: " +
                                switch_words + "); ignored, launchfit logs asynchronously"});
    }
  }
  return c;
}

// ---- output: where a line goes ----

struct route {
  std::shared_ptr<spdlog::logger> target;       // set_logger()'s logger, or null
  std::shared_ptr<spdlog::sinks::sink> output;  // launchfit's own output (stderr) when there is no target
};

thread_local int sink_depth = 0;  // > 0 while this thread is inside launchfit's sink (or writes for it)

class launchfit_sink;

struct log_state final : record_output {
  std::mutex mutex;        // configuration
  std::mutex route_mutex;  // target and output, read per line
  // Held while a line is written into the route (by a synchronous writer or the logging thread), so that a
  // fork can wait until no thread is inside an output (a sink's own lock). A pointer: a child replaces one
  // that a writer stuck on its output held at the fork.
  std::mutex* write_lock = new std::mutex;
  route current;
  std::shared_ptr<spdlog::logger> front;
  std::shared_ptr<launchfit_sink> sink;
  std::atomic<log_format> format{log_format::text};
  std::atomic<bool> async{false};
  // Asynchronous output by default covers launchfit's own output; a logger given to set_logger() gets lines
  // on the logging thread only when asked for (LAUNCHFIT_LOG_ASYNC or set_log_async): its sinks are the
  // user's, and so is their threading (spdlog has an asynchronous logger for that).
  std::atomic<bool> async_chosen{false};
  std::atomic<bool> user_route{false};  // user_target, read without the lock by the logging path
  std::atomic<bool> started{false};  // the logging thread was started as the environment says
  std::atomic<std::uint64_t> dropped{0};
  spdlog::level::level_enum default_level = spdlog::level::info;  // restored by set_logger(nullptr)
  bool user_target = false;
  std::set<std::string> spill_warned;
  std::atomic<bool> warnings_pending{false};
  std::vector<env_warning> warnings;
  async_sink queue{*this};
  bool exit_handler_registered = false;
  bool fork_write_locked = false;
  std::vector<void*> abandoned;  // locks a forked child replaced: never freed, kept reachable

  void write(const log_record& r) noexcept override;
  void flush() noexcept override;
  log_record drop_report(std::uint64_t n) override;
  std::mutex& write_mutex() noexcept override { return *write_lock; }
  void count_dropped(std::uint64_t n) noexcept override { dropped.fetch_add(n, std::memory_order_relaxed); }
};

// Whether a line goes to the logging thread (see log_state::async_chosen).
bool queues_lines(const log_state& s) {
  return s.async.load(std::memory_order_relaxed) &&
         (s.async_chosen.load(std::memory_order_relaxed) || !s.user_route.load(std::memory_order_relaxed));
}

route current_route(log_state& s) {
  std::lock_guard<std::mutex> lock(s.route_mutex);
  return s.current;
}

// A JSON line: the object with the line's time and the process id first (a child of fork() says its own).
std::string render_json(const log_record& r) {
  const std::string object = r.json ? r.payload : wrap_json(r.level, r.payload);
  std::string line = "{\"time\":\"" + rfc3339_utc(r.time) + "\",\"pid\":" + std::to_string(::getpid());
  line += object.size() > 2 ? "," + object.substr(1) : std::string("}");
  return line;
}

std::string render(const log_record& r, log_format f) {
  if (f == log_format::json) return render_json(r);
  return escape_line(r.payload, line_cap);
}

// Writes one record where launchfit's lines go now. May throw (a user's sink or error handler).
void write_record(log_state& s, const log_record& r) {
  if (r.plan) {  // a new plan's line, made here, on the logging thread, in the format in force
    const log_format f = s.format.load(std::memory_order_relaxed);
    write_record(s, log_record{r.level, r.time, r.thread_id, f == log_format::json, format_plan(*r.plan, f), nullptr});
    return;
  }
  const route rt = current_route(s);
  const std::string line = render(r, s.format.load(std::memory_order_relaxed));
  if (rt.target) {
    rt.target->log(r.time, spdlog::source_loc{}, r.level, spdlog::string_view_t(line.data(), line.size()));
  } else if (rt.output && rt.output->should_log(r.level)) {
    spdlog::details::log_msg m(r.time, spdlog::source_loc{}, logger_name, r.level,
                               spdlog::string_view_t(line.data(), line.size()));
    m.thread_id = r.thread_id;
    rt.output->log(m);
  }
}

void flush_route(log_state& s) {
  const route rt = current_route(s);
  if (rt.target) rt.target->flush();
  if (rt.output) rt.output->flush();
}

void log_state::write(const log_record& r) noexcept {
  ++sink_depth;  // a user sink that logs from here is dropped, not queued again forever
  try {
    write_record(*this, r);
  } catch (...) {
    dropped.fetch_add(1, std::memory_order_relaxed);
  }
  --sink_depth;
}

void log_state::flush() noexcept {
  ++sink_depth;
  try {
    flush_route(*this);
  } catch (...) {
  }
  --sink_depth;
}

log_record log_state::drop_report(std::uint64_t n) {
  const std::string count = std::to_string(n);
  const std::string message =
      "launchfit log queue full: " + count + " lines dropped (asynchronous logging never blocks a launch)";
  const log_format f = format.load();
  event_payload p = f == log_format::json
                        ? build_event(spdlog::level::warn, "log_dropped", message, {{"dropped", count}}, f)
                        : build_event(spdlog::level::warn, "log_dropped", message, {}, f);
  return {spdlog::level::warn, spdlog::log_clock::now(), 0, p.json, std::move(p.text), nullptr};
}

// Writes a record synchronously, under the write lock.
void write_now(log_state& s, const log_record& r) {
  std::lock_guard<std::mutex> lock(*s.write_lock);
  s.write(r);
  s.queue.written().fetch_add(1, std::memory_order_relaxed);
}

// ---- the logger's state and its lifecycle ----

// The state is made on first use under init_mutex, not as a function-local static: a child forked while
// another thread was making it would wait forever in the static's guard. The fork hooks take init_mutex,
// so a fork waits until the state is made (or not begun).
std::mutex init_mutex;
std::atomic<log_state*> the_state{nullptr};

// Takes the write lock once no writer is inside the output (fork), waiting while writers still write
// lines: false when none was written for `still` (a stuck output) or after wait_cap. Polls:
// std::timed_mutex's timed lock is invisible to ThreadSanitizer on glibc, which then reports the unlock.
bool lock_write_while_moving(log_state& s, std::chrono::milliseconds still) {
  const auto start = std::chrono::steady_clock::now();
  auto moved = start;
  std::uint64_t seen = s.queue.written().load(std::memory_order_relaxed);
  while (!s.write_lock->try_lock()) {
    const auto now = std::chrono::steady_clock::now();
    if (const std::uint64_t w = s.queue.written().load(std::memory_order_relaxed); w != seen) {
      seen = w;
      moved = now;
    }
    if (now - moved >= still || now - start >= wait_cap) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Fork: every lock of the logger is taken, in the order its users take them (configuration, queue,
// write, route), and given back in the parent. The child gets new ones where a thread it does not have
// could hold the old one: the write lock and the output's console lock when a writer was stuck in the
// output at the fork (then launchfit's own stderr output is usable again; a user's sink stuck that way is
// the user's), and the queue's condition variables. Its logging thread starts again with its first line.
void before_fork() {
  init_mutex.lock();
  log_state* s = the_state.load(std::memory_order_acquire);
  if (!s) return;
  s->mutex.lock();
  s->queue.prepare_fork();
  s->fork_write_locked = lock_write_while_moving(*s, exit_write_wait);
  s->route_mutex.lock();
}

void after_fork_parent() {
  if (log_state* s = the_state.load(std::memory_order_acquire)) {
    s->route_mutex.unlock();
    if (s->fork_write_locked) s->write_lock->unlock();
    s->queue.parent_after_fork();
    s->mutex.unlock();
  }
  init_mutex.unlock();
}

void after_fork_child() {
  if (log_state* s = the_state.load(std::memory_order_acquire)) {
    s->route_mutex.unlock();
    if (s->fork_write_locked) {
      s->write_lock->unlock();
    } else {
      s->abandoned.push_back(s->write_lock);
      s->write_lock = new std::mutex;
      if (auto* own = dynamic_cast<stderr_sink*>(s->current.output.get())) own->replace_lock_after_fork();
    }
    s->queue.child_after_fork();
    s->mutex.unlock();
  }
  init_mutex.unlock();
}

void register_fork_hooks() {
  static std::atomic<bool> done{false};
  if (!done.load(std::memory_order_acquire) &&
      lifecycle::on_fork({before_fork, after_fork_parent, after_fork_child}))
    done.store(true, std::memory_order_release);
}

// At load time, before any thread of the program can be inside the first use.
const bool fork_hooks_at_load = (register_fork_hooks(), true);

void drain_at_exit() {
  if (log_state* s = the_state.load(std::memory_order_acquire)) s->queue.drain_at_exit();
}

// Starts the logging thread (again in a forked child). Returns false if it cannot.
bool ensure_worker(log_state& s) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.exit_handler_registered) s.exit_handler_registered = lifecycle::on_exit(drain_at_exit);
  }
  return s.queue.start();
}

// Waits until the logging thread has written everything queued.
bool wait_drained(log_state& s) { return s.queue.wait_drained(flush_wait); }

// The front logger's only sink: one safe line per message, to the current route.
class launchfit_sink final : public spdlog::sinks::sink {
 public:
  explicit launchfit_sink(log_state& s) : s_(s) {}

  void log(const spdlog::details::log_msg& msg) override {
    log_state& s = s_;
    if (sink_depth > 0) {  // a user sink logging to launchfit from inside launchfit's logging
      s.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++sink_depth;
    try {
      log_record r{msg.level, msg.time, msg.thread_id, msg.source.filename == json_marker,
                   std::string(msg.payload.data(), msg.payload.size()), nullptr};
      if (!queues_lines(s) || !s.queue.submit(r)) write_now(s, r);
    } catch (...) {
      s.dropped.fetch_add(1, std::memory_order_relaxed);
    }
    --sink_depth;
  }

  void flush() override {
    if (sink_depth > 0) return;
    // A stuck output holds the write lock: flush() gives up on it as the wait for the queue did.
    if (s_.async.load() && !wait_drained(s_)) return;
    std::lock_guard<std::mutex> lock(*s_.write_lock);
    s_.flush();
  }

  // logger()->set_pattern() / set_formatter() shape launchfit's own output.
  void set_pattern(const std::string& pattern) override {
    set_formatter(std::make_unique<spdlog::pattern_formatter>(pattern));
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    std::lock_guard<std::mutex> lock(s_.route_mutex);
    if (s_.current.output) s_.current.output->set_formatter(std::move(f));
  }

 private:
  log_state& s_;
};

void apply_pattern(log_state& s) {
  std::lock_guard<std::mutex> lock(s.route_mutex);
  if (s.current.output) s.current.output->set_formatter(make_formatter(s.format));
}

// Applies the environment (first use, or a test's reset). Caller holds s.mutex.
void configure_locked(log_state& s, std::shared_ptr<spdlog::sinks::sink> output) {
  env_config env = read_env();
  s.format = env.format;
  s.default_level = env.level;
  s.front->set_level(env.level);
  s.spill_warned.clear();
  s.user_target = false;
  {
    std::lock_guard<std::mutex> lock(s.route_mutex);
    s.current.target = nullptr;
    s.current.output = output ? std::move(output) : std::make_shared<stderr_sink>();
  }
  apply_pattern(s);
  s.async = env.async;
  s.async_chosen = env.async_set;
  s.user_route = false;
  s.warnings = std::move(env.warnings);
  s.warnings_pending = !s.warnings.empty();
}

std::atomic<spdlog::logger*> fast_logger{nullptr};

log_state& make_state() {
  log_state& s = *new log_state();  // never destroyed: a line logged from a static destructor still works
  s.sink = std::make_shared<launchfit_sink>(s);
  s.front = std::make_shared<spdlog::logger>(logger_name, s.sink);
  std::lock_guard<std::mutex> lock(s.mutex);
  configure_locked(s, nullptr);
  // A logger named "launchfit" registered before first use receives launchfit's lines.
  std::shared_ptr<spdlog::logger> existing = spdlog::get(logger_name);
  if (!existing) {
    try {
      spdlog::register_logger(s.front);
    } catch (const spdlog::spdlog_ex&) {
      existing = spdlog::get(logger_name);  // registered concurrently
    }
  }
  if (existing && existing != s.front) {
    std::lock_guard<std::mutex> route_lock(s.route_mutex);
    s.current.target = existing;
    s.user_target = true;
    s.user_route = true;
    s.front->set_level(existing->level());
  }
  fast_logger.store(s.front.get(), std::memory_order_release);
  return s;
}

void emit_env_warnings(log_state& s) {
  if (!s.warnings_pending.exchange(false)) return;
  std::vector<env_warning> warnings;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    warnings = s.warnings;
  }
  // The text line already names the variable and the value; JSON gets them as fields too.
  const bool json = s.format.load() == log_format::json;
  for (const env_warning& w : warnings) {
    if (json) {
      log_event(spdlog::level::warn, "bad_environment", w.message,
                {{"variable", w.variable}, {"value", w.value}});
    } else {
      log_event(spdlog::level::warn, "bad_environment", w.message);
    }
  }
}

// The state without side effects.
log_state& state_raw() {
  if (log_state* s = the_state.load(std::memory_order_acquire)) return *s;
  register_fork_hooks();  // in case a static initialiser of the program logs before ours ran
  std::lock_guard<std::mutex> lock(init_mutex);
  if (log_state* s = the_state.load(std::memory_order_relaxed)) return *s;
  log_state& s = make_state();
  the_state.store(&s, std::memory_order_release);
  return s;
}

log_state& state() {
  log_state& s = state_raw();
  if (s.warnings_pending.load(std::memory_order_relaxed)) emit_env_warnings(s);
  return s;
}

log_state& started_state() {
  log_state& s = state();
  if (!s.started.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(init_mutex);
    if (!s.started.load(std::memory_order_relaxed)) {
      if (s.async) ensure_worker(s);
      s.started.store(true, std::memory_order_release);
    }
  }
  return s;
}

std::string pct(double v) {
  char s[16];
  std::snprintf(s, sizeof s, "%.1f%%", v * 100.0);
  return s;
}

std::string work_to_string(const work& w) {
  if (w.kind == work::shape::none) return "resident";
  if (w.kind == work::shape::grid) return "caller(" + w.grid.to_string() + ")";
  std::string per = w.per_thread > 1 ? "per_thread=" + std::to_string(w.per_thread) : std::string();
  if (w.kind == work::shape::grid_stride && w.waves > 1)
    per += (per.empty() ? "" : ",") + std::string("waves=") + std::to_string(w.waves);
  if (w.kind == work::shape::items && w.rank > 1) per += std::string(per.empty() ? "" : ",") + std::to_string(w.rank) + "d";
  return (w.kind == work::shape::items ? "items" : "grid_stride") + (per.empty() ? per : "(" + per + ")");
}

std::string grid_rule(const plan& p, const work& w) {
  if (p.grid.x != 0 && w.kind != work::shape::grid) return "fixed(" + p.grid.to_string() + ")";
  if (p.cooperative && w.kind == work::shape::none)
    return "co-resident(" + std::to_string(p.resident_blocks()) + ")";
  if (w.kind == work::shape::grid_stride && p.full_grid && w.waves == 0) return work_to_string(w) + "(full grid)";
  return work_to_string(w) + (w.kind == work::shape::grid_stride || w.kind == work::shape::none
                                  ? "(cap " + std::to_string(p.resident_blocks()) + ")"
                                  : std::string());
}

// The grid the first launch ran: grid_for() rounds it up to whole clusters, so the log shows what the driver
// was given, not the work's ceil. Empty when that grid is not computable here.
std::string first_grid(const plan& p, const work& w) {
  try {
    return grid_for(p, w).to_string();
  } catch (...) {
    return {};
  }
}

// Waves per SM of the grid the first launch ran (Nsight Compute's launch__waves_per_multiprocessor); -1 when
// that grid is not computable here.
double first_waves(const plan& p, const work& w) {
  try {
    return p.waves(grid_for(p, w));
  } catch (...) {
    return -1;
  }
}

// The cluster figures: clusters of the launch co-resident on the device, and the share of the SMs' thread
// slots their blocks fill ("cluster occupancy").
double cluster_occupancy(const plan& p, const occupancy_result& o) {
  if (p.resident_clusters <= 0 || p.sm_count <= 0 || o.active_warps_per_sm <= 0 || o.occupancy <= 0)
    return 0;
  const double max_threads_per_sm = 32.0 * o.active_warps_per_sm / o.occupancy;
  return static_cast<double>(p.resident_blocks()) * p.block_threads / (max_threads_per_sm * p.sm_count);
}

// Logs a payload built by build_event (or format_plan) as is.
void log_payload(spdlog::level::level_enum level, const event_payload& p) {
  spdlog::logger& l = *started_state().front;
  const spdlog::string_view_t text(p.text.data(), p.text.size());
  if (p.json) {
    l.log(spdlog::source_loc{json_marker, 0, ""}, level, text);
  } else {
    l.log(spdlog::source_loc{}, level, text);
  }
}

// With asynchronous output a new plan's line is made by the logging thread: the launching thread only queues a
// copy of the report (the line took 3.2-3.5 us of its CPU time to make). False: make and log it here.
bool queue_plan_line(log_state& s, const std::shared_ptr<const plan_report>& r) {
  if (!queues_lines(s) || sink_depth > 0) return false;
  // A sink added to logger() or a backtrace sees lines through the front logger: the line is made here then.
  if (s.front->sinks().size() != 1 || s.front->should_backtrace()) return false;
  log_record rec{spdlog::level::info, spdlog::log_clock::now(), spdlog::details::os::thread_id(), false, {}, r};
  return s.queue.submit(rec);
}

}  // namespace

std::string grid_rule_text(const plan& p, const work& w) { return grid_rule(p, w); }

std::string format_plan(const plan_report& r, log_format f) {
  const plan& p = r.plan;
  // Demangled here (on the logging thread, when asynchronous) unless the launch had to name the kernel.
  const std::string kernel = r.kernel.demangled.empty() ? demangle(r.kernel.name) : r.kernel.demangled;
  const std::string cc = std::to_string(r.cc / 10) + "." + std::to_string(r.cc % 10);
  if (f == log_format::json) {
    nlohmann::json j = {
        {"level", "info"},
        {"logger", logger_name},
        {"event", "new_plan"},
        {"kernel", valid_utf8(kernel, log_field_cap)},
        {"device", valid_utf8(r.device, log_field_cap)},
        {"device_ordinal", r.device_ordinal},
        {"cc", cc},
        {"block", p.block.to_string()},
        {"block_threads", p.block_threads},
        {"grid_rule", grid_rule(p, r.first_work)},
        {"blocks_per_sm", p.blocks_per_sm},
        {"sm_count", p.sm_count},
        {"dynamic_smem_bytes", p.dynamic_smem_bytes},
        {"cooperative", p.cooperative},
        {"occupancy", p.occupancy.occupancy},
        {"active_warps_per_sm", p.occupancy.active_warps_per_sm},
        {"active_blocks_per_sm", p.occupancy.active_blocks_per_sm},
        {"limiter", limiter_names(p.occupancy.limiters)},
        {"registers", r.kernel.regs_per_thread},
        {"local_bytes_per_thread", r.kernel.local_bytes_per_thread},
        {"static_smem_bytes", r.kernel.static_smem_bytes},
        {"policy", valid_utf8(p.policy, log_field_cap)},
        {"match", valid_utf8(p.match, log_field_cap)},
        {"reason", valid_utf8(p.reason, log_field_cap)},
    };
    if (!p.warning.empty()) j["warning"] = valid_utf8(p.warning, log_field_cap);
    if (!r.override_glob.empty()) j["override"] = valid_utf8(r.override_glob, log_field_cap);
    if (const double w = first_waves(p, r.first_work); w >= 0) j["waves_per_sm"] = w;
    if (const std::string g = first_grid(p, r.first_work); !g.empty()) j["first_grid"] = g;
    if (!p.blocks.empty()) j["block_rule"] = p.blocks;
    if (p.shape_rule.is_set()) j["block_shape"] = p.shape_rule.to_string();
    if (p.programmatic) j["pdl"] = true;
    if (r.family_size > 0) j["family_members"] = r.family_size;
    if (r.device_sm_count > 0 && p.sm_count < r.device_sm_count) j["sm_budget"] = p.sm_count;
    if (p.cluster.count() > 1) {
      j["cluster"] = p.cluster.to_string();
      j["clusters_per_wave"] = p.resident_clusters;
      j["cluster_occupancy"] = cluster_occupancy(p, p.occupancy);
      if (p.cluster_from_kernel) j["cluster_from_kernel"] = true;
    }
    if (p.trials > 0) {
      j["trials"] = p.trials;
      j["tuning_ms"] = p.tuning_ms;
    }
    return dump_json(j);
  }
  const auto quoted = [](const std::string& v) { return quote_text(v, log_field_cap); };
  std::string s =
      "new plan: kernel=" + escape_text(kernel, log_field_cap) + " device=" + quoted(r.device) +
      " #" + std::to_string(r.device_ordinal) + " cc=" + cc + " block=" + p.block.to_string() +
      " grid=" + grid_rule(p, r.first_work) + " smem=" + std::to_string(p.dynamic_smem_bytes) +
      "B occupancy=" + pct(p.occupancy.occupancy) + " (" + std::to_string(p.occupancy.active_blocks_per_sm) +
      " blocks, " + std::to_string(p.occupancy.active_warps_per_sm) + " warps/SM; runs " +
      std::to_string(p.blocks_per_sm) + " blocks/SM) limiter=" + limiter_names(p.occupancy.limiters) +
      " regs=" + std::to_string(r.kernel.regs_per_thread) +
      " local=" + std::to_string(r.kernel.local_bytes_per_thread) +
      "B policy=" + escape_text(p.policy, log_field_cap);
  if (p.cooperative) s += " cooperative";
  if (p.cluster.count() > 1) {
    s += " cluster=" + p.cluster.to_string() + (p.cluster_from_kernel ? "(kernel)" : "") +
         " clusters/wave=" + std::to_string(p.resident_clusters) +
         " cluster_occupancy=" + pct(cluster_occupancy(p, p.occupancy));
  }
  if (p.programmatic) s += " pdl";
  if (!p.blocks.empty()) s += " blocks=" + quoted(p.blocks);
  if (p.shape_rule.is_set()) s += " shape=" + p.shape_rule.to_string();
  if (r.family_size > 0) s += " family=" + std::to_string(r.family_size);
  if (r.device_sm_count > 0 && p.sm_count < r.device_sm_count)
    s += " sms=" + std::to_string(p.sm_count) + "/" + std::to_string(r.device_sm_count);
  if (const std::string g = first_grid(p, r.first_work); !g.empty()) s += " first_grid=" + g;
  if (const double w = first_waves(p, r.first_work); w >= 0) {
    char t[32];
    std::snprintf(t, sizeof t, " waves=%.2f", w);
    s += t;
  }
  if (!r.override_glob.empty()) s += " override=" + quoted(r.override_glob);
  s += " match=" + escape_text(p.match, log_field_cap);
  if (p.trials > 0) {
    char t[64];
    std::snprintf(t, sizeof t, " trials=%d tuning=%.1fms", p.trials, p.tuning_ms);
    s += t;
  }
  s += " reason=" + quoted(p.reason);
  return s;
}

void log_new_plan(plan_report report) noexcept {
  try {
    log_state& s = started_state();
    spdlog::logger& l = *s.front;
    const log_format f = s.format.load();
    // The report moves once, into what a queued line holds; the lines below read it there.
    const auto shared = std::make_shared<const plan_report>(std::move(report));
    const plan_report& r = *shared;
    if (l.should_log(spdlog::level::info) && !queue_plan_line(s, shared))
      log_payload(spdlog::level::info, {format_plan(r, f), f == log_format::json});
    if (!r.plan.warning.empty() && l.should_log(spdlog::level::warn)) {
      if (f == log_format::json) {
        log_event(spdlog::level::warn, "policy_shortfall",
                  "kernel " + r.kernel.demangled + ": " + r.plan.warning,
                  {{"kernel", r.kernel.demangled}, {"policy", r.plan.policy}, {"warning", r.plan.warning}});
      } else {
        log_payload(spdlog::level::warn, {"kernel " + escape_text(r.kernel.demangled, log_field_cap) + ": " +
                                          escape_text(r.plan.warning, log_field_cap)});
      }
    }
    if (r.kernel.local_bytes_per_thread > 0) {
      bool first = false;
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        first = s.spill_warned.insert(r.kernel.name.substr(0, log_field_cap)).second;
      }
      if (first && l.should_log(spdlog::level::warn)) {
        const std::string spill = std::to_string(r.kernel.local_bytes_per_thread);
        const std::string regs = std::to_string(r.kernel.regs_per_thread);
        if (f == log_format::json) {
          // Numbers stay numbers in the spill object.
          nlohmann::json j = {{"level", "warning"},
                              {"logger", logger_name},
                              {"event", "local_memory"},
                              {"kernel", valid_utf8(r.kernel.demangled, log_field_cap)},
                              {"local_bytes_per_thread", r.kernel.local_bytes_per_thread},
                              {"registers", r.kernel.regs_per_thread}};
          log_payload(spdlog::level::warn, {dump_json(j), true});
        } else {
          log_payload(spdlog::level::warn, {"kernel " + escape_text(r.kernel.demangled, log_field_cap) +
                                            " uses " + spill + " B of local memory per thread (" + regs +
                                            " registers; a stack frame or register spills, -Xptxas -v says "
                                            "which): expect extra memory traffic"});
        }
      }
    }
  } catch (...) {
    try {
      state().dropped.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
    }
  }
}

void log_event(spdlog::level::level_enum level, std::string_view event, std::string_view message,
               std::initializer_list<log_field> fields) noexcept {
  try {
    log_state& s = started_state();
    if (!s.front->should_log(level)) return;
    log_payload(level, build_event(level, event, message, fields, s.format.load()));
  } catch (...) {
    try {
      state().dropped.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
    }
  }
}

void reset_logging_for_tests(std::shared_ptr<spdlog::sinks::sink> output) {
  log_state& s = state();
  if (s.async) wait_drained(s);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    configure_locked(s, std::move(output));
  }
  if (s.async) ensure_worker(s);
  emit_env_warnings(s);
}

std::shared_ptr<spdlog::logger> logger() { return started_state().front; }

spdlog::logger& logger_fast() {
  if (spdlog::logger* l = fast_logger.load(std::memory_order_acquire)) return *l;
  return *started_state().front;
}

}  // namespace detail

std::shared_ptr<spdlog::logger> logger() { return detail::logger(); }

void set_logger(std::shared_ptr<spdlog::logger> l) {
  detail::log_state& s = detail::started_state();
  if (l == s.front) l = nullptr;         // set_logger(logger()) must not route the logger into itself
  if (s.async) detail::wait_drained(s);  // lines queued so far go where they were logged for
  std::lock_guard<std::mutex> lock(s.mutex);
  if (l) {
    if (!s.user_target) s.default_level = s.front->level();
    s.front->set_level(l->level());
    s.user_target = true;
  } else if (s.user_target) {
    s.front->set_level(s.default_level);
    s.user_target = false;
  }
  s.user_route = s.user_target;
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  s.current.target = std::move(l);
}

void set_log_format(log_format f) {
  detail::log_state& s = detail::started_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.format = f;
  detail::apply_pattern(s);
}

log_format current_log_format() { return detail::started_state().format.load(); }

void set_log_async(bool on) {
  detail::log_state& s = detail::started_state();
  s.async_chosen = true;
  if (on) {
    s.async = detail::ensure_worker(s);
  } else if (s.async) {
    detail::wait_drained(s);
    s.async = false;
  }
}

bool log_async() { return detail::started_state().async.load(); }

std::uint64_t log_lines_dropped() { return detail::state().dropped.load(); }

}  // namespace launchfit

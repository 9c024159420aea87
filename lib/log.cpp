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
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "async_sink.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "log_line.hpp"
#include "settings.hpp"
#include "stderr_sink.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {


namespace {

// A message that is already one launchfit JSON object carries this file name (compared by address, so no
// message text can claim it); line 0 keeps it out of any %s/%@ pattern field.
constexpr const char json_marker[] = "launchfit:json";
// A wait for the logging thread (at exit and fork, or in flush()) gives up only on a stuck output, never on
// a slow one or a thread short of CPU: when the thread has written no line for this long, or after wait_cap
// in all.
constexpr auto exit_write_wait = std::chrono::milliseconds(500);
constexpr auto flush_wait = std::chrono::seconds(1);
constexpr auto wait_cap = std::chrono::seconds(10);

// ---- environment ----

// The logging settings (settings.hpp reads LAUNCHFIT_LOG_LEVEL, SPDLOG_LEVEL, LAUNCHFIT_LOG_FORMAT and
// LAUNCHFIT_LOG_ASYNC with every other variable, and reports the values it refused).
spdlog::level::level_enum level_of(log_level_setting l) {
  static_assert(static_cast<int>(log_level_setting::trace) == spdlog::level::trace &&
                    static_cast<int>(log_level_setting::warn) == spdlog::level::warn &&
                    static_cast<int>(log_level_setting::off) == spdlog::level::off,
                "log_level_setting follows spdlog's order");
  return static_cast<spdlog::level::level_enum>(l);
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
  std::atomic<bool> started{false};     // the logging thread was started as the environment says
  std::atomic<std::uint64_t> dropped{0};
  spdlog::level::level_enum default_level = spdlog::level::info;  // restored by set_logger(nullptr)
  bool user_target = false;
  std::set<std::string> spill_warned;
  async_sink queue{*this};
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

// Writes one record where launchfit's lines go now. May throw (a user's sink or error handler).
void write_record(log_state& s, const log_record& r) {
  if (r.plan) {  // a new plan's line, made here, on the logging thread, in the format in force
    const log_format f = s.format.load(std::memory_order_relaxed);
    write_record(
        s, log_record{r.level, r.time, r.thread_id, f == log_format::json, format_plan(*r.plan, f), nullptr});
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

// Puts the queue on the background thread (which drains it at exit, after the plan stores). False if it
// cannot.
bool ensure_worker(log_state& s) { return s.queue.start(); }

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
      log_record r{msg.level,
                   msg.time,
                   msg.thread_id,
                   msg.source.filename == json_marker,
                   std::string(msg.payload.data(), msg.payload.size()),
                   nullptr};
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
  const settings::log_settings& env = current_settings().log;
  s.format = env.format;
  s.default_level = level_of(env.level);
  s.front->set_level(s.default_level);
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
}

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
  hot.logger.store(s.front.get(), std::memory_order_release);
  return s;
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

// The state, once the settings' warnings are logged (their first call logs them: a line through this state).
log_state& state() {
  log_state& s = state_raw();
  report_settings_warnings();
  return s;
}

// `report`: log the settings' warnings now (set_logger() logs them once the lines go to the new logger).
log_state& started_state(bool report = true) {
  log_state& s = report ? state() : state_raw();
  if (!s.started.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(init_mutex);
    if (!s.started.load(std::memory_order_relaxed)) {
      if (s.async) ensure_worker(s);
      s.started.store(true, std::memory_order_release);
    }
  }
  return s;
}

}  // namespace

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

log_front started_front() {
  log_state& s = started_state();
  return {*s.front, s.format.load()};
}

bool queue_plan_line(const std::shared_ptr<const plan_report>& r) {
  log_state& s = started_state();
  if (!queues_lines(s) || sink_depth > 0) return false;
  // A sink added to logger() or a backtrace sees lines through the front logger: the line is made here then.
  if (s.front->sinks().size() != 1 || s.front->should_backtrace()) return false;
  log_record rec{
      spdlog::level::info, spdlog::log_clock::now(), spdlog::details::os::thread_id(), false, {}, r};
  return s.queue.submit(rec);
}

bool first_spill_warning(const std::string& kernel) {
  log_state& s = started_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.spill_warned.insert(kernel).second;
}

void count_dropped_line() noexcept {
  try {
    state().dropped.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
  }
}

void log_event(spdlog::level::level_enum level, std::string_view event, std::string_view message,
               std::initializer_list<log_field> fields) noexcept {
  try {
    log_state& s = started_state();
    if (!s.front->should_log(level)) return;
    log_payload(level, build_event(level, event, message, fields, s.format.load()));
  } catch (...) {
    count_dropped_line();
  }
}

void reset_logging_for_tests(std::shared_ptr<spdlog::sinks::sink> output) {
  log_state& s = state();
  if (s.async) wait_drained(s);
  settings_reload_for_tests();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    configure_locked(s, std::move(output));
  }
  if (s.async) ensure_worker(s);
  report_settings_warnings();
}

std::shared_ptr<spdlog::logger> logger() { return started_state().front; }

spdlog::logger& logger_started() { return *started_state().front; }

}  // namespace detail

std::shared_ptr<spdlog::logger> logger() { return detail::logger(); }

void set_logger(std::shared_ptr<spdlog::logger> l) {
  // A program that sets its logger first gets the warnings about its environment there.
  detail::log_state& s = detail::started_state(false);
  if (l == s.front) l = nullptr;         // set_logger(logger()) must not route the logger into itself
  if (s.async) detail::wait_drained(s);  // lines queued so far go where they were logged for
  {
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
  detail::report_settings_warnings();
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

// SPDX-License-Identifier: MIT
// How a launchfit log line looks: logfmt text (key=value, the message quoted) or one JSON object, both with
// an RFC 3339 time in UTC; an event's message and fields, escaped and capped.

#include <spdlog/pattern_formatter.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "lifecycle.hpp"
#include "log_line.hpp"
#include "text.hpp"

namespace launchfit::detail {

namespace {

// Text lines are logfmt: key=value, one quoting rule (logfmt_value), the message in msg. %* and %~ are
// launchfit's flags (below): the RFC 3339 time and the quoted message.
constexpr const char* text_pattern = "time=%* level=%l logger=%n pid=%P msg=%~";
constexpr const char* json_pattern = "%v";

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

// A JSON line: the object with the line's time and the process id first (a child of fork() says its own).
std::string render_json(const log_record& r) {
  const std::string object = r.json ? r.payload : wrap_json(r.level, r.payload);
  std::string line =
      "{\"time\":\"" + rfc3339_utc(r.time) + "\",\"pid\":" + std::to_string(lifecycle::process_id());
  line += object.size() > 2 ? "," + object.substr(1) : std::string("}");
  return line;
}

}  // namespace

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

std::unique_ptr<spdlog::formatter> make_formatter(log_format f) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<rfc3339_flag>('*').add_flag<logfmt_message_flag>('~');
  formatter->set_pattern(f == log_format::json ? json_pattern : text_pattern);
  return formatter;
}

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

std::string render(const log_record& r, log_format f) {
  if (f == log_format::json) return render_json(r);
  return escape_line(r.payload, line_cap);
}

}  // namespace launchfit::detail

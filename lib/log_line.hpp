// SPDX-License-Identifier: MIT
#pragma once
// Internal to the logger's files: how a line looks (log_format.cpp: logfmt text or one JSON object, the
// time, an event's fields) and how one is handed to the logger (log.cpp). plan_line.cpp says what a new
// plan's lines hold.

#include <spdlog/formatter.h>
#include <spdlog/logger.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "async_sink.hpp"
#include "log_internal.hpp"

namespace launchfit::detail {

constexpr const char* logger_name = "launchfit";
constexpr std::size_t line_cap = 64 * 1024;  // any one message, escaped or wrapped

// ---- how a line looks (log_format.cpp) ------------------------------------------------------------------

// One JSON value as text, ASCII only: no raw control, bidirectional or other non-ASCII character reaches a
// terminal.
std::string dump_json(const nlohmann::json& j);
// The formatter of launchfit's own output for `f` (logfmt text with an RFC 3339 time, or the JSON object).
std::unique_ptr<spdlog::formatter> make_formatter(log_format f);

// A message as the logger carries it: text, or (json) one launchfit JSON object.
struct event_payload {
  std::string text;
  bool json = false;
};
// An event's message and fields in format `f` (see log_event()).
event_payload build_event(spdlog::level::level_enum level, std::string_view event, std::string_view message,
                          std::initializer_list<log_field> fields, log_format f);
// A record as the line written in format `f`.
std::string render(const log_record& r, log_format f);

// ---- handing a line to the logger (log.cpp) -------------------------------------------------------------

// The front logger once started (the settings' warnings logged, the logging thread started as asked) and the
// format in force.
struct log_front {
  spdlog::logger& logger;
  log_format format;
};
log_front started_front();
// Logs a payload built by build_event (or format_plan) as is.
void log_payload(spdlog::level::level_enum level, const event_payload& p);
// With asynchronous output a new plan's line is made by the logging thread: the launching thread only queues
// a copy of the report (the line took 3.2-3.5 us of its CPU time to make). False: make and log it here.
bool queue_plan_line(const std::shared_ptr<const plan_report>& r);
// True the first time `kernel` asks for its spill warning in this process (and after a test's reset).
bool first_spill_warning(const std::string& kernel);
// Counts a line that could not be logged. Never throws.
void count_dropped_line() noexcept;

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup logging
/// \brief Production logging: one line per new plan through the spdlog logger named "launchfit", its format,
/// level and output.
///
// launchfit's production logging: one line per new plan through the spdlog logger named "launchfit".
// Cheap to include: neither spdlog nor fmt comes with it (include <spdlog/spdlog.h> to call the logger's
// methods).

#include <cstdint>
#include <memory>

#include "launchfit/export.hpp"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace launchfit {

// How launchfit's log lines are written.
enum class log_format {
  text,  // one readable line per event (the default)
  json,  // one JSON object per line
};

// The "launchfit" logger, created on first use and never destroyed (a line logged from a static destructor
// is written). Its lines go to stderr, or to the logger given to set_logger(), or to a logger named
// "launchfit" that was registered with spdlog before first use. Level: LAUNCHFIT_LOG_LEVEL, else
// SPDLOG_LEVEL ("launchfit=debug" or a bare level), else info; a value that is not a level is reported in
// one warning and ignored. Every line it writes is one line: control characters and invalid UTF-8 in
// any message are escaped. set_pattern()/set_formatter() on it shape the stderr output. Never touches
// spdlog's default logger.
LAUNCHFIT_API std::shared_ptr<spdlog::logger> logger();
// Sends launchfit's lines to `l` (its sinks, pattern and level; launchfit adopts l's level now, later
// changes go through logger()->set_level()). nullptr sends them to stderr again.
LAUNCHFIT_API void set_logger(std::shared_ptr<spdlog::logger> l);

// text (default) or json. A text line on stderr is logfmt, read by logfmt parsers:
//   time=2026-12-03T20:41:07.123456Z level=info logger=launchfit pid=4242 msg="new plan: kernel=..."
// (a value bare unless it holds a space, '=', '"', a control or non-ASCII character; then quoted, with
// backslash escapes for the quote, the backslash, newline, return, tab and \\uNNNN for other characters).
// With json every line on stderr is one JSON object (with your own logger: every message) that starts with
// "time" (the same RFC 3339 UTC time) and "pid".
// LAUNCHFIT_LOG_FORMAT=json sets it at first use.
LAUNCHFIT_API void set_log_format(log_format f);
// The format in force.
LAUNCHFIT_API log_format current_log_format();

// Asynchronous output, the default for launchfit's own output (LAUNCHFIT_LOG_ASYNC=0 at first use, or
// set_log_async(false), writes each line on the thread that logs it): a logging thread formats and writes
// lines, a new plan's line included; the launching thread only queues them. A logger given to set_logger()
// gets its lines on the logging thread only when asynchronous output was asked for (LAUNCHFIT_LOG_ASYNC=1 or
// set_log_async(true)); otherwise on the thread that logs, as its own sinks decide. The queue is bounded: when full, new lines are dropped
// and counted (a launch never waits for the log), and the drop is reported in a warning. Lines still
// queued are written at exit (waiting at most about half a second for a stuck output). Fork-safe in both
// modes: a child of fork() (forked while other threads log, or while one makes the logger) logs and exits;
// with asynchronous output it starts a logging thread of its own with its first line, and the parent's
// queued lines stay the parent's to write.
LAUNCHFIT_API void set_log_async(bool on);
// Whether output is asynchronous now.
LAUNCHFIT_API bool log_async();
// Lines launchfit could not write: dropped from a full asynchronous queue, at exit from a stuck output,
// or logged by a sink from inside launchfit's own logging.
LAUNCHFIT_API std::uint64_t log_lines_dropped();

}  // namespace launchfit

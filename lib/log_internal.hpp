// SPDX-License-Identifier: MIT
#pragma once
// Logging internals: structured events, the new-plan line and the escaping they share.
#include <spdlog/logger.h>

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "hot_words.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/log.hpp"
#include "launchfit/plan.hpp"

namespace spdlog::sinks {
class sink;
}  // namespace spdlog::sinks

namespace launchfit::detail {

// The launchfit logger, for library internals.
std::shared_ptr<spdlog::logger> logger();
// The launchfit logger once made (log.cpp), and the call that makes it.
spdlog::logger& logger_started();
// The launchfit logger without locking (for the per-launch trace check); valid for the process lifetime.
inline spdlog::logger& logger_fast() {
  if (spdlog::logger* l = hot.logger.load(std::memory_order_acquire)) return *l;
  return logger_started();
}

struct kept_plan;

// Everything one new-plan line says. A queued line holds the report until the logging thread writes it: the
// plan, the kernel and the device are read where they live for the process's lifetime, not copied.
struct plan_report {
  const kept_plan* kept = nullptr;        // the plan and its kernel (keep_plan(): never freed)
  const device_limits* device = nullptr;  // the context's device (limits_for(): never freed)
  work first_work;                        // the work shape of the launch that made the plan
  std::string override_glob;              // LAUNCHFIT_POLICY entry that chose the policy, if any
  int family_size = 0;                    // a kernel family: its members (the kernel is the member chosen)
};

// How the plan's grid is made for this work: "items", "grid_stride(cap 1056)", "co-resident(1056)", ...
std::string grid_rule_text(const plan& p, const work& w);
// The items of this work, as launched: "items(1000003)", "items({1024, 768})" (plan.cpp).
std::string items_text(const work& w);

// The line logged for a new plan (text: key=value pairs; json: one object). Untrusted fields are escaped
// and capped; never throws for any field content.
std::string format_plan(const plan_report& r, log_format f);
// Logs a new plan at info, plus one warning per spilling kernel and one for a plan with a warning.
// Never throws.
void log_new_plan(plan_report r) noexcept;

// One event: text "message key=value ..." or one JSON object
// {"level":..,"logger":"launchfit","event":..,"msg":..,key:value,...}. The message is launchfit's own
// (untrusted text in it escaped already; what is left unsafe is escaped, its escapes kept); values are
// untrusted: escaped, capped at log_field_cap bytes. Never throws.
using log_field = std::pair<std::string_view, std::string_view>;
void log_event(spdlog::level::level_enum level, std::string_view event, std::string_view message,
               std::initializer_list<log_field> fields = {}) noexcept;

// Longest piece of untrusted text logged as is; longer text ends in "...(N bytes)" (N: its full length).
constexpr std::size_t log_field_cap = 4096;

// Tests: re-reads the environment as at first use (level, format, async; warnings again), forgets the
// spill warnings already given and set_logger(), and writes to `output` (nullptr: stderr).
void reset_logging_for_tests(std::shared_ptr<spdlog::sinks::sink> output = nullptr);

}  // namespace launchfit::detail

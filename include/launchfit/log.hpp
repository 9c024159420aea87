#pragma once
// launchfit's production logging: one line per new plan through the spdlog logger named "launchfit".

#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "launchfit/kernel.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

enum class log_format { text, json };

// The "launchfit" logger. Created on first use with a stderr sink unless a logger of that name is already
// registered with spdlog (then that one, with the user's sinks, is used). Level: LAUNCHFIT_LOG_LEVEL, else
// SPDLOG_LEVEL ("launchfit=debug" or a bare level), else info. Never touches spdlog's default logger.
std::shared_ptr<spdlog::logger> logger();
// Replaces the logger (e.g. to add sinks); nullptr restores the default one.
void set_logger(std::shared_ptr<spdlog::logger> l);

// text (default) or json: one JSON object per line. LAUNCHFIT_LOG_FORMAT=json sets it at first use.
void set_log_format(log_format f);
log_format current_log_format();

// Everything one new-plan line says.
struct plan_report {
  kernel_resources kernel;
  std::string device;        // "NVIDIA H200"
  int device_ordinal = -1;
  int cc = 0;                // 90
  launchfit::plan plan;
  work first_work;           // the work shape of the launch that made the plan
  std::string override_glob; // LAUNCHFIT_POLICY entry that chose the policy, if any
};

// The line logged for a new plan (text: key=value pairs; json: one object).
std::string format_plan(const plan_report& r, log_format f);
// Logs a new plan at info, plus one warning per spilling kernel and one for a plan with a warning.
void log_new_plan(const plan_report& r);

}  // namespace launchfit

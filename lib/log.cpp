#include <spdlog/cfg/helpers.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cctype>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "launchfit/log.hpp"
#include "log_internal.hpp"

namespace launchfit {
namespace {

constexpr const char* logger_name = "launchfit";

std::optional<spdlog::level::level_enum> level_from_env() {
  if (const char* v = std::getenv("LAUNCHFIT_LOG_LEVEL"); v && *v) {
    const auto lvl = spdlog::level::from_str(v);
    if (lvl != spdlog::level::off || std::string(v) == "off") return lvl;
  }
  // SPDLOG_LEVEL="info,launchfit=debug": honour our entry, or the bare default level.
  if (const char* v = std::getenv("SPDLOG_LEVEL"); v && *v) {
    std::optional<spdlog::level::level_enum> bare;
    std::string s(v);
    std::size_t pos = 0;
    while (pos <= s.size()) {
      const std::size_t comma = s.find(',', pos);
      const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      const std::size_t eq = item.find('=');
      if (eq == std::string::npos) {
        if (!item.empty()) bare = spdlog::level::from_str(item);
      } else if (item.substr(0, eq) == logger_name) {
        return spdlog::level::from_str(item.substr(eq + 1));
      }
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (bare) return bare;
  }
  return std::nullopt;
}

struct log_state {
  std::mutex mutex;
  std::shared_ptr<spdlog::logger> logger;
  log_format format = log_format::text;
  bool format_from_env_done = false;
  std::set<std::string> spill_warned;
  bool owns_logger = false;  // we created it, so we may set its pattern
  std::vector<std::shared_ptr<spdlog::logger>> every_logger;  // keeps logger_fast() targets alive
};

std::atomic<spdlog::logger*> fast_logger{nullptr};

void publish_locked(log_state& s) {
  s.every_logger.push_back(s.logger);
  fast_logger.store(s.logger.get(), std::memory_order_release);
}

void format_env_locked(log_state& s) {
  if (s.format_from_env_done) return;
  s.format_from_env_done = true;
  if (const char* v = std::getenv("LAUNCHFIT_LOG_FORMAT"); v && std::string(v) == "json") s.format = log_format::json;
}

// JSON lines must be nothing but the object: drop the text prefix on the logger we own.
void apply_pattern_locked(log_state& s) {
  if (!s.owns_logger || !s.logger) return;
  s.logger->set_pattern(s.format == log_format::json ? "%v" : "[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
}

log_state& state() {
  static log_state* s = new log_state();
  return *s;
}

std::shared_ptr<spdlog::logger> make_default_logger(bool& owns) {
  owns = false;
  if (auto existing = spdlog::get(logger_name)) return existing;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(logger_name, sink);
  l->set_level(level_from_env().value_or(spdlog::level::info));
  try {
    spdlog::register_logger(l);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(logger_name)) return existing;  // registered concurrently
  }
  owns = true;
  return l;
}

std::string pct(double v) {
  char s[16];
  std::snprintf(s, sizeof s, "%.1f%%", v * 100.0);
  return s;
}

std::string work_to_string(const work& w) {
  if (w.kind == work::shape::none) return "resident";
  const std::string per = w.per_thread > 1 ? "(per_thread=" + std::to_string(w.per_thread) + ")" : std::string();
  return (w.kind == work::shape::items ? "items" : "grid_stride") + per;
}

std::string grid_rule(const plan& p, const work& w) {
  if (p.grid.x != 0) return "fixed(" + p.grid.to_string() + ")";
  if (p.cooperative && w.kind == work::shape::none) return "co-resident(" + std::to_string(p.resident_blocks()) + ")";
  return work_to_string(w) + (w.kind == work::shape::items ? std::string() : "(cap " + std::to_string(p.resident_blocks()) + ")");
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  log_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.logger) {
    s.logger = make_default_logger(s.owns_logger);
    format_env_locked(s);
    apply_pattern_locked(s);
    publish_locked(s);
  }
  return s.logger;
}

void set_logger(std::shared_ptr<spdlog::logger> l) {
  log_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (l) {
    s.logger = std::move(l);
    s.owns_logger = false;
  } else {
    s.logger = make_default_logger(s.owns_logger);
    apply_pattern_locked(s);
  }
  publish_locked(s);
}

void set_log_format(log_format f) {
  log_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.format = f;
  s.format_from_env_done = true;
  apply_pattern_locked(s);
}

log_format current_log_format() {
  log_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  format_env_locked(s);
  return s.format;
}

std::string format_plan(const plan_report& r, log_format f) {
  const plan& p = r.plan;
  const std::string cc = std::to_string(r.cc / 10) + "." + std::to_string(r.cc % 10);
  if (f == log_format::json) {
    nlohmann::json j = {
        {"level", "info"},
        {"logger", logger_name},
        {"event", "new_plan"},
        {"kernel", r.kernel.demangled},
        {"device", r.device},
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
        {"spill_bytes", r.kernel.local_bytes_per_thread},
        {"static_smem_bytes", r.kernel.static_smem_bytes},
        {"policy", p.policy},
        {"match", p.match},
        {"reason", p.reason},
    };
    if (!p.warning.empty()) j["warning"] = p.warning;
    if (!r.override_glob.empty()) j["override"] = r.override_glob;
    if (p.trials > 0) {
      j["trials"] = p.trials;
      j["tuning_ms"] = p.tuning_ms;
    }
    return j.dump();
  }
  std::string s = "new plan: kernel=" + r.kernel.demangled + " device=\"" + r.device + "\" #" +
                  std::to_string(r.device_ordinal) + " cc=" + cc + " block=" + p.block.to_string() +
                  " grid=" + grid_rule(p, r.first_work) + " smem=" + std::to_string(p.dynamic_smem_bytes) +
                  "B occupancy=" + pct(p.occupancy.occupancy) + " (" +
                  std::to_string(p.occupancy.active_blocks_per_sm) + " blocks, " +
                  std::to_string(p.occupancy.active_warps_per_sm) + " warps/SM; runs " +
                  std::to_string(p.blocks_per_sm) + " blocks/SM) limiter=" + limiter_names(p.occupancy.limiters) +
                  " regs=" + std::to_string(r.kernel.regs_per_thread) +
                  " spill=" + std::to_string(r.kernel.local_bytes_per_thread) + "B policy=" + p.policy;
  if (p.cooperative) s += " cooperative";
  if (!r.override_glob.empty()) s += " override=\"" + r.override_glob + "\"";
  s += " match=" + p.match;
  if (p.trials > 0) {
    char t[64];
    std::snprintf(t, sizeof t, " trials=%d tuning=%.1fms", p.trials, p.tuning_ms);
    s += t;
  }
  s += " reason=\"" + p.reason + "\"";
  return s;
}

void log_new_plan(const plan_report& r) {
  auto l = logger();
  const log_format f = current_log_format();
  if (l->should_log(spdlog::level::info)) l->info(format_plan(r, f));
  if (!r.plan.warning.empty()) {
    if (f == log_format::json) {
      l->warn(nlohmann::json{{"event", "policy_shortfall"}, {"kernel", r.kernel.demangled},
                             {"policy", r.plan.policy}, {"warning", r.plan.warning}}
                  .dump());
    } else {
      l->warn("kernel {}: {}", r.kernel.demangled, r.plan.warning);
    }
  }
  if (r.kernel.local_bytes_per_thread > 0) {
    bool first = false;
    {
      log_state& s = state();
      std::lock_guard<std::mutex> lock(s.mutex);
      first = s.spill_warned.insert(r.kernel.name).second;
    }
    if (first) {
      if (f == log_format::json) {
        l->warn(nlohmann::json{{"event", "spill"}, {"kernel", r.kernel.demangled},
                               {"spill_bytes", r.kernel.local_bytes_per_thread},
                               {"registers", r.kernel.regs_per_thread}}
                    .dump());
      } else {
        l->warn("kernel {} spills {} B per thread to local memory ({} registers): expect extra memory traffic",
                r.kernel.demangled, r.kernel.local_bytes_per_thread, r.kernel.regs_per_thread);
      }
    }
  }
}

namespace detail {
std::shared_ptr<spdlog::logger> logger() { return launchfit::logger(); }
spdlog::logger& logger_fast() {
  if (spdlog::logger* l = fast_logger.load(std::memory_order_acquire)) return *l;
  return *launchfit::logger();
}
}  // namespace detail

}  // namespace launchfit

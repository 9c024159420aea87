// SPDX-License-Identifier: MIT
// What a new plan's log lines say: the plan line (text or JSON: the kernel, device, block, grid rule,
// occupancy and why), its policy's shortfall and the kernel's spill warning, once per kernel.

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "launch_options.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "log_line.hpp"
#include "plan_cache.hpp"
#include "plan_description.hpp"
#include "text.hpp"

namespace launchfit::detail {

namespace {

std::string work_to_string(const work& w) {
  if (w.kind == work::shape::none) return "resident";
  if (w.kind == work::shape::grid) return "caller(" + w.grid.to_string() + ")";
  std::string per = w.per_thread > 1 ? "per_thread=" + std::to_string(w.per_thread) : std::string();
  if (w.kind == work::shape::grid_stride && w.waves > 1)
    per += (per.empty() ? "" : ",") + std::string("waves=") + std::to_string(w.waves);
  if (w.kind == work::shape::items && w.rank > 1)
    per += std::string(per.empty() ? "" : ",") + std::to_string(w.rank) + "d";
  return work_kind_word(w.kind) + (per.empty() ? per : "(" + per + ")");
}

std::string grid_rule(const plan& p, const work& w) {
  if (p.grid.x != 0 && w.kind != work::shape::grid) return "fixed(" + p.grid.to_string() + ")";
  if (p.options.cooperative && w.kind == work::shape::none)
    return "co-resident(" + std::to_string(p.resident_blocks()) + ")";
  if (w.kind == work::shape::grid_stride && p.full_grid && w.waves == 0)
    return work_to_string(w) + "(full grid)";
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
  if (p.resident_clusters <= 0 || p.sm_count <= 0 || o.active_warps_per_sm <= 0 || o.occupancy <= 0) return 0;
  const double max_threads_per_sm = 32.0 * o.active_warps_per_sm / o.occupancy;
  return static_cast<double>(p.resident_blocks()) * p.block_threads / (max_threads_per_sm * p.sm_count);
}

}  // namespace

std::string grid_rule_text(const plan& p, const work& w) { return grid_rule(p, w); }

// What the report adds to the plan's own fields (plan_description.hpp), under the same names in text and JSON.
std::vector<plan_field> describe_report(const plan_report& r, const std::string& kernel) {
  const plan& p = r.kept->plan;
  const device_limits& dev = *r.device;
  const auto text = [](const char* name, const std::string& v, std::string shown_as) {
    return plan_field{name, valid_utf8(v, log_field_cap), std::move(shown_as), shown::line, false};
  };
  const auto number = [](const char* name, long long v) {
    return plan_field{name, v, std::to_string(v), shown::line, false};
  };
  std::vector<plan_field> f;
  f.push_back(text("kernel", kernel, escape_text(kernel, log_field_cap)));
  f.push_back(text("device", dev.name, quote_text(dev.name, log_field_cap)));
  f.push_back(number("device_ordinal", dev.ordinal));
  const std::string cc = std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor);
  f.push_back(text("cc", cc, cc));
  f.push_back(text("grid_rule", grid_rule(p, r.first_work), grid_rule(p, r.first_work)));
  if (const std::string g = first_grid(p, r.first_work); !g.empty()) f.push_back(text("first_grid", g, g));
  if (const double w = first_waves(p, r.first_work); w >= 0) {
    char t[32];
    std::snprintf(t, sizeof t, "%.2f", w);
    f.push_back({"waves_per_sm", w, t, shown::line, false});
  }
  if (p.options.has_cluster()) {
    const double c = cluster_occupancy(p, p.occupancy);
    f.push_back({"cluster_occupancy", c, percent_text(c), shown::line, false});
  }
  f.push_back(number("registers", r.kept->regs_per_thread));
  f.push_back(number("local_bytes_per_thread", static_cast<long long>(r.kept->local_bytes_per_thread)));
  f.push_back(number("static_smem_bytes", static_cast<long long>(r.kept->static_smem_bytes)));
  if (r.family_size > 0) f.push_back(number("family_members", r.family_size));
  if (dev.sm_count > 0 && p.sm_count < dev.sm_count) f.push_back(number("device_sm_count", dev.sm_count));
  if (!r.override_glob.empty())
    f.push_back(text("override", r.override_glob, quote_text(r.override_glob, log_field_cap)));
  return f;
}

std::string format_plan(const plan_report& r, log_format f) {
  // Demangled here (on the logging thread, when asynchronous) unless the launch had to name the kernel.
  const kept_plan& k = *r.kept;
  const std::string kernel = display_name(k);
  const std::vector<plan_field> context = describe_report(r, kernel);
  const std::vector<plan_field> fields =
      describe_plan(k.plan, f == log_format::json ? plan_forms::json_and_text : plan_forms::text);
  if (f == log_format::json) {
    nlohmann::json j = {{"level", "info"}, {"logger", logger_name}, {"event", "new_plan"}};
    j.update(fields_json(context, false));
    nlohmann::json plan = fields_json(fields, false);
    for (auto& [name, value] : plan.items()) {  // free text from policies, plugins and files: capped, valid
      (void)name;
      if (value.is_string()) value = valid_utf8(value.get_ref<const std::string&>(), log_field_cap);
    }
    j["plan"] = std::move(plan);
    return dump_json(j);
  }
  return "new plan: " + fields_text(context, shown::line) + " " + fields_text(fields, shown::line);
}

void log_new_plan(plan_report report) noexcept {
  try {
    const log_front front = started_front();
    spdlog::logger& l = front.logger;
    const log_format f = front.format;
    // The report moves once, into what a queued line holds; the lines below read it there.
    const auto shared = std::make_shared<const plan_report>(std::move(report));
    const kept_plan& k = *shared->kept;
    if (l.should_log(spdlog::level::info) && !queue_plan_line(shared))
      log_payload(spdlog::level::info, {format_plan(*shared, f), f == log_format::json});
    if (!k.plan.warning.empty() && l.should_log(spdlog::level::warn)) {
      if (f == log_format::json) {
        log_event(spdlog::level::warn, "policy_shortfall",
                  "kernel " + k.kernel_demangled + ": " + k.plan.warning,
                  {{"kernel", k.kernel_demangled}, {"policy", k.plan.policy}, {"warning", k.plan.warning}});
      } else {
        log_payload(spdlog::level::warn, {"kernel " + escape_text(k.kernel_demangled, log_field_cap) + ": " +
                                          escape_text(k.plan.warning, log_field_cap)});
      }
    }
    if (k.local_bytes_per_thread > 0) {
      const bool first = first_spill_warning(k.kernel_name.substr(0, log_field_cap));
      if (first && l.should_log(spdlog::level::warn)) {
        const std::string spill = std::to_string(k.local_bytes_per_thread);
        const std::string regs = std::to_string(k.regs_per_thread);
        if (f == log_format::json) {
          // Numbers stay numbers in the spill object.
          nlohmann::json j = {{"level", "warning"},
                              {"logger", logger_name},
                              {"event", "local_memory"},
                              {"kernel", valid_utf8(k.kernel_demangled, log_field_cap)},
                              {"local_bytes_per_thread", k.local_bytes_per_thread},
                              {"registers", k.regs_per_thread}};
          log_payload(spdlog::level::warn, {dump_json(j), true});
        } else {
          log_payload(spdlog::level::warn, {"kernel " + escape_text(k.kernel_demangled, log_field_cap) +
                                            " uses " + spill + " B of local memory per thread (" + regs +
                                            " registers; a stack frame or register spills, -Xptxas -v says "
                                            "which): expect extra memory traffic"});
        }
      }
    }
  } catch (...) {
    count_dropped_line();
  }
}

}  // namespace launchfit::detail

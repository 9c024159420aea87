// SPDX-License-Identifier: MIT
// What a new plan's log lines say: the plan line (text or JSON: the kernel, device, block, grid rule,
// occupancy and why), its policy's shortfall and the kernel's spill warning, once per kernel.

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "log_line.hpp"
#include "text.hpp"

namespace launchfit::detail {

namespace {

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
  if (w.kind == work::shape::items && w.rank > 1)
    per += std::string(per.empty() ? "" : ",") + std::to_string(w.rank) + "d";
  return (w.kind == work::shape::items ? "items" : "grid_stride") + (per.empty() ? per : "(" + per + ")");
}

std::string grid_rule(const plan& p, const work& w) {
  if (p.grid.x != 0 && w.kind != work::shape::grid) return "fixed(" + p.grid.to_string() + ")";
  if (p.cooperative && w.kind == work::shape::none)
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
      "new plan: kernel=" + escape_text(kernel, log_field_cap) + " device=" + quoted(r.device) + " #" +
      std::to_string(r.device_ordinal) + " cc=" + cc + " block=" + p.block.to_string() +
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
    const log_front front = started_front();
    spdlog::logger& l = front.logger;
    const log_format f = front.format;
    // The report moves once, into what a queued line holds; the lines below read it there.
    const auto shared = std::make_shared<const plan_report>(std::move(report));
    const plan_report& r = *shared;
    if (l.should_log(spdlog::level::info) && !queue_plan_line(shared))
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
      const bool first = first_spill_warning(r.kernel.name.substr(0, log_field_cap));
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
    count_dropped_line();
  }
}

}  // namespace launchfit::detail

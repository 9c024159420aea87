// SPDX-License-Identifier: MIT
// One description of a plan (plan_description.hpp): its fields, names, JSON values and text forms.

#include "plan_description.hpp"

#include <cstdio>

#include "launchfit/occupancy.hpp"
#include "plan_json.hpp"
#include "text.hpp"

namespace launchfit::detail {
namespace {

constexpr std::size_t text_cap = 4096;  // longest free text a line shows of one field

nlohmann::json dims_json(dims d) { return nlohmann::json::array({d.x, d.y, d.z}); }

std::string millis(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1fms", v);
  return s;
}

plan_field number(const char* name, long long v, shown where) {
  return {name, v, std::to_string(v), where, true};
}

// A flag: its name alone where set and `worth` showing, nowhere else.
plan_field flag(const char* name, bool v, bool worth = true) {
  return {name, v, {}, v && worth ? shown::everywhere : shown::nowhere, true};
}

}  // namespace

std::vector<plan_field> describe_plan(const plan& p, plan_forms forms) {
  const launch_options& o = p.options;
  const occupancy_result& occ = p.occupancy;
  const bool json = forms == plan_forms::json_and_text;
  // A value only the JSON printers read (null for a text printer).
  const auto only_json = [json](auto&& make) { return json ? nlohmann::json(make()) : nlohmann::json(); };
  std::vector<plan_field> f;
  f.reserve(28);
  f.push_back({"block", only_json([&] { return dims_json(p.block); }), p.block.to_string(), shown::everywhere, true});
  f.push_back(number("block_threads", p.block_threads, shown::nowhere));  // the block's product
  f.push_back(number("blocks_per_sm", p.blocks_per_sm, shown::everywhere));
  f.push_back(number("sm_count", p.sm_count, shown::everywhere));
  f.push_back(number("dynamic_smem_bytes", static_cast<long long>(p.dynamic_smem_bytes), shown::everywhere));
  // grid.x == 0: the grid is made from each launch's work (the log line's grid_rule says how).
  f.push_back({"grid", only_json([&] { return dims_json(p.grid); }), p.grid.to_string(),
               p.grid.x ? shown::everywhere : shown::nowhere, true});
  const bool clustered = o.has_cluster();
  f.push_back({"cluster", only_json([&] { return dims_json(o.cluster); }), o.cluster.to_string(),
               clustered ? shown::everywhere : shown::nowhere, true});
  f.push_back(number("resident_clusters", p.resident_clusters, clustered ? shown::line : shown::nowhere));
  f.push_back(flag("cluster_from_kernel", o.cluster_from_kernel, clustered));
  f.push_back(flag("cooperative", o.cooperative));
  f.push_back(flag("programmatic", o.programmatic));
  f.push_back(flag("full_grid", p.full_grid));
  f.push_back({"blocks", only_json([&] { return p.blocks; }), quote_text(p.blocks, text_cap),
               p.blocks.empty() ? shown::nowhere : shown::everywhere, true});
  // The launch's block shape is part of the plan's key, not of the stored plan.
  const bool shaped = p.shape_rule.is_set();
  f.push_back({"block_shape", shaped ? only_json([&] { return p.shape_rule.to_string(); }) : nlohmann::json(),
               shaped ? p.shape_rule.to_string() : std::string(), shaped ? shown::everywhere : shown::nowhere, false});
  // Shown once computed (a plan a policy made but nothing validated yet has none).
  const bool computed = occ.active_blocks_per_sm > 0 || occ.limiters != 0;
  f.push_back({"occupancy", only_json([&] { return occupancy_to_json(occ); }), percent_text(occ.occupancy),
               computed ? shown::everywhere : shown::nowhere, true});
  // The JSON holds these inside "occupancy", under the same names.
  const shown counts = computed ? shown::line : shown::nowhere;
  f.push_back({"active_blocks_per_sm", nullptr, std::to_string(occ.active_blocks_per_sm), counts, false});
  f.push_back({"active_warps_per_sm", nullptr, std::to_string(occ.active_warps_per_sm), counts, false});
  f.push_back({"limiters", nullptr, limiter_names(occ.limiters), computed ? shown::everywhere : shown::nowhere, false});
  f.push_back(
      {"policy", only_json([&] { return p.policy; }), escape_text(p.policy, text_cap), shown::everywhere, true});
  f.push_back({"match", only_json([&] { return p.match; }), escape_text(p.match, text_cap), shown::line, true});
  f.push_back(number("trials", p.trials, p.trials > 0 ? shown::line : shown::nowhere));
  f.push_back({"tuning_ms", p.tuning_ms, millis(p.tuning_ms), p.trials > 0 ? shown::line : shown::nowhere, true});
  // A plan's warning has a line of its own (log_new_plan()).
  f.push_back({"warning", only_json([&] { return p.warning; }), quote_text(p.warning, text_cap), shown::nowhere, true});
  f.push_back({"reason", only_json([&] { return p.reason; }), quote_text(p.reason, text_cap), shown::line, true});
  return f;
}

std::string fields_text(const std::vector<plan_field>& fields, shown at) {
  std::string s;
  for (const plan_field& f : fields) {
    if (f.where == shown::nowhere || (at == shown::everywhere && f.where != shown::everywhere)) continue;
    if (!s.empty()) s += ' ';
    s += f.name;
    if (!f.text.empty() || !f.value.is_boolean()) {
      s += '=';
      s += f.text;
    }
  }
  return s;
}

nlohmann::json fields_json(const std::vector<plan_field>& fields, bool stored_only) {
  nlohmann::json j = nlohmann::json::object();
  for (const plan_field& f : fields) {
    if (f.value.is_null() || (stored_only && !f.stored)) continue;
    j[f.name] = f.value;
  }
  return j;
}

}  // namespace launchfit::detail

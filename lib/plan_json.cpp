// SPDX-License-Identifier: MIT
// plan and occupancy_result as JSON: the field list, written once (plan_json.hpp).

#include "plan_json.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "plan_description.hpp"
#include "text.hpp"

namespace launchfit::detail {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const char* key, const std::string& what) {
  throw bad_plan_json(std::string("'") + key + "' is " + what);
}

// One JSON value as an integer in [lo, hi].
template <class T>
T integer(const json& v, const char* key, long long lo, unsigned long long hi) {
  static_assert(std::is_integral_v<T>);
  if (!v.is_number_integer()) bad(key, "not an integer");
  bool in_range;
  unsigned long long u = 0;
  long long i = 0;
  if (v.is_number_unsigned()) {  // what the parser makes of every non-negative number in the text
    u = v.get<std::uint64_t>();
    in_range = u <= hi && (lo <= 0 || u >= static_cast<unsigned long long>(lo));
  } else {
    i = v.get<std::int64_t>();
    in_range = i >= lo && (i < 0 || static_cast<unsigned long long>(i) <= hi);
  }
  if (!in_range) bad(key, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.is_number_unsigned() ? static_cast<T>(u) : static_cast<T>(i);
}

double number(const json& v, const char* key, double lo, double hi) {
  if (!v.is_number()) bad(key, "not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(key, "out of range");
  return d;
}

dims dims_of(const json& v, const char* key, unsigned lo, unsigned hi) {
  if (!v.is_array() || v.size() != 3) bad(key, "not an array of 3");
  return dims{integer<unsigned>(v[0], key, lo, hi), integer<unsigned>(v[1], key, lo, hi),
              integer<unsigned>(v[2], key, lo, hi)};
}

// obj[key] through read(value) when present.
template <class F>
void field(const json& obj, const char* key, F&& read) {
  if (const auto it = obj.find(key); it != obj.end()) read(*it);
}

template <class T>
void int_field(const json& obj, const char* key, T& out, long long lo, unsigned long long hi) {
  field(obj, key, [&](const json& v) { out = integer<T>(v, key, lo, hi); });
}

void text_field(const json& obj, const char* key, std::string& out) {
  field(obj, key, [&](const json& v) {
    if (!v.is_string()) bad(key, "not a string");
    out = sanitize_text(v.get_ref<const std::string&>(), max_plan_text_bytes);
  });
}

constexpr unsigned long long int_max = INT_MAX;
constexpr unsigned long long smem_max = 1ull << 30;  // far above any device's shared memory

}  // namespace

json occupancy_to_json(const occupancy_result& o) {
  return {{"block_threads", o.block_threads},
          {"dynamic_smem_bytes", o.dynamic_smem_bytes},
          {"active_blocks_per_sm", o.active_blocks_per_sm},
          {"active_warps_per_sm", o.active_warps_per_sm},
          {"active_threads_per_sm", o.active_threads_per_sm},
          {"occupancy", o.occupancy},
          {"limiters", o.limiters},
          {"blocks_limit_warps", o.blocks_limit_warps},
          {"blocks_limit_registers", o.blocks_limit_registers},
          {"blocks_limit_shared_memory", o.blocks_limit_shared_memory},
          {"blocks_limit_blocks", o.blocks_limit_blocks},
          {"allocated_regs_per_block", o.allocated_regs_per_block},
          {"allocated_smem_per_block_bytes", o.allocated_smem_per_block_bytes}};
}

json plan_to_json(const plan& p) { return fields_json(describe_plan(p), true); }

occupancy_result occupancy_from_json(const json& j) {
  if (!j.is_object()) throw bad_plan_json("'occupancy' is not an object");
  occupancy_result o;
  int_field(j, "block_threads", o.block_threads, 0, 1024);
  int_field(j, "dynamic_smem_bytes", o.dynamic_smem_bytes, 0, smem_max);
  int_field(j, "active_blocks_per_sm", o.active_blocks_per_sm, 0, int_max);
  int_field(j, "active_warps_per_sm", o.active_warps_per_sm, 0, int_max);
  int_field(j, "active_threads_per_sm", o.active_threads_per_sm, 0, int_max);
  field(j, "occupancy", [&](const json& v) { o.occupancy = number(v, "occupancy", 0, 1); });
  int_field(j, "limiters", o.limiters, 0, 0xFFFF);
  int_field(j, "blocks_limit_warps", o.blocks_limit_warps, 0, int_max);
  int_field(j, "blocks_limit_registers", o.blocks_limit_registers, 0, int_max);
  int_field(j, "blocks_limit_shared_memory", o.blocks_limit_shared_memory, 0, int_max);
  int_field(j, "blocks_limit_blocks", o.blocks_limit_blocks, 0, int_max);
  int_field(j, "allocated_regs_per_block", o.allocated_regs_per_block, 0, int_max);
  int_field(j, "allocated_smem_per_block_bytes", o.allocated_smem_per_block_bytes, 0, smem_max);
  return o;
}

plan plan_from_json(const json& j) {
  if (!j.is_object()) throw bad_plan_json("'plan' is not an object");
  plan p;
  const auto block = j.find("block");
  if (block == j.end()) throw bad_plan_json("missing 'block'");
  p.block = dims_of(*block, "block", 1, 1024);
  // A plan that could never launch is not worth trusting (blocks hold at most 1024 threads everywhere).
  if (p.block.count() > 1024) throw bad_plan_json("block " + p.block.to_string() + " is not a legal block");
  p.block_threads = static_cast<int>(p.block.count());
  // Written for readers of the file; one that disagrees with the block is not the plan that was made.
  field(j, "block_threads", [&](const json& v) {
    if (integer<int>(v, "block_threads", 0, 1024) != p.block_threads)
      bad("block_threads", v.dump() + ", but block " + p.block.to_string() + " holds " +
                               std::to_string(p.block_threads) + " threads");
  });
  int_field(j, "blocks_per_sm", p.blocks_per_sm, 0, 65536);
  int_field(j, "sm_count", p.sm_count, 0, 65536);
  int_field(j, "dynamic_smem_bytes", p.dynamic_smem_bytes, 0, smem_max);
  field(j, "grid", [&](const json& v) {
    p.grid = dims_of(v, "grid", 0, int_max);
    if (p.grid.y == 0 || p.grid.z == 0 || p.grid.y > 65535 || p.grid.z > 65535) {
      bad("grid", "out of range (y and z in 1..65535)");
    }
  });
  field(j, "cluster", [&](const json& v) {
    p.options.cluster = dims_of(v, "cluster", 1, 64);
    if (p.options.cluster.count() > 64) bad("cluster", "out of range (at most 64 blocks)");
  });
  field(j, "cooperative", [&](const json& v) {
    if (!v.is_boolean()) bad("cooperative", "not a boolean");
    p.options.cooperative = v.get<bool>();
  });
  // Shown by tools; a launch recomputes residency and the block rule, and checks both flags against itself.
  int_field(j, "resident_clusters", p.resident_clusters, 0, int_max);
  field(j, "cluster_from_kernel", [&](const json& v) {
    if (!v.is_boolean()) bad("cluster_from_kernel", "not a boolean");
    p.options.cluster_from_kernel = v.get<bool>();
  });
  field(j, "full_grid", [&](const json& v) {
    if (!v.is_boolean()) bad("full_grid", "not a boolean");
    p.full_grid = v.get<bool>();
  });
  field(j, "programmatic", [&](const json& v) {
    if (!v.is_boolean()) bad("programmatic", "not a boolean");
    p.options.programmatic = v.get<bool>();
  });
  text_field(j, "blocks", p.blocks);
  field(j, "occupancy", [&](const json& v) { p.occupancy = occupancy_from_json(v); });
  text_field(j, "policy", p.policy);
  text_field(j, "reason", p.reason);
  text_field(j, "warning", p.warning);
  int_field(j, "trials", p.trials, 0, int_max);
  field(j, "tuning_ms", [&](const json& v) { p.tuning_ms = number(v, "tuning_ms", 0, max_tuning_ms); });
  return p;
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// launchfit-plans: list, show, diff, merge, prune and check launchfit plan-cache files (LAUNCHFIT_CACHE).
//
//   launchfit-plans list plans.json
//   launchfit-plans diff h100.json h200.json
//   launchfit-plans merge fleet.json staging-a.json staging-b.json
//   launchfit-plans prune fleet.json --driver-below 12.4 --keep-kernels kernels.txt
//   launchfit-plans check fleet.json
//   launchfit-plans push fleet.json redis://plans.internal:6379     (or pull, list, check a redis:// URL)
//
// Files are read and written with the library's own reader and writer: bounded in size, never a special
// file, merged and pruned under the lock the library's writers take. Text from a file is shown escaped.
// Exit codes (demos/common/tool.hpp, as every launchfit tool): 0 done; 1 a bad entry (check), differences
// (diff), conflicts with --fail-on-conflict (merge), bad entries in a push or pull, a refused prune; 2 a bad
// command line or a file that is not a plan cache; 3 a file that cannot be read or written, a lock held too
// long, or a store that cannot be reached.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cache_file.hpp"
#include "plan_match.hpp"
#include "plan_merge.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"
#include "plan_json.hpp"
#include "store/kv_scheme.hpp"
#include "store/plan_tools.hpp"
#include "text.hpp"
#include "tool.hpp"

namespace {

namespace ld = launchfit::detail;
namespace tools = launchfit::detail::plan_tools;
using launchfit::stored_key;
using ld::stored_entry;
using nlohmann::json;

// A bad command line or a file that is not a plan cache: exit code 2 (launchfit_tool::exit_usage).
struct usage_error {
  std::string message;
};

// A file that cannot be read or written, a lock held too long, a store that cannot be reached: exit code 3
// (launchfit_tool::exit_environment).
struct environment_error {
  std::string message;
};

// Calibrations are entries of the file as plans are (the library writes both): every command knows them.
bool is_calibration(const stored_entry& e) { return e.key.kernel == ld::calibration_kernel; }

// Text from a file as this tool prints it: escaped as launchfit's log lines escape it (text.hpp), and a
// store URL's password (redis://user:pw@...) replaced by *** wherever a URL is printed (ld::redact_url).
std::string shown(std::string_view s, std::size_t max_bytes = 4096) {
  if (s.find("://") != std::string_view::npos && s.find('@') != std::string_view::npos)
    return ld::escape_text(ld::redact_url(s), max_bytes);
  return ld::escape_text(s, max_bytes);
}

// ---- reading ----------------------------------------------------------------------------------------------

struct loaded {
  std::string path;
  std::vector<stored_entry> entries;  // one per key, in file order (the one launchfit keeps of a duplicate)
  std::size_t skipped = 0;
  std::vector<std::string> problems;
};

using ld::key_tuple;
using ld::tie_key;

// One entry per key, as every reader of the library keeps them (plan_merge.hpp).
std::vector<stored_entry> unique_entries(std::vector<stored_entry> in) { return ld::one_entry_per_key(std::move(in)); }

// A remote store in place of a file: "redis://..." (any "scheme://" is taken for a URL, so that a typo in the
// scheme is reported as such rather than as a missing file).
bool is_remote_url(const std::string& path) { return path.find("://") != std::string::npos; }

// A URL that is not one is the command line's (exit 2).
void check_store_url(const std::string& text) {
  if (const std::string why = tools::url_problem(text); !why.empty())
    throw usage_error{shown(text, 300) + " is not redis://[user[:password]@]host:port[/db] (" + why + ")"};
}

// What a store command says when it failed: the store that cannot be reached, that answered an error, or the
// bound (keys, bytes, time) that stopped it (exit 3: the environment, as a file that cannot be read).
[[noreturn]] void store_failed(const std::string& text, const tools::failure& f) {
  throw environment_error{shown(text, 300) + ": " + shown(f.text, 1024)};
}

// Every valid entry at the URL, as load() reads a file; a store that cannot be read whole within the bounds
// is an environment_error (exit 3).
loaded load_remote(const std::string& text) {
  check_store_url(text);
  const tools::listing l = tools::list_entries(text);
  if (l.failed) store_failed(text, l.failed);
  loaded out{ld::redact_url(text), unique_entries(l.entries), l.refused, {}};
  for (const auto& p : l.problems) out.problems.push_back(shown(p.key, 128) + ": " + shown(p.why, 1024));
  return out;
}

// Reads a file as the library would; an unusable file is a usage_error (exit 2). Bad entries are counted.
loaded load(const std::string& path, std::size_t max_bytes) {
  if (is_remote_url(path)) return load_remote(path);
  std::string text, why;
  switch (ld::read_cache_file(path, max_bytes, text, why)) {
    case ld::cache_file_read::ok:
      break;
    case ld::cache_file_read::missing:
      throw environment_error{shown(path, 512) + ": no such file"};
    case ld::cache_file_read::refused:
      throw environment_error{shown(path, 512) + ": " + why};
  }
  ld::cache_file_contents c = ld::parse_cache_file(text);
  switch (c.status) {
    case ld::cache_file_status::ok:
    case ld::cache_file_status::empty:
      break;
    case ld::cache_file_status::corrupt:
    case ld::cache_file_status::foreign:
    case ld::cache_file_status::wrong_version:
      throw usage_error{shown(path, 512) + ": " + c.problem};
  }
  return {path, unique_entries(std::move(c.entries)), c.skipped, std::move(c.problems)};
}

// A write refused by update_cache_file(): a file that is there but is no plan cache of this version was
// given in place of one (exit 2); anything else is the file system's or the lock's (exit 3).
[[noreturn]] void write_failed(const std::string& path, const std::string& why, std::size_t max_bytes) {
  std::string text, unused;
  if (ld::read_cache_file(path, max_bytes, text, unused) == ld::cache_file_read::ok) {
    const ld::cache_file_status status = ld::parse_cache_file(text).status;
    if (status == ld::cache_file_status::foreign || status == ld::cache_file_status::wrong_version)
      throw usage_error{shown(path, 512) + ": " + why};
  }
  throw environment_error{shown(path, 512) + ": " + why};
}

void warn_skipped(const loaded& f) {
  if (f.skipped == 0) return;
  std::cerr << "launchfit-plans: warning: " << shown(f.path, 512) << ": skipped " << f.skipped << " bad entr"
            << (f.skipped == 1 ? "y" : "ies") << " (" << (f.problems.empty() ? "" : f.problems.front())
            << "); see launchfit-plans check\n";
}

// ---- what an entry says -----------------------------------------------------------------------------------

// kernel_fingerprint(): name|regs|static smem|local bytes|max threads|ptx|binary version. The name may hold
// '|' in a hostile file: the six numbers are taken from the right.
struct fingerprint {
  std::string name;
  long long regs = -1, static_smem = -1, local_bytes = -1, max_threads = -1, ptx = -1, binary = -1;
  bool ok = false;
};

// Read by the library's one reader of fingerprints (every entry the tool shows passed it).
fingerprint parse_fingerprint(const std::string& text) {
  fingerprint f;
  f.name = text;
  if (const std::optional<launchfit::kernel_resources> k = launchfit::kernel_from_fingerprint(text)) {
    f.name = k->name;
    f.regs = k->regs_per_thread;
    f.static_smem = static_cast<long long>(k->static_smem_bytes);
    f.local_bytes = static_cast<long long>(k->local_bytes_per_thread);
    f.max_threads = k->max_threads_per_block;
    f.ptx = k->ptx_version;
    f.binary = k->binary_version;
    f.ok = true;
  }
  return f;
}

std::string driver_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
std::string cc_text(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

std::string time_text(std::uint64_t ms) {
  if (ms == 0) return "unknown";
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  if (!::gmtime_r(&t, &tm)) return std::to_string(ms) + " ms";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string grid_rule(const launchfit::plan& p) {
  return p.grid.x == 0 ? "from the work" : "fixed " + p.grid.to_string();
}

std::string percent(double occupancy) {
  return std::to_string(static_cast<int>(occupancy * 100 + 0.5)) + "%";
}

// "0.225 ms ±1.2%, 16 trials" (then ", not clean: <conditions>"), or "-" for a static or untuned plan.
std::string measurement_text(const stored_entry& e) {
  if (!e.measurement) return "-";
  const ld::plan_measurement& m = *e.measurement;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.4g ms \u00b1%.1f%%, %u trials", m.best_ms, m.spread * 100, m.trials);
  std::string out = buf;
  if (!m.clean)
    out += ", not clean" + (m.conditions.empty() ? std::string() : ": " + shown(m.conditions, 256));
  return out;
}

// "redis://host:6379/0 epoch 2": where a remote or backfilled entry came from; "-" for a plan made here.
std::string origin_text(const stored_entry& e) {
  if (e.origin.empty() && e.epoch == 0) return "-";
  return (e.origin.empty() ? std::string("here") : shown(e.origin, 300)) + " epoch " +
         std::to_string(e.epoch);
}

std::string device_text(const stored_key& k) {
  return (k.device_name.empty() ? std::string("(model not recorded)") : shown(k.device_name, 64)) + " " +
         shown(k.device_uuid, 64);
}

json entry_as_json(const stored_entry& e) {
  json j = json::parse(ld::cache_file_line(e), nullptr, false);
  if (j.is_discarded()) j = json::object();
  if (is_calibration(e)) {  // its "calibration" object says it all; it has no plan to describe
    j["kind"] = "calibration";
    j.erase("plan");
    return j;
  }
  j["kind"] = "plan";
  const fingerprint f = parse_fingerprint(e.key.kernel);
  j["kernel_name"] = f.name;
  j["limiters"] = launchfit::limiter_names(e.plan.occupancy.limiters);
  j["grid_rule"] = grid_rule(e.plan);
  j["resident_blocks"] = e.plan.resident_blocks();
  return j;
}

void print_json(const json& j) { std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n'; }

// ---- list / show ------------------------------------------------------------------------------------------

struct selection {
  std::string kernel;  // substring of the kernel name
  std::string device;  // substring of the device name or UUID
  bool selects(const stored_entry& e) const {
    return (kernel.empty() || parse_fingerprint(e.key.kernel).name.find(kernel) != std::string::npos) &&
           (device.empty() || e.key.device_name.find(device) != std::string::npos ||
            e.key.device_uuid.find(device) != std::string::npos);
  }
};

// Columns of text as a terminal shows them: UTF-8 continuation bytes take no column.
std::size_t columns(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Rows of cells, each column as wide as its widest cell (the last cell of a row is not padded) and two spaces
// apart: a value never runs into the next one, however long (a policy's 45-byte parameter string included).
void print_columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows)
    for (std::size_t i = 0; i + 1 < row.size(); ++i) {
      if (width.size() <= i) width.resize(i + 1, 0);
      width[i] = std::max(width[i], columns(row[i]));
    }
  for (const auto& row : rows) {
    std::string line = "  ";
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - columns(row[i]) + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

int run_list(const std::vector<std::string>& files, const selection& sel, bool as_json,
             std::size_t max_bytes) {
  json all = json::array();
  for (const auto& path : files) {
    const loaded f = load(path, max_bytes);
    warn_skipped(f);
    std::vector<std::vector<std::string>> rows;
    if (!as_json) {
      std::cout << shown(path, 512) << ": " << f.entries.size() << " entr"
                << (f.entries.size() == 1 ? "y" : "ies") << "\n";
      rows.push_back({"device", "cc", "SMs", "driver", "kernel", "policy", "block", "blk/SM", "occ",
                      "limiters", "measured", "origin"});
    }
    for (const auto& e : f.entries) {
      if (!sel.selects(e)) continue;
      if (as_json) {
        json j = entry_as_json(e);
        j["file"] = is_remote_url(path) ? ld::redact_url(path) : path;
        all.push_back(std::move(j));
        continue;
      }
      const auto& k = e.key;
      const auto& p = e.plan;
      std::vector<std::string> row = {
          k.device_name.empty() ? shown(k.device_uuid, 28) : shown(k.device_name, 28), cc_text(k.cc),
          std::to_string(k.sm_count), driver_text(k.driver_version)};
      if (is_calibration(e)) {  // a measured target, not a plan: no block, occupancy or limiter
        row.push_back("(calibration: " + std::to_string(e.bytes_in_flight_per_sm) + " B in flight per SM)");
      } else {
        row.insert(row.end(),
                   {shown(parse_fingerprint(k.kernel).name, 32), shown(k.policy, 32), p.block.to_string(),
                    std::to_string(p.blocks_per_sm), percent(p.occupancy.occupancy),
                    launchfit::limiter_names(p.occupancy.limiters), measurement_text(e), origin_text(e)});
      }
      rows.push_back(std::move(row));
    }
    if (!as_json) print_columns(rows);
  }
  if (as_json) print_json(all);
  return 0;
}

int run_show(const std::vector<std::string>& files, const selection& sel, bool as_json,
             std::size_t max_bytes) {
  json all = json::array();
  for (const auto& path : files) {
    const loaded f = load(path, max_bytes);
    warn_skipped(f);
    std::size_t i = 0;
    for (const auto& e : f.entries) {
      ++i;
      if (!sel.selects(e)) continue;
      if (as_json) {
        json j = entry_as_json(e);
        j["file"] = is_remote_url(path) ? ld::redact_url(path) : path;
        all.push_back(std::move(j));
        continue;
      }
      const auto& k = e.key;
      const auto& p = e.plan;
      if (is_calibration(e)) {
        std::cout << shown(path, 512) << " #" << i << "\n"
                  << "  calibration  " << e.bytes_in_flight_per_sm
                  << " B in flight per SM (launchfit::bytes_in_flight's default target on this model)\n"
                  << "  device       " << device_text(k) << ", cc " << cc_text(k.cc) << ", " << k.sm_count
                  << " SMs, L2 " << k.l2_bytes << " B, driver " << driver_text(k.driver_version) << "\n"
                  << "  reason       " << shown(p.reason, 512) << "\n"
                  << "  stored       " << time_text(e.stored_at_ms) << "\n";
        continue;
      }
      const fingerprint fp = parse_fingerprint(k.kernel);
      std::cout << shown(path, 512) << " #" << i << "\n"
                << "  kernel       " << shown(fp.name) << "\n"
                << "  resources    "
                << (fp.ok ? std::to_string(fp.regs) + " regs/thread, " + std::to_string(fp.static_smem) +
                                " B static smem, " + std::to_string(fp.local_bytes) + " B local, max " +
                                std::to_string(fp.max_threads) + " threads, ptx " + std::to_string(fp.ptx) +
                                ", binary " + std::to_string(fp.binary)
                          : "(fingerprint not understood: " + shown(k.kernel, 256) + ")")
                << "\n"
                << "  device       " << device_text(k) << ", cc " << cc_text(k.cc) << ", " << k.sm_count
                << " SMs, L2 " << k.l2_bytes << " B, driver " << driver_text(k.driver_version) << "\n"
                << "  policy       " << shown(k.policy) << "\n"
                << "  smem rule    " << shown(k.smem_rule) << ", bucket " << k.bucket << "\n"
                << "  block        " << p.block.to_string() << " (" << p.block_threads << " threads), "
                << p.blocks_per_sm << " blocks/SM on " << p.sm_count << " SMs = " << p.resident_blocks()
                << " resident\n"
                << "  grid         " << grid_rule(p) << (p.options.cooperative ? ", cooperative" : "")
                << (p.options.cluster.count() > 1 ? ", cluster " + p.options.cluster.to_string() : "") << "\n"
                << "  dynamic smem " << p.dynamic_smem_bytes << " B\n"
                << "  occupancy    " << percent(p.occupancy.occupancy) << ", limited by "
                << launchfit::limiter_names(p.occupancy.limiters) << "\n"
                << "  reason       " << shown(p.reason, 512) << "\n"
                << (p.warning.empty() ? "" : "  warning      " + shown(p.warning, 512) + "\n")
                << (p.trials > 0 ? "  tuning       " + std::to_string(p.trials) + " trials, " +
                                       std::to_string(p.tuning_ms) + " ms\n"
                                 : "")
                << "  measured     " << measurement_text(e) << "\n"
                << "  origin       " << origin_text(e) << "\n"
                << "  stored       " << time_text(e.stored_at_ms) << "\n";
    }
  }
  if (as_json) print_json(all);
  return 0;
}

// ---- diff -------------------------------------------------------------------------------------------------

// What a plan is for, across GPUs and compilers: the kernel's name (not its resources, which a new compiler
// changes), the policy, the smem rule and the size bucket.
using launch_id = std::tuple<std::string, std::string, std::string, std::uint64_t>;

struct side {
  const stored_entry* e = nullptr;
  std::size_t others = 0;  // more entries for the same launch (other GPUs or drivers)
};

// Per launch, the newest entry (then the smallest UUID): one plan per side, chosen the same way every time.
std::map<launch_id, side> by_launch(const loaded& f) {
  std::map<launch_id, side> out;
  for (const auto& e : f.entries) {
    side& s =
        out[launch_id{parse_fingerprint(e.key.kernel).name, e.key.policy, e.key.smem_rule, e.key.bucket}];
    if (!s.e) {
      s.e = &e;
      continue;
    }
    ++s.others;
    if (std::make_tuple(~e.stored_at_ms, e.key.device_uuid) <
        std::make_tuple(~s.e->stored_at_ms, s.e->key.device_uuid))
      s.e = &e;
  }
  return out;
}

struct change {
  std::string what, a, b;
};

std::vector<change> changes(const stored_entry& a, const stored_entry& b) {
  std::vector<change> out;
  auto note = [&](const char* what, const std::string& x, const std::string& y) {
    if (x != y) out.push_back({what, x, y});
  };
  const auto &pa = a.plan, &pb = b.plan;
  note("block", pa.block.to_string(), pb.block.to_string());
  note("grid rule", grid_rule(pa), grid_rule(pb));
  note("cooperative", pa.options.cooperative ? "yes" : "no", pb.options.cooperative ? "yes" : "no");
  note("cluster", pa.options.cluster.to_string(), pb.options.cluster.to_string());
  note("dynamic smem", std::to_string(pa.dynamic_smem_bytes) + " B",
       std::to_string(pb.dynamic_smem_bytes) + " B");
  note("occupancy", percent(pa.occupancy.occupancy), percent(pb.occupancy.occupancy));
  note("limiters", launchfit::limiter_names(pa.occupancy.limiters),
       launchfit::limiter_names(pb.occupancy.limiters));
  note("residency", std::to_string(pa.blocks_per_sm) + " blocks/SM x " + std::to_string(pa.sm_count) + " SMs",
       std::to_string(pb.blocks_per_sm) + " blocks/SM x " + std::to_string(pb.sm_count) + " SMs");
  const fingerprint fa = parse_fingerprint(a.key.kernel), fb = parse_fingerprint(b.key.kernel);
  if (fa.ok && fb.ok) {
    note("registers", std::to_string(fa.regs), std::to_string(fb.regs));
    note("static smem", std::to_string(fa.static_smem) + " B", std::to_string(fb.static_smem) + " B");
    note("local memory", std::to_string(fa.local_bytes) + " B", std::to_string(fb.local_bytes) + " B");
  }
  return out;
}

std::string launch_text(const launch_id& id) {
  const auto& [kernel, policy, smem, bucket] = id;
  return shown(kernel, 200) + " " + shown(policy, 200) + " [" + shown(smem, 64) +
         (bucket ? ", bucket " + std::to_string(bucket) : "") + "]";
}

int run_diff(const std::string& path_a, const std::string& path_b, bool all, bool as_json,
             std::size_t max_bytes) {
  const loaded fa = load(path_a, max_bytes), fb = load(path_b, max_bytes);
  warn_skipped(fa);
  warn_skipped(fb);
  const auto a = by_launch(fa), b = by_launch(fb);
  std::set<launch_id> ids;
  for (const auto& [id, s] : a) ids.insert(id);
  for (const auto& [id, s] : b) ids.insert(id);
  std::size_t same = 0, changed = 0, only_a = 0, only_b = 0;
  json out = json::array();
  for (const auto& id : ids) {
    const auto ia = a.find(id), ib = b.find(id);
    json row = {{"kernel", std::get<0>(id)},
                {"policy", std::get<1>(id)},
                {"smem_rule", std::get<2>(id)},
                {"bucket", std::get<3>(id)}};
    if (ib == b.end() || ia == a.end()) {
      const bool in_a = ib == b.end();
      ++(in_a ? only_a : only_b);
      row["status"] = in_a ? "only in A" : "only in B";
      if (!as_json)
        std::cout << (in_a ? "- " : "+ ") << launch_text(id) << ": only in " << (in_a ? "A" : "B") << " ("
                  << device_text((in_a ? ia : ib)->second.e->key) << ")\n";
      out.push_back(std::move(row));
      continue;
    }
    const stored_entry &ea = *ia->second.e, &eb = *ib->second.e;
    const auto diffs = changes(ea, eb);
    row["a"] = entry_as_json(ea);
    row["b"] = entry_as_json(eb);
    if (diffs.empty()) {
      ++same;
      row["status"] = "same";
      if (all && !as_json)
        std::cout << "= " << launch_text(id) << ": block " << ea.plan.block.to_string() << ", "
                  << ea.plan.blocks_per_sm << " blocks/SM, " << percent(ea.plan.occupancy.occupancy) << "\n";
      if (all) out.push_back(std::move(row));
      continue;
    }
    ++changed;
    row["status"] = "changed";
    json list = json::array();
    std::string text;
    for (const auto& c : diffs) {
      list.push_back({{"what", c.what}, {"a", c.a}, {"b", c.b}});
      text += (text.empty() ? "" : "; ") + c.what + " " + c.a + " -> " + c.b;
    }
    row["changes"] = std::move(list);
    if (!as_json) {
      std::cout << "~ " << launch_text(id) << ": " << text << "\n"
                << "    A: " << device_text(ea.key) << ", driver " << driver_text(ea.key.driver_version)
                << (ia->second.others ? " (+" + std::to_string(ia->second.others) + " more)" : "") << "\n"
                << "    B: " << device_text(eb.key) << ", driver " << driver_text(eb.key.driver_version)
                << (ib->second.others ? " (+" + std::to_string(ib->second.others) + " more)" : "") << "\n";
    }
    out.push_back(std::move(row));
  }
  if (as_json) {
    print_json({{"a", path_a},
                {"b", path_b},
                {"same", same},
                {"changed", changed},
                {"only_in_a", only_a},
                {"only_in_b", only_b},
                {"launches", out}});
  } else {
    std::cout << same << " same, " << changed << " changed, " << only_a << " only in A ("
              << shown(path_a, 256) << "), " << only_b << " only in B (" << shown(path_b, 256) << ")\n";
  }
  return changed + only_a + only_b == 0 ? 0 : 1;
}

// ---- merge ------------------------------------------------------------------------------------------------

std::string entry_name(const stored_entry& e) {
  return shown(parse_fingerprint(e.key.kernel).name, 200) + " " + shown(e.key.policy, 200) + " on " +
         shown(e.key.device_uuid, 64) + " (driver " + driver_text(e.key.driver_version) + ", bucket " +
         std::to_string(e.key.bucket) + ")";
}

// The entry line without its time: two entries that differ only in when they were stored agree.
std::string content_of(stored_entry e) {
  e.stored_at_ms = 0;
  return ld::cache_file_line(e);
}

int run_merge(const std::string& out_path, const std::vector<std::string>& inputs, bool fail_on_conflict,
              bool dry_run, unsigned lock_wait_ms, std::size_t max_bytes) {
  std::vector<loaded> in;
  for (const auto& p : inputs) {
    in.push_back(load(p, max_bytes));
    warn_skipped(in.back());
  }
  std::size_t conflicts = 0, total = 0;
  std::string problem;
  const std::string why = ld::update_cache_file(
      out_path, max_bytes, lock_wait_ms,
      [&](const ld::cache_file_contents& current) -> std::optional<std::vector<stored_entry>> {
        if (current.status == ld::cache_file_status::corrupt) {
          problem = "not replaced: " + current.problem;
          return std::nullopt;
        }
        struct held {
          stored_entry e;
          std::string from;
        };
        std::map<key_tuple, held> merged;
        std::vector<key_tuple> order;
        conflicts = 0;
        auto add = [&](const stored_entry& e, const std::string& from) {
          auto k = tie_key(e.key);
          const auto it = merged.find(k);
          if (it == merged.end()) {
            order.push_back(k);
            merged.emplace(std::move(k), held{e, from});
            return;
          }
          held& h = it->second;
          if (content_of(h.e) == content_of(e)) {
            if (e.stored_at_ms > h.e.stored_at_ms) h = held{e, from};
            return;
          }
          // Conflict: where either plan was measured, the library's rule (ld::replaces_in_file: a measured
          // plan stays unless one measured better beyond noise comes); else the newest wins, on a tie the
          // later file on the command line.
          const bool replace = e.measurement || h.e.measurement ? ld::replaces_in_file(e, h.e)
                                                                : e.stored_at_ms >= h.e.stored_at_ms;
          const held& kept = replace ? held{e, from} : h;
          const held& dropped = replace ? h : held{e, from};
          std::string what;
          for (const auto& c : changes(kept.e, dropped.e))
            what += (what.empty() ? "" : "; ") + c.what + " " + c.a + " vs " + c.b;
          std::cout << "conflict: " << entry_name(e) << ": kept " << shown(kept.from, 256) << " (stored "
                    << time_text(kept.e.stored_at_ms) << "), dropped " << shown(dropped.from, 256)
                    << " (stored " << time_text(dropped.e.stored_at_ms) << ")"
                    << (what.empty() ? "" : ": " + what) << "\n";
          ++conflicts;
          if (replace) h = held{e, from};
        };
        for (const auto& e : unique_entries(current.entries)) add(e, out_path);
        for (const auto& f : in)
          for (const auto& e : f.entries) add(e, f.path);
        if (fail_on_conflict && conflicts > 0) return std::nullopt;
        std::vector<stored_entry> out;
        out.reserve(order.size());
        for (const auto& k : order) out.push_back(merged.at(k).e);
        total = out.size();
        if (dry_run) return std::nullopt;
        return out;
      });
  if (!why.empty()) write_failed(out_path, why, max_bytes);
  if (!problem.empty()) throw usage_error{shown(out_path, 512) + ": " + problem};
  if (fail_on_conflict && conflicts > 0) {
    std::cerr << "launchfit-plans: " << conflicts << " conflict(s); " << shown(out_path, 512)
              << " left as it was (--fail-on-conflict)\n";
    return 1;
  }
  std::cout << (dry_run ? "would merge " : "merged ") << inputs.size() << " file(s) into "
            << shown(out_path, 512) << ": " << total << " entries, " << conflicts
            << " conflict(s) resolved\n";
  return 0;
}

// ---- prune ------------------------------------------------------------------------------------------------

// "12.4", "12.40" or "12040" (cuDriverGetVersion).
int parse_driver(const std::string& text) {
  const std::size_t dot = text.find('.');
  auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
      throw usage_error{"--driver-below: '" + shown(text, 64) + "' is not a driver version (12.4 or 12040)"};
    return std::stoi(s);
  };
  if (dot == std::string::npos) return number(text);
  const int major = number(text.substr(0, dot));
  const int m = number(text.substr(dot + 1));
  if (m > 99 || major > 999) throw usage_error{"--driver-below: '" + shown(text, 64) + "' is out of range"};
  return major * 1000 + m * 10;
}

// Kernel names, one per line; blank lines and lines starting with '#' are ignored.
std::set<std::string> read_kernel_list(const std::string& path, std::size_t max_bytes) {
  std::string text, why;
  switch (ld::read_cache_file(path, max_bytes, text, why)) {
    case ld::cache_file_read::ok:
      break;
    case ld::cache_file_read::missing:
      throw environment_error{"--keep-kernels " + shown(path, 512) + ": no such file"};
    case ld::cache_file_read::refused:
      throw environment_error{"--keep-kernels " + shown(path, 512) + ": " + why};
  }
  std::set<std::string> names;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    const std::size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    names.insert(line.substr(start));
  }
  return names;
}

// A plan whose key does not name the work's kind (written by launchfit 0.3 or before): no launch finds it.
bool without_work_kind(const stored_entry& e) { return ld::key_names_no_work_kind(e.key); }

int run_prune(const std::string& path, const std::optional<std::string>& driver_below,
              const std::optional<std::string>& keep_kernels, bool without_kind, bool force, bool dry_run,
              unsigned lock_wait_ms, std::size_t max_bytes) {
  if (!driver_below && !keep_kernels && !without_kind)
    throw usage_error{"prune needs --driver-below, --keep-kernels and/or --without-work-kind"};
  const int below = driver_below ? parse_driver(*driver_below) : 0;
  const std::optional<std::set<std::string>> keep =
      keep_kernels ? std::optional(read_kernel_list(*keep_kernels, max_bytes)) : std::nullopt;
  std::size_t removed = 0, kept = 0, repeated = 0;
  std::string problem;
  std::size_t skipped = 0;
  bool refused = false;
  const std::string why = ld::update_cache_file(
      path, max_bytes, lock_wait_ms,
      [&](const ld::cache_file_contents& current) -> std::optional<std::vector<stored_entry>> {
        if (current.status == ld::cache_file_status::corrupt) {
          problem = current.problem;
          return std::nullopt;
        }
        repeated = 0;
        const std::vector<stored_entry> entries = ld::one_entry_per_key(current.entries, &repeated);
        // A list that names no kernel of the file is the wrong list far more often than a wish to empty the
        // file (a stripped binary, the wrong program): it removes nothing unless --force says so.
        if (keep && !force) {
          std::size_t plans = 0, listed = 0;
          for (const auto& e : entries) {
            if (is_calibration(e)) continue;
            ++plans;
            listed += keep->count(parse_fingerprint(e.key.kernel).name);
          }
          if (plans > 0 && listed == 0) {
            refused = true;
            return std::nullopt;
          }
        }
        skipped = current.skipped;
        std::vector<stored_entry> out;
        removed = kept = 0;
        for (const auto& e : entries) {
          std::string reason;
          if (below && e.key.driver_version < below) {
            reason = "driver " + driver_text(e.key.driver_version) + " < " + driver_text(below);
          } else if (keep && !is_calibration(e) && !keep->count(parse_fingerprint(e.key.kernel).name)) {
            reason = "kernel not in " + shown(*keep_kernels, 256);
          } else if (without_kind && without_work_kind(e)) {
            reason = "its key names no work kind (written by launchfit 0.3 or before: no launch finds it)";
          }
          if (reason.empty()) {
            out.push_back(e);
            ++kept;
          } else {
            std::cout << (dry_run ? "would remove " : "removed ") << entry_name(e) << ": " << reason << "\n";
            ++removed;
          }
        }
        if (dry_run || (removed == 0 && skipped == 0 && repeated == 0)) return std::nullopt;
        return out;
      });
  if (!why.empty()) write_failed(path, why, max_bytes);
  if (!problem.empty()) throw usage_error{shown(path, 512) + ": " + problem};
  if (refused) {
    std::cerr << "launchfit-plans: error: " << shown(*keep_kernels, 512) << " names no kernel of "
              << shown(path, 512) << "; nothing removed (--force removes every plan it does not name)\n";
    return launchfit_tool::exit_failed;
  }
  std::cout << shown(path, 512) << ": " << (dry_run ? "would remove " : "removed ") << removed << ", kept "
            << kept
            << (skipped ? ", " + std::to_string(skipped) + " bad entries " + (dry_run ? "would be " : "") +
                              "dropped"
                        : "")
            << (repeated ? ", " + std::to_string(repeated) + " repeated entries of a key " +
                               (dry_run ? "would be " : "") + "dropped (the one launchfit reads kept)"
                         : "")
            << "\n";
  return 0;
}

// ---- check ------------------------------------------------------------------------------------------------

// The entry checked offline by the check every reader of the library applies (ld::validate_stored_entry: its
// key and plan hold together, and on its architecture when the built-in table knows it), so that check
// passes exactly the entries a lookup serves. Files and stores were read through it already; said again so
// that no change of a reader skips it. Empty when it passes; `unchecked` set when its compute capability has
// no table entry (its plan was held to the format's bounds only).
std::string check_entry(const stored_entry& e, bool& unchecked) {
  if (std::string why = ld::validate_stored_entry(e); !why.empty()) return why;
  if (e.key.kernel == ld::calibration_kernel) return "";  // a measured target: no plan is launched from it
  try {
    launchfit::device_limits::for_arch(std::to_string(e.key.cc));
  } catch (const launchfit::error&) {
    unchecked = true;
  }
  return "";
}

// What check says of entries no launch finds (keys without the work's kind): valid, kept by every reader, but
// dead weight an operator may remove: in a file with prune (before a push, which sends them as they are); a
// store holds them until its values expire. Empty when there are none.
std::string unfindable_note(std::size_t n, bool in_file) {
  if (n == 0) return "";
  const char* them = n == 1 ? "it" : "them";
  return std::to_string(n) + (n == 1 ? " entry names" : " entries name") +
         " no work kind (written by launchfit 0.3 or before): no launch finds " + them +
         (in_file ? std::string("; launchfit-plans prune --without-work-kind removes ") + them
                  : std::string(n == 1 ? "; it stays" : "; they stay") + " until the store's values expire");
}

int run_check(const std::vector<std::string>& files, bool as_json, std::size_t max_bytes) {
  std::size_t bad = 0;
  json report = json::array();
  for (const auto& path : files) {
    json file = {{"file", path}, {"problems", json::array()}};
    auto problem = [&](const std::string& text) {
      ++bad;
      file["problems"].push_back(text);
      if (!as_json) std::cout << shown(path, 512) << ": " << text << "\n";
    };
    std::string text, why;
    const auto r = ld::read_cache_file(path, max_bytes, text, why);
    if (r != ld::cache_file_read::ok) {
      problem(r == ld::cache_file_read::missing ? "no such file" : why);
      report.push_back(std::move(file));
      continue;
    }
    const ld::cache_file_contents c = ld::parse_cache_file(text);
    if (c.status != ld::cache_file_status::ok && c.status != ld::cache_file_status::empty) {
      problem(c.problem);
      report.push_back(std::move(file));
      continue;
    }
    for (const auto& p : c.problems) problem(shown(p, 1024));
    if (c.skipped > c.problems.size())
      problem("and " + std::to_string(c.skipped - c.problems.size()) + " more bad entries");
    // Kept, as a lookup keeps them, but an operator wants to know of a clock or a file that lies.
    file["notes"] = json::array();
    for (const auto& n : c.clamps) {
      file["notes"].push_back(n);
      if (!as_json) std::cout << shown(path, 512) << ": note: " << shown(n, 1024) << "\n";
    }
    if (c.clamped > c.clamps.size() && !as_json)
      std::cout << shown(path, 512) << ": note: and " << c.clamped - c.clamps.size()
                << " more stored_at stamps read as of unknown age\n";
    std::size_t unchecked = 0;
    // Counted as prune removes them: a key written twice is one plan (the one the library keeps), as a lookup
    // reads it.
    std::size_t repeated = 0;
    const std::vector<stored_entry> plans = ld::one_entry_per_key(c.entries, &repeated);
    const auto unfindable = static_cast<std::size_t>(std::count_if(plans.begin(), plans.end(), without_work_kind));
    for (std::size_t i = 0; i < c.entries.size(); ++i) {
      bool no_table = false;
      const std::string why_bad = check_entry(c.entries[i], no_table);
      unchecked += no_table;
      if (!why_bad.empty())
        problem("entry " + std::to_string(i) + " (" + entry_name(c.entries[i]) +
                "): " + shown(why_bad, 1024));
    }
    file["entries"] = c.entries.size();
    file["not_checked_offline"] = unchecked;
    file["without_work_kind"] = unfindable;
    file["repeated_keys"] = repeated;
    if (repeated > 0) {
      // Valid, and read as one plan per key, but a hand edit or a concatenation an operator wants to know of.
      const std::string note =
          std::to_string(repeated) + (repeated == 1 ? " entry repeats a key" : " entries repeat a key") +
          " written before in the file: launchfit reads one plan per key (a measured plan over an unmeasured one, "
          "the faster of two measured ones beyond their noise, else the newer); "
          "any launchfit-plans prune writes the file with that one alone";
      file["notes"].push_back(note);
      if (!as_json) std::cout << shown(path, 512) << ": note: " << note << "\n";
    }
    if (const std::string note = unfindable_note(unfindable, true); !note.empty()) {
      file["notes"].push_back(note);
      if (!as_json) std::cout << shown(path, 512) << ": note: " << note << "\n";
    }
    if (!as_json && file["problems"].empty())
      std::cout << shown(path, 512) << ": " << c.entries.size()
                << (c.entries.size() == 1 ? " entry" : " entries") << ", all valid"
                << (unchecked ? " (" + std::to_string(unchecked) +
                                    " of a compute capability without a table entry: parsed only)"
                              : "")
                << "\n";
    report.push_back(std::move(file));
  }
  if (as_json) print_json(report);
  return bad == 0 ? 0 : 1;
}

// ---- push / pull / check against a remote store -------------------------------------------------

// Every valid entry of FILE to the store as the library writes: a key holding a valid plan keeps it, an
// invalid value under a key is replaced.
int run_push(const std::string& path, const std::string& target, std::uint64_t ttl_s, bool dry_run,
             std::size_t max_bytes) {
  check_store_url(target);
  const loaded f = load(path, max_bytes);
  warn_skipped(f);
  // Entries no launch finds (keys without the work's kind) are pushed as they are, and counted.
  const std::vector<stored_entry>& sent = f.entries;
  const std::size_t unfindable =
      static_cast<std::size_t>(std::count_if(sent.begin(), sent.end(), without_work_kind));
  const std::string left_out =
      unfindable ? "; " + std::to_string(unfindable) + " name no work kind (no launch finds them)" : "";
  if (dry_run) {  // the store is not even contacted
    std::cout << "would push " << sent.size() << " entries of " << shown(path, 512) << " to "
              << shown(target, 300) << " (keys already stored keep their plans unless measured worse)"
              << (f.skipped ? ", " + std::to_string(f.skipped) + " bad entries skipped" : "") << left_out << "\n";
    return f.skipped == 0 ? 0 : 1;
  }
  const tools::push_result r = tools::push_entries(target, sent, ttl_s);
  for (const auto& p : r.problems) std::cout << shown(path, 512) << ": " << shown(p, 1024) << "\n";
  if (r.failed) {
    throw environment_error{shown(target, 300) + ": " + shown(r.failed.text, 1024) + " (" +
                            std::to_string(r.written + r.replaced) + " entries written before)"};
  }
  std::cout << "pushed " << sent.size() << " entries of " << shown(path, 512) << " to "
            << shown(target, 300) << ": " << r.written << " written, " << r.present << " already stored, "
            << r.refused << " refused, " << r.replaced << " invalid values replaced, " << r.superseded
            << " replaced by plans measured better"
            << (f.skipped ? ", " + std::to_string(f.skipped) + " bad entries skipped" : "") << left_out << "\n";
  return r.refused + f.skipped == 0 ? 0 : 1;
}

// Every valid entry of the store merged into FILE under the library's lock: a key FILE lacks is added; of
// two plans for one key the newer stays.
int run_pull(const std::string& source, const std::string& path, bool dry_run, unsigned lock_wait_ms,
             std::size_t max_bytes) {
  const loaded remote = load_remote(source);
  warn_skipped(remote);
  std::size_t added = 0, updated = 0, kept = 0;
  std::string problem;
  const std::string why = ld::update_cache_file(
      path, max_bytes, lock_wait_ms,
      [&](const ld::cache_file_contents& current) -> std::optional<std::vector<stored_entry>> {
        if (current.status == ld::cache_file_status::corrupt) {
          problem = current.problem;
          return std::nullopt;
        }
        added = updated = kept = 0;
        std::vector<stored_entry> out = unique_entries(current.entries);
        std::map<key_tuple, std::size_t> at;
        for (std::size_t i = 0; i < out.size(); ++i) at.emplace(tie_key(out[i].key), i);
        for (const auto& e : remote.entries) {
          stored_entry copy = e;
          copy.plan.match = launchfit::detail::plan_match::computed;  // never written: where a plan came from is the reader's to say
          const auto it = at.find(tie_key(e.key));
          if (it == at.end()) {
            at.emplace(tie_key(e.key), out.size());
            out.push_back(std::move(copy));
            ++added;
          } else if (e.measurement || out[it->second].measurement
                         ? ld::replaces_in_file(e, out[it->second])  // measured: the library's rule
                         : e.stored_at_ms > out[it->second].stored_at_ms) {
            out[it->second] = std::move(copy);
            ++updated;
          } else {
            ++kept;
          }
        }
        if (dry_run || (added + updated == 0 && current.skipped == 0)) return std::nullopt;
        return out;
      });
  if (!why.empty()) write_failed(path, why, max_bytes);
  if (!problem.empty()) throw usage_error{shown(path, 512) + ": " + problem};
  std::cout << (dry_run ? "would pull " : "pulled ") << remote.entries.size() << " entries of "
            << shown(source, 300) << " into " << shown(path, 512) << ": " << added << " added, " << updated
            << " newer, " << kept << " kept as they were"
            << (remote.skipped ? ", " + std::to_string(remote.skipped) + " refused" : "") << "\n";
  return remote.skipped == 0 ? 0 : 1;
}

// check for a store: every value validated as a lookup validates it, then each entry as check_entry() checks
// an entry of a file. Bad entries: exit 1; a store that cannot be read within the bounds: exit 3.
int run_check_remote(const std::vector<std::string>& urls, bool as_json) {
  std::size_t bad = 0;
  bool unreachable = false, malformed = false;
  json report = json::array();
  for (const auto& text : urls) {
    json store = {{"store", ld::redact_url(text)}, {"problems", json::array()}};
    auto problem = [&](const std::string& line) {
      ++bad;
      store["problems"].push_back(line);
      if (!as_json) std::cout << shown(text, 300) << ": " << line << "\n";
    };
    try {
      check_store_url(text);
    } catch (const usage_error& e) {
      malformed = true;
      store["error"] = e.message;
      if (!as_json) std::cout << e.message << "\n";
      report.push_back(std::move(store));
      continue;
    }
    const tools::listing l = tools::list_entries(text);
    if (l.failed) {
      unreachable = true;
      store["error"] = l.failed.text;
      if (!as_json) std::cout << shown(text, 300) << ": " << shown(l.failed.text, 1024) << "\n";
    }
    for (const auto& p : l.problems) problem(shown(p.key, 128) + ": " + shown(p.why, 1024));
    if (l.refused > l.problems.size())
      problem("and " + std::to_string(l.refused - l.problems.size()) + " more bad entries");
    std::size_t unchecked = 0, unfindable = 0;
    for (const auto& e : l.entries) {
      bool no_table = false;
      const std::string why_bad = check_entry(e, no_table);
      unchecked += no_table;
      unfindable += without_work_kind(e);
      if (!why_bad.empty())
        problem(shown(tools::store_key(e.key), 128) + " (" + entry_name(e) + "): " + shown(why_bad, 1024));
    }
    store["entries"] = l.entries.size();
    store["not_checked_offline"] = unchecked;
    store["without_work_kind"] = unfindable;
    store["notes"] = json::array();
    if (const std::string note = unfindable_note(unfindable, false); !note.empty()) {
      store["notes"].push_back(note);
      if (!as_json) std::cout << shown(text, 300) << ": note: " << note << "\n";
    }
    store["truncated"] = l.failed.what == tools::failure::kind::bound;
    if (!as_json && store["problems"].empty() && !l.failed)
      std::cout << shown(text, 300) << ": " << l.entries.size()
                << (l.entries.size() == 1 ? " entry" : " entries") << ", all valid"
                << (unchecked ? " (" + std::to_string(unchecked) +
                                    " of a compute capability without a table entry: parsed only)"
                              : "")
                << "\n";
    report.push_back(std::move(store));
  }
  if (as_json) print_json(report);
  // A store that cannot be reached is the environment; a URL that is not one is the command line.
  return unreachable ? launchfit_tool::exit_environment
         : malformed ? launchfit_tool::exit_usage
         : bad == 0  ? 0
                     : 1;
}

// check of files and stores together: files as run_check() checks them, stores as run_check_remote(); the
// worse exit code. --json gives one report, so it takes either files or stores.
// ---- stats ------------------------------------------------------------------------------------------------

// Per device model (name, compute capability, SMs, driver): how many plans, of which tuned (measured) or not.
struct model_counts {
  std::size_t plans = 0, tuned = 0, unclean = 0, untuned = 0, calibrations = 0;
};

int run_stats(const std::string& target, bool as_json, std::size_t max_bytes) {
  std::vector<stored_entry> entries;
  std::size_t refused = 0;
  std::optional<tools::store_view> store;
  std::string name = target;
  if (is_remote_url(target)) {
    check_store_url(target);
    store = tools::view_store(target);
    if (store->plans.failed) store_failed(target, store->plans.failed);
    entries = std::move(store->plans.entries);
    refused = store->plans.refused;
    name = ld::redact_url(target);
  } else {
    loaded f = load(target, max_bytes);
    entries = std::move(f.entries);
    refused = f.skipped;
  }
  using model_id = std::tuple<std::string, int, int, int>;
  std::map<model_id, model_counts> models;
  for (const auto& e : entries) {
    const stored_key& k = e.key;
    model_counts& c =
        models[model_id{k.device_name.empty() ? "(model not recorded) " + k.device_uuid : k.device_name, k.cc,
                        k.sm_count, k.driver_version}];
    if (is_calibration(e)) {
      ++c.calibrations;
      continue;
    }
    ++c.plans;
    if (!e.measurement) {
      ++c.untuned;
    } else {
      ++c.tuned;
      if (!e.measurement->clean) ++c.unclean;
    }
  }
  if (as_json) {
    json j = {{"store", name}, {"entries", entries.size()}, {"refused", refused}, {"models", json::array()}};
    for (const auto& [id, c] : models)
      j["models"].push_back({{"device_name", std::get<0>(id)},
                             {"cc", std::get<1>(id)},
                             {"sm_count", std::get<2>(id)},
                             {"driver_version", std::get<3>(id)},
                             {"plans", c.plans},
                             {"tuned", c.tuned},
                             {"not_clean", c.unclean},
                             {"static", c.untuned},
                             {"calibrations", c.calibrations}});
    if (store) {
      j["lease_count"] = store->lease_count;
      j["leases"] = json::array();
      for (const auto& l : store->leases)
        j["leases"].push_back({{"plan_key", l.plan_key}, {"owner", l.owner}, {"ttl_ms", l.ttl_ms}});
    }
    print_json(j);
    return 0;
  }
  std::cout << shown(name, 300) << ": " << entries.size() << " entr" << (entries.size() == 1 ? "y" : "ies")
            << ", " << refused << " refused (bad or forged values, not counted below)";
  if (store)
    std::cout << ", " << store->lease_count << " tuning lease" << (store->lease_count == 1 ? "" : "s");
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"device model", "cc", "SMs", "driver", "plans", "tuned", "not clean", "static", "calibrations"}};
  for (const auto& [id, c] : models)
    rows.push_back({shown(std::get<0>(id), 64), cc_text(std::get<1>(id)), std::to_string(std::get<2>(id)),
                    driver_text(std::get<3>(id)), std::to_string(c.plans), std::to_string(c.tuned),
                    std::to_string(c.unclean), std::to_string(c.untuned), std::to_string(c.calibrations)});
  print_columns(rows);
  if (store && !store->leases.empty()) {
    std::cout << "tuning leases (a process tuning the plan under that key now):\n";
    std::vector<std::vector<std::string>> lease_rows = {{"plan key", "owner", "left"}};
    for (const auto& l : store->leases)
      lease_rows.push_back({shown(l.plan_key, 128), shown(l.owner, 128),
                            l.ttl_ms >= 0    ? std::to_string(l.ttl_ms) + " ms"
                            : l.ttl_ms == -1 ? "no expiry"
                                             : "gone"});
    print_columns(lease_rows);
    if (store->lease_count > store->leases.size())
      std::cout << "  ... and " << store->lease_count - store->leases.size() << " more\n";
  }
  return 0;
}

int run_check_with_stores(const std::vector<std::string>& args, bool as_json, std::size_t max_bytes) {
  std::vector<std::string> urls, paths;
  for (const auto& a : args) (is_remote_url(a) ? urls : paths).push_back(a);
  if (as_json && !paths.empty())
    throw usage_error{"check --json takes either plan-cache files or redis:// URLs, not both"};
  const int stores = run_check_remote(urls, as_json);
  return paths.empty() ? stores : std::max(stores, run_check(paths, as_json, max_bytes));
}

// What every redis:// command says of exit code 3 in its --help, with the bounds it runs under.
std::string store_exit_code_text() {
  const tools::store_bounds b;
  return "3 when the store cannot be reached, answers an error (NOAUTH, OOM, ...) or is not Redis, or a "
         "bound "
         "stopped the command (" +
         std::to_string(b.max_ms / 1000) + " s, " + std::to_string(b.max_bytes >> 20) + " MiB of answers, " +
         std::to_string(b.max_keys) + " keys)";
}

// LAUNCHFIT_REMOTE_TTL, as the library reads it.
std::uint64_t remote_ttl() {
  std::string warning;
  const std::uint64_t ttl = tools::ttl_from_env(warning);
  if (!warning.empty()) std::cerr << "launchfit-plans: warning: " << warning << "\n";
  return ttl;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "launchfit-plans: list, show, diff, merge, prune, check and count (stats) launchfit plan-cache files "
      "(LAUNCHFIT_CACHE) or a remote store (redis://[user[:password]@]host:port[/db], LAUNCHFIT_REMOTE; "
      "LAUNCHFIT_REDIS_PASSWORD or LAUNCHFIT_REDIS_PASSWORD_FILE); push and pull between the two.\n" +
          std::string(launchfit_tool::exit_codes_text),
      "launchfit-plans"};
  launchfit_tool::add_version(app);
  app.require_subcommand(1);
  app.fallthrough();  // --max-bytes before or after the subcommand
  std::size_t max_bytes = ld::cache_file_default_max_bytes;
  unsigned lock_wait_ms = 5000;
  app.add_option("--max-bytes", max_bytes, "largest file read, in bytes (default 16 MiB, as the library)")
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 32));

  std::vector<std::string> files;
  selection sel;
  bool as_json = false, all = false, fail_on_conflict = false, dry_run = false;
  std::string a, b, out;
  std::optional<std::string> driver_below, keep_kernels;

  auto* list = app.add_subcommand(
      "list",
      "one line per plan: device, kernel, policy, block, occupancy, limiters; for a redis:// URL exit code " +
          store_exit_code_text());
  list->add_option("files", files, "plan-cache files or redis:// URLs")->required();
  list->add_option("--kernel", sel.kernel, "only kernels whose name contains this");
  list->add_option("--device", sel.device, "only devices whose name or UUID contains this");
  list->add_flag("--json", as_json, "print a JSON array of entries");

  auto* show = app.add_subcommand("show", "every field of every plan");
  show->add_option("files", files, "plan-cache files")->required();
  show->add_option("--kernel", sel.kernel, "only kernels whose name contains this");
  show->add_option("--device", sel.device, "only devices whose name or UUID contains this");
  show->add_flag("--json", as_json, "print a JSON array of entries");

  auto* diff = app.add_subcommand(
      "diff",
      "per kernel, policy, smem rule and bucket: block, grid rule, occupancy, limiters, residency and the "
      "kernel's registers and smem of A and B (two GPU models, or before and after a compiler upgrade); "
      "exit code 1 when they differ");
  diff->add_option("A", a, "plan-cache file")->required();
  diff->add_option("B", b, "plan-cache file")->required();
  diff->add_flag("--all", all, "also list the launches whose plans are the same");
  diff->add_flag("--json", as_json, "print the comparison as JSON");

  auto* merge = app.add_subcommand(
      "merge",
      "merges the entries of IN... into OUT (created when missing; its own entries count as the first "
      "input) under the library's file lock; of two different plans for one key a measured plan stays "
      "unless one measured better beyond noise comes, else the newer wins, then the later file; every "
      "conflict is reported");
  merge->add_option("OUT", out, "plan-cache file written")->required();
  merge->add_option("IN", files, "plan-cache files read")->required();
  merge->add_flag("--fail-on-conflict", fail_on_conflict,
                  "leave OUT as it was and exit 1 when plans conflict");
  merge->add_flag("--dry-run", dry_run, "say what would be merged and conflict, change nothing");
  merge->add_option("--lock-wait-ms", lock_wait_ms, "how long to wait for the file's lock (default 5000)");

  auto* prune = app.add_subcommand(
      "prune",
      "removes entries from FILE under the library's file lock: stored with an older driver, or for "
      "kernels not listed; bad entries are dropped too");
  prune->add_option("FILE", out, "plan-cache file")->required();
  prune->add_option("--driver-below", driver_below,
                    "remove entries stored with a driver older than this (12.4 or 12040)");
  prune->add_option(
      "--keep-kernels", keep_kernels,
      "keep only kernels named in this file (one mangled name per line, as in the fingerprint; "
      "e.g. nm --defined-only app | awk '{print $3}'); calibrations are kept; a list that names "
      "no kernel of FILE is refused (exit 1) unless --force");
  bool force = false;
  bool without_kind = false;
  prune->add_flag("--without-work-kind", without_kind,
                  "remove plans whose key names no work kind (written by launchfit 0.3 or before; no launch finds "
                  "them)");
  prune->add_flag("--force", force, "with --keep-kernels: prune even when the list names no kernel of FILE");
  prune->add_flag("--dry-run", dry_run, "say what would be removed, change nothing");
  prune->add_option("--lock-wait-ms", lock_wait_ms, "how long to wait for the file's lock (default 5000)");

  auto* check = app.add_subcommand(
      "check",
      "validates every entry as the library would (the file format, then each plan against the built-in "
      "limits of its compute capability and SM count and the kernel its fingerprint describes); exit code 1 "
      "naming each bad entry; for a redis:// URL " +
          store_exit_code_text());
  check->add_option("files", files, "plan-cache files or redis:// URLs")->required();
  check->add_flag("--json", as_json, "print the report as JSON");

  std::string url;
  std::uint64_t ttl_s = 0;
  auto* push = app.add_subcommand(
      "push",
      "writes every valid entry of FILE to a remote store as the library does (a key holding a valid plan "
      "keeps it unless the entry was measured better beyond noise; an invalid value is replaced); exit code "
      "1 when FILE has bad entries or some were refused, " +
          store_exit_code_text());
  push->add_option("FILE", out, "plan-cache file read")->required();
  push->add_option("URL", url, "redis://host:port[/db]")->required();
  push->add_flag("--dry-run", dry_run, "say what would be pushed, contact no store");
  push->add_option("--ttl", ttl_s, "seconds the entries live (default LAUNCHFIT_REMOTE_TTL, else 30 days)")
      ->check(CLI::Range(std::uint64_t(1), std::uint64_t(315360000)));

  auto* pull = app.add_subcommand(
      "pull",
      "merges every valid entry of a remote store into FILE (created when missing) under the library's file "
      "lock: keys FILE lacks are added, of two plans for one key a measured plan stays unless one measured "
      "better beyond noise comes, else the newer stays; entries record the store as their origin; exit code "
      "1 when the store holds bad entries, " +
          store_exit_code_text());
  pull->add_option("URL", url, "redis://host:port[/db]")->required();
  pull->add_option("FILE", out, "plan-cache file written")->required();
  pull->add_flag("--dry-run", dry_run, "say what would be pulled, change nothing");
  pull->add_option("--lock-wait-ms", lock_wait_ms, "how long to wait for the file's lock (default 5000)");

  std::string store_arg;
  auto* stats = app.add_subcommand(
      "stats",
      "per device model of a plan-cache file or a remote store: plans, tuned (measured) or static, not "
      "clean, calibrations; refused values counted; for a store its tuning leases (owner, time left); for a "
      "redis:// URL exit code " +
          store_exit_code_text());
  stats->add_option("STORE", store_arg, "plan-cache file or redis:// URL")->required();
  stats->add_flag("--json", as_json, "print the counts as JSON");

  if (const std::optional<int> code = launchfit_tool::parse(app, argc, argv, launchfit::detail::redact_url)) return *code;
  try {
    if (list->parsed()) return run_list(files, sel, as_json, max_bytes);
    if (show->parsed()) return run_show(files, sel, as_json, max_bytes);
    if (diff->parsed()) return run_diff(a, b, all, as_json, max_bytes);
    if (merge->parsed()) return run_merge(out, files, fail_on_conflict, dry_run, lock_wait_ms, max_bytes);
    if (prune->parsed())
      return run_prune(out, driver_below, keep_kernels, without_kind, force, dry_run, lock_wait_ms, max_bytes);
    if (check->parsed() && std::any_of(files.begin(), files.end(), is_remote_url))
      return run_check_with_stores(files, as_json, max_bytes);
    if (check->parsed()) return run_check(files, as_json, max_bytes);
    if (push->parsed()) return run_push(out, url, ttl_s ? ttl_s : remote_ttl(), dry_run, max_bytes);
    if (pull->parsed()) return run_pull(url, out, dry_run, lock_wait_ms, max_bytes);
    if (stats->parsed()) return run_stats(store_arg, as_json, max_bytes);
  } catch (const usage_error& e) {
    std::cerr << "launchfit-plans: error: " << e.message << "\n";
    return launchfit_tool::exit_usage;
  } catch (const environment_error& e) {
    std::cerr << "launchfit-plans: error: " << e.message << "\n";
    return launchfit_tool::exit_environment;
  } catch (const std::exception& e) {
    std::cerr << "launchfit-plans: error: " << shown(e.what(), 1024) << "\n";
    return launchfit_tool::exit_failed;
  }
  return launchfit_tool::exit_usage;
}

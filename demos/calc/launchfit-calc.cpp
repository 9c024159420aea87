// SPDX-License-Identifier: MIT
// launchfit-calc: occupancy of one kernel configuration without a GPU, the resource that binds, what to
// cut for one more block, and the three calculator graphs as an SVG.
//
//   launchfit-calc --arch H200 --threads 256 --regs 40 --smem 16K --svg occupancy.svg
//
//   launchfit-calc --cubin build/kernels.fatbin --block 256 --fail-on-spill --min-occupancy 50
//
// Exit codes (demos/common/tool.hpp, as every launchfit tool): 0 done; 1 a --cubin gate failed
// (--fail-on-spill, --min-occupancy, --max-regs: every kernel that crossed one is named on stderr); 2 bad
// or impossible input (a --cubin file that is not compiled CUDA code, or is malformed); 3 the device could
// not be queried (no driver or GPU), a --cubin file could not be opened or read, or the SVG not written.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cubin_report.hpp"
#include "launchfit/detail/text.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/policy.hpp"
#include "svg.hpp"
#include "tool.hpp"

namespace {

// Bad command line or impossible configuration: exit code 2.
struct usage_error {
  std::string message;
};

struct options {
  std::string arch = "sm_90";
  std::optional<int> device;
  int threads = 256;
  int regs = 32;
  std::size_t dynamic_smem = 0;
  std::size_t static_smem = 0;
  std::string svg;
  bool json = false;
  // --cubin mode
  std::string cubin;
  bool arch_given = false;
  int block = 256;
  bool pdl = false;  // the kernels are launched with .pdl(): say which never wait for their predecessor
  launchfit::calc::gates gates;
};

// A --cubin gate failed: a finding, exit code 1.
constexpr int exit_gate_failed = launchfit_tool::exit_failed;

// The machine, not the command line: no driver or GPU, a file that cannot be written (exit code 3).
struct environment_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Text from the command line as a message shows it: escaped, at most 200 bytes, in quotes unless `bare`.
std::string shown(std::string_view text, bool bare = false) {
  return bare ? launchfit::detail::escape_text(text, 200) : launchfit::detail::quote_text(text, 200, '\'');
}

// A whole decimal number in [lo, hi]: "out of range" when it is one but too large, never a wrapped value.
long long parse_integer(const std::string& flag, const std::string& text, long long lo, long long hi) {
  long long value = 0;
  const char* first = text.data() + (text.size() > 1 && text[0] == '+' && text[1] != '-');
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec == std::errc::result_out_of_range && ptr == last)
    throw usage_error{flag + " is out of range: " + shown(text)};
  if (ec != std::errc() || ptr != last || first == last)
    throw usage_error{flag + " expects a whole number, got " + shown(text)};
  if (value < lo || value > hi) throw usage_error{flag + " is out of range: " + shown(text)};
  return value;
}

int parse_int(const std::string& flag, const std::string& text) {
  return static_cast<int>(parse_integer(flag, text, INT_MIN, INT_MAX));
}

// "49152", "48K", "48KB", "48KiB", "1M" (binary units: shared memory is sized in KiB).
std::size_t parse_bytes(const std::string& flag, const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::size_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    scale = 1024;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    scale = std::size_t{1024} * 1024;
  if (digits == 0 || scale == 0)
    throw usage_error{flag + " expects bytes such as 4096, 16K or 16KB, got " + shown(text)};
  std::size_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec == std::errc::result_out_of_range || value > SIZE_MAX / scale)
    throw usage_error{flag + " is out of range: " + shown(text)};
  (void)ptr;
  return value * scale;
}

options parse(int argc, char** argv) {
  CLI::App app{
      "Occupancy of one kernel configuration without a GPU, the resource that binds, what to cut for one "
      "more block, and the three calculator graphs as an SVG.\n"
      "  e.g. launchfit-calc --arch H200 --threads 256 --regs 40 --smem 16K --svg occupancy.svg\n" +
          std::string(launchfit_tool::exit_codes_text),
      "launchfit-calc"};
  launchfit_tool::add_version(app);
  app.allow_extras();  // reported below as "unknown option", with the option's name
  std::string arch = "sm_90", device, threads, regs, smem, static_smem, svg, cubin, block, min_occupancy,
              max_regs;
  bool json = false, fail_on_spill = false, pdl = false;
  const auto last_wins = [](CLI::Option* o) {
    return o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  };
  last_wins(app.add_option("--arch", arch, "architecture or part from the built-in table (default sm_90)"))
      ->type_name("sm_90|9.0|H200");
  last_wins(app.add_option("--device", device, "query CUDA device N instead (needs a driver)"))
      ->type_name("N");
  last_wins(app.add_option("--threads", threads, "threads per block (default 256)"))->type_name("N");
  last_wins(app.add_option("--regs", regs, "registers per thread (default 32)"))->type_name("N");
  last_wins(
      app.add_option("--smem", smem,
                     "dynamic shared memory per block; 16K, 16KB and 16KiB mean 16384 bytes (default 0)"))
      ->type_name("BYTES");
  last_wins(app.add_option("--static-smem", static_smem, "static shared memory per block (default 0)"))
      ->type_name("BYTES");
  last_wins(
      app.add_option("--svg", svg, "write occupancy vs block size, registers and shared memory to FILE"))
      ->type_name("FILE");
  app.add_flag("--json", json, "print the result as JSON instead of a table");
  last_wins(
      app.add_option("--cubin", cubin,
                     "report every kernel of a cubin, fatbin, object, executable or library: registers, "
                     "static smem, local memory, max threads, occupancy (on the cubin's own architecture, "
                     "or on --arch; --arch all: every table architecture the code runs on)"))
      ->type_name("FILE");
  last_wins(app.add_option("--block", block, "with --cubin: threads per block for occupancy (default 256)"))
      ->type_name("N");
  app.add_flag("--fail-on-spill", fail_on_spill,
               "with --cubin: exit 1 if a kernel uses local memory (stack frame or spills)");
  last_wins(app.add_option("--min-occupancy", min_occupancy,
                           "with --cubin: exit 1 if a kernel's occupancy is below PCT percent"))
      ->type_name("PCT");
  last_wins(app.add_option("--max-regs", max_regs,
                           "with --cubin: exit 1 if a kernel uses more than N registers per thread"))
      ->type_name("N");
  app.add_flag("--pdl", pdl,
               "with --cubin: the kernels are launched with .pdl(): name those whose sm_90 code never "
               "executes griddepcontrol.wait (cudaGridDependencySynchronize), which would wait for nothing");
  // --help, --version and what CLI11 refuses are answered (and said) as every launchfit tool answers them.
  if (const std::optional<int> code = launchfit_tool::parse(app, argc, argv)) std::exit(*code);
  if (!app.remaining().empty()) throw usage_error{"unknown option " + shown(app.remaining().front(), true)};

  options o;
  o.json = json;
  o.arch = arch;
  if (app.count("--device") > 0) o.device = parse_int("--device", device);
  if (app.count("--threads") > 0) o.threads = parse_int("--threads", threads);
  if (app.count("--regs") > 0) o.regs = parse_int("--regs", regs);
  if (app.count("--smem") > 0) o.dynamic_smem = parse_bytes("--smem", smem);
  if (app.count("--static-smem") > 0) o.static_smem = parse_bytes("--static-smem", static_smem);
  if (app.count("--svg") > 0 && svg.empty()) throw usage_error{"--svg needs a file name, got ''"};
  o.svg = svg;
  o.arch_given = app.count("--arch") > 0;
  const bool cubin_mode = app.count("--cubin") > 0;
  if (!cubin_mode) {
    for (const char* flag : {"--block", "--fail-on-spill", "--min-occupancy", "--max-regs", "--pdl"})
      if (app.count(flag) > 0) throw usage_error{std::string(flag) + " applies to --cubin FILE"};
    return o;
  }
  if (cubin.empty()) throw usage_error{"--cubin needs a file name, got ''"};
  for (const char* flag : {"--threads", "--regs", "--static-smem", "--svg", "--device"})
    if (app.count(flag) > 0)
      throw usage_error{std::string(flag) +
                        " does not apply to --cubin, which reads each kernel's figures from "
                        "the file (use --block for the block size)"};
  o.cubin = cubin;
  if (app.count("--block") > 0) o.block = static_cast<int>(parse_integer("--block", block, 1, 1024));
  o.gates.fail_on_spill = fail_on_spill;
  o.pdl = pdl;
  if (app.count("--min-occupancy") > 0) {
    std::string pct = min_occupancy;
    if (!pct.empty() && pct.back() == '%') pct.pop_back();
    char* end = nullptr;
    errno = 0;
    const double value = pct.empty() ? -1 : std::strtod(pct.c_str(), &end);
    if (pct.empty() || end != pct.c_str() + pct.size() || errno != 0 || !(value >= 0 && value <= 100))
      throw usage_error{"--min-occupancy expects a percentage from 0 to 100, got " + shown(min_occupancy)};
    o.gates.min_occupancy_pct = value;
  }
  if (app.count("--max-regs") > 0)
    o.gates.max_regs = static_cast<int>(parse_integer("--max-regs", max_regs, 0, 255));
  return o;
}

std::string blocks_text(int blocks) { return blocks == INT_MAX ? "unlimited" : std::to_string(blocks); }

std::string cut_advice(const launchfit::one_more_block& cut, unsigned limiters) {
  const std::string regs = "cut registers to <= " + std::to_string(cut.max_regs_per_thread) + " per thread";
  const std::string smem = "dynamic smem to <= " + std::to_string(cut.max_dynamic_smem_bytes) + " bytes";
  std::string advice = "to gain one more block: ";
  if (cut.max_regs_per_thread >= 0 && cut.max_dynamic_smem_bytes >= 0) return advice + regs + " or " + smem;
  if (cut.max_regs_per_thread >= 0) return advice + regs + " (shared memory alone cannot help)";
  if (cut.max_dynamic_smem_bytes >= 0) return advice + "cut " + smem + " (registers alone cannot help)";
  return advice + "neither registers nor shared memory alone can help (limited by " +
         launchfit::limiter_names(limiters) + ")";
}

void print_table(const launchfit::device_limits& d, const options& o, const launchfit::occupancy_result& r,
                 const launchfit::one_more_block& cut) {
  const auto mark = [&r](unsigned bit) { return (r.limiters & bit) ? "   <- binding" : ""; };
  std::printf("%s: compute capability %d.%d, %d SMs\n", d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count);
  std::printf(
      "kernel: %d threads per block, %d registers per thread, %zu B dynamic + %zu B static shared memory\n\n",
      o.threads, o.regs, o.dynamic_smem, o.static_smem);
  std::printf("  %-38s %s\n", "Theoretical Occupancy", launchfit::detail::percent_text(r.occupancy).c_str());
  std::printf("  %-38s %d of %d\n", "Theoretical Active Warps per SM", r.active_warps_per_sm,
              d.max_warps_per_sm);
  std::printf("  %-38s %d\n", "Active Blocks per SM", r.active_blocks_per_sm);
  std::printf("  %-38s %d of %d\n", "Active Threads per SM", r.active_threads_per_sm, d.max_threads_per_sm);
  std::printf("  %-38s %s%s\n", "Block Limit Warps", blocks_text(r.blocks_limit_warps).c_str(),
              mark(launchfit::limit_warps));
  std::printf("  %-38s %s%s\n", "Block Limit Registers", blocks_text(r.blocks_limit_registers).c_str(),
              mark(launchfit::limit_registers));
  std::printf("  %-38s %s%s\n", "Block Limit Shared Mem", blocks_text(r.blocks_limit_shared_memory).c_str(),
              mark(launchfit::limit_shared_memory));
  std::printf("  %-38s %s%s\n", "Block Limit SM (blocks per SM)", blocks_text(r.blocks_limit_blocks).c_str(),
              mark(launchfit::limit_blocks));
  std::printf("  %-38s %d of %d per SM\n", "Registers per Block (allocated)", r.allocated_regs_per_block,
              d.regs_per_sm);
  std::printf("  %-38s %zu B (incl. %zu B reserved) of %zu B per SM\n", "Shared Memory per Block (allocated)",
              r.allocated_smem_per_block_bytes, d.smem_reserved_per_block_bytes, d.smem_per_sm_bytes);
  std::printf("  %-38s %s\n\n", "Limited by", launchfit::limiter_names(r.limiters).c_str());
  if (!r.why_no_block.empty()) std::printf("no block fits: %s\n", r.why_no_block.c_str());
  std::printf("%s\n", cut_advice(cut, r.limiters).c_str());
}

nlohmann::ordered_json to_json(const launchfit::device_limits& d, const options& o,
                               const launchfit::occupancy_result& r, const launchfit::one_more_block& cut) {
  nlohmann::ordered_json limiters = nlohmann::ordered_json::array();
  std::stringstream names(launchfit::limiter_names(r.limiters));
  for (std::string name; std::getline(names, name, '|');) limiters.push_back(name);
  const auto limit = [](int blocks) {
    return blocks == INT_MAX ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(blocks);
  };
  nlohmann::ordered_json j = {
      {"device", {{"name", d.name}, {"arch", d.arch()}, {"sm_count", d.sm_count}}},
      {"kernel",
       {{"threads_per_block", o.threads},
        {"regs_per_thread", o.regs},
        {"dynamic_smem_bytes", o.dynamic_smem},
        {"static_smem_bytes", o.static_smem}}},
      {"occupancy", r.occupancy},
      {"active_blocks_per_sm", r.active_blocks_per_sm},
      {"active_warps_per_sm", r.active_warps_per_sm},
      {"active_threads_per_sm", r.active_threads_per_sm},
      {"max_warps_per_sm", d.max_warps_per_sm},
      {"blocks_limit",
       {{"warps", limit(r.blocks_limit_warps)},
        {"registers", limit(r.blocks_limit_registers)},
        {"shared_memory", limit(r.blocks_limit_shared_memory)},
        {"blocks", limit(r.blocks_limit_blocks)}}},
      {"limiters", limiters},
      {"why_no_block",
       r.why_no_block.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.why_no_block)},
      {"allocated_regs_per_block", r.allocated_regs_per_block},
      {"allocated_smem_per_block_bytes", r.allocated_smem_per_block_bytes},
      {"one_more_block",
       {{"target_blocks_per_sm", cut.target_blocks_per_sm},
        {"max_regs_per_thread",
         cut.max_regs_per_thread >= 0 ? nlohmann::ordered_json(cut.max_regs_per_thread) : nullptr},
        {"max_dynamic_smem_bytes",
         cut.max_dynamic_smem_bytes >= 0 ? nlohmann::ordered_json(cut.max_dynamic_smem_bytes) : nullptr}}},
  };
  if (!o.svg.empty()) j["svg"] = o.svg;
  return j;
}

// ---- SVG: occupancy vs block size, registers and shared memory, written with demos/common/svg.hpp ----

// Occupancy held over [from, to) of the x axis (data units), and the resources that bind there.
struct step {
  double from = 0, to = 0;
  double occupancy = 0;
  unsigned limiters = 0;
};

struct curve {
  curve(std::string t, std::string xl, double xmax, double tick, double scale = 1)
      : title(std::move(t)), x_label(std::move(xl)), x_max(xmax), x_tick(tick), x_scale(scale) {}
  std::string title, x_label;
  double x_max = 0, x_tick = 0, x_scale = 1;  // axis in display units; x_scale converts data to them
  std::vector<step> steps;
  double current_x = 0, current_y = 0;
  std::string current_label;
};

// Where a policy's choice lands on the block-size curve.
struct policy_mark {
  std::string label;  // "max_occupancy()"
  int block = 0;      // 0: the policy refused (why in `refusal`)
  double occupancy = 0;
  std::string note;  // what the policy does, in a few words
  std::string colour, refusal;
};

// The shading of a binding limit, by limiter bitmask; ties (several bits) take the next tie colour.
struct limit_colours {
  std::vector<std::pair<unsigned, std::string>> used;  // in order of first appearance

  const std::string& of(unsigned limiters) {
    for (const auto& [mask, colour] : used)
      if (mask == limiters) return colour;
    static const std::pair<unsigned, const char*> single[] = {
        {launchfit::limit_warps, "#d6e6f5"},         {launchfit::limit_registers, "#fbdcc2"},
        {launchfit::limit_shared_memory, "#d5eecf"}, {launchfit::limit_blocks, "#e4d9f2"},
        {launchfit::limit_block_size, "#e6e6e6"},    {launchfit::limit_barriers, "#f4ecb0"}};
    static const char* ties[] = {"#f2d3e2", "#cfeceb", "#eee2c9", "#dcdcf0"};
    std::string colour;
    for (const auto& [mask, c] : single)
      if (mask == limiters) colour = c;
    if (colour.empty()) {
      std::size_t tie_count = 0;
      for (const auto& [mask, c] : used) tie_count += (mask & (mask - 1)) != 0;
      colour = ties[tie_count % std::size(ties)];
    }
    used.emplace_back(limiters, colour);
    return used.back().second;
  }
};

// "registers + warps" for a tie, as the legend says it.
std::string limit_label(unsigned limiters) {
  if (limiters == launchfit::limit_none) return "nothing (no block)";
  std::string names = launchfit::limiter_names(limiters), out;
  for (char c : names) out += c == '|' ? std::string(" + ") : std::string(1, c == '_' ? ' ' : c);
  if (limiters == launchfit::limit_warps) out += " (threads per SM)";
  if (limiters == launchfit::limit_blocks) out += " per SM";
  return out;
}

struct box {
  double x, y, w, h;  // the panel, in document coordinates
};

void draw_panel(launchfit_svg::document& svg, const curve& c, const box& b, limit_colours& colours,
                const std::vector<policy_mark>& marks = {}) {
  using launchfit_svg::num;
  const double x0 = b.x + 58, x1 = b.x + b.w - 18, y0 = b.y + b.h - 56, y1 = b.y + 44;
  const auto px = [&](double x) { return x0 + (x1 - x0) * std::clamp(x * c.x_scale / c.x_max, 0.0, 1.0); };
  const auto py = [&](double occ) { return y0 - (y0 - y1) * occ; };

  svg.open("g", {{"class", "graph"}});
  svg.text((x0 + x1) / 2, b.y + 24, c.title,
           {{"text-anchor", "middle"}, {"font-size", 15}, {"font-weight", "bold"}});
  // The binding limit along the curve: one band per run of equal limiters.
  for (std::size_t i = 0; i < c.steps.size();) {
    std::size_t j = i;
    while (j + 1 < c.steps.size() && c.steps[j + 1].limiters == c.steps[i].limiters) ++j;
    const double from = px(c.steps[i].from), to = px(c.steps[j].to);
    if (to > from) {
      svg.open("rect", {{"class", "limit-band"},
                        {"data-limit", launchfit::limiter_names(c.steps[i].limiters)},
                        {"x", from},
                        {"y", y1},
                        {"width", to - from},
                        {"height", y0 - y1},
                        {"fill", colours.of(c.steps[i].limiters)}});
      svg.element("title", {}, "limited by " + limit_label(c.steps[i].limiters));
      svg.close();
    }
    i = j + 1;
  }
  for (int pct = 0; pct <= 100; pct += 25) {
    const double y = py(pct / 100.0);
    svg.line(x0, y, x1, y, {{"stroke", "#bbb"}, {"stroke-opacity", "0.6"}});
    svg.text(x0 - 6, y + 4, std::to_string(pct) + "%", {{"text-anchor", "end"}});
  }
  for (double t = 0; t <= c.x_max + 1e-9; t += c.x_tick) {
    const double x = x0 + (x1 - x0) * t / c.x_max;
    svg.line(x, y0, x, y0 + 5, {{"stroke", "#333"}});
    svg.text(x, y0 + 18, std::to_string(static_cast<int>(t)), {{"text-anchor", "middle"}});
  }
  svg.path("M" + num(x0) + ',' + num(y1) + " V" + num(y0) + " H" + num(x1),
           {{"fill", "none"}, {"stroke", "#333"}});
  svg.text((x0 + x1) / 2, b.y + b.h - 16, c.x_label, {{"text-anchor", "middle"}});
  svg.text(0, 0, "occupancy (warps per SM)",
           {{"transform", "translate(" + num(b.x + 16) + ',' + num((y0 + y1) / 2) + ") rotate(-90)"},
            {"text-anchor", "middle"}});

  // The curve as steps: occupancy holds over each step's interval.
  std::string d;
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    const step& s = c.steps[i];
    if (i == 0 || s.from != c.steps[i - 1].to)
      d += (d.empty() ? "M" : " M") + num(px(s.from)) + ',' + num(py(s.occupancy));
    else
      d += " V" + num(py(s.occupancy));
    d += " H" + num(px(s.to));
  }
  svg.path(d, {{"class", "occupancy-steps"}, {"fill", "none"}, {"stroke", "#1f77b4"}, {"stroke-width", 2}});

  // Each policy's choice: a diamond on the curve, labelled above it (stacked where several land together).
  std::vector<std::pair<int, int>> at_block;  // block -> marks drawn there
  double size = 10;
  for (const policy_mark& m : marks) {
    if (m.block <= 0) continue;
    int stacked = 0;
    for (auto& [block, count] : at_block)
      if (block == m.block) stacked = count++;
    if (stacked == 0) at_block.emplace_back(m.block, 1);
    const double mx = px(m.block), my = py(m.occupancy);
    svg.open("g", {{"class", "policy-mark"}, {"data-policy", m.label}, {"data-block", m.block}});
    svg.path("M" + num(mx) + ',' + num(my - size) + " L" + num(mx + size) + ',' + num(my) + " L" + num(mx) +
                 ',' + num(my + size) + " L" + num(mx - size) + ',' + num(my) + " Z",
             {{"fill", m.colour}, {"stroke", "white"}, {"stroke-width", 1}});
    const double label_y = my < y1 + 60 ? my + 26 + 15.0 * stacked : my - 16 - 15.0 * stacked;
    svg.text(
        std::clamp(mx, x0 + 130, x1 - 130), label_y,
        m.label + ": " + std::to_string(m.block) + " threads, " +
            launchfit::detail::percent_text(m.occupancy),
        {{"class", "policy-label"}, {"text-anchor", "middle"}, {"fill", m.colour}, {"font-weight", "bold"}});
    svg.close();
    size = std::max(5.0, size - 2);
  }

  const double cx = px(c.current_x), cy = py(c.current_y);
  svg.circle(cx, cy, 6, {{"class", "current"}, {"fill", "#d62728"}}, c.current_label);
  if (marks.empty())
    svg.text(std::clamp(cx, x0 + 70, x1 - 70), cy < y1 + 20 ? cy + 22 : cy - 12, c.current_label,
             {{"text-anchor", "middle"}, {"fill", "#d62728"}});
  svg.close();
}

void draw_legend(launchfit_svg::document& svg, double x, double y, const limit_colours& colours,
                 const std::vector<policy_mark>& marks, const std::string& current) {
  svg.open("g", {{"class", "legend"}});
  svg.text(x, y, "binding limit (shaded)", {{"font-weight", "bold"}});
  y += 8;
  for (const auto& [mask, colour] : colours.used) {
    svg.rect(x, y, 22, 14, {{"fill", colour}, {"stroke", "#999"}});
    svg.text(x + 30, y + 11, limit_label(mask));
    y += 20;
  }
  y += 16;
  svg.text(x, y, "where each policy's block lands", {{"font-weight", "bold"}});
  y += 8;
  for (const policy_mark& m : marks) {
    const double cy = y + 7;
    svg.path("M" + launchfit_svg::num(x + 11) + ',' + launchfit_svg::num(cy - 7) + " l7,7 -7,7 -7,-7 Z",
             {{"fill", m.colour}});
    svg.text(x + 30, y + 11,
             m.block > 0 ? m.label + ": " + std::to_string(m.block) + " threads" : m.label + ": refused");
    svg.text(x + 30, y + 25, m.block > 0 ? m.note : m.refusal, {{"fill", "#555"}, {"font-size", 11}});
    y += 34;
  }
  svg.circle(x + 11, y + 7, 6, {{"fill", "#d62728"}});
  svg.text(x + 30, y + 11, current);
  svg.close();
}

// The block each built-in policy would choose for this kernel on this device, from the same calculator.
std::vector<policy_mark> policy_marks(const launchfit::device_limits& d, const launchfit::kernel_resources& k,
                                      const options& o) {
  launchfit::query q;
  q.device = d;
  q.kernel = k;
  q.dynamic_smem_bytes = o.dynamic_smem;
  q.bytes_in_flight_per_sm = launchfit::default_bytes_in_flight_per_sm(d);
  const launchfit::max_occupancy_policy preferred{launchfit::max_occupancy_params{}};
  const launchfit::max_occupancy_policy driver{launchfit::max_occupancy_params{0, 0}};
  const launchfit::bytes_in_flight_params bif_params{};
  const launchfit::bytes_in_flight_policy bif{bif_params};
  struct named {
    std::string label, note;
    const launchfit::policy* p;
  };
  const named policies[] = {
      {"max_occupancy()", "the most resident warps; ties go to 256 threads", &preferred},
      {"max_occupancy(0)", "the driver's block (cuOccupancyMaxPotentialBlockSize)", &driver},
      {"bytes_in_flight(" + std::to_string(bif_params.per_thread) + ")",
       "fewest warps for " + std::to_string(q.bytes_in_flight_per_sm / 1024) + " KiB/SM in flight at " +
           std::to_string(bif_params.per_thread) + " B/thread",
       &bif}};
  const char* colours[] = {"#2ca02c", "#9467bd", "#ff7f0e"};
  std::vector<policy_mark> marks;
  for (std::size_t i = 0; i < std::size(policies); ++i) {
    policy_mark m;
    m.label = policies[i].label;
    m.note = policies[i].note;
    m.colour = colours[i];
    try {
      const launchfit::plan p = policies[i].p->choose(q);
      m.block = p.block_threads;
      m.occupancy = p.occupancy.occupancy;
    } catch (const launchfit::error& e) {
      m.refusal = e.message().empty() ? e.what() : e.message();
    }
    marks.push_back(std::move(m));
  }
  return marks;
}

// Writes the whole file or says why not: the path as given (escaped) and the system's reason.
void write_file(const std::string& path, const std::string& text) {
  const auto refuse = [&path](int err) {
    throw environment_error("cannot write --svg file " + shown(path) + ": " + std::strerror(err));
  };
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) refuse(errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) refuse(written ? errno : write_errno);
}

void write_svg(const std::string& path, const launchfit::device_limits& d,
               const launchfit::kernel_resources& k, const options& o,
               const launchfit::occupancy_result& now) {
  using launchfit_svg::num;
  const auto at = [&d](const launchfit::kernel_resources& kernel, int threads, std::size_t smem) {
    return launchfit::occupancy(d, kernel, threads, smem);
  };
  const std::string current = launchfit::detail::percent_text(now.occupancy);

  // Block sizes are discrete (multiples of 32): each owns the 32 threads around it.
  curve by_block{"Occupancy vs block size", "threads per block", 1024, 128};
  for (int threads = 32; threads <= std::min(d.max_threads_per_block, k.max_threads_per_block);
       threads += 32) {
    const auto r = at(k, threads, o.dynamic_smem);
    by_block.steps.push_back({threads - 16.0, threads + 16.0, r.occupancy, r.limiters});
  }
  by_block.current_x = o.threads;
  by_block.current_y = now.occupancy;
  by_block.current_label = std::to_string(o.threads) + " threads (--threads): " + current;

  curve by_regs{"Occupancy vs registers per thread", "registers per thread", 256, 32};
  for (int regs = 1; regs <= d.max_regs_per_thread; ++regs) {
    auto fewer = k;
    fewer.regs_per_thread = regs;
    const auto r = at(fewer, o.threads, o.dynamic_smem);
    by_regs.steps.push_back({regs - 0.5, regs + 0.5, r.occupancy, r.limiters});
  }
  by_regs.current_x = o.regs;
  by_regs.current_y = now.occupancy;
  by_regs.current_label = std::to_string(o.regs) + " regs: " + current;

  // Shared memory on the x axis is static + dynamic per block, in KiB, as the user declares it; occupancy
  // holds from one allocation unit where it changes to the next.
  const std::size_t optin = std::max(d.smem_per_block_optin_bytes, d.smem_per_block_bytes);
  const double optin_kib = static_cast<double>(optin) / 1024.0;
  double tick = 8;
  while (optin_kib / tick > 8) tick *= 2;
  curve by_smem{"Occupancy vs shared memory per block", "shared memory per block, static + dynamic (KiB)",
                optin_kib, tick, 1.0 / 1024};
  const std::size_t unit = std::max<std::size_t>(d.smem_alloc_unit_bytes, 1);
  for (std::size_t dyn = 0; k.static_smem_bytes + dyn <= optin; dyn += unit) {
    const auto r = at(k, o.threads, dyn);
    const double x = static_cast<double>(k.static_smem_bytes + dyn);
    if (!by_smem.steps.empty() && by_smem.steps.back().occupancy == r.occupancy &&
        by_smem.steps.back().limiters == r.limiters)
      by_smem.steps.back().to = x + static_cast<double>(unit);
    else
      by_smem.steps.push_back({x, x + static_cast<double>(unit), r.occupancy, r.limiters});
  }
  by_smem.current_x = static_cast<double>(k.static_smem_bytes + o.dynamic_smem);
  by_smem.current_y = now.occupancy;
  by_smem.current_label = num(by_smem.current_x / 1024) + " KiB: " + current;

  const std::vector<policy_mark> marks = policy_marks(d, k, o);
  const double wide = 900, tall = 400, narrow = 630, short_h = 330, top = 56;
  launchfit_svg::document svg(2 * narrow + 20, top + tall + short_h + 20);
  svg.text(14, 24,
           "launchfit-calc: " + d.name + ", " + std::to_string(o.threads) + " threads, " +
               std::to_string(o.regs) + " registers, " + std::to_string(o.dynamic_smem) + " B dynamic + " +
               std::to_string(o.static_smem) + " B static shared memory",
           {{"font-size", 16}, {"font-weight", "bold"}});
  svg.text(14, 46, now.summary(), {{"font-size", 14}});
  limit_colours colours;
  draw_panel(svg, by_block, {10, top, wide, tall}, colours, marks);
  draw_panel(svg, by_regs, {10, top + tall, narrow, short_h}, colours);
  draw_panel(svg, by_smem, {10 + narrow, top + tall, narrow, short_h}, colours);
  draw_legend(svg, 10 + wide + 16, top + 40, colours, marks, by_block.current_label);
  write_file(path, svg.str());
}

// ---- --cubin: a kernel report for CI ----

std::string bytes_text(std::size_t bytes) { return std::to_string(bytes) + " B"; }

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string sm_list(const launchfit::calc::cubin_contents& contents) {
  std::string text;
  for (const auto& image : contents.images) {
    const std::string sm = "sm_" + std::to_string(image.sm);
    if (text.find(sm) == std::string::npos) text += (text.empty() ? "" : ", ") + sm;
  }
  return text;
}

// --pdl: each kernel once (a kernel shown on several architectures is one kernel), whether its code waits.
void print_pdl_notes(const std::vector<launchfit::calc::kernel_row>& rows) {
  using launchfit::detail::escape_text;
  std::set<const launchfit::calc::cubin_kernel*> seen;
  std::set<int> unread;
  int waiting = 0, never = 0;
  for (const auto& row : rows) {
    if (!seen.insert(row.kernel).second) continue;
    const std::optional<bool> waits = row.kernel->waits_for_predecessor;
    if (!waits) {
      unread.insert(row.cubin_sm);
    } else if (*waits) {
      ++waiting;
    } else {
      ++never;
      std::printf(
          "\n%s (sm_%d): never executes griddepcontrol.wait (cudaGridDependencySynchronize): launched "
          "with .pdl() it waits for nothing\n",
          escape_text(row.kernel->demangled, 200).c_str(), row.cubin_sm);
    }
  }
  if (waiting > 0 && never == 0) std::printf("\n--pdl: every kernel read executes griddepcontrol.wait\n");
  for (const int sm : unread)
    std::printf(
        "\n--pdl: sm_%d code is not read for griddepcontrol.wait (sm_90 code only): its kernels are not "
        "checked\n",
        sm);
}

void print_cubin_table(const options& o, const launchfit::calc::cubin_contents& contents,
                       const std::vector<launchfit::calc::kernel_row>& rows) {
  using launchfit::detail::escape_text;
  std::printf("%s: %s, %s (%s); block %d threads, %zu B dynamic shared memory\n", shown(o.cubin).c_str(),
              contents.format.c_str(), plural(contents.images.size(), "cubin", "cubins").c_str(),
              sm_list(contents).c_str(), o.block, o.dynamic_smem);
  for (const std::string& skipped : contents.skipped)
    std::printf("skipped: %s\n", escape_text(skipped, 400).c_str());
  std::string group;
  for (const auto& row : rows) {
    std::string on = "no table entry for sm_" + std::to_string(row.cubin_sm);
    if (row.device) {
      on = row.device->arch();
      if (row.device->name.rfind("sm_", 0) != 0) on += " " + row.device->name;
      on += ", " + std::to_string(row.device->sm_count) + " SMs";
    }
    const std::string this_group =
        "sm_" + std::to_string(row.cubin_sm) + " cubin (" + row.image_where + "), on " + on;
    if (this_group != group) {
      group = this_group;
      std::printf("\n%s:\n  %4s %12s %13s %13s %6s %10s  %-22s %s\n", escape_text(group, 400).c_str(), "regs",
                  "static smem", "local/thread", "max threads", "block", "occupancy", "limited by", "kernel");
    }
    const auto& k = *row.kernel;
    const std::string max_threads =
        std::to_string(row.max_threads_per_block) +
        (std::string_view(row.max_threads_from) == "default" ? "" : " " + std::string(row.max_threads_from));
    const std::string block = std::to_string(row.block_threads) + (row.block_clamped ? "*" : "");
    // Local memory: the kernel's own frame, and the stack its callees add (when they do).
    const std::string local = launchfit::calc::local_memory_text(k);
    const std::string occ = row.occupancy ? launchfit::detail::percent_text(row.occupancy->occupancy) : "-";
    const std::string limited =
        row.occupancy ? launchfit::limiter_names(row.occupancy->limiters) : "refused: " + row.refusal;
    std::printf("  %4d %12s %13s %13s %6s %10s  %-22s %s\n", k.regs_per_thread,
                bytes_text(k.static_smem_bytes).c_str(), local.c_str(), max_threads.c_str(), block.c_str(),
                occ.c_str(), escape_text(limited, 200).c_str(), escape_text(k.demangled, 200).c_str());
  }
  if (std::any_of(rows.begin(), rows.end(), [](const auto& r) {
        return r.kernel->stack_bytes_per_thread > r.kernel->local_bytes_per_thread;
      }))
    std::printf("\n+N: bytes of stack per thread that the functions the kernel calls add to its frame\n");
  if (std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.kernel->stack_undetermined; }))
    std::printf(
        "\n+?: the stack size cannot be determined (recursion or calls through pointers); the driver's stack "
        "size limit (cudaLimitStackSize) applies\n");
  if (o.pdl) print_pdl_notes(rows);
  for (const auto& row : rows)
    if (row.occupancy && !row.occupancy->why_no_block.empty())
      std::printf("\n%s on %s: %s\n", escape_text(row.kernel->demangled, 200).c_str(),
                  row.device->arch().c_str(), row.occupancy->why_no_block.c_str());
  if (std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.block_clamped; }))
    std::printf("\n* the kernel's maximum block, smaller than --block %d\n", o.block);
}

nlohmann::ordered_json cubin_json(const options& o, const launchfit::calc::cubin_contents& contents,
                                  const std::vector<launchfit::calc::kernel_row>& rows,
                                  const std::vector<std::string>& failures) {
  using json = nlohmann::ordered_json;
  json cubins = json::array();
  for (const auto& image : contents.images)
    cubins.push_back({{"sm", image.sm}, {"where", image.where}, {"kernels", image.kernels.size()}});
  json kernels = json::array();
  for (const auto& row : rows) {
    const auto& k = *row.kernel;
    json limiters = json::array();
    if (row.occupancy) {
      std::stringstream names(launchfit::limiter_names(row.occupancy->limiters));
      for (std::string name; std::getline(names, name, '|');) limiters.push_back(name);
    }
    kernels.push_back({
        {"name", k.name},
        {"demangled", k.demangled},
        {"cubin_sm", row.cubin_sm},
        {"cubin", row.image_where},
        {"arch", row.device ? json(row.device->arch()) : json(nullptr)},
        {"device", row.device ? json(row.device->name) : json(nullptr)},
        {"regs_per_thread", k.regs_per_thread},
        {"static_smem_bytes", k.static_smem_bytes},
        {"local_bytes_per_thread", k.local_bytes_per_thread},
        {"stack_bytes_per_thread", k.stack_undetermined ? json(nullptr) : json(k.stack_bytes_per_thread)},
        {"stack_undetermined", k.stack_undetermined},
        {"waits_for_predecessor", k.waits_for_predecessor ? json(*k.waits_for_predecessor) : json(nullptr)},
        {"max_threads_per_block", row.max_threads_per_block},
        {"max_threads_from", row.max_threads_from},
        {"max_reg_count", k.max_reg_count > 0 ? json(k.max_reg_count) : json(nullptr)},
        {"block_threads", row.block_threads},
        {"block_clamped", row.block_clamped},
        {"occupancy", row.occupancy ? json(row.occupancy->occupancy) : json(nullptr)},
        {"active_blocks_per_sm", row.occupancy ? json(row.occupancy->active_blocks_per_sm) : json(nullptr)},
        {"active_warps_per_sm", row.occupancy ? json(row.occupancy->active_warps_per_sm) : json(nullptr)},
        {"limiters", limiters},
        {"why_no_block", row.occupancy && !row.occupancy->why_no_block.empty()
                             ? json(row.occupancy->why_no_block)
                             : json(nullptr)},
        {"refusal", row.refusal.empty() ? json(nullptr) : json(row.refusal)},
    });
  }
  return {
      {"file", o.cubin},
      {"format", contents.format},
      {"block_threads", o.block},
      {"dynamic_smem_bytes", o.dynamic_smem},
      {"cubins", cubins},
      {"skipped", contents.skipped},
      {"kernels", kernels},
      {"gates",
       {{"fail_on_spill", o.gates.fail_on_spill},
        {"min_occupancy_pct", o.gates.min_occupancy_pct ? json(*o.gates.min_occupancy_pct) : json(nullptr)},
        {"max_regs", o.gates.max_regs ? json(*o.gates.max_regs) : json(nullptr)},
        {"failures", failures}}},
  };
}

int run_cubin(const options& o) {
  launchfit::calc::cubin_contents contents;
  try {
    contents = launchfit::calc::read_cubin_file(o.cubin);
  } catch (const launchfit::calc::cubin_file_error& e) {
    throw environment_error(e.what());
  } catch (const launchfit::calc::cubin_error& e) {
    throw usage_error{e.what()};
  }
  launchfit::calc::row_options ro;
  ro.arch = o.arch_given ? o.arch : "";
  ro.block_threads = o.block;
  ro.dynamic_smem_bytes = o.dynamic_smem;
  std::vector<launchfit::calc::kernel_row> rows;
  try {
    rows = launchfit::calc::occupancy_rows(contents, ro);
  } catch (const launchfit::calc::cubin_error& e) {
    throw usage_error{shown(o.cubin) + ": " + e.what()};
  }
  const auto failures = launchfit::calc::gate_failures(rows, o.gates);
  if (o.json)
    std::cout << cubin_json(o, contents, rows, failures)
                     .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << '\n';
  else
    print_cubin_table(o, contents, rows);
  std::cout.flush();
  std::fflush(stdout);
  for (const std::string& failure : failures)
    std::cerr << "launchfit-calc: gate failed: " << launchfit::detail::escape_text(failure, 1000) << '\n';
  return failures.empty() ? 0 : exit_gate_failed;
}

int run(const options& o) {
  if (!o.cubin.empty()) return run_cubin(o);
  launchfit::device_limits device;
  if (o.device) {
    try {
      device = launchfit::device_limits::query(*o.device);
    } catch (const launchfit::error& e) {
      std::cerr << "launchfit-calc: error: cannot query device " << *o.device << ": " << e.what() << '\n';
      return launchfit_tool::exit_environment;
    }
  } else {
    device = launchfit::device_limits::for_arch(o.arch);
  }
  const auto kernel = launchfit::kernel_resources::manual(o.regs, o.static_smem);
  const auto result = launchfit::occupancy(device, kernel, o.threads, o.dynamic_smem);
  const auto cut = launchfit::what_to_cut(device, kernel, o.threads, o.dynamic_smem);
  if (!o.svg.empty()) write_svg(o.svg, device, kernel, o, result);
  if (o.json)
    std::cout << to_json(device, o, result, cut).dump(2) << '\n';
  else
    print_table(device, o, result, cut);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const usage_error& e) {
    std::cerr << "launchfit-calc: error: " << e.message << " (see launchfit-calc --help)\n";
  } catch (const launchfit::error& e) {
    // The message alone says what to change; the call and error code add nothing for a command line.
    std::cerr << "launchfit-calc: error: " << (e.message().empty() ? e.what() : e.message()) << '\n';
  } catch (const environment_error& e) {
    std::cerr << "launchfit-calc: error: " << e.what() << '\n';
    return launchfit_tool::exit_environment;
  } catch (const std::exception& e) {
    std::cerr << "launchfit-calc: error: " << e.what() << '\n';
    return launchfit_tool::exit_failed;
  }
  return launchfit_tool::exit_usage;
}

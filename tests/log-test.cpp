// SPDX-License-Identifier: MIT
// New-plan log lines: content, JSON validity, once-only warnings, user sinks.

#include "launchfit/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "async_sink.hpp"
#include "launchfit/policy.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "plan_description.hpp"
#include "plan_json.hpp"
#include "text.hpp"

namespace lf = launchfit;

namespace {

// A new plan's report as the tests write it: values, made into a plan_report (which points at a kept plan
// and at device limits that live as long as the process) where a line is formatted or logged.
struct report_values {
  lf::kernel_resources kernel;
  std::string device;
  int device_ordinal = -1;
  int cc = 0;
  lf::plan plan;
  lf::work first_work;
  std::string override_glob;
  int device_sm_count = 0;  // 0: the plan's
  int family_size = 0;

  operator lf::detail::plan_report() const {  // NOLINT(google-explicit-constructor): reads as a report
    static std::mutex m;
    static std::deque<lf::device_limits>& devices = *new std::deque<lf::device_limits>;  // never freed
    lf::device_limits d = lf::device_limits::for_arch("H200");
    d.name = device;
    d.ordinal = device_ordinal;
    d.cc_major = cc / 10;
    d.cc_minor = cc % 10;
    d.sm_count = device_sm_count > 0 ? device_sm_count : plan.sm_count;
    lf::detail::plan_report r;
    {
      std::lock_guard<std::mutex> lock(m);
      r.device = &devices.emplace_back(std::move(d));
    }
    r.kept = &lf::detail::keep_plan(plan, kernel);
    r.first_work = first_work;
    r.override_glob = override_glob;
    r.family_size = family_size;
    return r;
  }
};

report_values sample_report(int spill_bytes = 0, const char* part = "H200") {
  lf::query q;
  q.device = lf::device_limits::for_arch(part);
  q.kernel = lf::kernel_resources::manual(40, 0, 1024, "_Z6reducePKfPfi");
  q.kernel.local_bytes_per_thread = static_cast<std::size_t>(spill_bytes);
  report_values r;
  r.kernel = q.kernel;
  r.device = "NVIDIA H200";
  r.device_ordinal = 0;
  r.cc = 90;
  r.plan = lf::bytes_in_flight_policy{{32, 0}}.choose(q);
  r.first_work = {lf::work::shape::grid_stride, 1 << 28, 1};
  return r;
}

struct captured {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  captured() {
    auto l = std::make_shared<spdlog::logger>("launchfit-test", sink);
    l->set_pattern("%l %v");
    l->set_level(spdlog::level::trace);
    lf::set_logger(l);
  }
  ~captured() {
    lf::set_logger(nullptr);
    lf::set_log_format(lf::log_format::text);
  }
  std::vector<std::string> lines() { return sink->last_formatted(); }
};

}  // namespace

TEST(Log, TextLineSaysWhatTheKernelRanWithAndWhy) {
  const std::string line = lf::detail::format_plan(sample_report(), lf::log_format::text);
  for (const char* field :
       {"kernel=reduce(float const*, float*, int)", "device=\"NVIDIA H200\" device_ordinal=0", "cc=9.0",
        "block=256", "grid_rule=grid_stride(cap 528)", "dynamic_smem_bytes=0", "occupancy=75%",
        "active_blocks_per_sm=6", "active_warps_per_sm=48", "blocks_per_sm=4", "limiters=registers",
        "registers=40", "local_bytes_per_thread=0",
        "policy=bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)", "match=computed",
        "reason=\""}) {
    EXPECT_NE(line.find(field), std::string::npos) << "missing " << field << " in: " << line;
  }
  // A tuned plan that timed the full grid says so.
  report_values tuned = sample_report();
  tuned.plan.full_grid = true;
  const std::string full = lf::detail::format_plan(tuned, lf::log_format::text);
  EXPECT_NE(full.find("grid_rule=grid_stride(full grid)"), std::string::npos) << full;
  EXPECT_NE(full.find(" full_grid"), std::string::npos) << full;
}

TEST(Log, JsonLineIsOneValidObjectWithTheSameFacts) {
  const std::string line = lf::detail::format_plan(sample_report(), lf::log_format::json);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "new_plan");
  EXPECT_EQ(j["kernel"], "reduce(float const*, float*, int)");
  EXPECT_EQ(j["registers"], 40);
  EXPECT_EQ(j["cc"], "9.0");
  EXPECT_EQ(j["grid_rule"], "grid_stride(cap 528)");
  // The plan as the plan file writes it, under the same names.
  const auto& p = j["plan"];
  EXPECT_EQ(p["block_threads"], 256);
  EXPECT_EQ(p["block"], nlohmann::json({256, 1, 1}));
  EXPECT_DOUBLE_EQ(p["occupancy"]["occupancy"].get<double>(), 0.75);
  EXPECT_EQ(p["occupancy"]["limiters"], lf::limit_registers);
  EXPECT_EQ(p["policy"], "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)");
  EXPECT_TRUE(p.contains("reason"));
}

// One description, every printer: the log line's plan object is the plan file's (the same keys and values),
// and every word the text printers show (the log line, plan::to_string()) is a key of the JSON, top level or
// inside "occupancy". PDL is "programmatic" and the limiters "limiters" everywhere.
TEST(Log, EveryPrinterNamesAPlansFieldsAlike) {
  report_values r = sample_report();
  lf::plan& p = r.plan;
  p.options.programmatic = true;
  p.options.cooperative = true;
  p.options.cluster = lf::dims{2, 1, 1};
  p.resident_clusters = 33;
  p.full_grid = true;
  p.blocks = "multiple of 64";
  p.grid = lf::dims{66, 1, 1};
  p.trials = 12;
  p.tuning_ms = 3.5;
  p.warning = "short of its target";
  const nlohmann::json file = lf::detail::plan_to_json(p);
  const nlohmann::json logged = nlohmann::json::parse(lf::detail::format_plan(r, lf::log_format::json))["plan"];
  for (const auto& [key, value] : file.items()) {
    ASSERT_TRUE(logged.contains(key)) << key << " is in the plan file's JSON but not in the log's";
    EXPECT_EQ(logged[key], value) << key;
  }
  EXPECT_EQ(file["programmatic"], true);
  EXPECT_FALSE(logged.contains("pdl"));
  // The field words of a line: tokens outside quotes that are a name alone or a name and '='.
  const auto words_of = [](const std::string& line) {
    std::vector<std::string> words;
    std::string token;
    bool quoted = false;
    for (std::size_t i = 0; i <= line.size(); ++i) {
      const char c = i < line.size() ? line[i] : ' ';
      if (c == '"' && (i == 0 || line[i - 1] != '\\')) quoted = !quoted;
      if (c != ' ' || quoted) {
        token += c;
        continue;
      }
      const std::size_t n = token.find_first_not_of("abcdefghijklmnopqrstuvwxyz_");
      if (n != 0 && (n == std::string::npos || token[n] == '=')) words.push_back(token.substr(0, n));
      token.clear();
    }
    return words;
  };
  const std::string text = lf::detail::format_plan(r, lf::log_format::text);
  const nlohmann::json whole = nlohmann::json::parse(lf::detail::format_plan(r, lf::log_format::json));
  // From the compute capability on: the kernel's name before it may hold spaces of its own.
  for (const std::string& line : {text.substr(text.find(" cc=") + 1), p.to_string()}) {
    std::size_t named = 0;
    const std::vector<std::string> words = words_of(line);
    for (const std::string& w : words) {
      if (w == "plan" || w == "new") continue;
      ++named;
      EXPECT_TRUE(logged.contains(w) || logged["occupancy"].contains(w) || whole.contains(w))
          << "'" << w << "' is shown in a text line but the JSON has no field of that name: " << line;
    }
    EXPECT_GT(named, 8u) << line;
    for (const char* w : {"programmatic", "cooperative", "full_grid", "cluster", "limiters"})
      EXPECT_NE(std::find(words.begin(), words.end(), w), words.end())
          << w << " missing in: " << line;
  }
  // The description holds every field the file reads back.
  const lf::plan back = lf::detail::plan_from_json(file);
  EXPECT_TRUE(back.options.programmatic && back.options.cooperative && back.full_grid);
  EXPECT_EQ(back.options.cluster, (lf::dims{2, 1, 1}));
  EXPECT_EQ(back.blocks, p.blocks);
}

TEST(Log, ABlockShapeIsInBothLinesWithTheGridItMade) {
  // A cuda-samples transpose: 32x8 blocks, 4 rows per thread over a 1000 x 777 matrix.
  lf::query q;
  q.device = lf::device_limits::for_arch("H200");
  q.kernel = lf::kernel_resources::manual(32, 32 * 33 * 4, 256, "_Z9transposePKfPfjj");
  q.work_hint = {lf::work::shape::items, 1000, 1};
  q.work_hint.rank = 2;
  q.work_hint.ny = 777;
  q.shape_rule.y = 8;
  q.shape_rule.per_thread_y = 4;
  report_values r = sample_report();
  r.kernel = q.kernel;
  r.plan = lf::max_occupancy_policy{}.choose(q);
  r.first_work = q.work_hint;
  const std::string text = lf::detail::format_plan(r, lf::log_format::text);
  for (const char* field : {"block=32x8", " block_shape=x=32n,y=8,per_thread_y=4", "first_grid=32x25"})
    EXPECT_NE(text.find(field), std::string::npos) << "missing " << field << " in: " << text;
  const auto j = nlohmann::json::parse(lf::detail::format_plan(r, lf::log_format::json));
  EXPECT_EQ(j["plan"]["block_shape"], "x=32n,y=8,per_thread_y=4");
  EXPECT_EQ(j["first_grid"], "32x25");
  // Without a shape, neither line has the field.
  EXPECT_EQ(lf::detail::format_plan(sample_report(), lf::log_format::text).find("shape="), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(lf::detail::format_plan(sample_report(), lf::log_format::json))["plan"]
                   .contains("block_shape"));
}

TEST(Log, NewPlanIsOneInfoLineAndASpillWarnsOncePerKernel) {
  captured c;
  report_values r = sample_report(64);
  r.kernel.name = "_Z13spilly_kernelv";
  r.kernel.demangled = "spilly_kernel()";
  lf::detail::log_new_plan(r);
  lf::detail::log_new_plan(r);  // a second plan of the same kernel: no second spill warning
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("info new plan:", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("warning kernel spilly_kernel() uses 64 B of local memory per thread", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("info new plan:", 0), 0u) << lines[2];
  // Local memory is a stack frame or spills: launchfit cannot tell which, so it never says "spills".
  for (const auto& l : lines) {
    EXPECT_EQ(l.find(" spills 64"), std::string::npos) << l;
    EXPECT_EQ(l.find("spill="), std::string::npos) << l;
    EXPECT_NE(l.find("local"), std::string::npos) << l;
  }
}

TEST(Log, ShortfallWarningCarriesBytesTargetAndAdvice) {
  captured c;
  lf::query q;
  q.device = lf::device_limits::for_arch("H200");
  q.kernel = lf::kernel_resources::manual(16, 0, 1024, "copy");
  report_values r;
  r.kernel = q.kernel;
  r.cc = 90;
  r.plan = lf::bytes_in_flight_policy{{8, 64 * 1024}}.choose(q);
  lf::detail::log_new_plan(r);
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("16 KB/SM"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("64 KB"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("independent loads"), std::string::npos) << lines[1];
}

TEST(Log, JsonFormatWarningsAreJsonToo) {
  captured c;
  lf::set_log_format(lf::log_format::json);
  report_values r = sample_report(16);
  r.kernel.name = "_Z5otherv";
  lf::detail::log_new_plan(r);
  for (const std::string& line : c.lines()) {
    const std::string body = line.substr(line.find(' ') + 1);
    EXPECT_TRUE(nlohmann::json::accept(body)) << body;
  }
}

TEST(Log, TheLoggerIsNamedLaunchfitAndDefaultsToInfo) {
  auto l = lf::logger();
  EXPECT_EQ(l->name(), "launchfit");
  EXPECT_EQ(spdlog::get("launchfit"), l);
  EXPECT_NE(spdlog::default_logger()->name(), "launchfit");
}

// ---- environment, escaping, one format per mode, asynchronous output ----

namespace {

// Sets logging variables for one test (the others unset), re-reads them as at first use with launchfit's
// output captured; restores the environment and stderr output afterwards.
class logging_env {
 public:
  explicit logging_env(std::initializer_list<std::pair<const char*, const char*>> vars = {}) {
    for (const char* name :
         {"LAUNCHFIT_LOG_LEVEL", "SPDLOG_LEVEL", "LAUNCHFIT_LOG_FORMAT", "LAUNCHFIT_LOG_ASYNC"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [k, v] : vars) setenv(k, v, 1);
    lf::detail::reset_logging_for_tests(sink_);
  }
  ~logging_env() {
    lf::set_log_async(false);
    for (const auto& [k, v] : saved_) {
      if (v) {
        setenv(k.c_str(), v->c_str(), 1);
      } else {
        unsetenv(k.c_str());
      }
    }
    lf::detail::reset_logging_for_tests();
  }
  logging_env(const logging_env&) = delete;
  logging_env& operator=(const logging_env&) = delete;

  // Every line written so far, without its end of line.
  std::vector<std::string> lines() {
    lf::logger()->flush();
    std::vector<std::string> out = sink_->last_formatted();
    for (std::string& l : out)
      if (!l.empty() && l.back() == '\n') l.pop_back();
    return out;
  }
  // Lines written so far, without waiting for the logging thread (no flush: a flush wakes it).
  std::size_t written() { return sink_->last_formatted().size(); }
  std::vector<std::string> lines_with(const std::string& part) {
    std::vector<std::string> out;
    for (const std::string& l : lines())
      if (l.find(part) != std::string::npos) out.push_back(l);
    return out;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// One line a terminal or a line-based collector shows as one line, nothing it would act on.
::testing::AssertionResult is_one_safe_line(const std::string& line) {
  for (const char c : line) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return ::testing::AssertionFailure() << "control byte " << int(u) << " in: " << line;
    }
  }
  try {
    (void)nlohmann::json(line).dump();  // throws on invalid UTF-8
  } catch (const nlohmann::json::exception& e) {
    return ::testing::AssertionFailure() << e.what() << " in: " << line;
  }
  return ::testing::AssertionSuccess();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// A logfmt reader as log collectors have one: key=value pairs separated by spaces; a value bare (up to the
// next space) or double-quoted with \" \\ \n \r \t \uNNNN escapes (surrogate pairs joined). nullopt when
// the line is not logfmt, or names a key twice.
std::optional<std::map<std::string, std::string>> parse_logfmt(const std::string& line) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  const auto hex4 = [&](std::size_t at, std::uint32_t& v) {
    if (at + 4 > line.size()) return false;
    v = 0;
    for (std::size_t k = at; k < at + 4; ++k) {
      const char c = line[k];
      v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99);
      if (v > 0xffff) return false;
    }
    return true;
  };
  while (i < line.size()) {
    const std::size_t eq = line.find('=', i);
    if (eq == std::string::npos || eq == i) return std::nullopt;
    const std::string key = line.substr(i, eq - i);
    if (key.find_first_of(" \"") != std::string::npos) return std::nullopt;
    i = eq + 1;
    std::string value;
    if (i < line.size() && line[i] == '"') {
      ++i;
      for (;;) {
        if (i >= line.size()) return std::nullopt;  // unterminated
        const char c = line[i++];
        if (c == '"') break;
        if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
        if (c != '\\') {
          value += c;
          continue;
        }
        if (i >= line.size()) return std::nullopt;
        const char e = line[i++];
        if (e == '"' || e == '\\' || e == '/') {
          value += e;
        } else if (e == 'n') {
          value += '\n';
        } else if (e == 'r') {
          value += '\r';
        } else if (e == 't') {
          value += '\t';
        } else if (e == 'u') {
          std::uint32_t cp = 0;
          if (!hex4(i, cp)) return std::nullopt;
          i += 4;
          if (cp >= 0xd800 && cp < 0xdc00) {
            std::uint32_t lo = 0;
            if (line.compare(i, 2, "\\u") != 0 || !hex4(i + 2, lo) || lo < 0xdc00 || lo > 0xdfff)
              return std::nullopt;
            i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(value, cp);
        } else {
          return std::nullopt;
        }
      }
      if (i < line.size() && line[i] != ' ') return std::nullopt;
    } else {
      const std::size_t end = std::min(line.find(' ', i), line.size());
      value = line.substr(i, end - i);
      if (value.empty() || value.find_first_of("=\"") != std::string::npos) return std::nullopt;
      i = end;
    }
    if (!out.emplace(key, value).second) return std::nullopt;
    if (i < line.size()) ++i;  // the space
  }
  return out;
}

// The fields of a logfmt line (empty when it is not one).
std::map<std::string, std::string> fields_of(const std::string& line) {
  return parse_logfmt(line).value_or(std::map<std::string, std::string>{});
}

const std::regex rfc3339_utc_micros(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)");

// A time a line says is now (within a minute): the time is UTC, not local.
bool is_now(const std::string& t) {
  std::tm tm{};
  if (!strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return false;
  const std::time_t then = timegm(&tm);
  return std::abs(std::difftime(std::time(nullptr), then)) < 60;
}

const char* const hostile =
    "ok\n[2026-01-01 00:00:00.000] [launchfit] [error] forged\r\t\x1b[31mred\x7f \xff\xfe\xc3";

}  // namespace

TEST(LogEnv, SpdlogLevelWithAGarbageLaunchfitEntryWarnsAndKeepsInfo) {
  for (const char* value : {"launchfit=garbage", "launchfit=", "info,launchfit=verbose"}) {
    logging_env env({{"SPDLOG_LEVEL", value}});
    EXPECT_EQ(lf::logger()->level(), spdlog::level::info) << value;
    const auto warnings = env.lines_with("SPDLOG_LEVEL");
    ASSERT_EQ(warnings.size(), 1u) << value;
    EXPECT_EQ(fields_of(warnings[0])["level"], "warning") << warnings[0];
    EXPECT_TRUE(has(warnings[0], "is not a level (valid: trace, debug, info, warn, error, critical, off)"))
        << warnings[0];
    EXPECT_TRUE(has(warnings[0], "; using info")) << warnings[0];
  }
}

// An SPDLOG_LEVEL of thousands of bad items: the first four named, the rest counted in one more warning (it was
// a warning per item).
TEST(LogEnv, ThousandsOfBadSpdlogLevelItemsAreNamedInTheirFirstFew) {
  std::string value;
  for (int i = 0; i < 2000; ++i) value += (i ? "," : "") + std::string("launchfit=q") + std::to_string(i);
  logging_env env({{"SPDLOG_LEVEL", value.c_str()}});
  EXPECT_EQ(lf::logger()->level(), spdlog::level::info);
  const auto warnings = env.lines_with("SPDLOG_LEVEL");
  EXPECT_EQ(warnings.size(), 5u);
  EXPECT_EQ(env.lines_with("1996 more items are not levels").size(), 1u);
}

TEST(LogEnv, EveryUnknownValueIsReportedOnceAndTheDefaultKept) {
  struct bad {
    const char* var;
    const char* value;
    const char* says;
  };
  for (const bad& b : {bad{"LAUNCHFIT_LOG_LEVEL", "verbose", "is not a level (valid: trace, debug, info"},
                       bad{"SPDLOG_LEVEL", "garbage", "is not a level"},
                       bad{"LAUNCHFIT_LOG_FORMAT", "yaml", "is neither text nor json; using text"},
                       bad{"LAUNCHFIT_LOG_ASYNC", "maybe", "is not a switch (valid: 1, 0, true, false"}}) {
    logging_env env({{b.var, b.value}});
    lf::detail::log_event(spdlog::level::info, "test", "after");
    lf::logger()->info("and again");
    const auto warnings = env.lines_with(b.var);
    ASSERT_EQ(warnings.size(), 1u) << b.var;
    EXPECT_TRUE(has(fields_of(warnings[0])["msg"], std::string("'") + b.value + "'")) << warnings[0];
    EXPECT_TRUE(has(warnings[0], b.says)) << warnings[0];
    EXPECT_EQ(lf::logger()->level(), spdlog::level::info);
    EXPECT_EQ(lf::current_log_format(), lf::log_format::text);
    EXPECT_TRUE(lf::log_async());  // the default: asynchronous
  }
}

TEST(LogEnv, ValidValuesAreTakenQuietlyWhateverTheirCase) {
  {
    logging_env env({{"SPDLOG_LEVEL", "info, launchfit = DEBUG"}, {"LAUNCHFIT_LOG_FORMAT", "JSON"}});
    EXPECT_EQ(lf::logger()->level(), spdlog::level::debug);
    EXPECT_EQ(lf::current_log_format(), lf::log_format::json);
    EXPECT_TRUE(env.lines().empty());
  }
  {
    logging_env env({{"LAUNCHFIT_LOG_LEVEL", "warning"}, {"SPDLOG_LEVEL", "launchfit=trace"}});
    EXPECT_EQ(lf::logger()->level(), spdlog::level::warn);
    EXPECT_TRUE(env.lines().empty());
  }
}

TEST(LogEnv, AHostileValueIsEscapedInItsWarning) {
  logging_env env({{"LAUNCHFIT_LOG_LEVEL", hostile}});
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(is_one_safe_line(lines[0]));
  const std::string msg = fields_of(lines[0])["msg"];
  EXPECT_TRUE(has(msg, "ok\\n[2026-01-01")) << lines[0];
  EXPECT_TRUE(has(msg, "\\x1b[31mred\\x7f \\xff\\xfe\\xc3")) << lines[0];
}

TEST(LogText, UntrustedFieldsCannotForgeALine) {
  report_values r = sample_report();
  r.plan.reason = hostile;
  r.plan.policy = std::string("evil\n") + hostile;
  r.kernel.demangled = "k\x1b]0;title\x07\xe2\x80\xae";  // OSC title, U+202E
  r.device = "dev\"ice\\";
  r.override_glob = "*\t*";
  r.plan.match = "m\xc0\xaf";  // overlong '/'
  const std::string line = lf::detail::format_plan(r, lf::log_format::text);
  EXPECT_TRUE(is_one_safe_line(line));
  EXPECT_TRUE(has(line, "kernel=k\\x1b]0;title\\x07\\u202e ")) << line;
  EXPECT_TRUE(has(line, "device=\"dev\\\"ice\\\\\"")) << line;
  EXPECT_TRUE(has(line, "override=\"*\\t*\"")) << line;
  EXPECT_TRUE(has(line, "match=m\\xc0\\xaf")) << line;
  EXPECT_TRUE(
      has(line, "reason=\"ok\\n[2026-01-01 00:00:00.000] [launchfit] [error] forged\\r\\t\\x1b[31mred"))
      << line;
}

TEST(LogText, EveryMessageIsOneLineWhoeverLogsIt) {
  logging_env env;
  lf::detail::logger()->warn("plugin said {}", hostile);  // as other parts of launchfit log
  lf::logger()->error(hostile);
  lf::detail::log_event(spdlog::level::warn, "test", hostile, {{"path", hostile}, {"n", "1"}});
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 3u);
  for (const std::string& l : lines) EXPECT_TRUE(is_one_safe_line(l));
  EXPECT_EQ(fields_of(lines[0])["level"], "warning") << lines[0];
  EXPECT_EQ(fields_of(lines[0])["msg"].rfind("plugin said ok\\n[2026", 0), 0u) << lines[0];
  EXPECT_TRUE(has(fields_of(lines[2])["msg"], " path=\"ok\\n[2026")) << lines[2];
  EXPECT_TRUE(has(fields_of(lines[2])["msg"], " n=1")) << lines[2];
}

TEST(LogText, AUserLoggerGetsEscapedMessagesToo) {
  captured c;
  lf::detail::logger()->warn("x\ny");
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "warning x\\ny\n");
}

TEST(LogText, AMegabyteReasonIsCappedAndSaysItsLength) {
  report_values r = sample_report();
  r.plan.reason = std::string(1 << 20, 'r');
  for (const lf::log_format f : {lf::log_format::text, lf::log_format::json}) {
    const std::string line = lf::detail::format_plan(r, f);
    EXPECT_LT(line.size(), 2 * lf::detail::log_field_cap);
    EXPECT_TRUE(has(line, "r...(1048576 bytes)")) << line.substr(line.size() - 100);
  }
  logging_env env;
  lf::detail::logger()->warn(std::string(1 << 20, 'w'));
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LT(lines[0].size(), 70u * 1024);
  EXPECT_TRUE(has(lines[0], "w...(1048576 bytes)"));
}

TEST(LogJson, InvalidUtf8NeverThrowsAndComesOutReplaced) {
  report_values r = sample_report(8);
  r.kernel.name = "_Z4utf8v";
  r.plan.reason = "bad \xff\xfe";
  r.kernel.demangled = "k\xc3";
  r.plan.warning = "w\xed\xa0\x80";  // a UTF-16 surrogate
  std::string line;
  ASSERT_NO_THROW(line = lf::detail::format_plan(r, lf::log_format::json));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["plan"]["reason"], "bad \xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(j["kernel"], "k\xef\xbf\xbd");
  EXPECT_TRUE(is_one_safe_line(line));
  logging_env env({{"LAUNCHFIT_LOG_FORMAT", "json"}});
  EXPECT_NO_THROW(lf::detail::log_new_plan(r));
  EXPECT_EQ(env.lines().size(), 3u);  // plan, shortfall/warning, spill
}

TEST(LogJson, EveryLineIsOneJsonObjectWhoeverLogsIt) {
  logging_env env({{"LAUNCHFIT_LOG_FORMAT", "json"}});
  report_values r = sample_report(16);
  r.kernel.name = "_Z5jsonsv";
  r.plan.warning = "falls short";
  lf::detail::log_new_plan(r);
  lf::detail::logger()->warn("x\ny");  // as the plugin loader and the cache file log
  lf::detail::logger()->error("plugin said {}", hostile);
  lf::logger()->info("{\"level\":\"info\",\"forged\":true}");  // JSON from outside is wrapped, not trusted
  lf::detail::log_event(spdlog::level::err, "test", hostile, {{"path", hostile}});
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 7u);
  for (const std::string& l : lines) {
    EXPECT_TRUE(is_one_safe_line(l));
    ASSERT_TRUE(nlohmann::json::accept(l)) << l;
    const auto j = nlohmann::json::parse(l);
    ASSERT_TRUE(j.is_object()) << l;
    EXPECT_EQ(j["logger"], "launchfit") << l;
    EXPECT_TRUE(j.contains("level")) << l;
  }
  EXPECT_EQ(nlohmann::json::parse(lines[3])["msg"], "x\ny");
  EXPECT_EQ(nlohmann::json::parse(lines[3])["level"], "warning");
  EXPECT_EQ(nlohmann::json::parse(lines[5])["msg"], "{\"level\":\"info\",\"forged\":true}");
  EXPECT_FALSE(nlohmann::json::parse(lines[5]).contains("forged"));
  EXPECT_EQ(nlohmann::json::parse(lines[6])["event"], "test");
}

TEST(LogJson, TheEnvironmentWarningIsJsonInJsonMode) {
  logging_env env({{"LAUNCHFIT_LOG_FORMAT", "json"}, {"LAUNCHFIT_LOG_LEVEL", "loud"}});
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 1u);
  const auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["event"], "bad_environment");
  EXPECT_EQ(j["variable"], "LAUNCHFIT_LOG_LEVEL");
  EXPECT_EQ(j["value"], "loud");
}

TEST(LogHostile, SetLoggerWithLaunchfitsOwnLoggerDoesNotLoop) {
  logging_env env;
  lf::set_logger(lf::logger());
  lf::logger()->warn("still written");
  lf::set_logger(nullptr);
  EXPECT_EQ(env.lines_with("still written").size(), 1u);
}

namespace {
// A sink that throws, under a logger whose error handler throws too.
class throwing_sink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg&) override { throw std::runtime_error("disk full"); }
  void flush() override { throw std::runtime_error("disk full"); }
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
};
// A sink that logs to launchfit from inside launchfit's logging.
class reentrant_sink final : public spdlog::sinks::sink {
 public:
  int calls = 0;
  void log(const spdlog::details::log_msg&) override {
    ++calls;
    lf::logger()->warn("again");
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
};
}  // namespace

TEST(LogHostile, AThrowingUserSinkNeverThrowsOutOfLaunchfit) {
  auto l = std::make_shared<spdlog::logger>("mine", std::make_shared<throwing_sink>());
  l->set_error_handler([](const std::string& m) { throw std::runtime_error(m); });
  lf::set_logger(l);
  report_values r = sample_report(8);
  r.kernel.name = "_Z5throwv";
  EXPECT_NO_THROW(lf::detail::log_new_plan(r));
  EXPECT_NO_THROW(lf::detail::log_event(spdlog::level::warn, "test", "x"));
  const auto before = lf::log_lines_dropped();
  EXPECT_NO_THROW(lf::detail::logger()->warn("direct {}", 1));
  EXPECT_GT(lf::log_lines_dropped(), before);
  lf::set_logger(nullptr);
}

TEST(LogHostile, ASinkThatLogsBackIsNotFollowedForever) {
  auto sink = std::make_shared<reentrant_sink>();
  lf::set_logger(std::make_shared<spdlog::logger>("mine", sink));
  const auto before = lf::log_lines_dropped();
  lf::logger()->warn("first");
  lf::set_logger(nullptr);
  EXPECT_EQ(sink->calls, 1);
  EXPECT_EQ(lf::log_lines_dropped(), before + 1);
}

TEST(LogAsync, LinesArriveInOrderAfterAFlush) {
  logging_env env({{"LAUNCHFIT_LOG_ASYNC", "1"}});
  EXPECT_TRUE(lf::log_async());
  for (int i = 0; i < 500; ++i)
    lf::detail::log_event(spdlog::level::info, "test", "line " + std::to_string(i));
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 500u);
  for (int i = 0; i < 500; ++i) EXPECT_TRUE(has(lines[i], "line " + std::to_string(i) + "")) << lines[i];
  lf::set_log_async(false);
  EXPECT_FALSE(lf::log_async());
}

// A program that logs a line every 30 ms keeps the logging thread polling, backing off after each batch (1,
// 2, 4, 8, 16 ms): a few looks per line, not one every millisecond (about 30 per line before).
TEST(LogAsync, ATrickleOfLinesCostsAFewPollsPerLineNotOnePerMillisecond) {
  logging_env env({{"LAUNCHFIT_LOG_ASYNC", "1"}});
  lf::detail::log_event(spdlog::level::info, "test", "first");
  ASSERT_EQ(env.lines().size(), 1u);  // the logging thread runs
  const std::uint64_t before = lf::detail::log_polls_for_tests.load();
  constexpr int lines = 20;
  for (int i = 0; i < lines; ++i) {
    lf::detail::log_event(spdlog::level::info, "test", "line " + std::to_string(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  const std::uint64_t polls = lf::detail::log_polls_for_tests.load() - before;
  std::printf("%d lines 30 ms apart: %llu polls\n", lines, static_cast<unsigned long long>(polls));
  EXPECT_LT(polls, 10u * lines);  // 1, 2, 4, 8 and 16 ms after each batch: a few looks in a 30 ms gap
  EXPECT_EQ(env.lines().size(), 1u + lines);
}

// A line some time after the last one (here 80 ms: past the fast polling, within park_after) is found by
// the logging thread's slower looks: its caller asks for no wake-up. A warning still asks for one at once.
// (Counted where the line is queued, whatever the thread happens to be doing then.)
TEST(LogAsync, ALineAfterAQuietSpellWakesNothingAWarningDoes) {
  logging_env env({{"LAUNCHFIT_LOG_ASYNC", "1"}});
  lf::detail::log_event(spdlog::level::info, "test", "first");
  ASSERT_EQ(env.lines().size(), 1u);  // flushed: the logging thread runs
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  const std::uint64_t wakes = lf::detail::log_wakes_for_tests.load();
  lf::detail::log_event(spdlog::level::info, "test", "after a quiet spell");
  EXPECT_EQ(lf::detail::log_wakes_for_tests.load(), wakes) << "an info line woke the logging thread";
  // Written by the thread's own look (no flush, which would wake it), within its idle period and slack.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::size_t written = 0;
  while ((written = env.written()) < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(written, 2u);
  EXPECT_EQ(lf::detail::log_wakes_for_tests.load(), wakes);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  lf::detail::log_event(spdlog::level::warn, "test", "a warning");
  EXPECT_EQ(lf::detail::log_wakes_for_tests.load(), wakes + 1) << "a warning did not wake the thread";
  EXPECT_EQ(env.lines().size(), 3u);
}

TEST(LogAsync, JsonAndEscapingHoldOnTheLoggingThread) {
  logging_env env({{"LAUNCHFIT_LOG_ASYNC", "on"}, {"LAUNCHFIT_LOG_FORMAT", "json"}});
  lf::detail::logger()->warn("x\ny");
  lf::detail::log_new_plan(sample_report());
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& l : lines) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
}

// ---- lines people can parse: logfmt text, JSON with the time and the process id ----

namespace {

// One line of every kind launchfit writes (the queue-full report is the fault suite's): a new plan, its
// spill and shortfall warnings, an event with fields, a line through the logger itself, hostile text. The
// environment warning comes from the test's environment.
void log_every_kind() {
  report_values r = sample_report(64);
  r.kernel.name = "_Z6every" + std::to_string(::getpid()) + "v";
  r.plan.warning = "bytes in flight short of the target";
  lf::detail::log_new_plan(r);
  lf::detail::log_event(spdlog::level::info, "test", "an event", {{"key", "a value"}, {"time", "forged"}});
  lf::logger()->warn("direct {}", 1);
  lf::detail::log_event(spdlog::level::warn, "test", hostile, {{"value", hostile}});
}

}  // namespace

TEST(LogFormat, EveryTextLineIsLogfmtWithTimeLevelLoggerPidAndMessage) {
  logging_env env({{"LAUNCHFIT_LOG_LEVEL", "verbose"}});
  log_every_kind();
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 7u);  // environment, plan, shortfall, spill, event, direct, hostile
  std::vector<std::string> messages;
  for (const std::string& line : lines) {
    const auto f = parse_logfmt(line);
    ASSERT_TRUE(f) << "not logfmt: " << line;
    EXPECT_TRUE(std::regex_match(f->at("time"), rfc3339_utc_micros)) << line;
    EXPECT_TRUE(is_now(f->at("time"))) << line;
    EXPECT_EQ(f->at("pid"), std::to_string(::getpid())) << line;
    EXPECT_EQ(f->at("logger"), "launchfit") << line;
    EXPECT_TRUE(f->at("level") == "info" || f->at("level") == "warning") << line;
    EXPECT_TRUE(is_one_safe_line(line));
    messages.push_back(f->at("msg"));
  }
  EXPECT_TRUE(has(messages[0], "LAUNCHFIT_LOG_LEVEL='verbose' is not a level")) << messages[0];
  EXPECT_EQ(messages[1].rfind("new plan: kernel=reduce(float const*, float*, int)", 0), 0u) << messages[1];
  EXPECT_TRUE(has(messages[1], " reason=\"")) << messages[1];
  EXPECT_EQ(messages[4], "an event key=\"a value\" time=forged");
  EXPECT_EQ(messages[5], "direct 1");
  // Hostile text stays escaped inside the message: one line, and the reader gets launchfit's escapes.
  EXPECT_EQ(messages[6].rfind("ok\\n[2026-01-01 00:00:00.000] [launchfit] [error] forged\\r\\t", 0), 0u)
      << messages[6];
}

TEST(LogFormat, EveryJsonLineHasAnRfc3339UtcTimeAndThePid) {
  logging_env env({{"LAUNCHFIT_LOG_FORMAT", "json"}, {"LAUNCHFIT_LOG_LEVEL", "verbose"}});
  log_every_kind();
  const auto lines = env.lines();
  ASSERT_EQ(lines.size(), 7u);
  for (const std::string& line : lines) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    ASSERT_TRUE(j.is_object()) << line;
    ASSERT_TRUE(j.contains("time") && j["time"].is_string()) << line;
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), rfc3339_utc_micros)) << line;
    EXPECT_TRUE(is_now(j["time"].get<std::string>())) << line;
    EXPECT_EQ(j["pid"], ::getpid()) << line;
    EXPECT_EQ(j["logger"], "launchfit") << line;
    EXPECT_TRUE(j.contains("level") && (j.contains("msg") || j.contains("event"))) << line;
    // A field named "time" cannot stand in for the line's own.
    std::size_t times = 0;
    for (auto at = line.find("\"time\":"); at != std::string::npos; at = line.find("\"time\":", at + 1))
      ++times;
    EXPECT_EQ(times, 1u) << line;
  }
}

TEST(LogFormat, LogfmtValuesAreBareUnlessTheyMustBeQuotedAndReadBackAsWritten) {
  EXPECT_EQ(lf::detail::logfmt_value("plain"), "plain");
  EXPECT_EQ(lf::detail::logfmt_value("a\\b(1,2)"), "a\\b(1,2)");
  EXPECT_EQ(lf::detail::logfmt_value(""), "\"\"");
  EXPECT_EQ(lf::detail::logfmt_value("two words"), "\"two words\"");
  EXPECT_EQ(lf::detail::logfmt_value("k=v"), "\"k=v\"");
  EXPECT_EQ(lf::detail::logfmt_value("say \"hi\" \\o/"), "\"say \\\"hi\\\" \\\\o/\"");
  EXPECT_EQ(lf::detail::logfmt_value("a\nb\x1b"), "\"a\\nb\\u001b\"");
  EXPECT_EQ(lf::detail::logfmt_value("caf\xc3\xa9 \xe2\x80\xae"), "\"caf\\u00e9 \\u202e\"");
  EXPECT_EQ(lf::detail::logfmt_value("\xf0\x9f\x98\x80"), "\"\\ud83d\\ude00\"");
  EXPECT_EQ(lf::detail::logfmt_value("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(lf::detail::logfmt_value("abcdef", 3), "\"abc...(6 bytes)\"");
  for (const std::string v : {"plain", "", "two words", "k=v", "say \"hi\" \\o/", "a\nb\r\tc\x01\x7f",
                              "caf\xc3\xa9 \xe2\x80\xae \xf0\x9f\x98\x80"}) {
    const auto f = parse_logfmt("k=" + lf::detail::logfmt_value(v, 1024) + " next=1");
    ASSERT_TRUE(f) << v;
    EXPECT_EQ(f->at("k"), v);
    EXPECT_EQ(f->at("next"), "1");
  }
}

// Not a test: the cost to the calling thread of one new-plan line (text, info), synchronous and
// asynchronous, into a sink that formats the line with the default pattern and discards it; and of
// format_plan alone. Thread CPU time, so other processes on the host do not count. Run with
// --gtest_also_run_disabled_tests --gtest_filter=*PlanLineCost*.
TEST(LogBench, DISABLED_PlanLineCost) {
  class discard_sink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
   protected:
    void sink_it_(const spdlog::details::log_msg& m) override {
      spdlog::memory_buf_t buf;
      formatter_->format(m, buf);
      bytes += buf.size();
    }
    void flush_() override {}

   public:
    std::size_t bytes = 0;
  };
  const auto thread_cpu_us = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
  };
  const lf::detail::plan_report r = sample_report();
  constexpr int batches = 10, batch = 4000;  // below the queue bound: nothing dropped
  {
    std::size_t bytes = 0;
    const double t0 = thread_cpu_us();
    for (int i = 0; i < batches * batch; ++i)
      bytes += lf::detail::format_plan(r, lf::log_format::text).size();
    std::printf("format_plan only: %.2f us per line (%zu bytes)\n",
                (thread_cpu_us() - t0) / (batches * batch), bytes / (batches * batch));
  }
  for (const bool async : {false, true}) {
    logging_env env;
    lf::detail::reset_logging_for_tests(std::make_shared<discard_sink>());
    lf::set_log_async(async);
    for (int i = 0; i < 1000; ++i) lf::detail::log_new_plan(r);  // warm up
    lf::logger()->flush();
    double spent = 0;
    for (int b = 0; b < batches; ++b) {
      const double t0 = thread_cpu_us();
      for (int i = 0; i < batch; ++i) lf::detail::log_new_plan(r);
      spent += thread_cpu_us() - t0;
      lf::logger()->flush();  // the logging thread's work, not the caller's
    }
    std::printf("%s: %.2f us of the caller's CPU per new-plan line (%d lines, dropped %llu)\n",
                async ? "async" : "sync", spent / (batches * batch), batches * batch,
                static_cast<unsigned long long>(lf::log_lines_dropped()));
    // A first launch: one line while the logging thread sleeps (it is woken for the line). Wall time, median.
    std::vector<double> one;
    for (int i = 0; i < 2000; ++i) {
      lf::logger()->flush();
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // the logging thread back asleep
      const auto t0 = std::chrono::steady_clock::now();
      lf::detail::log_new_plan(r);
      one.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(one.begin(), one.end());
    std::printf("%s: %.2f us wall per line logged alone (median of %zu, the logging thread asleep before each)\n",
                async ? "async" : "sync", one[one.size() / 2], one.size());
  }
}

// ---- asynchronous output, the default ----

namespace {

// Holds the logging thread inside the batch it has just taken until release() (a plain function pointer is
// all the hook takes, hence the statics).
struct held_logging_thread {
  static inline std::mutex m;
  static inline std::condition_variable cv;
  static inline bool taken = false, released = false;
  held_logging_thread() {
    taken = released = false;
    lf::detail::log_batch_taken_for_tests = [] {
      lf::detail::log_batch_taken_for_tests = nullptr;
      std::unique_lock<std::mutex> lock(m);
      taken = true;
      cv.notify_all();
      cv.wait(lock, [] { return released; });
    };
  }
  void wait_taken() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [] { return taken; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(m);
      released = true;
    }
    cv.notify_all();
  }
  ~held_logging_thread() {
    release();
    lf::detail::log_batch_taken_for_tests = nullptr;
  }
};

// Records the thread each line arrives on.
class thread_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg&) override { threads_.push_back(std::this_thread::get_id()); }
  void flush_() override {}

 private:
  std::vector<std::thread::id> threads_;
};

}  // namespace

// By default a launch only queues a copy of its new plan's report: the logging thread makes the line. Seen
// here by the format: the line queued while text was in force, then written after JSON was set, is JSON.
TEST(LogAsync, ByDefaultANewPlansLineIsMadeOnTheLoggingThread) {
  logging_env env;  // no LAUNCHFIT_LOG_* variable: the defaults
  ASSERT_TRUE(lf::log_async());
  {
    held_logging_thread held;
    lf::detail::log_event(spdlog::level::info, "test", "first line");
    held.wait_taken();
    lf::detail::log_new_plan(sample_report());
    lf::set_log_format(lf::log_format::json);
  }
  const auto plans = env.lines_with("new_plan");
  lf::set_log_format(lf::log_format::text);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].rfind("{\"time\":", 0), 0u) << plans[0];
  EXPECT_TRUE(nlohmann::json::accept(plans[0])) << plans[0];
  // LAUNCHFIT_LOG_ASYNC=0: made and written by the caller, in the format in force then.
  logging_env sync({{"LAUNCHFIT_LOG_ASYNC", "0"}});
  EXPECT_FALSE(lf::log_async());
  lf::detail::log_new_plan(sample_report());
  lf::set_log_format(lf::log_format::json);
  const auto sync_plans = sync.lines_with("new plan");
  lf::set_log_format(lf::log_format::text);
  ASSERT_EQ(sync_plans.size(), 1u);
  EXPECT_EQ(sync_plans[0].find("{"), std::string::npos) << sync_plans[0];
}

// A logger given to set_logger() gets lines on the thread that logs them, unless asynchronous output was
// asked for (set_log_async or LAUNCHFIT_LOG_ASYNC): its sinks and their threading are the user's.
TEST(LogAsync, AUsersLoggerIsAsynchronousOnlyWhenAskedFor) {
  logging_env env;
  auto sink = std::make_shared<thread_sink>();
  lf::set_logger(std::make_shared<spdlog::logger>("user", sink));
  lf::detail::log_event(spdlog::level::info, "test", "on the caller");
  lf::detail::log_new_plan(sample_report());
  lf::logger()->flush();
  auto seen = sink->threads();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::this_thread::get_id());
  EXPECT_EQ(seen[1], std::this_thread::get_id());
  lf::set_log_async(true);
  lf::detail::log_event(spdlog::level::info, "test", "on the logging thread");
  lf::detail::log_new_plan(sample_report());
  lf::logger()->flush();
  seen = sink->threads();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_NE(seen[2], std::this_thread::get_id());
  EXPECT_NE(seen[3], std::this_thread::get_id());
  lf::set_logger(nullptr);
}

// A sink added to logger() (or a backtrace) sees lines through the front logger: a new plan's line reaches
// it too, asynchronous output or not.
TEST(LogAsync, ASinkAddedToTheLoggerGetsTheNewPlansLine) {
  logging_env env;
  ASSERT_TRUE(lf::log_async());
  auto extra = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  lf::logger()->sinks().push_back(extra);
  lf::detail::log_new_plan(sample_report());
  lf::logger()->flush();
  lf::logger()->sinks().pop_back();
  const auto seen = extra->last_formatted();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("new plan: kernel=reduce"), std::string::npos) << seen[0];
  EXPECT_EQ(env.lines_with("new plan").size(), 1u);
}

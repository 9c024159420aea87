// SPDX-License-Identifier: MIT
// The settings (lib/settings.hpp): every environment variable launchfit reads, read once into one value,
// through one number parser, one word parser and one warning format; the warnings escaped, bounded and
// logged once; the value read by one thread when many use it first; getenv nowhere else (the lint).

#include "settings.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "captured_log.hpp"

namespace {

namespace lf = launchfit;
namespace ld = launchfit::detail;
using launchfit_test::has;

// An environment for read_settings(): only what a test puts in it.
struct fake_environment {
  std::map<std::string, std::string> vars;
  static const char* lookup(const char* name, void* self) {
    const auto& vars = static_cast<fake_environment*>(self)->vars;
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
  ld::settings read() { return ld::read_settings(&lookup, this); }
};

ld::settings read_with(const std::string& name, const std::string& value) {
  fake_environment env;
  env.vars[name] = value;
  return env.read();
}

// The one warning of a value read alone; fails the test when there is not exactly one.
std::string warning_of(const std::string& name, const std::string& value) {
  const ld::settings s = read_with(name, value);
  if (s.warnings.size() != 1) {
    ADD_FAILURE() << name << "='" << value.substr(0, 40) << "': " << s.warnings.size() << " warnings";
    return "";
  }
  EXPECT_EQ(s.warnings[0].variable, name);
  return s.warnings[0].message;
}

// ---- the parsers ----------------------------------------------------------------------------------------

TEST(SettingsParse, NumbersAreDecimalDigitsWithinTheirRange) {
  EXPECT_EQ(ld::parse_number("1", 1, 10), 1u);
  EXPECT_EQ(ld::parse_number("10", 1, 10), 10u);
  EXPECT_EQ(ld::parse_number("007", 1, 10), 7u);
  EXPECT_EQ(ld::parse_number("18446744073709551615", 0, UINT64_MAX), UINT64_MAX);
  for (const char* bad :
       {"", "0", "11", "-1", "+1", " 1", "1 ", "1\n", "0x1", "1e3", "1.0", "１", "1,000", "\t"})
    EXPECT_FALSE(ld::parse_number(bad, 1, 10).has_value()) << "'" << bad << "'";
  // Overflow: one past 2^64 - 1, and numbers far larger, are refused rather than wrapped.
  EXPECT_FALSE(ld::parse_number("18446744073709551616", 0, UINT64_MAX).has_value());
  EXPECT_FALSE(ld::parse_number("184467440737095516150", 0, UINT64_MAX).has_value());
  EXPECT_FALSE(ld::parse_number(std::string(100000, '9'), 0, UINT64_MAX).has_value());
  // A maximum below a digit still refuses that digit (no unsigned wrap in the bound check).
  EXPECT_FALSE(ld::parse_number("7", 1, 5).has_value());
  EXPECT_EQ(ld::parse_number("5", 1, 5), 5u);
}

TEST(SettingsParse, WordsIgnoreCaseAndSurroundingBlanksOnly) {
  EXPECT_EQ(ld::parse_word("frozen", {"read_write", "frozen"}), 1u);
  EXPECT_EQ(ld::parse_word(" FROZEN\t", {"read_write", "frozen"}), 1u);
  EXPECT_EQ(ld::parse_word("Read_Write", {"read_write", "frozen"}), 0u);
  for (const char* bad : {"", "froze", "frozenn", "fro zen", "frozen\n", "frozen;", "\xef\xbd\x86rozen"})
    EXPECT_FALSE(ld::parse_word(bad, {"read_write", "frozen"}).has_value()) << "'" << bad << "'";
}

TEST(SettingsParse, TheWarningNamesTheVariableEscapesAndBoundsTheValue) {
  EXPECT_EQ(ld::setting_warning_text("LAUNCHFIT_X", "abc", "is not a word", "text"),
            "LAUNCHFIT_X='abc' is not a word; using text");
  const std::string hostile = "a\nb\r\x1b[31m'\x7f\xff\xe2\x80\xae";
  const std::string w = ld::setting_warning_text("LAUNCHFIT_X", hostile, "is bad", "the default");
  EXPECT_EQ(w, "LAUNCHFIT_X='a\\nb\\r\\x1b[31m\\'\\x7f\\xff\\u202e' is bad; using the default");
  for (const char c : w) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << w;
  // A long value is cut, and says how long it was.
  const std::string huge(1 << 20, 'x');
  const std::string cut = ld::setting_warning_text("LAUNCHFIT_X", huge, "is bad", "1");
  EXPECT_LE(cut.size(), ld::setting_shown_bytes + 64) << cut.substr(0, 300);
  EXPECT_TRUE(has(cut, "(1048576 bytes)")) << cut.substr(0, 300);
}

// ---- every variable --------------------------------------------------------------------------------------

TEST(SettingsRead, NothingSetMeansTheDefaultsAndNoWarning) {
  const ld::settings s = fake_environment{}.read();
  EXPECT_TRUE(s.plugins.paths.empty());
  EXPECT_FALSE(s.plugins.fallback);
  EXPECT_TRUE(s.policy_overrides.empty());
  EXPECT_TRUE(s.cache.file.empty());
  EXPECT_EQ(s.cache.mode, lf::cache_file_mode::read_write);
  EXPECT_EQ(s.cache.match, lf::cache_match::model);
  EXPECT_EQ(s.cache.max_bytes, std::size_t(16) << 20);
  EXPECT_EQ(s.cache.max_entries, 8192u);
  EXPECT_TRUE(s.remote.url.empty());
  EXPECT_EQ(s.remote.ttl_s, 30u * 24 * 3600);
  EXPECT_EQ(s.log.level, ld::log_level_setting::info);
  EXPECT_EQ(s.log.format, lf::log_format::text);
  EXPECT_TRUE(s.log.async);
  EXPECT_FALSE(s.log.async_set);
  EXPECT_TRUE(s.nvtx);
  EXPECT_FALSE(s.nvtx_tool_attached);
  EXPECT_FALSE(s.cuda_launch_blocking);
  EXPECT_TRUE(s.warnings.empty());
}

// Empty is unset (`VAR= command`) for every variable: the default, no warning.
TEST(SettingsRead, AnEmptyVariableIsAnUnsetOne) {
  fake_environment env;
  for (const char* name :
       {"LAUNCHFIT_PLUGINS", "LAUNCHFIT_PLUGIN_FALLBACK", "LAUNCHFIT_POLICY", "LAUNCHFIT_CACHE",
        "LAUNCHFIT_CACHE_MODE", "LAUNCHFIT_CACHE_MATCH", "LAUNCHFIT_CACHE_MAX_BYTES",
        "LAUNCHFIT_CACHE_MAX_ENTRIES", "LAUNCHFIT_REMOTE", "LAUNCHFIT_REMOTE_TTL", "LAUNCHFIT_LOG_LEVEL",
        "SPDLOG_LEVEL", "LAUNCHFIT_LOG_FORMAT", "LAUNCHFIT_LOG_ASYNC", "LAUNCHFIT_NVTX",
        "NVTX_INJECTION64_PATH", "CUDA_LAUNCH_BLOCKING"})
    env.vars[name] = "";
  const ld::settings s = env.read();
  EXPECT_TRUE(s.warnings.empty());
  EXPECT_EQ(s.cache.mode, lf::cache_file_mode::read_write);
  EXPECT_EQ(s.cache.max_bytes, std::size_t(16) << 20);
  EXPECT_FALSE(s.log.async_set);
  EXPECT_TRUE(s.nvtx);
  EXPECT_FALSE(s.nvtx_tool_attached);
  EXPECT_FALSE(s.cuda_launch_blocking);
}

struct number_variable {
  const char* name;
  std::uint64_t fallback, max;
  const char* unit;
  std::uint64_t (*field)(const ld::settings&);
};

const number_variable number_variables[] = {
    {"LAUNCHFIT_CACHE_MAX_BYTES", std::uint64_t(16) << 20, std::uint64_t(1) << 40, "bytes",
     [](const ld::settings& s) -> std::uint64_t { return s.cache.max_bytes; }},
    {"LAUNCHFIT_CACHE_MAX_ENTRIES", 8192, 0xffffffffULL, "entries",
     [](const ld::settings& s) -> std::uint64_t { return s.cache.max_entries; }},
    {"LAUNCHFIT_REMOTE_TTL", 30ULL * 24 * 3600, 10ULL * 365 * 24 * 3600, "seconds",
     [](const ld::settings& s) -> std::uint64_t { return s.remote.ttl_s; }},
};

TEST(SettingsRead, EveryNumberTakesItsRangeAndRefusesTheRestWithOneWarning) {
  for (const number_variable& v : number_variables) {
    SCOPED_TRACE(v.name);
    const std::string max = std::to_string(v.max), fallback = std::to_string(v.fallback);
    EXPECT_EQ(v.field(read_with(v.name, "1")), 1u);
    EXPECT_EQ(v.field(read_with(v.name, "4096")), 4096u);
    EXPECT_EQ(v.field(read_with(v.name, max)), v.max);
    EXPECT_TRUE(read_with(v.name, max).warnings.empty());
    const std::string why =
        "' is not a number of " + std::string(v.unit) + " in 1.." + max + "; using " + fallback;
    // garbage, zero, above the range, past 2^64, signs, blanks, a huge value
    for (const std::string& bad :
         {std::string("lots"), std::string("0"), std::to_string(v.max + 1),
          std::string("18446744073709551616"), std::string("99999999999999999999999"), std::string("-5"),
          std::string("+5"), std::string(" 5"), std::string("5 "), std::string("\t5"), std::string("5\n"),
          std::string("0x10")}) {
      SCOPED_TRACE("'" + bad + "'");
      const ld::settings s = read_with(v.name, bad);
      EXPECT_EQ(v.field(s), v.fallback);
      ASSERT_EQ(s.warnings.size(), 1u);
      EXPECT_EQ(s.warnings[0].variable, v.name);
      EXPECT_EQ(s.warnings[0].value, bad);
      EXPECT_TRUE(has(s.warnings[0].message, why)) << s.warnings[0].message;
      EXPECT_EQ(s.warnings[0].message.rfind(std::string(v.name) + "='", 0), 0u) << s.warnings[0].message;
    }
    const std::string huge(1 << 20, '7');
    const ld::settings s = read_with(v.name, huge);
    EXPECT_EQ(v.field(s), v.fallback);
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_LE(s.warnings[0].message.size(), 400u);
    EXPECT_LE(s.warnings[0].value.size(), ld::setting_value_cap);
    EXPECT_TRUE(has(s.warnings[0].message, "...(1048576 bytes)'")) << s.warnings[0].message;
  }
}

TEST(SettingsRead, TheCacheFilesModeAndMatchFallBackToTheSafeWord) {
  EXPECT_EQ(read_with("LAUNCHFIT_CACHE_MODE", "frozen").cache.mode, lf::cache_file_mode::frozen);
  EXPECT_EQ(read_with("LAUNCHFIT_CACHE_MODE", " Frozen ").cache.mode, lf::cache_file_mode::frozen);
  EXPECT_EQ(read_with("LAUNCHFIT_CACHE_MODE", "read_write").cache.mode, lf::cache_file_mode::read_write);
  EXPECT_TRUE(read_with("LAUNCHFIT_CACHE_MODE", "READ_WRITE").warnings.empty());
  EXPECT_EQ(read_with("LAUNCHFIT_CACHE_MATCH", "exact").cache.match, lf::cache_match::exact);
  EXPECT_EQ(read_with("LAUNCHFIT_CACHE_MATCH", "model").cache.match, lf::cache_match::model);
  // A typo must not start writing a file meant to be read only, nor widen what a production job accepts.
  for (const char* typo : {"readwrite", "read-write", "rw", "frozne", "-", "1", "read_write frozen"}) {
    const ld::settings s = read_with("LAUNCHFIT_CACHE_MODE", typo);
    EXPECT_EQ(s.cache.mode, lf::cache_file_mode::frozen) << typo;
  }
  for (const char* typo : {"modle", "models", "exactly", "any", "0"}) {
    const ld::settings s = read_with("LAUNCHFIT_CACHE_MATCH", typo);
    EXPECT_EQ(s.cache.match, lf::cache_match::exact) << typo;
  }
  EXPECT_EQ(warning_of("LAUNCHFIT_CACHE_MODE", "frozne"),
            "LAUNCHFIT_CACHE_MODE='frozne' is neither read_write nor frozen; using frozen");
  EXPECT_EQ(warning_of("LAUNCHFIT_CACHE_MATCH", "modle\x1b[31m"),
            "LAUNCHFIT_CACHE_MATCH='modle\\x1b[31m' is neither exact nor model; using exact");
}

TEST(SettingsRead, EverySwitchTakesTheCommonWordsAndKeepsItsDefaultOtherwise) {
  struct sw {
    const char* name;
    bool fallback;
    bool (*field)(const ld::settings&);
  };
  for (const sw& v :
       {sw{"LAUNCHFIT_PLUGIN_FALLBACK", false, [](const ld::settings& s) { return s.plugins.fallback; }},
        sw{"LAUNCHFIT_NVTX", true, [](const ld::settings& s) { return s.nvtx; }},
        sw{"LAUNCHFIT_LOG_ASYNC", true, [](const ld::settings& s) { return s.log.async; }}}) {
    SCOPED_TRACE(v.name);
    for (const char* on : {"1", "yes", "ON", " true "}) EXPECT_TRUE(v.field(read_with(v.name, on))) << on;
    for (const char* off : {"0", "no", "Off", "FALSE"}) EXPECT_FALSE(v.field(read_with(v.name, off))) << off;
    for (const char* bad : {"maybe", "2", "-1", "y", "enable", "o n"}) {
      const ld::settings s = read_with(v.name, bad);
      EXPECT_EQ(v.field(s), v.fallback) << bad;
      ASSERT_EQ(s.warnings.size(), 1u) << bad;
      EXPECT_EQ(s.warnings[0].message,
                std::string(v.name) + "='" + bad +
                    "' is not a switch (valid: 1, 0, true, false, yes, no, on, off); using " +
                    (v.fallback ? "on" : "off"));
    }
  }
  // LAUNCHFIT_LOG_ASYNC "said so" only when it held a switch word (then it holds for a user's logger too).
  EXPECT_TRUE(read_with("LAUNCHFIT_LOG_ASYNC", "off").log.async_set);
  EXPECT_FALSE(read_with("LAUNCHFIT_LOG_ASYNC", "maybe").log.async_set);
}

TEST(SettingsRead, TheLogLevelFromLaunchfitLogLevelElseSpdlogLevel) {
  using L = ld::log_level_setting;
  EXPECT_EQ(read_with("LAUNCHFIT_LOG_LEVEL", "debug").log.level, L::debug);
  EXPECT_EQ(read_with("LAUNCHFIT_LOG_LEVEL", " WARNING ").log.level, L::warn);
  EXPECT_EQ(read_with("LAUNCHFIT_LOG_LEVEL", "err").log.level, L::err);
  EXPECT_EQ(read_with("SPDLOG_LEVEL", "info,launchfit=trace").log.level, L::trace);
  EXPECT_EQ(read_with("SPDLOG_LEVEL", "critical").log.level, L::critical);
  EXPECT_EQ(read_with("SPDLOG_LEVEL", "other=off,launchfit = debug,").log.level, L::debug);
  fake_environment both;
  both.vars = {{"LAUNCHFIT_LOG_LEVEL", "error"}, {"SPDLOG_LEVEL", "launchfit=trace"}};
  EXPECT_EQ(both.read().log.level, L::err);
  // A refused LAUNCHFIT_LOG_LEVEL leaves SPDLOG_LEVEL to decide, and the warning says what is used.
  both.vars = {{"LAUNCHFIT_LOG_LEVEL", "verbose"}, {"SPDLOG_LEVEL", "launchfit=debug"}};
  const ld::settings s = both.read();
  EXPECT_EQ(s.log.level, L::debug);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_EQ(
      s.warnings[0].message,
      "LAUNCHFIT_LOG_LEVEL='verbose' is not a level (valid: trace, debug, info, warn, error, critical, off); "
      "using debug");
  EXPECT_EQ(
      warning_of("SPDLOG_LEVEL", "info,launchfit=loud"),
      "SPDLOG_LEVEL='info,launchfit=loud' holds 'launchfit=loud', which is not a level (valid: trace, debug, "
      "info, warn, error, critical, off); using info");
  EXPECT_EQ(read_with("SPDLOG_LEVEL", "info,launchfit=loud").log.level, L::info);
  EXPECT_EQ(warning_of("LAUNCHFIT_LOG_FORMAT", "yaml"),
            "LAUNCHFIT_LOG_FORMAT='yaml' is neither text nor json; using text");
  EXPECT_EQ(read_with("LAUNCHFIT_LOG_FORMAT", "JSON").log.format, lf::log_format::json);
}

// Paths, URLs, lists and policy strings are kept as set (the module that uses one validates it, and says so
// in its own words); only empty means unset.
TEST(SettingsRead, TextIsKeptAsSetForItsModuleToValidate) {
  const std::string odd = " /tmp/a b:\x1b[31m;x\xff ";
  EXPECT_EQ(read_with("LAUNCHFIT_PLUGINS", odd).plugins.paths, odd);
  EXPECT_EQ(read_with("LAUNCHFIT_POLICY", odd).policy_overrides, odd);
  EXPECT_EQ(read_with("LAUNCHFIT_CACHE", odd).cache.file, odd);
  EXPECT_EQ(read_with("LAUNCHFIT_REMOTE", odd).remote.url, odd);
  const std::string huge = "k=fixed;" + std::string(10 << 20, ';');  // the policy parser refuses it by length
  EXPECT_EQ(read_with("LAUNCHFIT_POLICY", huge).policy_overrides.size(), huge.size());
  EXPECT_TRUE(read_with("LAUNCHFIT_POLICY", huge).warnings.empty());
  EXPECT_TRUE(read_with("NVTX_INJECTION64_PATH", "/opt/nsight/libinj.so").nvtx_tool_attached);
  EXPECT_TRUE(read_with("CUDA_LAUNCH_BLOCKING", "1").cuda_launch_blocking);
  EXPECT_TRUE(read_with("CUDA_LAUNCH_BLOCKING", "yes").cuda_launch_blocking);  // any value but 0
  EXPECT_FALSE(read_with("CUDA_LAUNCH_BLOCKING", "0").cuda_launch_blocking);
}

TEST(SettingsRead, SeveralRefusedValuesGiveOneWarningEach) {
  fake_environment env;
  env.vars = {{"LAUNCHFIT_CACHE_MODE", "x"},
              {"LAUNCHFIT_CACHE_MATCH", "y"},
              {"LAUNCHFIT_REMOTE_TTL", "z"},
              {"LAUNCHFIT_NVTX", "w"},
              {"LAUNCHFIT_CACHE", "/tmp/fine"}};
  const ld::settings s = env.read();
  ASSERT_EQ(s.warnings.size(), 4u);
  EXPECT_EQ(s.warnings[0].variable, "LAUNCHFIT_CACHE_MODE");
  EXPECT_EQ(s.warnings[1].variable, "LAUNCHFIT_CACHE_MATCH");
  EXPECT_EQ(s.warnings[2].variable, "LAUNCHFIT_REMOTE_TTL");
  EXPECT_EQ(s.warnings[3].variable, "LAUNCHFIT_NVTX");
}

// ---- the process's value: read once, by one thread, warnings logged once ---------------------------------

// Restores a variable and the settings after a test that changed them.
class scoped_variable {
 public:
  scoped_variable(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
    ::setenv(name, value, 1);
  }
  ~scoped_variable() {
    if (saved_) {
      ::setenv(name_, saved_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
    ld::settings_reload_for_tests();
  }
  scoped_variable(const scoped_variable&) = delete;
  scoped_variable& operator=(const scoped_variable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST(SettingsProcess, ReadOnceUntilTheTestReload) {
  const ld::settings& first = ld::current_settings();
  const std::uint64_t reads = ld::settings_reads_for_tests();
  scoped_variable v("LAUNCHFIT_CACHE_MAX_ENTRIES", "77");
  EXPECT_EQ(&ld::current_settings(), &first);  // the environment changed: the value did not
  EXPECT_NE(ld::current_settings().cache.max_entries, 77u);
  EXPECT_EQ(ld::settings_reads_for_tests(), reads);
  const ld::settings& again = ld::settings_reload_for_tests();
  EXPECT_EQ(ld::settings_reads_for_tests(), reads + 1);
  EXPECT_EQ(&ld::current_settings(), &again);
  EXPECT_EQ(again.cache.max_entries, 77u);
  EXPECT_NE(first.cache.max_entries, 77u);  // the previous value is still there, unchanged
}

// Many threads using the settings first: one reads the environment, all get the same value.
TEST(SettingsProcess, ManyThreadsAtFirstUseReadTheEnvironmentOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child is this binary started again: nothing read yet
  EXPECT_EXIT(
      {
        ::setenv("LAUNCHFIT_CACHE_MAX_BYTES", "12345", 1);
        if (ld::settings_reads_for_tests() != 0) std::exit(2);  // the test would prove nothing
        constexpr int threads = 16;
        std::atomic<int> ready{0};
        std::vector<const ld::settings*> seen(threads);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < threads) std::this_thread::yield();
            seen[t] = &ld::current_settings();
          });
        }
        for (auto& th : pool) th.join();
        for (const ld::settings* s : seen)
          if (s != seen[0] || s->cache.max_bytes != 12345) std::exit(3);
        std::exit(ld::settings_reads_for_tests() == 1 ? 0 : 4);
      },
      testing::ExitedWithCode(0), "");
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(SettingsProcess, TheWarningsAreLoggedOncePerValueRead) {
  launchfit_test::captured_log log(spdlog::level::info);
  scoped_variable v("LAUNCHFIT_CACHE_MATCH", "modle\x1b[31m");
  ld::settings_reload_for_tests();
  ld::report_settings_warnings();
  ld::report_settings_warnings();
  lf::logger()->warn("and a line after them");
  lf::logger()->flush();
  const std::string expected =
      "LAUNCHFIT_CACHE_MATCH='modle\\x1b[31m' is neither exact nor model; using exact";
  EXPECT_EQ(count(log.text(), expected), 1) << log.text();
  EXPECT_EQ(log.text().find('\x1b'), std::string::npos);
  ld::settings_reload_for_tests();  // a value read again is reported again
  ld::report_settings_warnings();
  lf::logger()->flush();
  EXPECT_EQ(count(log.text(), expected), 2) << log.text();
}

// A program that sets its own logger first finds the warnings about its environment there.
TEST(SettingsProcess, TheWarningsGoToALoggerSetBeforeAnythingIsLogged) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("LAUNCHFIT_NVTX", "perhaps", 1);
        ::setenv("LAUNCHFIT_LOG_ASYNC", "0", 1);
        std::string text;
        {
          launchfit_test::captured_log log(spdlog::level::info);
          lf::logger()->info("first line");
          lf::logger()->flush();
          text = log.text();
        }
        const bool once = count(text, "LAUNCHFIT_NVTX='perhaps' is not a switch") == 1;
        const bool before = text.find("LAUNCHFIT_NVTX") < text.find("first line");
        std::exit(once && before ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// ---- getenv in settings.cpp alone ------------------------------------------------------------------------

// The lint (ctest: getenv) passes on this tree; here: it fails on a source that reads the environment itself.
TEST(SettingsLint, ASourceThatReadsTheEnvironmentItselfFailsTheCheck) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("launchfit-getenv-lint-" + std::to_string(::getpid()));
  fs::create_directories(root / "lib");
  fs::create_directories(root / "plugins");
  const auto lint = [&] {
    const std::string command = std::string("'") + LAUNCHFIT_CMAKE_COMMAND + "' -DSOURCE_DIR='" +
                                root.string() + "' -P '" + LAUNCHFIT_SOURCE_DIR +
                                "/tests/lint/getenv.cmake' > /dev/null 2>&1";
    return std::system(command.c_str());
  };
  std::ofstream(root / "lib" / "settings.cpp") << "const char* v = std::getenv(\"LAUNCHFIT_X\");\n";
  std::ofstream(root / "lib" / "fine.cpp") << "int environment = 0;  // not the environment\n";
  EXPECT_EQ(lint(), 0);
  for (const std::string& line :
       {"const char* v = std::getenv(\"LAUNCHFIT_X\");", "auto v = ::secure_getenv(\"X\");",
        "extern char** environ; char* first = environ[0];"}) {
    std::ofstream(root / "plugins" / "reads.cpp") << line << "\n";
    EXPECT_NE(lint(), 0) << line;
  }
  fs::remove_all(root);
}

}  // namespace

// SPDX-License-Identifier: MIT
// Every launchfit command-line tool answers as people expect: --version (exit 0, "<tool> <version>"),
// --help (exit 0, the exit codes documented, no build path) and a flag it does not know (exit 2, said on
// stderr with the tool's name). The exit codes are demos/common/tool.hpp's, one set for all tools, and each
// tool exits as its own --help table says for a case of every row (ExitCodes*: the expected code is read from
// the table, so a table and a tool that disagree fail).

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/version.hpp"
#include "plan_file_format.hpp"
#include "tool_run.hpp"

namespace fs = std::filesystem;

namespace {

const std::string demos_dir = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos";

using outcome = launchfit_test::tool_outcome;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

outcome run(const std::string& tool, const std::string& args) {
  return launchfit_test::run_tool(demos_dir + "/" + tool, args);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Tool : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!std::ifstream(demos_dir + "/" + GetParam()).good())
      GTEST_SKIP() << GetParam() << " not built here (launchfit-calibrate needs LAUNCHFIT_BUILD_CUDA)";
  }
};

TEST_P(Tool, AnswersVersion) {
  const outcome r = run(GetParam(), "--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string(GetParam()) + " " + launchfit::version() + "\n");
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_P(Tool, AnswersHelpWithItsExitCodesAndNoBuildPath) {
  for (const char* flag : {"--help", "-h"}) {
    const outcome r = run(GetParam(), flag);
    EXPECT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    EXPECT_TRUE(has(r.out, std::string("Usage: ") + GetParam())) << r.out;
    EXPECT_TRUE(has(r.out, "Exit codes: 0 done; 1 findings or a failed operation; 2 a bad command line"))
        << r.out;
    EXPECT_TRUE(has(r.out, "--version")) << r.out;
    EXPECT_FALSE(has(r.out, LAUNCHFIT_TEST_BINARY_DIR)) << r.out;
    EXPECT_FALSE(has(r.out, "/demos/")) << r.out;
  }
}

TEST_P(Tool, RefusesAnUnknownFlagWithExitCode2) {
  const outcome r = run(GetParam(), "--no-such-flag");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err.rfind(std::string(GetParam()) + ": error: ", 0), 0u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// ---- exit codes against each tool's own --help table ----

// The "Exit codes: 0 done; 1 ...; 2 ...; 3 ..." line of a tool's --help, as code -> what it says.
std::map<int, std::string> exit_table(const std::string& tool) {
  const outcome help = run(tool, "--help");
  std::map<int, std::string> table;
  const std::size_t at = help.out.find("Exit codes: ");
  if (at == std::string::npos) return table;
  std::string text = help.out.substr(at + 12, help.out.find('\n', at) - at - 12);
  if (!text.empty() && text.back() == '.') text.pop_back();
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ';');) {
    const std::size_t first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    item = item.substr(first);
    table[std::stoi(item)] = item.substr(item.find(' ') + 1);
  }
  return table;
}

// One case: the tool run with `args`, in a situation that the table row containing `says` describes.
struct exit_case {
  std::string args;
  std::string says;
};

// Runs every case and checks each exit code against the table row that says what the case is; every row has a
// case, except those in `not_here` (rows this machine cannot reach, e.g. a measurement without a GPU).
void expect_exit_codes_as_the_table_says(const std::string& tool, const std::vector<exit_case>& cases,
                                         const std::set<int>& not_here = {}) {
  const std::map<int, std::string> table = exit_table(tool);
  ASSERT_EQ(table.size(), 4u) << tool << " --help has no exit code table of 0..3";
  std::map<int, int> rows_covered;
  for (const exit_case& c : cases) {
    int expected = -1;
    for (const auto& [code, text] : table)
      if (text.find(c.says) != std::string::npos) {
        ASSERT_EQ(expected, -1) << "'" << c.says << "' is in two rows of " << tool << "'s table";
        expected = code;
      }
    ASSERT_NE(expected, -1) << "'" << c.says << "' is in no row of " << tool << "'s table";
    const outcome r = run(tool, c.args);
    EXPECT_EQ(r.exit_code, expected) << tool << " " << c.args << " (" << c.says << ", " << expected << ": "
                                     << table.at(expected) << ")\nstdout: " << r.out << "\nstderr: " << r.err;
    // A bad command line or environment is said on stderr, with the tool's name.
    if (expected >= 2)
      EXPECT_EQ(r.err.find(tool + ": error: "), 0u) << tool << " " << c.args << ": " << r.err;
    ++rows_covered[expected];
  }
  for (const auto& [code, text] : table) {
    if (not_here.count(code)) {
      std::printf("%s: exit code %d (%s) not checked on this machine\n", tool.c_str(), code, text.c_str());
      continue;
    }
    EXPECT_GT(rows_covered[code], 0) << tool << ": no case for exit code " << code << " (" << text << ")";
  }
}

class ExitCodes : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-tools-test-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "not-cuda.txt") << "some text, neither a cubin nor a plan cache\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return "'" + (dir_ / name).string() + "'"; }
  // A directory that does not exist, so that nothing can be written under it.
  std::string unwritable(const std::string& name) const {
    return "'" + (dir_ / "no-such-dir" / name).string() + "'";
  }
  bool built(const std::string& tool) const { return std::ifstream(demos_dir + "/" + tool).good(); }

  fs::path dir_;
};

TEST_F(ExitCodes, LaunchfitCalcExitsAsItsTableSays) {
  if (!built("launchfit-calc")) GTEST_SKIP() << "launchfit-calc not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  std::vector<exit_case> cases = {
      {"--arch sm_90 --threads 256 --regs 40", "done"},
      {"--threads many", "bad command line"},
      {"--threads 2048", "bad command line"},
      {"--cubin " + path("not-cuda.txt"), "input"},
      {"--cubin " + path("no-such.cubin"), "cannot be read"},
      {"--arch sm_90 --svg " + unwritable("x.svg"), "written"},
      {"--device 99", "no driver or GPU"},  // no driver here, or no device 99 on a GPU machine
  };
  // A gate that fails: the sample cubins (built with nvcc where there is one) have kernels that spill.
  const std::string samples = demos_dir + "/calc/cubin-samples/samples_sm90.cubin";
  const bool have_samples = std::ifstream(samples).good();
  if (have_samples) cases.push_back({"--cubin '" + samples + "' --fail-on-spill", "findings"});
  expect_exit_codes_as_the_table_says("launchfit-calc", cases,
                                      have_samples ? std::set<int>{} : std::set<int>{1});
}

TEST_F(ExitCodes, LaunchfitPlansExitsAsItsTableSays) {
  if (!built("launchfit-plans")) GTEST_SKIP() << "launchfit-plans not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  launchfit::device_limits d = launchfit::device_limits::for_arch("H200");
  d.uuid = "GPU-tools-test";
  d.name = "NVIDIA H200";
  launchfit::detail::stored_entry e;
  e.key = launchfit::stored_key_for(d, 12080, launchfit::kernel_resources::manual(32, 0, 1024, "_Z5saxpyPf"),
                                    "max_occupancy()", "bytes=0", 0);
  e.plan.block = launchfit::dims{256, 1, 1};
  e.plan.block_threads = 256;
  e.plan.blocks_per_sm = 8;
  e.plan.sm_count = d.sm_count;
  e.plan.policy = "max_occupancy()";
  e.plan.reason = "tools test";
  e.stored_at_ms = 1000;
  std::ofstream(dir_ / "one.json", std::ios::binary) << launchfit::detail::serialize_cache_file({e});
  std::ofstream(dir_ / "none.json", std::ios::binary) << launchfit::detail::serialize_cache_file({});
  expect_exit_codes_as_the_table_says(
      "launchfit-plans", {
                             {"list " + path("one.json"), "done"},
                             {"diff " + path("none.json") + " " + path("one.json"), "findings"},
                             {"list", "bad command line"},
                             {"list " + path("not-cuda.txt"), "input"},
                             {"list " + path("no-such.json"), "cannot be read"},
                             {"merge " + unwritable("out.json") + " " + path("one.json"), "written"},
                             {"list redis://127.0.0.1:1", "reached"},  // nothing listens on port 1
                             {"stats " + path("one.json"), "done"},
                             {"stats redis://127.0.0.1:1", "reached"},
                         });
}

TEST_F(ExitCodes, LaunchfitCalibrateExitsAsItsTableSays) {
  if (!built("launchfit-calibrate"))
    GTEST_SKIP() << "launchfit-calibrate not built (it needs LAUNCHFIT_BUILD_CUDA)";
  std::vector<exit_case> cases = {
      {"--repeats many", "bad command line"},
      {"--warps 6", "bad command line"},
  };
  // 0 and 1 need a GPU (a measurement that succeeds, or one whose sums come out wrong): the GPU machine's
  // business. Without one, it must say so.
  std::set<int> not_here = {0, 1};
  if (fs::exists("/dev/nvidiactl"))
    not_here.insert(3);
  else
    cases.push_back({"--quick --svg ''", "no driver or GPU"});
  expect_exit_codes_as_the_table_says("launchfit-calibrate", cases, not_here);
}

INSTANTIATE_TEST_SUITE_P(Tools, Tool,
                         testing::Values("launchfit-plans", "launchfit-calc", "launchfit-calibrate"),
                         [](const testing::TestParamInfo<const char*>& i) {
                           std::string name = i.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace

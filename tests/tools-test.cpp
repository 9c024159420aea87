// SPDX-License-Identifier: MIT
// Every launchfit command-line tool answers as people expect: --version (exit 0, "<tool> <version>"),
// --help (exit 0, the exit codes documented, no build path) and a flag it does not know (exit 2, said on
// stderr with the tool's name). The exit codes are demos/common/tool.hpp's, one set for all tools.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "launchfit/version.hpp"

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

INSTANTIATE_TEST_SUITE_P(Tools, Tool, testing::Values("launchfit-plans", "launchfit-calc", "launchfit-calibrate"),
                         [](const testing::TestParamInfo<const char*>& i) {
                           std::string name = i.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace

// SPDX-License-Identifier: MIT
// launchfit-calc, the command line: the table, the SVG and the refusals a user sees.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tool_run.hpp"
#include "xml_check.hpp"

namespace {

const std::string binary_dir = LAUNCHFIT_TEST_BINARY_DIR;
const std::string calc = binary_dir + "/../demos/launchfit-calc";

using outcome = launchfit_test::tool_outcome;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

outcome run_calc(const std::string& args) { return launchfit_test::run_tool(calc, args); }

bool built() { return std::ifstream(calc).good(); }

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Calc, TableAndSvgForAGoodInput) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const std::string svg = binary_dir + "/calc-test.svg";
  std::remove(svg.c_str());
  const outcome r = run_calc("--arch H200 --threads 256 --regs 40 --smem 16K --svg '" + svg + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* line :
       {"Theoretical Occupancy                  75%", "Active Blocks per SM                   6",
        "Theoretical Active Warps per SM        48 of 64", "Block Limit Registers                  6",
        "Block Limit Shared Mem                 13", "Limited by                             registers",
        "to gain one more block: cut registers to <= 32 per thread"})
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing '" << line << "' in:\n" << r.out;

  const std::string picture = slurp(svg);
  ASSERT_FALSE(picture.empty()) << svg;
  EXPECT_EQ(picture.rfind("<svg", 0), 0u);
  EXPECT_NE(picture.find("</svg>"), std::string::npos);
  EXPECT_EQ(launchfit_test::xml_problem(picture), "");
  EXPECT_EQ(count(picture, "<g class=\"graph\""), 3u);
  EXPECT_EQ(count(picture, "class=\"occupancy-steps\""), 3u);
  EXPECT_EQ(count(picture, "class=\"current\""), 3u);  // the current configuration, once per graph
  for (const char* title : {"Occupancy vs block size", "Occupancy vs registers per thread",
                            "Occupancy vs shared memory per block"})
    EXPECT_NE(picture.find(title), std::string::npos) << title;
}

// The block-size graph of 40 registers x 256 threads on an H200: occupancy as steps, each stretch shaded by
// the limit that binds there (shared memory for the smallest blocks, then registers, with warps tied at
// 768), and where each built-in policy's block lands, as the library's policies choose it.
TEST(CalcSvg, BlockSizeGraphHasStepsLimitBandsAndEveryPolicysChoice) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const std::string svg = binary_dir + "/calc-test-policies.svg";
  std::remove(svg.c_str());
  const outcome r = run_calc("--arch H200 --threads 256 --regs 40 --smem 16K --svg '" + svg + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string picture = slurp(svg);
  ASSERT_EQ(launchfit_test::xml_problem(picture), "");
  // Python's parser too, where there is one.
  if (std::system("command -v python3 >/dev/null 2>&1") == 0)
    EXPECT_EQ(std::system(("python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' '" +
                           svg + "' >/dev/null 2>&1")
                              .c_str()),
              0)
        << svg << " does not parse as XML";

  const std::size_t first = picture.find("<g class=\"graph\"");
  const std::size_t second = picture.find("<g class=\"graph\"", first + 1);
  ASSERT_NE(second, std::string::npos);
  const std::string by_block = picture.substr(first, second - first);

  // Steps: horizontal runs joined by vertical ones, never a slanted line between two block sizes.
  const std::size_t steps = by_block.find("class=\"occupancy-steps\"");
  ASSERT_NE(steps, std::string::npos);
  const std::size_t d = by_block.rfind("d=\"", steps);
  const std::string path = by_block.substr(d + 3, by_block.find('"', d + 3) - d - 3);
  EXPECT_GE(count(path, " H"), 32u) << path;  // one run per block size, 32 ... 1024
  EXPECT_GE(count(path, " V"), 3u) << path;
  EXPECT_EQ(path.find(" L"), std::string::npos) << path;

  for (const char* band :
       {"data-limit=\"shared_memory\"", "data-limit=\"registers\"", "data-limit=\"warps|registers\""})
    EXPECT_NE(by_block.find(band), std::string::npos) << band;
  EXPECT_GE(count(by_block, "class=\"limit-band\""), 4u);

  EXPECT_EQ(count(by_block, "class=\"policy-mark\""), 3u);
  for (const char* mark : {"data-policy=\"max_occupancy()\" data-block=\"256\"",
                           "data-policy=\"max_occupancy(0)\" data-block=\"768\"",
                           "data-policy=\"bytes_in_flight(16)\" data-block=\"256\""})
    EXPECT_NE(by_block.find(mark), std::string::npos) << mark << " in\n" << by_block;
  EXPECT_EQ(count(by_block, "class=\"policy-label\""), 3u);

  // The legend names every shaded limit and every policy.
  const std::string legend = picture.substr(picture.find("<g class=\"legend\""));
  for (const char* entry :
       {">registers<", ">shared memory<", ">warps + registers<", "max_occupancy(): 256 threads",
        "max_occupancy(0): 768 threads", "bytes_in_flight(16): 256 threads"})
    EXPECT_NE(legend.find(entry), std::string::npos) << entry << " in\n" << legend;
}

TEST(Calc, SharedMemoryBoundAdviceAndJson) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const outcome table = run_calc("--arch 9.0 --threads 128 --regs 168 --smem 96KB");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("12.5%"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("cut dynamic smem to <= 76800 bytes"), std::string::npos) << table.out;

  const outcome json = run_calc("--arch sm_90 --threads 128 --regs 168 --smem 98304 --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"active_blocks_per_sm\": 2"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"shared_memory\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"max_dynamic_smem_bytes\": 76800"), std::string::npos) << json.out;
}

// 168 registers x 1024 threads: "limited by registers" alone would not say that no block of that size ever
// runs; the table names the limit on threads per block and its numbers, as the library's result does.
TEST(Calc, TheRegisterLimitOnThreadsPerBlockIsNamedWithItsNumbers) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const outcome table = run_calc("--arch H200 --threads 1024 --regs 168");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(
      table.out.find("no block fits: a block of 1024 threads exceeds the register limit on threads per "
                     "block: 168 registers per thread x 32 threads = 5376 registers per warp (a multiple "
                     "of the 256-register allocation unit); 65536 registers per block / 5376 = 12 warps: "
                     "at most 384 threads per block"),
      std::string::npos)
      << table.out;
  const outcome json = run_calc("--arch H200 --threads 1024 --regs 168 --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"why_no_block\": \"a block of 1024 threads exceeds the register limit"),
            std::string::npos)
      << json.out;
  // Where a block fits, nothing is added.
  EXPECT_EQ(run_calc("--arch H200 --threads 384 --regs 168").out.find("no block fits"), std::string::npos);
}

TEST(Calc, ImpossibleInputsExitWithTwoAndSayWhy) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const struct {
    const char* args;
    const char* says;
  } cases[] = {
      {"--threads 2048", "exceeds the device maximum of 1024 threads per block"},
      {"--regs 300", "300 registers per thread is outside 0..255"},
      {"--smem 300K", "exceeds the 232448 B opt-in maximum"},
      {"--smem 200K --static-smem 30K", "exceeds the 232448 B opt-in maximum"},
      {"--arch sm_99", "unknown architecture or part 'sm_99'; known: sm_50"},
      {"--threads many", "--threads expects a whole number"},
      {"--smem 16Q", "--smem expects bytes"},
      {"--frobnicate", "unknown option --frobnicate"},
  };
  for (const auto& c : cases) {
    const outcome r = run_calc(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
    EXPECT_NE(r.err.find("launchfit-calc: error: "), std::string::npos) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
  }
}

TEST(Calc, HelpListsEveryOption) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  for (const char* flag : {"--help", "-h"}) {
    const outcome r = run_calc(flag);
    EXPECT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    for (const char* option :
         {"--arch", "--device", "--threads", "--regs", "--smem", "--static-smem", "--svg", "--json"})
      EXPECT_NE(r.out.find(option), std::string::npos) << option << " missing from:\n" << r.out;
  }
}

TEST(Calc, AnSvgThatCannotBeWrittenSaysWhy) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const outcome missing = run_calc("--svg /nonexistent-launchfit-dir/x.svg");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;  // the environment: a file that cannot be written
  EXPECT_NE(missing.err.find(
                "cannot write --svg file '/nonexistent-launchfit-dir/x.svg': No such file or directory"),
            std::string::npos)
      << missing.err;
  const outcome directory = run_calc("--svg '" + binary_dir + "'");
  EXPECT_EQ(directory.exit_code, 3) << directory.err;
  EXPECT_NE(directory.err.find("': Is a directory"), std::string::npos) << directory.err;
  // The path is shown escaped: a control byte or invalid UTF-8 in it cannot reach the terminal raw.
  const outcome odd = run_calc("--svg \"$(printf '/nonexistent-launchfit-dir/\\033[2J\\377.svg')\"");
  EXPECT_EQ(odd.exit_code, 3) << odd.err;
  EXPECT_NE(odd.err.find("'/nonexistent-launchfit-dir/\\x1b[2J\\xff.svg': No such file or directory"),
            std::string::npos)
      << odd.err;
}

TEST(Calc, EmptySvgNameIsRefused) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const outcome r = run_calc("--svg ''");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("launchfit-calc: error: --svg needs a file name"), std::string::npos) << r.err;
}

TEST(Calc, HostileNumbers) {
  if (!built()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const struct {
    const char* args;
    const char* says;
  } cases[] = {
      {"--threads 99999999999", "--threads is out of range: '99999999999'"},
      {"--regs 99999999999999999999999", "--regs is out of range: '99999999999999999999999'"},
      {"--smem 99999999999999999999K", "--smem is out of range: '99999999999999999999K'"},
      {"--static-smem 18014398509481984M", "--static-smem is out of range"},
      {"--device 4294967296", "--device is out of range"},
      {"--smem 99999999999K", "102399999998976 B dynamic shared memory exceeds the 232448 B opt-in maximum"},
      {"--threads 0x10", "--threads expects a whole number, got '0x10'"},
      {"--threads 1e3", "--threads expects a whole number, got '1e3'"},
      {"--threads ''", "--threads expects a whole number, got ''"},
      {"--threads -0", "a block needs at least 1 thread"},
      {"--regs -1", "-1 registers per thread is outside 0..255"},
      {"--smem -1K", "--smem expects bytes"},
      {"--threads", "--threads"},
      {"\"$(printf -- '--x\\033[2J')\"", "unknown option --x\\x1b[2J"},
  };
  for (const auto& c : cases) {
    const outcome r = run_calc(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("invalid"), std::string::npos) << c.args << ": " << r.err;
    for (char ch : r.err)
      EXPECT_TRUE(ch == '\n' || static_cast<unsigned char>(ch) >= 0x20) << c.args << ": " << r.err;
  }
  // As before: the last of a repeated option wins, and a leading '+' is a number's sign.
  const outcome last = run_calc("--threads 128 --threads=+64 --json --json");
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_NE(last.out.find("\"threads_per_block\": 64"), std::string::npos) << last.out;
}

}  // namespace

// launchfit-calc, the command line: the table, the SVG and the refusals a user sees.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

const std::string binary_dir = LAUNCHFIT_TEST_BINARY_DIR;
const std::string calc = binary_dir + "/../demos/launchfit-calc";

struct outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

outcome run_calc(const std::string& args) {
  const std::string out = binary_dir + "/calc-test.out", err = binary_dir + "/calc-test.err";
  const int status = std::system(("'" + calc + "' " + args + " >'" + out + "' 2>'" + err + "'").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

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
  EXPECT_EQ(count(picture, "<g class=\"graph\""), 3u);
  EXPECT_EQ(count(picture, "<polyline"), 3u);
  EXPECT_EQ(count(picture, "<circle"), 3u);  // the current configuration, once per graph
  for (const char* title : {"Occupancy vs block size", "Occupancy vs registers per thread",
                            "Occupancy vs shared memory per block"})
    EXPECT_NE(picture.find(title), std::string::npos) << title;
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

}  // namespace

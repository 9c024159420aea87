// SPDX-License-Identifier: MIT
// launchfit-plans on forged files: huge, truncated, deeply nested, a FIFO, a flood of bad entries, names with
// control characters. Every run ends in time, never crashes, and shows file text escaped.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cache_file.hpp"
#include "fault/bounded.hpp"
#include "launchfit/device.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../../demos/launchfit-plans";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct outcome {
  bool finished = false;
  int exit_code = -1;
  std::string out, err;
};

class PlansFault : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(tool).good()) GTEST_SKIP() << tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
    dir_ = fs::temp_directory_path() / ("launchfit-plans-fault-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The tool in a child with a deadline: a hang is a failure, not a stuck run.
  outcome run(const std::string& args, int limit_ms = 8000) {
    const std::string cmd = "cd '" + dir_.string() + "' && exec '" + tool + "' " + args + " >out 2>err";
    const auto r = lf::fault::run_bounded(milliseconds(limit_ms), [&] {
      const int status = std::system(cmd.c_str());
      return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
    });
    return {r.finished, r.exit_code, slurp(dir_ / "out"), slurp(dir_ / "err")};
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  fs::path dir_;
};

std::string one_entry() {
  lf::device_limits d = lf::device_limits::for_arch("H200");
  d.uuid = "GPU-a";
  d.name = "NVIDIA H200";
  ld::stored_entry e;
  e.key = lf::stored_key_for(d, 12080, lf::kernel_resources::manual(32, 0, 1024, "_Z5saxpyfPKfPfi"),
                             "max_occupancy()", "bytes=0", 0);
  e.plan.block = lf::dims{256, 1, 1};
  e.plan.block_threads = 256;
  e.plan.blocks_per_sm = 8;
  e.plan.sm_count = 132;
  return ld::serialize_cache_file({e});
}

}  // namespace

TEST_F(PlansFault, AFileAboveTheLimitIsRefusedUnread) {
  write("huge.json", std::string(200000, ' '));
  for (const char* sub : {"list", "show", "check"}) {
    const outcome r = run(std::string(sub) + " huge.json --max-bytes 100000");
    ASSERT_TRUE(r.finished) << sub;
    EXPECT_EQ(r.exit_code, std::string(sub) == "check" ? 1 : 3) << sub;  // a file that cannot be read: 3
    EXPECT_TRUE((r.out + r.err).find("200000 bytes is above") != std::string::npos) << sub << r.out << r.err;
  }
}

TEST_F(PlansFault, TruncatedAndForeignFilesAreRefusedAndNeverReplaced) {
  const std::string whole = one_entry();
  write("cut.json", whole.substr(0, whole.size() / 2));
  write("foreign.json", "{\"hello\": 1}");
  outcome r = run("list cut.json");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cut.json: not valid JSON (truncated or damaged)"), std::string::npos) << r.err;
  write("in.json", whole);
  for (const char* out : {"cut.json", "foreign.json"}) {
    const std::string before = slurp(dir_ / out);
    r = run(std::string("merge ") + out + " in.json");
    ASSERT_TRUE(r.finished);
    EXPECT_EQ(r.exit_code, 2) << out;
    EXPECT_NE(r.err.find("not replaced"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(dir_ / out), before) << out;
  }
}

TEST_F(PlansFault, DeeplyNestedJsonEndsInTime) {
  const std::size_t depth = 1000000;
  write("deep.json", "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [" +
                         std::string(depth, '[') + std::string(depth, ']') + "]}");
  outcome r = run("check deep.json");
  ASSERT_TRUE(r.finished) << "a hang";
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("entry 0: entry is not an object"), std::string::npos) << r.out.substr(0, 500);
  r = run("list deep.json");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(PlansFault, AFloodOfBadEntriesIsCountedNotListed) {
  std::string text = "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [";
  for (int i = 0; i < 200000; ++i) text += i ? ",1" : "1";
  text += "]}";
  write("flood.json", text);
  const outcome r = run("check flood.json");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("and 199900 more bad entries"), std::string::npos) << r.out.substr(r.out.size() - 300);
  EXPECT_LT(r.out.size(), 20000u);
}

TEST_F(PlansFault, AFifoNeverBlocks) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo.json").c_str(), 0600), 0);
  outcome r = run("list fifo.json", 5000);
  ASSERT_TRUE(r.finished) << "blocked on a FIFO";
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("not a regular file (a FIFO)"), std::string::npos) << r.err;
  r = run("merge fifo.json fifo.json", 5000);
  ASSERT_TRUE(r.finished) << "blocked on a FIFO";
  EXPECT_EQ(r.exit_code, 3);
  r = run("prune fifo.json --driver-below 12.0", 5000);
  ASSERT_TRUE(r.finished) << "blocked on a FIFO";
  EXPECT_EQ(r.exit_code, 3);
  // Refused before a lock is made: no lock file is left beside what is not a plan file.
  EXPECT_FALSE(fs::exists(dir_ / "fifo.json.lock"));
  fs::create_directory(dir_ / "dir.json");
  write("empty.json", "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [\n]}\n");
  r = run("merge dir.json empty.json", 5000);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("not a regular file (a directory)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "dir.json.lock"));
}

TEST_F(PlansFault, ControlCharactersInNamesAndPathsAreEscaped) {
  std::string text = one_entry();
  // Where the library keeps text (plan reason, policy of the plan) it is cleaned on load; where it refuses
  // it (key text), the tool names the entry with the text escaped.
  const std::string forged = "_Z5saxpyfPKfPfi\\u001b]0;owned\\u0007\\n[error] forged";
  const auto at = text.find("_Z5saxpyfPKfPfi");
  text.replace(at, std::string("_Z5saxpyfPKfPfi").size(), forged);
  write("ctl.json", text);
  outcome r = run("check ctl.json");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(r.out.find('\x07'), std::string::npos);
  // A file name with an escape sequence is escaped in messages too.
  r = run("list \"$(printf 'bad\\033[31m.json')\"");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 3);  // no such file
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad\\x1b[31m.json: no such file"), std::string::npos) << r.err;
}

// SPDX-License-Identifier: MIT
// launchfit-plans, the command line over plan-cache files: list, show, diff, merge, prune and check on
// crafted files, as an operator runs them.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "launchfit/device.hpp"
#include "tool_run.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;

namespace {

const std::string binary_dir = LAUNCHFIT_TEST_BINARY_DIR;
const std::string tool = binary_dir + "/../demos/launchfit-plans";

using outcome = launchfit_test::tool_outcome;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool built() { return std::ifstream(tool).good(); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class PlansTool : public testing::Test {
 protected:
  void SetUp() override {
    if (!built()) GTEST_SKIP() << tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
    dir_ = fs::temp_directory_path() / ("launchfit-plans-tool-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  outcome run(const std::string& args) { return launchfit_test::run_tool(tool, args, dir_.string()); }
  void write(const std::string& name, const std::vector<ld::stored_entry>& entries) {
    std::ofstream(dir_ / name, std::ios::binary) << ld::serialize_cache_file(entries);
  }
  void write_text(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  fs::path dir_;
};

lf::device_limits gpu(const std::string& uuid, const std::string& name = "NVIDIA H200") {
  lf::device_limits d = lf::device_limits::for_arch("H200");
  d.uuid = uuid;
  d.name = name;
  return d;
}

// A plan keyed as launchfit 0.4 stores it, with the work's kind (" work=items"; the built-in's own text, with
// its parameters, is shortened to "max_occupancy()" here).
ld::stored_entry entry(const lf::device_limits& d, const std::string& kernel, int regs, unsigned block,
                       int blocks_per_sm, std::uint64_t stored_at = 1000, int driver = 12080) {
  ld::stored_entry e;
  e.key = lf::stored_key_for(d, driver, lf::kernel_resources::manual(regs, 0, 1024, kernel),
                             "max_occupancy() work=items", "bytes=0", 0);
  e.plan.block = lf::dims{block, 1, 1};
  e.plan.block_threads = static_cast<int>(block);
  e.plan.blocks_per_sm = blocks_per_sm;
  e.plan.sm_count = d.sm_count;
  e.plan.occupancy.block_threads = static_cast<int>(block);
  e.plan.occupancy.active_blocks_per_sm = blocks_per_sm;
  e.plan.occupancy.occupancy = blocks_per_sm * static_cast<double>(block) / 2048.0;
  e.plan.occupancy.limiters = regs > 32 ? lf::limit_registers : lf::limit_warps;
  e.plan.policy = "max_occupancy()";
  e.plan.reason = "computed in staging";
  e.stored_at_ms = stored_at;
  return e;
}

// A plan file's text holds one entry, of the kernel `mangled` (its key's fingerprint starts with the name).
void expect_only_kernel(const std::string& text, const std::string& mangled) {
  const auto left = ld::parse_cache_file(text);
  ASSERT_EQ(left.entries.size(), 1u) << text;
  EXPECT_EQ(left.entries[0].key.kernel.rfind(mangled + "|", 0), 0u) << left.entries[0].key.kernel;
}

// The same plan as launchfit 0.3 stored it: its key names no work kind, and no launch finds it.
ld::stored_entry legacy_entry(const lf::device_limits& d, const std::string& kernel, int regs, unsigned block,
                              int blocks_per_sm) {
  ld::stored_entry e = entry(d, kernel, regs, block, blocks_per_sm);
  e.key.policy = "max_occupancy()";
  return e;
}

}  // namespace

TEST_F(PlansTool, EverySubcommandHasHelp) {
  for (const char* sub :
       {"", "list ", "show ", "diff ", "merge ", "prune ", "check ", "push ", "pull ", "stats "}) {
    const outcome r = run(std::string(sub) + "--help");
    EXPECT_EQ(r.exit_code, 0) << sub << r.err;
    EXPECT_TRUE(has(r.out, "Usage: launchfit-plans")) << sub << r.out;
  }
  EXPECT_EQ(run("").exit_code, 2);
  EXPECT_EQ(run("frobnicate x").exit_code, 2);
}

TEST_F(PlansTool, ListAndShowAsTableAndJson) {
  write("a.json",
        {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8), entry(gpu("GPU-a"), "_Z3fooPf", 40, 128, 12)});
  outcome r = run("list a.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "a.json: 2 entries")) << r.out;
  EXPECT_TRUE(has(r.out, "_Z5saxpyfPKfPfi")) << r.out;
  EXPECT_TRUE(has(r.out, "NVIDIA H200")) << r.out;
  EXPECT_TRUE(has(r.out, "registers")) << r.out;

  r = run("list a.json --json --kernel foo");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["kernel_name"], "_Z3fooPf");
  EXPECT_EQ(j[0]["plan"]["block"], nlohmann::json({128, 1, 1}));
  EXPECT_EQ(j[0]["key"]["device_name"], "NVIDIA H200");

  r = run("show a.json --kernel saxpy");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "32 regs/thread")) << r.out;
  EXPECT_TRUE(has(r.out, "8 blocks/SM on 132 SMs = 1056 resident")) << r.out;
  EXPECT_TRUE(has(r.out, "driver 12.8")) << r.out;
  EXPECT_FALSE(has(r.out, "_Z3fooPf")) << r.out;
}

// The cells of a table row: its text split where two or more spaces separate values.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::size_t at = line.find_first_not_of(' ');
  while (at != std::string::npos) {
    const std::size_t gap = line.find("  ", at);
    out.push_back(line.substr(at, gap == std::string::npos ? std::string::npos : gap - at));
    at = gap == std::string::npos ? gap : line.find_first_not_of(' ', gap);
  }
  return out;
}

// Where each cell of `line` starts.
std::vector<std::size_t> starts(const std::string& line, const std::vector<std::string>& cells) {
  std::vector<std::size_t> out;
  std::size_t from = 0;
  for (const std::string& c : cells) {
    from = line.find(c, from);
    out.push_back(from);
    from += c.size();
  }
  return out;
}

// A kernel or policy longer than its column (shown capped, "...(N bytes)") once ran into the next column
// ("...(45 bytes)256"): every column is as wide as its widest value and two spaces from the next.
TEST_F(PlansTool, ListColumnsStaySeparatedAndAlignedWhateverTheWidths) {
  const std::string long_kernel =
      "_ZN7physics6fluids12navier_stokes24pressure_projection_stepILi3EEEvPKfPfii";
  const std::string long_policy = "bytes_in_flight(per_thread=16,target_per_sm=32768,prefer_block=256)";
  auto wide = entry(gpu("GPU-a"), long_kernel, 40, 256, 8);
  wide.key.policy = long_policy + " work=items";
  wide.plan.policy = long_policy;
  auto narrow = entry(gpu("GPU-b", "H"), "_Z1kPf", 32, 1024, 2);
  write("a.json", {wide, narrow});
  const outcome r = run("list a.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "a.json: 2 entries")) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);  // "a.json: 2 entries"
  std::getline(lines, line);
  const std::string header = line;
  const std::vector<std::string> titles = cells(header);
  ASSERT_EQ(titles.size(), 12u) << r.out;  // ... limiters, measured, origin
  EXPECT_EQ(titles[5], "policy");
  EXPECT_EQ(titles[6], "block");
  std::vector<std::vector<std::string>> rows;
  while (std::getline(lines, line)) {
    const std::vector<std::string> c = cells(line);
    ASSERT_EQ(c.size(), titles.size()) << "'" << line << "' in\n" << r.out;
    EXPECT_EQ(starts(line, c), starts(header, titles)) << "'" << line << "': each value under its title in\n"
                                                       << r.out;
    rows.push_back(c);
  }
  ASSERT_EQ(rows.size(), 2u) << r.out;
  // The wide row's policy, shown capped, then its block and blocks per SM, each a value of its own.
  EXPECT_EQ(rows[0][5].rfind("bytes_in_flight(", 0), 0u) << r.out;
  EXPECT_EQ(rows[0][6], "256") << r.out;
  EXPECT_EQ(rows[0][7], "8") << r.out;
  EXPECT_EQ(rows[1][6], "1024") << r.out;
  EXPECT_EQ(rows[1][7], "2") << r.out;
  EXPECT_FALSE(has(r.out, "bytes)2")) << r.out;
}

TEST_F(PlansTool, DiffNamesWhatChangedPerKernelAndPolicy) {
  // Before and after a compiler upgrade: saxpy got 8 more registers and a smaller block; foo is gone.
  write("before.json",
        {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8), entry(gpu("GPU-a"), "_Z3fooPf", 32, 128, 16),
         entry(gpu("GPU-a"), "_Z3barPf", 32, 512, 4)});
  write("after.json",
        {entry(gpu("GPU-b"), "_Z5saxpyfPKfPfi", 40, 128, 12), entry(gpu("GPU-b"), "_Z3barPf", 32, 512, 4),
         entry(gpu("GPU-b"), "_Z3newPf", 32, 64, 32)});
  outcome r = run("diff before.json after.json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.out,
                  "~ _Z5saxpyfPKfPfi max_occupancy() work=items [bytes=0]: block 256 -> 128; occupancy 100% -> 75%; "
                  "limiters warps -> registers; residency 8 blocks/SM x 132 SMs -> 12 blocks/SM x 132 SMs; "
                  "registers 32 -> 40"))
      << r.out;
  EXPECT_TRUE(has(r.out, "- _Z3fooPf max_occupancy() work=items [bytes=0]: only in A")) << r.out;
  EXPECT_TRUE(has(r.out, "+ _Z3newPf max_occupancy() work=items [bytes=0]: only in B")) << r.out;
  EXPECT_FALSE(has(r.out, "_Z3barPf")) << r.out;
  EXPECT_TRUE(has(r.out, "1 same, 1 changed, 1 only in A (before.json), 1 only in B (after.json)")) << r.out;

  r = run("diff before.json after.json --json --all");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["same"], 1);
  EXPECT_EQ(j["changed"], 1);
  EXPECT_EQ(j["launches"].size(), 4u);

  r = run("diff before.json before.json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "3 same, 0 changed")) << r.out;
}

TEST_F(PlansTool, MergeResolvesConflictsByAgeThenOrderAndReportsThem) {
  write("out.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8, 1000)});
  write("one.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 128, 16, 2000),
                     entry(gpu("GPU-b"), "_Z3fooPf", 32, 64, 32)});
  write("two.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 512, 4, 2000)});
  outcome r = run("merge out.json one.json two.json --fail-on-conflict");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(ld::parse_cache_file(slurp(dir_ / "out.json")).entries.size(), 1u);  // left as it was

  r = run("merge out.json one.json two.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // out (1000) loses to one (2000); one and two tie at 2000: the later file wins.
  EXPECT_TRUE(
      has(r.out,
          "conflict: _Z5saxpyfPKfPfi max_occupancy() work=items on GPU-a (driver 12.8, bucket 0): kept one.json "
          "(stored 1970-01-01T00:00:02Z), dropped out.json (stored 1970-01-01T00:00:01Z): block 128 vs 256"))
      << r.out;
  EXPECT_TRUE(has(r.out, "kept two.json (stored 1970-01-01T00:00:02Z), dropped one.json")) << r.out;
  EXPECT_TRUE(has(r.out, "2 entries, 2 conflict(s) resolved")) << r.out;
  const auto merged = ld::parse_cache_file(slurp(dir_ / "out.json"));
  ASSERT_EQ(merged.entries.size(), 2u);
  for (const auto& e : merged.entries)
    if (e.key.device_uuid == "GPU-a") EXPECT_EQ(e.plan.block_threads, 512);

  // Into a new file; and the same merge again changes nothing.
  r = run("merge new.json one.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string once = slurp(dir_ / "new.json");
  EXPECT_EQ(run("merge new.json one.json").exit_code, 0);
  EXPECT_EQ(slurp(dir_ / "new.json"), once);
}

TEST_F(PlansTool, MergeWaitsForTheLibrarysLockAndGivesUp) {
  write("one.json", {entry(gpu("GPU-a"), "_Z3fooPf", 32, 64, 32)});
  const std::string lock = (dir_ / "out.json.lock").string();
  const std::string args =
      "flock '" + lock + "' sleep 3 & sleep 0.5; '" + tool + "' merge out.json one.json --lock-wait-ms 200";
  const int status =
      std::system(("cd '" + dir_.string() + "' && (" + args + ") >out 2>err; echo $? >rc; wait").c_str());
  (void)status;
  if (slurp(dir_ / "err").find("flock") != std::string::npos && !fs::exists(lock))
    GTEST_SKIP() << "no flock(1)";
  EXPECT_EQ(slurp(dir_ / "rc"), "3\n") << slurp(dir_ / "out") << slurp(dir_ / "err");  // the environment
  EXPECT_TRUE(has(slurp(dir_ / "err"), "is held by another process (waited 200 ms)")) << slurp(dir_ / "err");
  EXPECT_FALSE(fs::exists(dir_ / "out.json"));
}

// Plans whose keys name no work kind (written by launchfit 0.3 or before) are found by no launch: prune
// removes them on request, and keeps every plan whose key names its kind.
TEST_F(PlansTool, PruneRemovesPlansWhoseKeysNameNoWorkKind) {
  const ld::stored_entry current = entry(gpu("GPU-a"), "_Z3newPf", 32, 128, 16);
  write("p.json", {legacy_entry(gpu("GPU-a"), "_Z3oldPf", 32, 128, 16), current});
  outcome r = run("prune p.json --without-work-kind --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "would remove _Z3oldPf")) << r.out;
  EXPECT_TRUE(has(r.out, "written by launchfit 0.3 or before")) << r.out;
  EXPECT_FALSE(has(r.out, "_Z3newPf")) << r.out;
  r = run("prune p.json --without-work-kind");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "p.json: removed 1, kept 1")) << r.out;
  expect_only_kernel(slurp(dir_ / "p.json"), "_Z3newPf");
}

// check points out the entries no launch finds (valid, so exit 0), in text and JSON, and names the prune that
// removes them, counted as that prune removes them (a key written twice is one plan); a file without such
// entries says nothing of them.
TEST_F(PlansTool, CheckPointsOutPlansWhoseKeysNameNoWorkKind) {
  const ld::stored_entry current = entry(gpu("GPU-a"), "_Z3newPf", 32, 128, 16);
  write("p.json", {legacy_entry(gpu("GPU-a"), "_Z3oldPf", 32, 128, 16),
                   legacy_entry(gpu("GPU-a"), "_Z4old2Pf", 32, 128, 16),
                   legacy_entry(gpu("GPU-a"), "_Z3oldPf", 32, 256, 8), current});
  outcome r = run("check p.json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "p.json: note: 2 entries name no work kind (written by launchfit 0.3 or before): no "
                         "launch finds them; launchfit-plans prune --without-work-kind removes them"))
      << r.out;
  EXPECT_TRUE(has(r.out, "4 entries, all valid")) << r.out;
  r = run("prune p.json --without-work-kind --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "would remove 2")) << r.out;
  r = run("check p.json --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 1) << r.out;
  EXPECT_EQ(j[0]["without_work_kind"], 2);
  EXPECT_EQ(j[0]["repeated_keys"], 1);
  EXPECT_EQ(j[0]["notes"].size(), 2u) << r.out;  // and the key written twice
  write("new.json", {current});
  r = run("check new.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.out, "work kind")) << r.out;
}

// A key written twice (a hand edit, two files concatenated) is valid and read as one plan, the one the library
// keeps (the newer where neither was measured, wherever it stands in the file): check says so (exit 0), and
// prune and list keep that plan. The tool kept the later entry in the file, which the library does not read.
TEST_F(PlansTool, AKeyWrittenTwiceIsPointedOutAndKeptAsTheLibraryReadsIt) {
  const ld::stored_entry newer = entry(gpu("GPU-a"), "_Z4twicePf", 32, 256, 8, /*stored_at=*/5000);
  const ld::stored_entry older = entry(gpu("GPU-a"), "_Z4twicePf", 32, 128, 16, /*stored_at=*/1000);
  write_text("p.json", ld::serialize_cache_file({newer}) + "\n");
  {  // the older one after it, as a concatenation leaves it: one entry per line, the second file's last
    std::string text = slurp(dir_ / "p.json");
    const std::string second = ld::serialize_cache_file({older});
    const std::size_t line = second.find("\n{");
    ASSERT_NE(line, std::string::npos) << second;
    const std::size_t end = second.find('\n', line + 1);
    const std::size_t close = text.rfind("\n]");
    ASSERT_NE(close, std::string::npos) << text;
    text.insert(close, ",\n" + second.substr(line + 1, end - line - 1));
    write_text("p.json", text);
  }
  ASSERT_EQ(ld::parse_cache_file(slurp(dir_ / "p.json")).entries.size(), 2u) << slurp(dir_ / "p.json");
  outcome r = run("check p.json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "p.json: note: 1 entry repeats a key written before in the file: launchfit reads one "
                         "plan per key (a measured plan over an unmeasured one, the faster of two measured ones beyond their noise, "
                         "else the newer)"))
      << r.out;
  r = run("prune p.json --without-work-kind");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "removed 0, kept 1, 1 repeated entries of a key dropped")) << r.out;
  const auto left = ld::parse_cache_file(slurp(dir_ / "p.json"));
  ASSERT_EQ(left.entries.size(), 1u) << slurp(dir_ / "p.json");
  EXPECT_EQ(left.entries[0].plan.block_threads, 256) << "the tool kept the older entry the library never reads";
  EXPECT_EQ(left.entries[0].stored_at_ms, 5000u);
  r = run("check p.json --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["repeated_keys"], 0) << r.out;
}

TEST_F(PlansTool, PruneOldDriversAndKernelsNoLongerPresent) {
  write("p.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8, 1000, 12020),
                   entry(gpu("GPU-a"), "_Z3fooPf", 32, 128, 16, 1000, 12080),
                   entry(gpu("GPU-a"), "_Z3oldPf", 32, 128, 16, 1000, 12080)});
  write_text("kernels.txt", "# kernels of the shipped binary\n_Z5saxpyfPKfPfi\n_Z3fooPf\r\n\n");
  const std::string before = slurp(dir_ / "p.json");
  outcome r = run("prune p.json --driver-below 12.4 --keep-kernels kernels.txt --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(
      r.out,
      "would remove _Z5saxpyfPKfPfi max_occupancy() work=items on GPU-a (driver 12.2, bucket 0): driver 12.2 < 12.4"))
      << r.out;
  EXPECT_TRUE(has(r.out, "would remove _Z3oldPf")) << r.out;
  EXPECT_EQ(slurp(dir_ / "p.json"), before);

  r = run("prune p.json --driver-below 12040 --keep-kernels kernels.txt");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "p.json: removed 2, kept 1")) << r.out;
  expect_only_kernel(slurp(dir_ / "p.json"), "_Z3fooPf");

  EXPECT_EQ(run("prune p.json").exit_code, 2);
  r = run("prune p.json --driver-below twelve");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--driver-below: 'twelve' is not a driver version (12.4 or 12040)")) << r.err;
}

ld::stored_entry calibration_entry(const lf::device_limits& d, std::uint64_t bytes_per_sm) {
  ld::stored_entry e;
  e.key = lf::stored_key_for(d, 12080, lf::kernel_resources{}, ld::calibration_policy, "", 0);
  e.key.kernel = ld::calibration_kernel;
  e.plan.block = lf::dims{1, 1, 1};
  e.plan.block_threads = 1;
  e.plan.reason = "measured by launchfit-calibrate: " + std::to_string(bytes_per_sm) + " B in flight per SM";
  e.bytes_in_flight_per_sm = bytes_per_sm;
  e.stored_at_ms = 1000;
  return e;
}

// Calibrations are entries the library writes beside plans: every command knows them for what they are.
TEST_F(PlansTool, CalibrationsAreEntriesNotMalformedPlans) {
  write("c.json",
        {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8), calibration_entry(gpu("GPU-a"), 32768)});
  outcome r = run("check c.json");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "c.json: 2 entries, all valid")) << r.out;

  r = run("list c.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "(calibration: 32768 B in flight per SM)")) << r.out;
  EXPECT_FALSE(has(r.out, "launchfit:calibration")) << "not shown as a kernel: " << r.out;

  r = run("show c.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "  calibration  32768 B in flight per SM")) << r.out;
  EXPECT_FALSE(has(r.out, "fingerprint not understood")) << r.out;

  r = run("list c.json --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["kind"], "plan");
  EXPECT_EQ(j[1]["kind"], "calibration");
  EXPECT_EQ(j[1]["calibration"]["bytes_in_flight_per_sm"], 32768);
  EXPECT_FALSE(j[1].contains("plan")) << j[1];
}

// A --keep-kernels list that names no kernel of the file is a mistake (a stripped binary, the wrong one): it
// removes nothing unless --force; calibrations are never removed by it.
TEST_F(PlansTool, PruneRefusesAKernelListThatMatchesNothingAndKeepsCalibrations) {
  write("p.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8),
                   entry(gpu("GPU-a"), "_Z3fooPf", 32, 128, 16), calibration_entry(gpu("GPU-a"), 32768)});
  write_text("stripped.txt", "main\n_start\n");
  const std::string before = slurp(dir_ / "p.json");
  outcome r = run("prune p.json --keep-kernels stripped.txt");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "launchfit-plans: error: stripped.txt names no kernel of p.json; nothing removed"))
      << r.err;
  EXPECT_EQ(slurp(dir_ / "p.json"), before);

  r = run("prune p.json --keep-kernels stripped.txt --force --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "p.json: would remove 2, kept 1")) << r.out;
  EXPECT_EQ(slurp(dir_ / "p.json"), before);

  r = run("prune p.json --keep-kernels stripped.txt --force");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto left = ld::parse_cache_file(slurp(dir_ / "p.json"));
  ASSERT_EQ(left.entries.size(), 1u);
  EXPECT_EQ(left.entries[0].key.kernel, ld::calibration_kernel);

  // A list naming one kernel prunes the others, and still keeps the calibration.
  write("q.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8),
                   entry(gpu("GPU-a"), "_Z3fooPf", 32, 128, 16), calibration_entry(gpu("GPU-a"), 32768)});
  write_text("one.txt", "_Z3fooPf\n");
  r = run("prune q.json --keep-kernels one.txt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "q.json: removed 1, kept 2")) << r.out;
}

// Every command that writes takes --dry-run and then writes nothing.
TEST_F(PlansTool, EveryWritingCommandHasADryRun) {
  write("a.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8)});
  write("b.json", {entry(gpu("GPU-a"), "_Z3fooPf", 32, 128, 16)});
  const std::string before = slurp(dir_ / "a.json");
  outcome r = run("merge a.json b.json --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "would merge 1 file(s) into a.json: 2 entries")) << r.out;
  EXPECT_EQ(slurp(dir_ / "a.json"), before);
  r = run("merge new.json b.json --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "new.json"));
  // push contacts no store (nothing listens on port 1); pull needs the store to say what it would pull.
  r = run("push a.json redis://127.0.0.1:1 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "would push 1 entries of a.json")) << r.out;
  EXPECT_FALSE(has(r.out, "work kind")) << r.out;
  write("old.json", {legacy_entry(gpu("GPU-a"), "_Z3oldPf", 32, 128, 16)});
  r = run("push old.json redis://127.0.0.1:1 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "would push 1 entries of old.json")) << r.out;
  EXPECT_TRUE(has(r.out, "; 1 name no work kind (no launch finds them)")) << r.out;
  for (const char* sub : {"merge", "prune", "push", "pull"}) {
    r = run(std::string(sub) + " --help");
    EXPECT_TRUE(has(r.out, "--dry-run")) << sub << ": " << r.out;
  }
}

// A symbolic link to a plan file is followed by every command, as the library follows LAUNCHFIT_CACHE.
TEST_F(PlansTool, SymlinkedFilesAreFollowedAsTheLibraryFollowsThem) {
  fs::create_directories(dir_ / "real");
  write("real/plans.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8)});
  fs::create_symlink("real/plans.json", dir_ / "plans.json");
  outcome r = run("list plans.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "_Z5saxpyfPKfPfi")) << r.out;
  r = run("check plans.json");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  write("b.json", {entry(gpu("GPU-a"), "_Z3fooPf", 32, 128, 16)});
  r = run("merge plans.json b.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir_ / "plans.json")) << "the link stays a link";
  EXPECT_EQ(ld::parse_cache_file(slurp(dir_ / "real/plans.json")).entries.size(), 2u);
  fs::create_symlink("real/missing.json", dir_ / "dangling.json");
  r = run("list dangling.json");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(has(r.err, "dangling")) << r.err;
}

TEST_F(PlansTool, CheckNamesEveryBadEntryAndExitsNonZero) {
  write("good.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8)});
  outcome r = run("check good.json");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "good.json: 1 entry, all valid")) << r.out;

  // A block above the kernel's limit, a shape error, and a plan whose smem disagrees with its rule.
  auto too_big = entry(gpu("GPU-a"), "_Z3bigPf", 32, 1024, 2);
  too_big.key.kernel = lf::kernel_fingerprint(lf::kernel_resources::manual(32, 0, 256, "_Z3bigPf"));
  auto smem = entry(gpu("GPU-a"), "_Z4smemPf", 32, 256, 8);
  smem.plan.dynamic_smem_bytes = 4096;
  write("bad.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8), too_big, smem});
  auto doc = nlohmann::json::parse(slurp(dir_ / "bad.json"));
  doc["entries"].push_back({{"key", {{"cc", 90}}}, {"plan", {{"block", {1, 1, 1}}}}});
  write_text("bad.json", doc.dump());
  r = run("check good.json bad.json");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "bad.json: entry 3: missing 'device_uuid'")) << r.out;
  // Entry 1: its kernel, and the block against the kernel's limit, in whatever words the check uses.
  const std::size_t entry1 = r.out.find("bad.json: entry 1 (");
  ASSERT_NE(entry1, std::string::npos) << r.out;
  const std::string line1 = r.out.substr(entry1, r.out.find('\n', entry1) - entry1);
  for (const char* part : {"_Z3bigPf", "1024 threads", "256"})
    EXPECT_TRUE(has(line1, part)) << part << " not in: " << line1;
  EXPECT_TRUE(
      has(r.out,
          "bad.json: entry 2 (kernel _Z4smemPf): the entry's plan has 4096 B of dynamic smem, its key 0 B"))
      << r.out;
  EXPECT_FALSE(has(r.out, "entry 0")) << r.out;

  r = run("check bad.json --json");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["problems"].size(), 3u);
  EXPECT_EQ(run("check missing.json").exit_code, 1);
}

// The library's own check of a stored entry: a plan that launches otherwise than its key says (an option
// added or dropped, another policy) is a bad entry, named; a calibration is checked as a calibration.
TEST_F(PlansTool, CheckRefusesAPlanThatLaunchesOtherwiseThanItsKey) {
  auto cooperative = entry(gpu("GPU-a"), "_Z4coopPf", 32, 256, 8);
  cooperative.plan.options.cooperative = true;
  auto programmatic = entry(gpu("GPU-a"), "_Z3pdlPf", 32, 256, 8);
  programmatic.plan.options.programmatic = true;
  auto clustered = entry(gpu("GPU-a"), "_Z7clusterPf", 32, 256, 8);
  clustered.plan.options.cluster = lf::dims{2, 1, 1};
  auto other_policy = entry(gpu("GPU-a"), "_Z5otherPf", 32, 256, 8);
  other_policy.plan.policy = "fixed(block=256,grid=0)";
  auto dropped = entry(gpu("GPU-a"), "_Z4dropPf", 32, 256, 8);
  dropped.key.policy = "max_occupancy() cooperative work=items";
  write("opts.json", {entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8), cooperative, programmatic,
                      clustered, other_policy, dropped});
  outcome r = run("check opts.json");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  for (const char* says :
       {"opts.json: entry 1 (kernel _Z4coopPf): the entry's plan is cooperative, its key is not",
        "opts.json: entry 2 (kernel _Z3pdlPf): the entry's plan is a programmatic dependent launch (PDL), "
        "its key is "
        "not",
        "opts.json: entry 3 (kernel _Z7clusterPf): the entry's plan has cluster 2, its key none",
        "opts.json: entry 4 (kernel _Z5otherPf): the entry's plan names policy 'fixed(block=256,grid=0)', "
        "its key "
        "'max_occupancy()'",
        "opts.json: entry 5 (kernel _Z4dropPf): the entry's plan is not cooperative, its key is"}) {
    EXPECT_TRUE(has(r.out, says)) << says << "\n" << r.out;
  }
  EXPECT_FALSE(has(r.out, "entry 0")) << r.out;
  const outcome l = run("list opts.json");
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_TRUE(has(l.err, "skipped 5 bad entries")) << l.err;

  // A calibration beside the plans: checked as one (its target), not as a plan of kernel
  // "launchfit:calibration".
  auto calibration = entry(gpu("GPU-a"), "unused", 32, 256, 8);
  calibration.key.kernel = ld::calibration_kernel;
  calibration.key.policy = ld::calibration_policy;
  calibration.key.smem_rule = "";
  calibration.bytes_in_flight_per_sm = 32 * 1024;
  write("calibrated.json", {legacy_entry(gpu("GPU-a"), "_Z5saxpyfPKfPfi", 32, 256, 8), calibration});
  r = run("check calibrated.json");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "calibrated.json: 2 entries, all valid")) << r.out;
  // A calibration has no work kind to name: only the plan written as 0.3 wrote it is counted.
  EXPECT_TRUE(has(r.out, "calibrated.json: note: 1 entry names no work kind")) << r.out;
  r = run("check calibrated.json --json");
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["without_work_kind"], 1) << r.out;
}

TEST_F(PlansTool, HostileNamesAreShownEscaped) {
  auto e = entry(gpu("GPU-a", "NVIDIA H200"), "_Z5saxpyfPKfPfi", 32, 256, 8);
  write("a.json", {e});
  auto doc = nlohmann::json::parse(slurp(dir_ / "a.json"));
  // Control characters in key text make an entry bad (the library refuses them): check names it escaped.
  doc["entries"][0]["key"]["kernel"] = "_Z3evilv\x1b[2J\n[info] forged|32|0|0|1024|90|90";
  write_text("a.json", doc.dump());
  const outcome r = run("check a.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.out, "entry 0: 'kernel' is too long or holds control characters")) << r.out;
  EXPECT_FALSE(has(r.out, "\x1b")) << r.out;
  const outcome l = run("list a.json");
  EXPECT_EQ(l.exit_code, 0);
  EXPECT_TRUE(has(l.err, "skipped 1 bad entry")) << l.err;
  EXPECT_FALSE(has(l.out + l.err, "\x1b"));
}

// A format version that is a string holding a bidi override (U+202E) and a C1 control (U+009B, an 8-bit CSI) is
// named escaped, by every subcommand that reads the file: JSON's own escapes cover C0 controls only, and the
// tool printed both characters raw (a terminal reordered or interpreted its output).
TEST_F(PlansTool, AFormatVersionThatHidesTerminalControlsIsShownEscaped) {
  write_text("v.json",
             "{\"format\": \"launchfit-plan-cache\", \"version\": \"1\\u202e\\u009b31mgnp.lmth\", \"entries\": []}\n");
  for (const char* sub : {"list", "check", "show", "stats"}) {
    const outcome r = run(std::string(sub) + " v.json");
    const std::string all = r.out + r.err;
    EXPECT_NE(r.exit_code, 0) << sub << ": " << all;
    EXPECT_TRUE(has(all, "format version")) << sub << ": " << all;
    EXPECT_FALSE(has(all, "\xe2\x80\xae")) << sub << ": the bidi override reached the output";
    EXPECT_FALSE(has(all, "\xc2\x9b")) << sub << ": the C1 control reached the output";
    EXPECT_TRUE(has(all, "\\u202e")) << sub << ": " << all;
  }
}

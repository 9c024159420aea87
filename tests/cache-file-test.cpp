// SPDX-License-Identifier: MIT
// The persistent plan cache file (cache.hpp, "persistent cache file" section).

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cache_file.hpp"
#include "file_lock.hpp"
#include "settings.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/log.hpp"
#include "plan_json.hpp"

namespace lf = launchfit;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

lf::stored_key key(int i, std::uint64_t bucket = 0) {
  lf::stored_key k;
  k.device_uuid = "GPU-3f1a2b4c-0000-1111-2222-333344445555";
  k.cc = 90;
  k.sm_count = 132;
  k.driver_version = 12080;
  k.kernel = lf::kernel_fingerprint(
      lf::kernel_resources::manual(32, 0, 1024, "_Z6kernel" + std::to_string(i) + "Pf"));
  // sample_plan() is cooperative and clustered: its key says so, as the planner's keys do.
  k.policy = "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256) cooperative cluster=2";
  k.smem_rule = "bytes=4096";  // as sample_plan()'s smem
  k.bucket = bucket;
  return k;
}

lf::plan sample_plan(int block) {
  lf::plan p;
  p.block = lf::dims{static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = std::min(2048 / block, 32);  // an SM of sm_90 holds 32 blocks
  p.sm_count = 132;
  p.dynamic_smem_bytes = 4096;
  p.grid = lf::dims{0, 1, 1};
  p.options.cluster = lf::dims{2, 1, 1};
  p.options.cooperative = true;
  p.occupancy.block_threads = block;
  p.occupancy.dynamic_smem_bytes = 4096;
  p.occupancy.active_blocks_per_sm = 2048 / block;
  p.occupancy.active_warps_per_sm = 64;
  p.occupancy.active_threads_per_sm = 2048;
  p.occupancy.occupancy = 1.0;
  p.occupancy.limiters = lf::limit_warps | lf::limit_registers;
  p.occupancy.blocks_limit_warps = 8;
  p.occupancy.blocks_limit_registers = 8;
  p.occupancy.blocks_limit_shared_memory = 40;
  p.occupancy.blocks_limit_blocks = 32;
  p.occupancy.allocated_regs_per_block = 8192;
  p.occupancy.allocated_smem_per_block_bytes = 5248;
  p.policy = "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)";
  p.reason = "16 warps/SM x 32 x 32 B = 16 KB";
  p.warning = "target unreachable";
  p.trials = 7;
  p.tuning_ms = 12.5;
  return p;
}

// Every field but match (where a plan came from is the reader's to say).
void expect_same_plan(const lf::plan& a, const lf::plan& b) {
  auto ja = lf::detail::plan_to_json(a), jb = lf::detail::plan_to_json(b);
  ja.erase("match");
  jb.erase("match");
  EXPECT_EQ(ja, jb);
}

// A scratch directory and a logger that counts launchfit's warnings.
class CacheFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-cache-test-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "plans.json";
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    lf::set_logger(std::make_shared<spdlog::logger>("launchfit-test", sink));
  }
  void TearDown() override {
    lf::close_cache_file();
    lf::set_logger(nullptr);
    fs::remove_all(dir_);
  }
  int warnings() const {
    const std::string s = log_.str();
    int n = 0;
    for (auto pos = s.find("[warning]"); pos != std::string::npos; pos = s.find("[warning]", pos + 1)) ++n;
    return n;
  }

  fs::path dir_, file_;
  std::ostringstream log_;
};

}  // namespace

TEST(KernelFingerprint, NamesEveryAttributeThatInvalidatesAPlan) {
  auto k = lf::kernel_resources::manual(40, 1024, 256, "_Z6reducePKfPfi");
  k.local_bytes_per_thread = 16;
  k.ptx_version = 90;
  k.binary_version = 90;
  EXPECT_EQ(lf::kernel_fingerprint(k), "_Z6reducePKfPfi|40|1024|16|256|90|90");
}

TEST_F(CacheFile, RoundTripsEveryPlanField) {
  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 0u);
  EXPECT_FALSE(fs::exists(file_));  // created on first write
  for (int i = 0; i < 3; ++i) lf::store_plan(key(i), sample_plan(128 << i));
  EXPECT_EQ(lf::stored_plan_count(), 3u);

  lf::close_cache_file();
  EXPECT_EQ(lf::stored_plan_count(), 0u);
  EXPECT_FALSE(lf::find_stored_plan(key(0)));

  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 3u);
  for (int i = 0; i < 3; ++i) {
    const auto p = lf::find_stored_plan(key(i));
    ASSERT_TRUE(p);
    expect_same_plan(*p, sample_plan(128 << i));
    EXPECT_EQ(p->match, "cache-file");
  }
  EXPECT_EQ(warnings(), 0) << log_.str();

  const auto doc = nlohmann::json::parse(slurp(file_));
  EXPECT_EQ(doc["format"], "launchfit-plan-cache");
  EXPECT_EQ(doc["version"], 1);
  ASSERT_EQ(doc["entries"].size(), 3u);
  EXPECT_EQ(doc["entries"][0]["key"]["device_uuid"], "GPU-3f1a2b4c-0000-1111-2222-333344445555");
  EXPECT_EQ(doc["entries"][0]["plan"]["occupancy"]["limiters"], lf::limit_warps | lf::limit_registers);
  // Nothing left behind but the file and its lock.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.path().filename() != "plans.json.lock";
  EXPECT_EQ(files, 1);
}

TEST_F(CacheFile, KeysAreExactAndOtherBucketsAreOptIn) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key(1, 10), sample_plan(128));
  lf::store_plan(key(1, 20), sample_plan(256));
  EXPECT_FALSE(lf::find_stored_plan(key(1, 14)));
  auto near = lf::find_stored_plan(key(1, 14), /*exact=*/false);
  ASSERT_TRUE(near);
  EXPECT_EQ(near->block_threads, 128);  // the nearest bucket
  EXPECT_EQ(near->match, "cache-file-other-bucket");
  EXPECT_EQ(lf::find_stored_plan(key(1, 20), false)->match, "cache-file");

  auto other = key(1, 10);
  other.driver_version = 12090;  // a new driver never reuses a plan
  EXPECT_FALSE(lf::find_stored_plan(other, false));
  other = key(1, 10);
  other.kernel = lf::kernel_fingerprint(lf::kernel_resources::manual(33, 0, 1024, "_Z6kernel1Pf"));
  EXPECT_FALSE(lf::find_stored_plan(other, false));

  lf::store_plan(key(1, 10), sample_plan(512));  // one entry per key: the newest wins
  EXPECT_EQ(lf::find_stored_plan(key(1, 10))->block_threads, 512);
  EXPECT_EQ(lf::stored_plan_count(), 2u);
}

TEST_F(CacheFile, IgnoresUnknownFieldsAndSkipsBadEntries) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key(0), sample_plan(128));
  lf::store_plan(key(1), sample_plan(256));
  lf::close_cache_file();

  auto doc = nlohmann::json::parse(slurp(file_));
  doc["written_by"] = "a newer launchfit";
  doc["entries"][0]["plan"]["future_field"] = {1, 2, 3};
  doc["entries"][1]["plan"]["block"] = "256";  // wrong type
  doc["entries"].push_back(42);
  doc["entries"].push_back({{"key", {{"cc", 90}}}, {"plan", {{"block", {128, 1, 1}}}}});  // incomplete key
  auto bad_block = doc["entries"][0];
  bad_block["key"]["bucket"] = 99;
  bad_block["plan"]["block"] = {2048, 1, 1};
  doc["entries"].push_back(bad_block);
  write_text(file_, doc.dump());

  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 1u);
  ASSERT_TRUE(lf::find_stored_plan(key(0)));
  EXPECT_EQ(lf::find_stored_plan(key(0))->block_threads, 128);
  EXPECT_EQ(warnings(), 1) << log_.str();
  EXPECT_NE(log_.str().find("skipped 4 bad entries (entry 1: 'block' is not an array of 3)"),
            std::string::npos)
      << log_.str();
}

TEST_F(CacheFile, TruncatedFileIsIgnoredOnceAndReplaced) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key(0), sample_plan(128));
  lf::close_cache_file();
  const std::string full = slurp(file_);
  write_text(file_, full.substr(0, full.size() / 2));

  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 0u);
  EXPECT_EQ(warnings(), 1) << log_.str();
  EXPECT_NE(log_.str().find("not valid JSON (truncated or damaged): 0 entries read line by line, 1 line skipped"),
            std::string::npos)
      << log_.str();
  EXPECT_NE(log_.str().find("it will be replaced with what was read"), std::string::npos)
      << log_.str();
  lf::store_plan(key(1), sample_plan(256));
  EXPECT_TRUE(lf::flush_cache_file());
  EXPECT_EQ(warnings(), 1) << log_.str();
  EXPECT_EQ(lf::detail::parse_cache_file(slurp(file_)).entries.size(), 1u);
}

// A file of launchfit's damaged in one line (a byte that is not UTF-8 in a reason) keeps every other entry: they
// are used, and written back when the file is replaced (one bad byte used to cost the whole file). A file that
// only names the format (notes, a README) is not launchfit's and is never replaced.
TEST_F(CacheFile, ADamagedLineCostsThatEntryAloneAndANoteNamingTheFormatIsLeftAlone) {
  std::vector<lf::detail::stored_entry> five;
  for (int k = 0; k < 5; ++k) five.push_back({key(k), sample_plan(128)});
  std::string text = lf::detail::serialize_cache_file(five);
  const std::size_t third = text.find("\n", text.find("\n", text.find("\n") + 1) + 1);  // the end of entry 2's line
  const std::size_t reason = text.rfind("\"reason\"", third);
  ASSERT_NE(reason, std::string::npos);
  text.insert(reason + 11, "\xff");  // inside entry 2's reason: the whole file is no longer JSON
  write_text(file_, text);
  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 4u) << log_.str();
  EXPECT_NE(log_.str().find("4 entries read line by line, 1 line skipped"), std::string::npos) << log_.str();
  lf::store_plan(key(9), sample_plan(256));
  ASSERT_TRUE(lf::flush_cache_file());
  const auto after = lf::detail::parse_cache_file(slurp(file_));
  EXPECT_EQ(after.status, lf::detail::cache_file_status::ok);
  EXPECT_EQ(after.entries.size(), 5u) << "the four that read and the new one";
  lf::close_cache_file();

  // The same damage made while the process runs, between two of its writes: the others' entries stay.
  write_text(file_, lf::detail::serialize_cache_file(five));
  log_.str("");
  lf::set_cache_file(file_.string());
  lf::store_plan(key(10), sample_plan(256));
  ASSERT_TRUE(lf::flush_cache_file());
  std::string now = slurp(file_);
  const std::size_t at = now.find("\"reason\"");
  ASSERT_NE(at, std::string::npos);
  now.insert(at + 11, "\xff");
  write_text(file_, now);
  lf::store_plan(key(11), sample_plan(256));
  ASSERT_TRUE(lf::flush_cache_file());
  EXPECT_EQ(lf::detail::parse_cache_file(slurp(file_)).entries.size(), 6u) << "five of six that read and the new one";
  lf::close_cache_file();

  const std::string note = "Our plans live in a launchfit-plan-cache file; see the wiki.\n";
  write_text(file_, note);
  log_.str("");
  lf::set_cache_file(file_.string());
  lf::store_plan(key(12), sample_plan(128));
  lf::flush_cache_file();
  EXPECT_EQ(slurp(file_), note) << "a note that names the format was replaced";
  EXPECT_NE(log_.str().find("not a file launchfit wrote"), std::string::npos) << log_.str();
  lf::close_cache_file();
}

// A large file of tiny JSON values ([{},{},...] after launchfit's head, 6 MiB) is not launchfit's: refused without
// building its document (16 MiB of it took 600 MB to parse, and a process near its memory limit aborted).
TEST(CacheFileFormat, ALargeFileOfTinyValuesIsRefusedUnparsed) {
  std::string text = "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [\n";
  text.reserve(6u << 20);
  while (text.size() < (6u << 20)) text += "{},";
  text += "{}]}\n";
  const auto c = lf::detail::parse_cache_file(text);
  EXPECT_EQ(c.status, lf::detail::cache_file_status::foreign);
  EXPECT_NE(c.problem.find("far denser than a file launchfit writes"), std::string::npos) << c.problem;
}

// A file larger than the memory there is, under a limit raised to allow it (LAUNCHFIT_CACHE_MAX_BYTES takes up to
// 1 TiB): refused with a reason, never a std::bad_alloc out of a launch (which, through a noexcept flush, ended
// the process). A sparse file of 200 GB, which no machine of this kind can hold in memory.
TEST(CacheFileFormat, AFileLargerThanMemoryIsRefusedNotThrown) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator reports an allocation this large instead of failing it";
#else
  std::ifstream mode_file("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  mode_file >> mode;
  if (mode != 0 && mode != 2) GTEST_SKIP() << "overcommit_memory " << mode << ": a 200 GB allocation may succeed";
  const std::string path =
      (std::filesystem::temp_directory_path() / ("launchfit-huge-" + std::to_string(::getpid()) + ".json")).string();
  {
    std::ofstream f(path);
  }
  ASSERT_EQ(::truncate(path.c_str(), 200LL << 30), 0);
  std::string text, why;
  lf::detail::file_identity id;
  const auto r = lf::detail::read_bounded(path, std::size_t{1} << 40, text, why, id);
  std::filesystem::remove(path);
  EXPECT_EQ(r, lf::detail::read_result::refused) << why;
  EXPECT_NE(why.find("no memory"), std::string::npos) << why;
#endif
}

// Two entries of one key in one file (edited by hand, two files concatenated): the newer is used, whichever
// comes last (the last one was, even when older), and the file keeps it alone when rewritten.
TEST_F(CacheFile, OfTwoEntriesOfOneKeyTheNewerIsUsed) {
  lf::detail::stored_entry newer{key(0), sample_plan(256)}, older{key(0), sample_plan(128)};
  newer.stored_at_ms = 2000;
  older.stored_at_ms = 1000;
  write_text(file_, lf::detail::serialize_cache_file({newer, older}));
  lf::set_cache_file(file_.string());
  const auto used = lf::find_stored_plan(key(0));
  ASSERT_TRUE(used);
  EXPECT_EQ(used->block_threads, 256) << "the older entry, last in the file, was used";
  lf::store_plan(key(1), sample_plan(128));
  ASSERT_TRUE(lf::flush_cache_file());
  const auto after = lf::detail::parse_cache_file(slurp(file_));
  ASSERT_EQ(after.entries.size(), 2u);
  for (const auto& e : after.entries)
    if (e.key.kernel == key(0).kernel) EXPECT_EQ(e.plan.block_threads, 256);
  lf::close_cache_file();
}

// A plan file this user may read but not write (another user's, mode 0444) in a directory anyone may write: its
// plans are read, and it is never replaced (the rename put this user's file in its place, owner and mode too).
// Run as another user (nobody) in a child where the tests run as root; skipped otherwise.
TEST(CacheFileFormat, AFileThisUserMayNotWriteIsReadAndNeverReplaced) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run the process as another user";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("launchfit-ro-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  const std::filesystem::path file = dir / "plans.json";
  const std::string text = lf::detail::serialize_cache_file({{key(0), sample_plan(256)}});
  {
    std::ofstream f(file);
    f << text;
  }
  std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  EXPECT_EXIT(
      {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) std::exit(3);
        lf::set_cache_file(file.string());
        const auto read = lf::find_stored_plan(key(0));
        lf::store_plan(key(1), sample_plan(128));
        lf::flush_cache_file();
        lf::close_cache_file();
        std::exit(read && read->block_threads == 256 ? 0 : 4);
      },
      testing::ExitedWithCode(0), "read-only for this process");
  std::ifstream f(file);
  const std::string after((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, text) << "replaced by a user who may not write it";
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the file changed owner";
  std::filesystem::remove_all(dir);
}

// A path that begins or ends with white space is a mistake of quoting: not used, one warning, no file made
// (LAUNCHFIT_CACHE="plans.json " made a file of that name beside the one meant).
TEST_F(CacheFile, APathWithSurroundingBlanksIsNotUsed) {
  for (const std::string odd : {file_.string() + " ", file_.string() + "\n", " " + file_.string(),
                                file_.string() + "\t"}) {
    log_.str("");
    lf::set_cache_file(odd);
    lf::store_plan(key(0), sample_plan(128));
    ASSERT_TRUE(lf::find_stored_plan(key(0))) << "kept in memory";
    lf::flush_cache_file();
    lf::close_cache_file();
    EXPECT_EQ(warnings(), 1) << log_.str();
    EXPECT_NE(log_.str().find("begins or ends with white space"), std::string::npos) << log_.str();
    EXPECT_FALSE(std::filesystem::exists(odd)) << "a file was made at the odd path";
  }
}

TEST_F(CacheFile, WrongVersionAndForeignFilesAreNeverOverwritten) {
  for (const std::string content :
       {std::string(R"({"format":"launchfit-plan-cache","version":2,"entries":[]})"),
        std::string(R"({"name":"my-project","dependencies":{}})"), std::string("[1,2,3]"),
        std::string("\x7f"
                    "ELF\x02\x01\x01\0 binary",
                    15),  // every byte of the literal, a NUL included
        std::string(R"({"format":"launchfit-plan-cache")")}) {
    SCOPED_TRACE(content);
    log_.str("");
    write_text(file_, content);
    lf::set_cache_file(file_.string());
    EXPECT_EQ(lf::stored_plan_count(), 0u);
    EXPECT_EQ(warnings(), 1) << log_.str();
    lf::store_plan(key(0), sample_plan(128));
    ASSERT_TRUE(lf::find_stored_plan(key(0)));  // kept in memory
    lf::flush_cache_file();
    // None is a file launchfit wrote (its head, one entry per line), not even the one that names the format.
    EXPECT_EQ(slurp(file_), content);
    EXPECT_EQ(warnings(), 1) << log_.str();
    lf::close_cache_file();
  }
}

TEST_F(CacheFile, UnwritableDirectoryWarnsOnceAndKeepsPlansInMemory) {
  // A regular file where the directory should be: unwritable even for root.
  write_text(dir_ / "not-a-dir", "x");
  lf::set_cache_file((dir_ / "not-a-dir" / "plans.json").string());
  for (int i = 0; i < 3; ++i) EXPECT_NO_THROW(lf::store_plan(key(i), sample_plan(128)));
  EXPECT_FALSE(lf::flush_cache_file());
  EXPECT_EQ(lf::stored_plan_count(), 3u);
  EXPECT_TRUE(lf::find_stored_plan(key(2)));
  EXPECT_EQ(warnings(), 1) << log_.str();
  EXPECT_NE(log_.str().find("cannot write it"), std::string::npos) << log_.str();
}

TEST_F(CacheFile, FrozenModeNeverWrites) {
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  lf::store_plan(key(0), sample_plan(128));
  EXPECT_FALSE(fs::exists(file_));
  EXPECT_FALSE(fs::exists(dir_ / "plans.json.lock"));
  EXPECT_EQ(lf::stored_plan_count(), 0u);

  lf::set_cache_file(file_.string());
  lf::store_plan(key(0), sample_plan(128));
  EXPECT_TRUE(lf::flush_cache_file());
  const std::string before = slurp(file_);
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::find_stored_plan(key(0))->block_threads, 128);  // reads still work
  lf::store_plan(key(1), sample_plan(256));
  EXPECT_FALSE(lf::find_stored_plan(key(1)));
  EXPECT_TRUE(lf::flush_cache_file());
  EXPECT_EQ(slurp(file_), before);
}

TEST_F(CacheFile, FallbackPlansAreNotStored) {
  lf::set_cache_file(file_.string());
  auto p = sample_plan(128);
  p.match = "fallback";  // a plugin declined; the next run should ask it again
  lf::store_plan(key(0), p);
  EXPECT_FALSE(lf::find_stored_plan(key(0)));
  EXPECT_TRUE(lf::flush_cache_file());
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(CacheFile, WritersMergeWhatOthersWrote) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key(0), sample_plan(128));
  EXPECT_TRUE(lf::flush_cache_file());
  // Another process adds an entry behind our back.
  auto contents = lf::detail::parse_cache_file(slurp(file_));
  contents.entries.push_back({key(1), sample_plan(256)});
  write_text(file_, lf::detail::serialize_cache_file(contents.entries));
  lf::store_plan(key(2), sample_plan(512));
  EXPECT_TRUE(lf::flush_cache_file());
  EXPECT_EQ(lf::detail::parse_cache_file(slurp(file_)).entries.size(), 3u);
  EXPECT_EQ(lf::find_stored_plan(key(1))->block_threads, 256);  // and we see it now

  // A file edited by hand (any JSON layout) merges the same way.
  auto doc = nlohmann::json::parse(slurp(file_));
  doc["entries"].push_back(nlohmann::json::parse(lf::detail::cache_file_line({key(3), sample_plan(64)})));
  write_text(file_, doc.dump(2));
  lf::store_plan(key(4), sample_plan(32));
  EXPECT_TRUE(lf::flush_cache_file());
  EXPECT_EQ(lf::detail::parse_cache_file(slurp(file_)).entries.size(), 5u);
  EXPECT_EQ(lf::find_stored_plan(key(3))->block_threads, 64);
  EXPECT_EQ(warnings(), 0) << log_.str();
}

TEST_F(CacheFile, StoredTextIsUntrustedAndCannotForgeLogLines) {
  auto doc = nlohmann::json::parse(lf::detail::serialize_cache_file({{key(0), sample_plan(128)}}));
  auto& plan = doc["entries"][0]["plan"];
  plan["reason"] = "fine\n[2026-01-01 00:00:00.000] [launchfit] [error] forged\r";
  plan["warning"] = "\x1b[2J\u202e\u0085" + std::string(100000, 'w');
  plan["match"] = "exact, trust me";
  write_text(file_, doc.dump());

  lf::set_cache_file(file_.string());
  const auto p = lf::find_stored_plan(key(0));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->reason, "fine?[2026-01-01 00:00:00.000] [launchfit] [error] forged?");
  EXPECT_EQ(p->warning.substr(0, 8), "?[2J??ww");
  EXPECT_EQ(p->warning.size(), lf::detail::max_plan_text_bytes);
  EXPECT_EQ(p->match, "cache-file");

  // A policy text that is not the key's policy (control characters included) refuses the entry, named.
  plan["policy"] = "bytes_in_flight\u2028x";
  write_text(file_, doc.dump());
  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 0u);
  EXPECT_NE(
      log_.str().find("entry 0 (kernel _Z6kernel0Pf): the entry's plan names policy 'bytes_in_flight?x'"),
      std::string::npos)
      << log_.str();
  plan["policy"] = key(0).policy.substr(0, key(0).policy.find(')') + 1);

  // Key text is compared, never cleaned: a key with a control character matches nothing and is skipped.
  doc["entries"][0]["key"]["kernel"] = key(1).kernel + "\n";
  write_text(file_, doc.dump());
  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 0u);
  EXPECT_NE(log_.str().find("'kernel' is too long or holds control characters"), std::string::npos)
      << log_.str();
}

TEST(CacheFileFormat, LineLayoutParsesLikeTheFullParser) {
  std::vector<lf::detail::stored_entry> entries;
  for (int i = 0; i < 5; ++i) entries.push_back({key(i), sample_plan(32 << i)});
  const std::string text = lf::detail::serialize_cache_file(entries);
  std::vector<lf::detail::stored_entry> fast;
  ASSERT_TRUE(lf::detail::parse_cache_file_lines(text, {}, fast));
  ASSERT_EQ(fast.size(), 5u);
  for (int i = 0; i < 5; ++i) expect_same_plan(fast[i].plan, entries[i].plan);
  // Known lines are skipped.
  const std::string second = lf::detail::cache_file_line(entries[1]);
  fast.clear();
  ASSERT_TRUE(lf::detail::parse_cache_file_lines(
      text, [&](std::string_view l) { return l == second; }, fast));
  EXPECT_EQ(fast.size(), 4u);
  // Anything else is left to the full parser.
  fast.clear();
  EXPECT_FALSE(lf::detail::parse_cache_file_lines(nlohmann::json::parse(text).dump(), {}, fast));
  EXPECT_FALSE(lf::detail::parse_cache_file_lines(text.substr(0, text.size() - 1), {}, fast));
  EXPECT_TRUE(lf::detail::parse_cache_file_lines(lf::detail::serialize_cache_file({}), {}, fast));
}

TEST_F(CacheFile, ConcurrentWritersFromTwoProcessesLoseNothing) {
  constexpr int per_child = 200;
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = ::fork();
    ASSERT_GE(children[c], 0);
    if (children[c] == 0) {
      lf::set_cache_file(file_.string());
      for (int i = 0; i < per_child; ++i) lf::store_plan(key(c * per_child + i), sample_plan(32 << (i % 5)));
      ::_exit(lf::flush_cache_file() && lf::stored_plan_count() >= per_child ? 0 : 1);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  lf::set_cache_file(file_.string());
  EXPECT_EQ(lf::stored_plan_count(), 2u * per_child);
  for (int i = 0; i < 2 * per_child; ++i) ASSERT_TRUE(lf::find_stored_plan(key(i))) << i;
  EXPECT_EQ(warnings(), 0) << log_.str();
}

// LAUNCHFIT_CACHE is read once per process: these run in a fresh child process each.
class CacheFileEnv : public CacheFile {
 protected:
  void SetUp() override {
    CacheFile::SetUp();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    write_text(file_, lf::detail::serialize_cache_file({{key(0), sample_plan(128)}}));
  }
};

TEST_F(CacheFileEnv, ReadWriteFromTheEnvironment) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_CACHE", file_.c_str(), 1);
        lf::detail::settings_reload_for_tests();  // the environment is read once per process
        const bool found = lf::find_stored_plan(key(0)).has_value();
        lf::store_plan(key(1), sample_plan(256));
        lf::flush_cache_file();
        std::exit(found && lf::detail::parse_cache_file(slurp(file_)).entries.size() == 2 ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST_F(CacheFileEnv, FrozenFromTheEnvironment) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_CACHE", file_.c_str(), 1);
        setenv("LAUNCHFIT_CACHE_MODE", "frozen", 1);
        lf::detail::settings_reload_for_tests();
        const std::string before = slurp(file_);
        const bool found = lf::find_stored_plan(key(0)).has_value();
        lf::store_plan(key(1), sample_plan(256));
        std::exit(found && slurp(file_) == before && lf::stored_plan_count() == 1 ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(CacheFileFormat, ParserNeverThrowsOnOddInput) {
  using lf::detail::cache_file_status;
  EXPECT_EQ(lf::detail::parse_cache_file("").status, cache_file_status::empty);
  EXPECT_EQ(lf::detail::parse_cache_file(" \n").status, cache_file_status::empty);
  EXPECT_EQ(lf::detail::parse_cache_file("null").status, cache_file_status::foreign);
  EXPECT_EQ(lf::detail::parse_cache_file(std::string(100000, '[')).status, cache_file_status::foreign);
  EXPECT_EQ(lf::detail::parse_cache_file(R"({"format":"launchfit-plan-cache","version":1.0})").status,
            cache_file_status::wrong_version);
  EXPECT_EQ(lf::detail::parse_cache_file(R"({"format":"launchfit-plan-cache","version":1})").status,
            cache_file_status::corrupt);
  // A version nested 200,000 deep (400 KB, under every size bound): the report named it by dump(), which
  // recurses, and overflowed the stack of every process reading the file.
  const auto nested = lf::detail::parse_cache_file(R"({"format":"launchfit-plan-cache","version":)" +
                                                   std::string(200000, '[') + std::string(200000, ']') + "}");
  EXPECT_EQ(nested.status, cache_file_status::wrong_version);
  EXPECT_NE(nested.problem.find("format version an array"), std::string::npos) << nested.problem;
  const auto long_text = lf::detail::parse_cache_file(R"({"format":"launchfit-plan-cache","version":")" +
                                                      std::string(10000, 'v') + "\"}");
  EXPECT_EQ(long_text.status, cache_file_status::wrong_version);
  EXPECT_LT(long_text.problem.size(), 200u) << "the version's text is cut";
  const auto c = lf::detail::parse_cache_file(
      R"({"format":"launchfit-plan-cache","version":1,"entries":[{"key":{},"plan":{}},{"key":[],"plan":1}]})");
  EXPECT_EQ(c.status, cache_file_status::ok);
  EXPECT_EQ(c.skipped, 2u);
}

TEST(CacheFileFormat, NulBytesMakeAFileCorrupt) {
  // Found by cache-file-fuzz: nlohmann::json stops at a NUL byte, so a line "{...}\0garbage" was taken by
  // the line parser while the whole file was rejected. Crashes can leave zero-filled blocks in a file.
  const std::string good = lf::detail::serialize_cache_file({{key(0), sample_plan(128)}});
  std::string zeroed = good;
  zeroed.insert(zeroed.find("\n]}"), std::string(8, '\0') + "{\"x\":1}");  // at the end of the entry's line
  const auto c = lf::detail::parse_cache_file(zeroed);
  EXPECT_EQ(c.status, lf::detail::cache_file_status::corrupt);
  EXPECT_TRUE(c.entries.empty());
  std::vector<lf::detail::stored_entry> fast;
  EXPECT_FALSE(lf::detail::parse_cache_file_lines(zeroed, {}, fast));
  EXPECT_EQ(lf::detail::parse_cache_file(good + std::string(4, '\0')).status,
            lf::detail::cache_file_status::corrupt);
}

TEST(CacheFileFormat, InvalidUtf8IsWrittenNotThrown) {
  lf::detail::stored_entry e{key(0), sample_plan(128)};
  e.plan.reason = "bad \xff\xfe byte";
  const std::string text = lf::detail::serialize_cache_file({e});
  const auto back = lf::detail::parse_cache_file(text);
  ASSERT_EQ(back.entries.size(), 1u);
  EXPECT_EQ(back.entries[0].key.kernel, e.key.kernel);
}

TEST(PlanJson, RoundTripsEveryFieldButMatch) {
  lf::plan p = sample_plan(256);
  p.match = "cache-file";
  const nlohmann::json j = lf::detail::plan_to_json(p);
  EXPECT_EQ(j["match"], "cache-file");
  EXPECT_EQ(j["occupancy"]["allocated_smem_per_block_bytes"], 5248);
  const lf::plan back = lf::detail::plan_from_json(j);
  expect_same_plan(back, p);
  EXPECT_EQ(back.match, "computed");  // never read: the reader says where a plan came from
  EXPECT_EQ(lf::detail::occupancy_to_json(lf::detail::occupancy_from_json(j["occupancy"])), j["occupancy"]);
}

TEST(PlanJson, RefusesWrongShapesAndOutOfRangeNumbers) {
  const nlohmann::json good = lf::detail::plan_to_json(sample_plan(128));
  auto refused = [&](const char* field, nlohmann::json value, const std::string& says) {
    nlohmann::json j = good;
    j[field] = std::move(value);
    try {
      lf::detail::plan_from_json(j);
      ADD_FAILURE() << field << " accepted";
    } catch (const lf::detail::bad_plan_json& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("block", {2048, 1, 1}, "'block' is out of range");
  refused("block", {64, 64, 1}, "block 64x64 is not a legal block");
  refused("block", {0, 1, 1}, "'block' is out of range");
  refused("block", "256", "'block' is not an array of 3");
  refused("grid", {1, 0, 1}, "'grid' is out of range");
  refused("cluster", {16, 16, 1}, "'cluster'");
  refused("blocks_per_sm", -1, "'blocks_per_sm' is out of range");
  refused("sm_count", 18446744073709551615ull, "'sm_count' is out of range");
  refused("dynamic_smem_bytes", 1e300, "'dynamic_smem_bytes' is not an integer");
  refused("tuning_ms", -1.0, "'tuning_ms' is out of range");
  refused("trials", true, "'trials' is not an integer");
  refused("cooperative", 1, "'cooperative' is not a boolean");
  refused("reason", 42, "'reason' is not a string");
  refused("occupancy", {{"occupancy", 1.5}}, "'occupancy' is out of range");
  refused("occupancy", nlohmann::json::array(), "'occupancy' is not an object");
  EXPECT_THROW(lf::detail::plan_from_json(nlohmann::json::array()), lf::detail::bad_plan_json);
  EXPECT_THROW(lf::detail::plan_from_json(nlohmann::json::object()), lf::detail::bad_plan_json);
}

TEST(PlanJson, SanitizedTextCannotForgeLogLines) {
  // Plan text read from a file goes through the one text module's sanitize_text().
  const auto safe_text = [](std::string_view s, std::size_t max = lf::detail::max_plan_text_bytes) {
    return lf::detail::sanitize_text(s, max);
  };
  EXPECT_EQ(safe_text("plain text, 32 KB/SM"), "plain text, 32 KB/SM");
  EXPECT_EQ(safe_text("a\nb\r\tc\x1b[31m"), "a?b??c?[31m");
  EXPECT_EQ(safe_text("bad \xff\xfe byte"), "bad ?? byte");
  EXPECT_EQ(safe_text("\xc0\xaf overlong, \xed\xa0\x80 surrogate"), "?? overlong, ??? surrogate");
  EXPECT_EQ(safe_text("caf\xc3\xa9 \xe2\x80\xae rtl \xc2\x85 nel"), "caf\xc3\xa9 ? rtl ? nel");
  EXPECT_EQ(safe_text("truncated \xe2\x82"), "truncated ??");
  EXPECT_EQ(safe_text(std::string(10000, 'x')).size(), lf::detail::max_plan_text_bytes);
  EXPECT_EQ(safe_text("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9");  // never half a character
  const std::string once = safe_text("x\n\xff\xe2\x80\xa8y");
  EXPECT_EQ(safe_text(once), once);
}

// A stored_at from the future wins no ranking: two plans for buckets equally near the one looked up are
// ranked newest first, and a stamp beyond the skew (2^53 ms: year 287396) is read as of unknown age.
TEST_F(CacheFile, AStampFromTheFutureDoesNotMakeAPlanTheNewest) {
  const std::uint64_t now =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  lf::detail::stored_entry honest{key(1, 10), sample_plan(128), now - 3600 * 1000};
  lf::detail::stored_entry forged{key(1, 30), sample_plan(512), std::uint64_t(1) << 53};
  write_text(file_, lf::detail::serialize_cache_file({honest, forged}));
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  const auto p = lf::find_stored_plan(key(1, 20), /*exact=*/false);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->block_threads, 128) << "the forged stamp won the ranking";
  EXPECT_EQ(lf::find_stored_plan(key(1, 30))->block_threads, 512)
      << "its plan is still served for its own key";

  // Within the skew a stamp is believed: a writer whose clock runs a minute ahead is still the newest.
  forged.stored_at_ms = now + 60 * 1000;
  write_text(file_, lf::detail::serialize_cache_file({honest, forged}));
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::find_stored_plan(key(1, 20), false)->block_threads, 512);
}

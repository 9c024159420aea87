// SPDX-License-Identifier: MIT
// The plan store (lib/store/chain.hpp, lib/cache_file.hpp): what it serves is an input of every plan. Opening
// or closing a file, storing a calibration, and another process changing an entry this process looked up
// (found or not) or a calibration make a new plan-inputs generation (plan_inputs.hpp), so a plan made from
// what the store served before is never reused; nothing else does, so plans are not made again for nothing.

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache_file.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/log.hpp"
#include "plan_inputs.hpp"
#include "store/chain.hpp"
#include "store/future_stamps.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

const std::string policy_text = "max_occupancy(prefer_block=256,block_limit=0)";

lf::device_limits h200(const std::string& uuid = "GPU-aaaaaaaa-0000-1111-2222-333344445555") {
  lf::device_limits d = lf::device_limits::for_arch("H200");
  d.uuid = uuid;
  d.name = "NVIDIA H200";
  return d;
}

lf::stored_key key(int i) {
  return lf::stored_key_for(h200(), 12080,
                            lf::kernel_resources::manual(32, 0, 1024, "_Z6kernel" + std::to_string(i) + "Pf"),
                            policy_text, "bytes=0", 0);
}

lf::plan plan_of(unsigned block) {
  lf::plan p;
  p.block = lf::dims{block, 1, 1};
  p.block_threads = static_cast<int>(block);
  p.blocks_per_sm = std::min(2048 / static_cast<int>(block), 32);  // an SM of sm_90 holds 32 blocks
  p.sm_count = 132;
  p.policy = policy_text;
  p.reason = "sample";
  return p;
}

ld::stored_entry entry(int i, unsigned block) { return {key(i), plan_of(block), 5000}; }

// Records the generation and says whether it moved since the last call.
class generation_watch {
 public:
  bool moved() {
    const std::uint64_t now = ld::plan_inputs_generation();
    const bool changed = now != last_;
    last_ = now;
    return changed;
  }

 private:
  std::uint64_t last_ = ld::plan_inputs_generation();
};

class PlanStore : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-plan-store-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "plans.json";
    lf::set_logger(std::make_shared<spdlog::logger>("launchfit-test",
                                                    std::make_shared<spdlog::sinks::ostream_sink_mt>(log_)));
  }
  void TearDown() override {
    lf::close_cache_file();
    lf::set_logger(nullptr);
    fs::remove_all(dir_);
  }
  // What another process does to the file: an edit of its entries, under the writers' lock, from a thread
  // that shares nothing with the store but the file.
  void other_process_edits(const std::function<void(std::vector<ld::stored_entry>&)>& edit) {
    std::string why;
    std::thread([&] {
      why = ld::update_cache_file(file_.string(), std::size_t(1) << 24, 5000,
                                  [&](const ld::cache_file_contents& c) {
                                    std::vector<ld::stored_entry> entries = c.entries;
                                    edit(entries);
                                    return std::optional<std::vector<ld::stored_entry>>(std::move(entries));
                                  });
    }).join();
    ASSERT_EQ(why, "");
  }
  static void set_entry(std::vector<ld::stored_entry>& entries, const ld::stored_entry& e) {
    for (auto& old : entries) {
      if (old.key.kernel == e.key.kernel) {
        old = e;
        return;
      }
    }
    entries.push_back(e);
  }

  fs::path dir_, file_;
  std::ostringstream log_;
};

}  // namespace

// A stored_at beyond the allowed skew is read as of unknown age: the file layer counts each one in its stats,
// and the first of the process is said once, naming its file (escaped: a path is untrusted text too).
TEST_F(PlanStore, StampsFromTheFutureAreCountedInTheLayersStatsAndSaidOnce) {
  ld::reset_future_stamp_warning_for_tests();
  const std::uint64_t now_ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  ld::stored_entry ahead = entry(0, 256);
  ahead.stored_at_ms = now_ms + 24ull * 3600 * 1000;  // a day ahead: far beyond max_stored_at_skew_ms
  const fs::path hostile = dir_ / "plans\n[error] forged.json";
  std::ofstream(hostile, std::ios::binary) << ld::serialize_cache_file({ahead, entry(1, 64)});
  ld::plan_store_layer& file = ld::file_layer();
  const std::uint64_t before = file.stats().future_stamps;
  lf::set_cache_file(hostile.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(file.stats().future_stamps, before + 1);
  EXPECT_EQ(lf::stored_plan_count(), 2u);  // kept, only its age is not believed
  const auto said = [&] {
    std::size_t n = 0;
    const std::string text = log_.str();
    for (auto at = text.find("said once per process"); at != std::string::npos;
         at = text.find("said once per process", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(said(), 1u) << log_.str();
  EXPECT_NE(log_.str().find("plan cache file " + (dir_ / "plans\\n[error] forged.json").string() +
                            ": entry 0 (kernel _Z6kernel0Pf): 'stored_at'"),
            std::string::npos)
      << log_.str();
  EXPECT_EQ(log_.str().find("plans\n[error]"), std::string::npos) << "the path is escaped: " << log_.str();

  // Another file's stamp from the future: counted too, not said again.
  std::ofstream(file_, std::ios::binary) << ld::serialize_cache_file({ahead});
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(file.stats().future_stamps, before + 2);
  EXPECT_EQ(said(), 1u) << log_.str();
}

TEST_F(PlanStore, OpeningClosingAndCalibratingChangeThePlanInputs) {
  generation_watch inputs;
  lf::set_cache_file(file_.string());  // a new file, no calibration: its plans may still win from now on
  EXPECT_TRUE(inputs.moved()) << "a file opened";
  lf::store_plan(key(0), plan_of(256));
  EXPECT_FALSE(inputs.moved()) << "this process's own plan";
  ASSERT_TRUE(lf::flush_cache_file());
  EXPECT_FALSE(inputs.moved()) << "this process's own write";
  lf::store_calibration(h200(), 12080, 24 * 1024);
  EXPECT_TRUE(inputs.moved()) << "a calibration stored";
  ASSERT_TRUE(lf::flush_cache_file());
  lf::close_cache_file();
  EXPECT_TRUE(inputs.moved()) << "a file closed";
  lf::close_cache_file();
  EXPECT_FALSE(inputs.moved()) << "no file to close";
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_TRUE(inputs.moved()) << "a file opened frozen";
  lf::store_calibration(h200(), 12080, 32 * 1024);
  EXPECT_FALSE(inputs.moved()) << "nothing is stored in frozen mode";
}

TEST_F(PlanStore, AnotherProcessChangingWhatThisOneLookedUpChangesThePlanInputs) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key(0), plan_of(256));
  ASSERT_TRUE(lf::flush_cache_file());
  ASSERT_TRUE(lf::find_stored_plan(key(0)));   // looked up, found
  ASSERT_FALSE(lf::find_stored_plan(key(1)));  // looked up, not found
  generation_watch inputs;

  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_FALSE(inputs.moved()) << "nothing changed";

  other_process_edits([](auto& entries) { set_entry(entries, entry(7, 128)); });
  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_FALSE(inputs.moved()) << "an entry this process never looked up";
  EXPECT_EQ(lf::stored_plan_count(), 2u) << "yet it is served from now on";

  other_process_edits([](auto&) {});  // rewritten as it was: a new file, the same entries
  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_FALSE(inputs.moved()) << "the same entries in a new file";

  other_process_edits([](auto& entries) { set_entry(entries, entry(0, 128)); });
  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_TRUE(inputs.moved()) << "an entry this process found";
  EXPECT_EQ(lf::find_stored_plan(key(0))->block_threads, 128);

  other_process_edits([](auto& entries) { set_entry(entries, entry(1, 512)); });
  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_TRUE(inputs.moved()) << "an entry this process looked for and did not find";
  EXPECT_EQ(lf::find_stored_plan(key(1))->block_threads, 512);

  other_process_edits([](auto& entries) { set_entry(entries, entry(7, 64)); });
  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_FALSE(inputs.moved()) << "again one this process never looked up";

  lf::device_limits other_gpu = h200("GPU-bbbbbbbb-0000-1111-2222-333344445555");
  other_process_edits([&](auto& entries) {
    ld::stored_entry calibration{
        lf::stored_key_for(other_gpu, 12080, lf::kernel_resources{}, ld::calibration_policy, "", 0),
        lf::plan{}, 6000, 40 * 1024};
    calibration.key.kernel = ld::calibration_kernel;
    calibration.plan.block = lf::dims{1, 1, 1};
    calibration.plan.block_threads = 1;
    entries.push_back(calibration);
  });
  ASSERT_TRUE(ld::refresh_cache_file(5000));
  EXPECT_TRUE(inputs.moved()) << "a calibration (the default target of every bytes_in_flight launch)";
  EXPECT_EQ(lf::find_calibration(h200(), 12080), std::optional<std::size_t>(40 * 1024));

  // This process writing while another one changed what it looked up: the merge finds it.
  other_process_edits([](auto& entries) { set_entry(entries, entry(0, 32)); });
  lf::store_plan(key(2), plan_of(256));
  ASSERT_TRUE(lf::flush_cache_file());
  EXPECT_TRUE(inputs.moved()) << "found by the writer's merge";
  EXPECT_EQ(lf::find_stored_plan(key(0))->block_threads, 32);
  EXPECT_EQ(log_.str().find("[warning]"), std::string::npos) << log_.str();
}

// Without asking: the background thread looks about once a second, and a lookup sooner.
TEST_F(PlanStore, AChangeByAnotherProcessIsSeenWithinASecondOrTwo) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key(0), plan_of(256));
  ASSERT_TRUE(lf::flush_cache_file());
  ASSERT_TRUE(lf::find_stored_plan(key(0)));
  generation_watch inputs;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string why =
        ld::update_cache_file(file_.string(), std::size_t(1) << 24, 5000, [](const auto& c) {
          std::vector<ld::stored_entry> entries = c.entries;
          set_entry(entries, entry(0, 64));
          return std::optional<std::vector<ld::stored_entry>>(std::move(entries));
        });
    ::_exit(why.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto start = std::chrono::steady_clock::now();
  while (!inputs.moved() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    lf::find_stored_plan(key(5));  // a miss, as a launch's: it looks at the file at most every 100 ms
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto waited = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  EXPECT_LT(waited.count(), 3000) << "the change was not seen";
  EXPECT_EQ(lf::find_stored_plan(key(0))->block_threads, 64);
}

// A frozen file is what every rank of a job opened: it is never read again.
TEST_F(PlanStore, AFrozenFileIsNotRefreshed) {
  std::ofstream(file_, std::ios::binary) << ld::serialize_cache_file({entry(0, 256)});
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  ASSERT_TRUE(lf::find_stored_plan(key(0)));
  generation_watch inputs;
  other_process_edits([](auto& entries) { set_entry(entries, entry(0, 128)); });
  EXPECT_FALSE(ld::refresh_cache_file(1000));
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_EQ(lf::find_stored_plan(key(0))->block_threads, 256);
  EXPECT_FALSE(inputs.moved());
}

TEST_F(PlanStore, TheFileLayerFindsThisGpuAndItsModelAndCountsWhatItDid) {
  std::ofstream(file_, std::ios::binary) << ld::serialize_cache_file(
      {entry(0, 256),
       {lf::stored_key_for(h200("GPU-bbbbbbbb-0000-1111-2222-333344445555"), 12080,
                           lf::kernel_resources::manual(32, 0, 1024, "_Z6kernel0Pf"), policy_text, "bytes=0",
                           3),
        plan_of(128), 1},
       entry(1, 64)});
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  ld::plan_store_layer& file = ld::file_layer();
  EXPECT_STREQ(file.name(), "file");
  const ld::layer_stats before = file.stats();
  const std::vector<ld::stored_entry> found = file.find(key(0));
  ASSERT_EQ(found.size(), 2u);  // this GPU's, and another H200's of another bucket; not kernel 1's
  const ld::layer_stats after = file.stats();
  EXPECT_EQ(after.lookups, before.lookups + 1);
  EXPECT_EQ(after.hits, before.hits + 2);
  EXPECT_FALSE(after.dead);
  const auto best = ld::best_stored_plan(found, key(0), /*exact_bucket=*/true, /*model=*/true, "cache-file");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->block_threads, 256);
  EXPECT_EQ(best->match, "cache-file");
}

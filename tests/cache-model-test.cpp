// SPDX-License-Identifier: MIT
// Plans that travel between GPUs of one model (cache.hpp: cache_match; lib/cache_file.hpp: stored_key_for,
// same_device_model, find_stored_plan): a plan tuned on one H200 serves every H200, below the plan of the
// GPU itself, never another model, MIG slice or green-context size, and only when exact matches are not
// required. Devices come from the built-in table with made-up UUIDs.

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "launchfit/log.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"
#include "plan_json.hpp"
#include "planner.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;

namespace {

constexpr const char* uuid_a = "GPU-aaaaaaaa-0000-1111-2222-333344445555";
constexpr const char* uuid_b = "GPU-bbbbbbbb-0000-1111-2222-333344445555";
constexpr const char* uuid_c = "GPU-cccccccc-0000-1111-2222-333344445555";

lf::device_limits h200(const std::string& uuid, const std::string& name = "NVIDIA H200") {
  lf::device_limits d = lf::device_limits::for_arch("H200");
  d.uuid = uuid;
  d.name = name;
  return d;
}

lf::kernel_resources saxpy() { return lf::kernel_resources::manual(32, 0, 1024, "_Z5saxpyfPKfPfi"); }

const std::string policy_text = "max_occupancy()";

lf::stored_key key_on(const lf::device_limits& d, int driver = 12080, std::uint64_t bucket = 0) {
  return lf::stored_key_for(d, driver, saxpy(), policy_text, "bytes=0", bucket);
}

lf::plan plan_of(unsigned block) {
  lf::plan p;
  p.block = lf::dims{block, 1, 1};
  p.block_threads = static_cast<int>(block);
  p.blocks_per_sm = 2048 / static_cast<int>(block);
  p.sm_count = 132;
  p.grid = lf::dims{0, 1, 1};
  p.policy = policy_text;
  p.reason = "tuned in staging";
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

class CacheModel : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-cache-model-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "plans.json";
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    lf::set_logger(std::make_shared<spdlog::logger>("launchfit-test", sink));
    lf::set_cache_match(lf::cache_match::model);
  }
  void TearDown() override {
    lf::close_cache_file();
    lf::set_cache_match(lf::cache_match::model);
    lf::set_logger(nullptr);
    fs::remove_all(dir_);
  }
  // A file as staging would ship it: the plans of one GPU, opened here frozen.
  void ship(const std::vector<ld::stored_entry>& entries,
            lf::cache_file_mode mode = lf::cache_file_mode::frozen) {
    write_text(file_, ld::serialize_cache_file(entries));
    lf::set_cache_file(file_.string(), mode);
  }

  fs::path dir_, file_;
  std::ostringstream log_;
};

}  // namespace

TEST(StoredKeyFor, TakesEveryFieldFromTheDeviceTheKernelAndTheLaunch) {
  lf::device_limits d = h200(uuid_a);
  d.sm_count = 66;  // a green context of half the SMs
  const lf::stored_key k = lf::stored_key_for(d, 12080, saxpy(), "p", "bytes=16", 7);
  EXPECT_EQ(k.device_uuid, uuid_a);
  EXPECT_EQ(k.device_name, "NVIDIA H200");
  EXPECT_EQ(k.cc, 90);
  EXPECT_EQ(k.sm_count, 66);
  EXPECT_EQ(k.l2_bytes, d.l2_bytes);
  EXPECT_EQ(k.driver_version, 12080);
  EXPECT_EQ(k.kernel, lf::kernel_fingerprint(saxpy()));
  EXPECT_EQ(k.policy, "p");
  EXPECT_EQ(k.smem_rule, "bytes=16");
  EXPECT_EQ(k.bucket, 7u);
  // A device name with control characters still makes a key that reads back.
  const lf::stored_key odd = key_on(h200(uuid_a, "NVIDIA\nH200"));
  EXPECT_EQ(odd.device_name, "NVIDIA?H200");
}

TEST(SameDeviceModel, NameCcSmCountL2MigAndDriverMajor) {
  const lf::stored_key a = key_on(h200(uuid_a));
  EXPECT_TRUE(lf::same_device_model(a, key_on(h200(uuid_b))));
  EXPECT_TRUE(lf::same_device_model(a, key_on(h200(uuid_b), 12090)));   // a newer minor driver
  EXPECT_TRUE(lf::same_device_model(a, key_on(h200(uuid_b), 12020)));   // an older minor driver
  EXPECT_FALSE(lf::same_device_model(a, key_on(h200(uuid_b), 13000)));  // another major driver

  lf::device_limits other = h200(uuid_b, "NVIDIA H200 NVL");
  EXPECT_FALSE(lf::same_device_model(a, key_on(other)));
  other = h200(uuid_b);
  other.sm_count = 66;  // green context
  EXPECT_FALSE(lf::same_device_model(a, key_on(other)));
  other = h200(uuid_b);
  other.cc_minor = 1;
  EXPECT_FALSE(lf::same_device_model(a, key_on(other)));
  other = h200(uuid_b);
  other.l2_bytes /= 2;
  EXPECT_FALSE(lf::same_device_model(a, key_on(other)));
  // A MIG slice is never the whole GPU, even with the same name and SM count reported.
  EXPECT_FALSE(lf::same_device_model(a, key_on(h200("MIG-bbbbbbbb-0000-1111-2222-333344445555"))));
  // Two MIG slices of one profile are one model; two profiles are not.
  const lf::stored_key mig =
      key_on(h200("MIG-11111111-0000-1111-2222-333344445555", "NVIDIA H200 MIG 1g.18gb"));
  EXPECT_TRUE(lf::same_device_model(
      mig, key_on(h200("MIG-22222222-0000-1111-2222-333344445555", "NVIDIA H200 MIG 1g.18gb"))));
  EXPECT_FALSE(lf::same_device_model(
      mig, key_on(h200("MIG-22222222-0000-1111-2222-333344445555", "NVIDIA H200 MIG 1g.35gb"))));
  // An entry of an older writer has no model: it serves its own GPU only.
  lf::stored_key old = a;
  old.device_name.clear();
  old.l2_bytes = 0;
  EXPECT_FALSE(lf::same_device_model(old, key_on(h200(uuid_b))));
  EXPECT_FALSE(lf::compatible_driver(0, 0));
}

TEST_F(CacheModel, ThisGpusPlanBeatsTheModelsAndTheModelsServesTheOthers) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key_on(h200(uuid_a)), plan_of(128));
  lf::store_plan(key_on(h200(uuid_b)), plan_of(256));

  auto own = lf::find_stored_plan(key_on(h200(uuid_a)));
  ASSERT_TRUE(own);
  EXPECT_EQ(own->block_threads, 128);
  EXPECT_EQ(own->match, "cache-file");

  auto other = lf::find_stored_plan(key_on(h200(uuid_c)));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->match, "cache-file-same-model");
}

TEST_F(CacheModel, AmongGpusOfTheModelTheNewestEntryThenTheSmallestUuid) {
  ship({{key_on(h200(uuid_b)), plan_of(256), 1000}, {key_on(h200(uuid_a)), plan_of(128), 1000}});
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_c)))->block_threads, 128);
  ship({{key_on(h200(uuid_b)), plan_of(256), 2000}, {key_on(h200(uuid_a)), plan_of(128), 1000}});
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_c)))->block_threads, 256);
}

TEST_F(CacheModel, TheSameDriverFirstThenTheNearest) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key_on(h200(uuid_a), 12020), plan_of(128));
  lf::store_plan(key_on(h200(uuid_b), 12080), plan_of(256));
  lf::store_plan(key_on(h200(uuid_c), 13000), plan_of(512));
  const char* here = "GPU-dddddddd-0000-1111-2222-333344445555";
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(here), 12080))->block_threads, 256);
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(here), 12030))->block_threads, 128);
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(here), 13010))->block_threads, 512);
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(here), 14000)));
  // This GPU with an upgraded driver: not exact any more, still its model.
  auto upgraded = lf::find_stored_plan(key_on(h200(uuid_a), 12090));
  ASSERT_TRUE(upgraded);
  EXPECT_EQ(upgraded->match, "cache-file-same-model");
}

TEST_F(CacheModel, FoundInFrozenModeTheWayStagingShipsIt) {
  const std::string before = [&] {
    ship({{key_on(h200(uuid_b)), plan_of(256), 1}});
    return slurp(file_);
  }();
  auto p = lf::find_stored_plan(key_on(h200(uuid_a)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->match, "cache-file-same-model");
  EXPECT_EQ(p->block_threads, 256);
  lf::store_plan(key_on(h200(uuid_a)), plan_of(512));  // frozen: nothing stored
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_a)))->block_threads, 256);
  lf::close_cache_file();
  EXPECT_EQ(slurp(file_), before);
}

TEST_F(CacheModel, ExactOnlyRefusesTheModelsPlans) {
  ship({{key_on(h200(uuid_b)), plan_of(256), 1}, {key_on(h200(uuid_a), 12080, 4), plan_of(128), 1}});
  lf::set_cache_match(lf::cache_match::exact);
  EXPECT_EQ(lf::cache_file_match(), lf::cache_match::exact);
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_a))));
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_c)), /*exact_bucket=*/false));
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_b)))->match, "cache-file");
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_a), 12080, 6), false)->match, "cache-file-other-bucket");
  lf::set_cache_match(lf::cache_match::model);
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_a)))->match, "cache-file-same-model");
}

TEST_F(CacheModel, OtherBucketsRankBelowTheModelsSameBucket) {
  ship({{key_on(h200(uuid_a), 12080, 4), plan_of(128), 1},
        {key_on(h200(uuid_b), 12080, 5), plan_of(256), 1},
        {key_on(h200(uuid_b), 12080, 9), plan_of(512), 1}});
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_a), 12080, 5))->match, "cache-file-same-model");
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_a), 12080, 8)));
  auto own_bucket = lf::find_stored_plan(key_on(h200(uuid_a), 12080, 8), false);
  EXPECT_EQ(own_bucket->match, "cache-file-other-bucket");
  EXPECT_EQ(own_bucket->block_threads, 128);
  auto model_bucket = lf::find_stored_plan(key_on(h200(uuid_c), 12080, 8), false);
  EXPECT_EQ(model_bucket->match, "cache-file-same-model-other-bucket");
  EXPECT_EQ(model_bucket->block_threads, 512);  // the nearest bucket
}

TEST_F(CacheModel, AnotherSmCountMigSliceCcNameOrKernelNeverMatches) {
  ship({{key_on(h200(uuid_b)), plan_of(256), 1}});
  lf::device_limits d = h200(uuid_a);
  d.sm_count = 66;
  EXPECT_FALSE(lf::find_stored_plan(key_on(d), false));
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200("MIG-aaaaaaaa-0000-1111-2222-333344445555")), false));
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_a, "NVIDIA H200 MIG 7g.141gb")), false));
  d = h200(uuid_a);
  d.cc_minor = 1;
  EXPECT_FALSE(lf::find_stored_plan(key_on(d), false));
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_a, "NVIDIA H100 80GB HBM3")), false));
  lf::stored_key k = key_on(h200(uuid_a));
  k.kernel = lf::kernel_fingerprint(lf::kernel_resources::manual(40, 0, 1024, "_Z5saxpyfPKfPfi"));
  EXPECT_FALSE(lf::find_stored_plan(k, false));
  k = key_on(h200(uuid_a));
  k.policy += " cooperative";
  EXPECT_FALSE(lf::find_stored_plan(k, false));
}

TEST_F(CacheModel, TheModelIsWrittenAndOlderFilesStillLoad) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key_on(h200(uuid_a)), plan_of(128));
  lf::close_cache_file();
  auto doc = nlohmann::json::parse(slurp(file_));
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["entries"][0]["key"]["device_name"], "NVIDIA H200");
  EXPECT_EQ(doc["entries"][0]["key"]["l2_bytes"], h200(uuid_a).l2_bytes);

  // As an older launchfit wrote it: no model in the key. It loads, serves its own GPU, and no other.
  doc["entries"][0]["key"].erase("device_name");
  doc["entries"][0]["key"].erase("l2_bytes");
  write_text(file_, doc.dump());
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::stored_plan_count(), 1u);
  EXPECT_EQ(log_.str().find("[warning]"), std::string::npos) << log_.str();
  EXPECT_EQ(lf::find_stored_plan(key_on(h200(uuid_a)))->match, "cache-file");
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_b)), false));
}

TEST_F(CacheModel, AModelFieldOfTheWrongShapeSkipsItsEntry) {
  lf::set_cache_file(file_.string());
  lf::store_plan(key_on(h200(uuid_b)), plan_of(256));
  lf::close_cache_file();
  auto doc = nlohmann::json::parse(slurp(file_));
  auto entry = doc["entries"][0];
  doc["entries"].clear();
  for (const nlohmann::json& name : {nlohmann::json("NVIDIA H200\n[error] forged"), nlohmann::json(42),
                                     nlohmann::json(std::string(70000, 'H'))}) {
    auto e = entry;
    e["key"]["device_name"] = name;
    doc["entries"].push_back(e);
  }
  auto e = entry;
  e["key"]["l2_bytes"] = -1;
  doc["entries"].push_back(e);
  write_text(file_, doc.dump());
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::stored_plan_count(), 0u);
  EXPECT_NE(log_.str().find("skipped 4 bad entries (entry 0: 'device_name' is too long or holds control "
                            "characters)"),
            std::string::npos)
      << log_.str();
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_a)), false));
}

// A forged entry claiming the model gets no further than a plan found on this GPU: one that launches
// otherwise than its key says (cooperative under a plain key) or whose block is above its key's kernel's
// limit is refused when the file is read, and the planner checks every stored plan it finds against the
// launch (the block this launch makes, smem, cooperative, co-residency).
TEST_F(CacheModel, AHostileEntryClaimingTheModelStillFacesValidation) {
  lf::plan forged = plan_of(1024);
  forged.blocks_per_sm = 2;
  lf::plan forged_coop = plan_of(256);
  forged_coop.options.cooperative = true;
  lf::plan forged_rows = plan_of(256);
  forged_rows.block = lf::dims{32, 8, 1};  // rows of 32 for a launch of 1-D work
  const lf::kernel_resources small = lf::kernel_resources::manual(32, 0, 256, "_Z5saxpyfPKfPfi");
  lf::stored_key k1 = lf::stored_key_for(h200(uuid_b), 12080, small, policy_text, "bytes=0", 0);
  lf::stored_key k2 = lf::stored_key_for(h200(uuid_b), 12080, small, policy_text, "bytes=0", 1);
  lf::stored_key k3 = lf::stored_key_for(h200(uuid_b), 12080, small, policy_text, "bytes=0", 2);
  ship({{k1, forged, 1}, {k2, forged_coop, 1}, {k3, forged_rows, 1}});

  lf::query q;
  q.device = h200(uuid_a);
  q.kernel = small;
  q.kernel.demangled = "saxpy(float, float const*, float*, int)";
  EXPECT_EQ(lf::stored_plan_count(), 1u);
  EXPECT_NE(log_.str().find("entry 0 (kernel _Z5saxpyfPKfPfi): the entry's plan has a block of 1024 threads, "
                            "above the 256 its key's kernel allows"),
            std::string::npos)
      << log_.str();
  EXPECT_NE(
      log_.str().find("entry 1 (kernel _Z5saxpyfPKfPfi): the entry's plan is cooperative, its key is not"),
      std::string::npos)
      << log_.str();
  EXPECT_FALSE(lf::find_stored_plan(lf::stored_key_for(q.device, 12080, small, policy_text, "bytes=0", 0)));
  EXPECT_FALSE(lf::find_stored_plan(lf::stored_key_for(q.device, 12080, small, policy_text, "bytes=0", 1)));
  auto found = lf::find_stored_plan(lf::stored_key_for(q.device, 12080, small, policy_text, "bytes=0", 2));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->match, "cache-file-same-model");
  std::string problem;
  try {
    problem = ld::check_stored_plan(q, *found, ld::launch_requirements{}, nullptr);
  } catch (const lf::error& e) {
    problem = e.message();
  }
  EXPECT_FALSE(problem.empty()) << "a forged plan passed: " << found->to_string();
}

// LAUNCHFIT_CACHE_MATCH is read once per process, at first use: each case runs in a fresh process.
TEST(CacheMatchEnv, ExactFromTheEnvironmentAndATypoMeansExactWithAWarning) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_CACHE_MATCH", "exact", 1);
        std::exit(lf::cache_file_match() == lf::cache_match::exact ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_CACHE_MATCH", "model", 1);
        std::exit(lf::cache_file_match() == lf::cache_match::model ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        unsetenv("LAUNCHFIT_CACHE_MATCH");
        std::exit(lf::cache_file_match() == lf::cache_match::model ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_CACHE_MATCH", "modle\x1b[31m", 1);
        std::ostringstream log;
        auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
        lf::set_logger(std::make_shared<spdlog::logger>("launchfit-test", sink));
        const bool exact = lf::cache_file_match() == lf::cache_match::exact;
        const bool warned = log.str().find(
                                "LAUNCHFIT_CACHE_MATCH='modle\\x1b[31m' is neither exact nor model; "
                                "using exact") != std::string::npos;
        std::exit(exact && warned ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_CACHE_MATCH", "model", 1);
        lf::set_cache_match(lf::cache_match::exact);  // the setter, before first use, wins
        std::exit(lf::cache_file_match() == lf::cache_match::exact ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// ---- calibrations: a measured bytes-in-flight target per device model ------------------------------------

TEST_F(CacheModel, ACalibrationServesEveryGpuOfTheModelAndSurvivesTheFile) {
  lf::set_cache_file(file_.string(), lf::cache_file_mode::read_write);
  EXPECT_FALSE(lf::find_calibration(h200(uuid_a), 12080));
  lf::store_calibration(h200(uuid_a), 12080, 40 * 1024);
  EXPECT_EQ(lf::find_calibration(h200(uuid_a), 12080), std::optional<std::size_t>(40 * 1024));
  EXPECT_EQ(lf::find_calibration(h200(uuid_b), 12090), std::optional<std::size_t>(40 * 1024));  // same model
  lf::device_limits h100 = h200(uuid_c, "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(lf::find_calibration(h100, 12080));  // another model
  lf::device_limits green = h200(uuid_b);
  green.sm_count = 66;
  EXPECT_FALSE(lf::find_calibration(green, 12080));  // a green context of half the SMs is its own model
  ASSERT_TRUE(lf::flush_cache_file());
  // No plan lookup ever sees the calibration entry, and a new process finds it in the file.
  EXPECT_FALSE(lf::find_stored_plan(key_on(h200(uuid_a))));
  lf::close_cache_file();
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::find_calibration(h200(uuid_b), 12080), std::optional<std::size_t>(40 * 1024));
  lf::set_cache_match(lf::cache_match::exact);
  EXPECT_FALSE(lf::find_calibration(h200(uuid_b), 12080));  // exact only: this GPU's own calibration
  EXPECT_EQ(lf::find_calibration(h200(uuid_a), 12080), std::optional<std::size_t>(40 * 1024));
  EXPECT_THROW(lf::store_calibration(h200(uuid_a), 12080, 0), lf::error);
  EXPECT_THROW(lf::store_calibration(h200(uuid_a), 12080, std::size_t(1) << 30), lf::error);
}

// A calibration is used only where the device could have measured it: four warps of 4-byte loads at least,
// at most what one of its SMs holds.
TEST_F(CacheModel, ACalibrationIsUsedOnlyInsideWhatTheDeviceCanHold) {
  lf::set_cache_file(file_.string(), lf::cache_file_mode::read_write);
  EXPECT_THROW(lf::store_calibration(h200(uuid_a), 12080, 1), lf::error);  // 1 B per SM
  EXPECT_THROW(lf::store_calibration(h200(uuid_a), 12080, 511), lf::error);
  EXPECT_THROW(lf::store_calibration(h200(uuid_a), 12080, std::size_t(1) << 20), lf::error);  // > an H200 SM
  lf::store_calibration(h200(uuid_a), 12080, 40 * 1024);
  EXPECT_EQ(lf::find_calibration(h200(uuid_a), 12080), std::optional<std::size_t>(40 * 1024));
  // The same model with smaller SMs (what the driver reports wins over the table): not a measurement here.
  lf::device_limits small = h200(uuid_a);
  small.regs_per_sm = 4096;
  small.smem_per_sm_bytes = 4096;
  EXPECT_FALSE(lf::find_calibration(small, 12080));
  EXPECT_NE(log_.str().find("calibration not used: a target of 40960 B in flight per SM is not in 512..20480 B"),
            std::string::npos)
      << log_.str();

  // 1 B per SM in a file (written by hand or forged) is skipped when the file is read: never used.
  nlohmann::json tiny = nlohmann::json::parse(
      ld::cache_file_line(ld::stored_entry{key_on(h200(uuid_b)), plan_of(256), 1}));
  tiny["key"]["kernel"] = ld::calibration_kernel;
  tiny["key"]["policy"] = ld::calibration_policy;
  tiny["calibration"] = {{"bytes_in_flight_per_sm", 1}};
  const ld::cache_file_contents c = ld::parse_cache_file(
      std::string("{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [") + tiny.dump() + "]}");
  EXPECT_EQ(c.entries.size(), 0u);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("not in 512 B..4 MiB"), std::string::npos) << c.problems[0];
}

TEST_F(CacheModel, ForgedCalibrationsAreSkippedNotTrusted) {
  const std::string good_key = ld::cache_file_line(ld::stored_entry{key_on(h200(uuid_a)), plan_of(256), 1});
  nlohmann::json huge = nlohmann::json::parse(good_key);
  huge["key"]["kernel"] = ld::calibration_kernel;
  huge["key"]["policy"] = ld::calibration_policy;
  huge["calibration"] = {{"bytes_in_flight_per_sm", std::uint64_t(1) << 40}};
  nlohmann::json misplaced = nlohmann::json::parse(good_key);  // a calibration on a kernel's plan
  misplaced["calibration"] = {{"bytes_in_flight_per_sm", 4096}};
  nlohmann::json missing = nlohmann::json::parse(good_key);
  missing["key"]["kernel"] = ld::calibration_kernel;
  const std::string text =
      std::string("{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [") + huge.dump() +
      "," + misplaced.dump() + "," + missing.dump() + "]}";
  const ld::cache_file_contents c = ld::parse_cache_file(text);
  EXPECT_EQ(c.status, ld::cache_file_status::ok);
  EXPECT_EQ(c.entries.size(), 0u);
  EXPECT_EQ(c.skipped, 3u);
  ASSERT_EQ(c.problems.size(), 3u);
  EXPECT_NE(c.problems[0].find("not in 512 B..4 MiB"), std::string::npos) << c.problems[0];
  EXPECT_NE(c.problems[1].find("'calibration' out of place"), std::string::npos) << c.problems[1];
  EXPECT_NE(c.problems[2].find("without 'calibration'"), std::string::npos) << c.problems[2];
}

// No plan key holds bytes_in_flight's default target: storing a calibration, opening or closing a file and
// set_bytes_in_flight_per_sm change the plan inputs (plan_key::inputs), so no plan made under the old target
// is hit again.
TEST_F(CacheModel, ChangingTheDefaultTargetChangesThePlanInputs) {
  std::uint64_t last = ld::plan_inputs_generation();
  const auto changed = [&] {
    const std::uint64_t now = ld::plan_inputs_generation();
    const bool moved = now != last;
    last = now;
    return moved;
  };
  lf::set_cache_file(file_.string(), lf::cache_file_mode::read_write);
  EXPECT_TRUE(changed()) << "a file opened";
  lf::store_calibration(h200(uuid_a), 12080, 24 * 1024);
  EXPECT_TRUE(changed()) << "a calibration stored";
  ASSERT_TRUE(lf::flush_cache_file());
  EXPECT_FALSE(changed()) << "this process writing its own calibration";
  lf::close_cache_file();
  EXPECT_TRUE(changed()) << "a file with a calibration closed";
  lf::set_cache_file(file_.string(), lf::cache_file_mode::frozen);
  EXPECT_TRUE(changed()) << "a file with a calibration opened";
  lf::set_bytes_in_flight_per_sm(90, 40 * 1024);
  EXPECT_TRUE(changed()) << "set_bytes_in_flight_per_sm";
  lf::set_bytes_in_flight_per_sm(90, 32 * 1024);
}

// SPDX-License-Identifier: MIT
// The autotune plugin (plugins/autotune) on the CPU: loading, declining without time_plan, finding the known
// optimum of synthetic cost models within its budgets, ties, failures, size buckets and cache-file round
// trips. time_plan is a fake here; tests/gpu/autotune-test.cu times a real kernel.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <clocale>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache_file.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/plugin.h"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "planner.hpp"
#include "test_query.hpp"

namespace lf = launchfit;

namespace {

std::string plugin_path() {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  return LAUNCHFIT_AUTOTUNE_PLUGIN;
#else
  return std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/autotune-test-clock/liblaunchfit-autotune-test-clock.so";
#endif
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using launchfit_test::h200_query;

const lf::work grid_stride_64m{lf::work::shape::grid_stride, 1ull << 26, 1};
const lf::work items_16m{lf::work::shape::items, 1ull << 24, 1};

// A fake time_plan: a cost model of (block threads, resident blocks per SM), recording every plan it timed. A
// full-grid plan of grid_stride work is recorded with blocks per SM full_grid_bps and timed by full_model,
// by default far slower than any capped plan (as a kernel whose blocks end in global atomics).
constexpr int full_grid_bps = -1;
class fake_timer {
 public:
  using model = std::function<double(int block, int blocks_per_sm)>;
  explicit fake_timer(
      model m, std::function<double(int block)> full_model = [](int) { return 1e3; })
      : model_(std::move(m)), full_model_(std::move(full_model)) {}

  std::function<double(const lf::plan&)> callback() {
    return [this](const lf::plan& p) {
      std::lock_guard<std::mutex> lock(mutex_);
      timed_.emplace_back(p.block_threads, p.full_grid ? full_grid_bps : p.blocks_per_sm);
      sm_count_ = p.sm_count;
      return p.full_grid ? full_model_(p.block_threads) : model_(p.block_threads, p.blocks_per_sm);
    };
  }
  std::vector<std::pair<int, int>> timed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return timed_;
  }
  int calls() const { return static_cast<int>(timed().size()); }
  int sm_count() const { return sm_count_; }

 private:
  model model_;
  std::function<double(int)> full_model_;
  mutable std::mutex mutex_;
  std::vector<std::pair<int, int>> timed_;
  int sm_count_ = 0;
};

// Smooth bowl with its minimum (1 ms) exactly at (best_block, best_bps): resident threads per SM matter most,
// block size a little. Every other plan is at least 2% slower, beyond the 1% floor of the noise rule (plans
// within it are tied and the fixed order decides), so the optimum is unambiguous.
fake_timer::model bowl(int best_block, int best_bps) {
  return [=](int block, int bps) {
    const double x = std::log2(double(block) * bps / (double(best_block) * best_bps));
    return 1.0 + 0.3 * x * x + 0.02 * std::abs(block - best_block) / 32.0;
  };
}


// The search times each plan once; then confirm() re-times the 3 fastest twice each. Returns the search's
// timings (those before the first repeat) and checks the rest: at most 6, each a plan the search timed.
std::vector<std::pair<int, int>> searched(const std::vector<std::pair<int, int>>& timed) {
  std::set<std::pair<int, int>> seen;
  std::size_t end = 0;
  while (end < timed.size() && seen.insert(timed[end]).second) ++end;
  EXPECT_LE(timed.size() - end, 6u) << "more re-timings than confirm() makes";
  std::map<std::pair<int, int>, int> repeats;
  for (std::size_t i = end; i < timed.size(); ++i) {
    EXPECT_TRUE(seen.count(timed[i]))
        << timed[i].first << "x" << timed[i].second << " re-timed, never searched";
    ++repeats[timed[i]];
  }
  EXPECT_LE(repeats.size(), 3u);
  for (const auto& [plan, n] : repeats) EXPECT_LE(n, 2) << plan.first << "x" << plan.second;
  return {timed.begin(), timed.begin() + static_cast<std::ptrdiff_t>(end)};
}

// Timed plans are distinct apart from confirm()'s re-timings.
void expect_distinct(const std::vector<std::pair<int, int>>& timed) { (void)searched(timed); }

// The clock the test build of the plugin measures max_ms by (launchfit_autotune_test_clock): fake trials
// advance it, nothing else does, so the budget's rules are tested without the host's scheduling (a trial that
// sleeps 2.5 ms took 4 under a sanitizer beside other tests, and a rule about short trials saw long ones).
std::atomic<double> virtual_ms{0};
double read_virtual_clock() { return virtual_ms.load(); }
void advance_virtual_clock(double ms) {
  double was = virtual_ms.load();
  while (!virtual_ms.compare_exchange_weak(was, was + ms)) {
  }
}

// Installs the virtual clock in the loaded plugin for its lifetime.
class virtual_clock {
 public:
  virtual_clock() {
    void* handle = dlopen(plugin_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle) {
      set_ = reinterpret_cast<void (*)(double (*)())>(dlsym(handle, "launchfit_autotune_test_clock"));
      dlclose(handle);  // the registry's handle keeps it loaded
    }
    if (set_) set_(&read_virtual_clock);
  }
  ~virtual_clock() {
    if (set_) set_(nullptr);
  }
  virtual_clock(const virtual_clock&) = delete;
  virtual_clock& operator=(const virtual_clock&) = delete;
  bool installed() const { return set_ != nullptr; }

 private:
  void (*set_)(double (*)()) = nullptr;
};

// Every test runs on the virtual clock: it stands still unless a test's fake trials advance it, so max_ms
// binds only where a test makes time pass (a host that stalls 50 ms mid-search changes no test's plan).
class Autotune : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(plugin_path())) {
      GTEST_SKIP() << "no autotune plugin at " << plugin_path()
                   << " (configured with LAUNCHFIT_BUILD_PLUGINS=OFF?)";
    }
    info_ = lf::load_plugin(plugin_path());
    clock_.emplace();
    ASSERT_TRUE(clock_->installed()) << plugin_path() << " is not the test build of the plugin";
  }
  lf::plugin_info info_;
  std::optional<virtual_clock> clock_;
};

// Trials that each take `ms` of the virtual clock (the bowl's timings), for the time budget's tests; full
// grids take as long (and are far slower, fake_timer's default).
fake_timer::model trials_of_ms(double ms) {
  return [ms](int block, int bps) {
    advance_virtual_clock(ms);
    return bowl(384, 3)(block, bps);
  };
}
std::function<double(int)> full_grids_of_ms(double ms) {
  return [ms](int) {
    advance_virtual_clock(ms);
    return 1e3;
  };
}

}  // namespace

TEST_F(Autotune, LoadsAsAPolicyNamedAutotune) {
  EXPECT_EQ(info_.name, "autotune");
  EXPECT_EQ(info_.version, "1.6.0");
  EXPECT_EQ(info_.abi_version, LAUNCHFIT_PLUGIN_ABI_VERSION);
  const auto names = lf::registered_policies();
  EXPECT_NE(std::find(names.begin(), names.end(), "autotune"), names.end());
  EXPECT_EQ(lf::policy_from_string("autotune(max_trials=40)")->to_string(), "autotune(max_trials=40)");
  // Parameters are part of the cache key.
  EXPECT_NE(lf::policy_from_string("autotune(max_trials=40)")->hash(),
            lf::policy_from_string("autotune")->hash());
}

// A budget with a fraction in a program whose locale writes decimals with a comma: std::strtod read "2.5" as
// 2 and refused it, and the policy string cannot hold "2,5". Needs such a locale installed.
TEST_F(Autotune, ReadsItsParametersInTheCLocaleWhateverTheProgramsIs) {
  const std::string before = std::setlocale(LC_NUMERIC, nullptr);
  const char* comma = nullptr;
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8", "nl_NL.UTF-8"})
    if (std::setlocale(LC_NUMERIC, name)) {
      comma = name;
      break;
    }
  if (!comma) GTEST_SKIP() << "no locale with a decimal comma is installed";
  EXPECT_EQ(std::localeconv()->decimal_point[0], ',');
  EXPECT_NO_THROW(lf::policy_from_string("autotune(max_ms=2.5)")) << comma;
  std::setlocale(LC_NUMERIC, before.c_str());
}

TEST_F(Autotune, RejectsBadParametersByName) {
  auto message = [](const char* text) {
    try {
      lf::policy_from_string(text);
    } catch (const lf::error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_TRUE(contains(message("autotune(max_trials=0)"), "max_trials='0' is not an integer in 1..100000"));
  EXPECT_TRUE(contains(message("autotune(max_ms=-1)"), "max_ms='-1' is not a positive number"));
  EXPECT_TRUE(contains(message("autotune(bucket=maybe)"), "bucket='maybe' is not on/off"));
  EXPECT_TRUE(contains(message("autotune(colour=red)"),
                       "unknown parameter 'colour' (known: bucket, max_ms, max_trials, shapes)"));
  EXPECT_NO_THROW(lf::policy_from_string("autotune(bucket=off,max_ms=50.5,max_trials=12)"));
}

TEST_F(Autotune, DeclinesWhenTheLaunchDoesNotAllowRerunning) {
  const lf::query q = h200_query(grid_stride_64m);  // no time_plan: neither .rerunnable() nor .reset(f)
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  const lf::plan max_occ = lf::max_occupancy_policy{}.choose(q);
  EXPECT_EQ(p.match, "fallback");
  EXPECT_TRUE(contains(p.reason, "declined by autotune")) << p.reason;
  EXPECT_EQ(p.block, max_occ.block);
  EXPECT_EQ(p.trials, 0);
}

// The plugin's own words, through the raw C interface: what to change in the launch.
TEST_F(Autotune, DeclineMessageTellsHowToAllowTuning) {
  void* handle = dlopen(plugin_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<launchfit_plugin_entry_fn>(dlsym(handle, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const launchfit_plugin_descriptor* d = entry();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->struct_size, sizeof(launchfit_plugin_descriptor));
  EXPECT_EQ(d->feedback, nullptr);  // decisions rest on trials: reported launch times would decide nothing
  EXPECT_NE(d->work_bucket, nullptr);

  void* state = nullptr;
  char err[512] = "";
  ASSERT_EQ(d->create("", &state, err, sizeof err), LAUNCHFIT_PLUGIN_OK) << err;

  launchfit_device device{};
  device.struct_size = sizeof device;
  device.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
  device.name = "test";
  device.uuid = "";
  device.sm_count = 4;
  device.warp_size = 32;
  device.max_threads_per_block = 1024;
  launchfit_query q{};
  q.struct_size = sizeof q;
  q.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
  q.device = &device;
  q.max_block_threads = 1024;
  q.work_kind = LAUNCHFIT_WORK_GRID_STRIDE;
  q.work_n = 1 << 20;
  q.work_per_thread = 1;
  q.active_blocks = [](void*, int block, size_t) { return 2048 / block; };
  q.time_plan = nullptr;
  launchfit_plan plan{};
  plan.struct_size = sizeof plan;
  plan.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
  EXPECT_EQ(d->choose(state, &q, &plan, err, sizeof err), LAUNCHFIT_PLUGIN_DECLINE);
  EXPECT_TRUE(contains(err, ".rerunnable()")) << err;
  EXPECT_TRUE(contains(err, ".reset(f)")) << err;
  EXPECT_TRUE(contains(plan.reason, ".rerunnable()")) << plan.reason;
  EXPECT_LT(std::strlen(plan.reason), size_t{LAUNCHFIT_PLAN_REASON_SIZE});

  // An older launchfit whose query ends before time_plan: the field must not be read.
  q.time_plan = [](void*, const launchfit_plan*) -> double { std::abort(); };
  q.struct_size = offsetof(launchfit_query, time_plan);
  err[0] = '\0';
  EXPECT_EQ(d->choose(state, &q, &plan, err, sizeof err), LAUNCHFIT_PLUGIN_DECLINE);
  EXPECT_TRUE(contains(err, ".rerunnable()")) << err;

  // With time_plan: a decision through the C interface alone, trials and time reported.
  q.struct_size = sizeof q;
  q.time_plan = [](void*, const launchfit_plan* p) { return 1.0 + std::abs(int(p->block_x) - 256) / 1024.0; };
  err[0] = '\0';
  plan = launchfit_plan{};
  plan.struct_size = sizeof plan;
  plan.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
  plan.dynamic_smem_bytes = LAUNCHFIT_SMEM_FROM_QUERY;
  ASSERT_EQ(d->choose(state, &q, &plan, err, sizeof err), LAUNCHFIT_PLUGIN_OK) << err;
  EXPECT_EQ(plan.block_x, 256u);
  EXPECT_EQ(plan.block_y, 1u);
  EXPECT_EQ(plan.dynamic_smem_bytes, LAUNCHFIT_SMEM_FROM_QUERY);
  EXPECT_EQ(plan.grid_x, 0u);
  EXPECT_GT(plan.trials, 0);
  EXPECT_LE(plan.trials, 64);
  EXPECT_GE(plan.tuning_ms, 0.0);

  // 2-D work whose shape is free (ABI 1.2): wider blocks are timed, and chosen when faster; from an ABI 1.1
  // query, which ends before those fields, never (they must not be read).
  q.work_kind = LAUNCHFIT_WORK_ITEMS;
  q.work_rank = 2;
  q.work_nx = q.work_ny = 4096;
  q.work_nz = 1;
  q.work_n = 4096ull * 4096ull;
  q.block_shape_free = 1;
  q.block_x_step = 32;
  q.time_plan = [](void*, const launchfit_plan* p) {
    return 1.0 + std::abs(int(p->block_x * p->block_y) - 256) / 1024.0 + (p->block_x == 128 ? 0.0 : 0.05);
  };
  plan.block_x = 0;
  ASSERT_EQ(d->choose(state, &q, &plan, err, sizeof err), LAUNCHFIT_PLUGIN_OK) << err;
  EXPECT_EQ(plan.block_x, 128u) << plan.reason;
  EXPECT_EQ(plan.block_y, 2u) << plan.reason;
  q.struct_size = offsetof(launchfit_query, work_rank);
  plan.block_x = 0;
  ASSERT_EQ(d->choose(state, &q, &plan, err, sizeof err), LAUNCHFIT_PLUGIN_OK) << err;
  EXPECT_EQ(plan.block_x, 256u) << plan.reason;
  EXPECT_EQ(plan.block_y, 1u) << plan.reason;

  void* refused = nullptr;  // not `state`: a failed create() clears its output, and `state` must be destroyed
  EXPECT_EQ(d->create("max_trials=abc", &refused, err, sizeof err), LAUNCHFIT_PLUGIN_ERROR);
  EXPECT_EQ(refused, nullptr);
  EXPECT_TRUE(contains(err, "max_trials='abc'")) << err;
  d->destroy(state);
  dlclose(handle);  // launchfit's own handle keeps the plugin loaded
}

TEST_F(Autotune, FindsTheKnownOptimumOfAGridStrideKernelWithinBudget) {
  lf::query q = h200_query(grid_stride_64m);
  ASSERT_EQ(q.active_blocks_for(384),
            5);  // the optimum below lies inside the lattice: 384 threads x 3 blocks
  fake_timer timer(bowl(384, 3));
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=40)")->choose(q);
  EXPECT_EQ(p.match, "computed");
  EXPECT_EQ(p.block_threads, 384) << p.reason;
  EXPECT_EQ(p.blocks_per_sm, 3) << p.reason;
  EXPECT_EQ(p.trials, timer.calls());
  EXPECT_GT(p.trials, 0);
  EXPECT_LE(p.trials, 40);
  EXPECT_GE(p.tuning_ms, 0.0);
  EXPECT_EQ(p.policy, "autotune(max_trials=40)");
  const std::size_t plans = searched(timer.timed()).size();
  EXPECT_TRUE(contains(p.reason, "fastest of " + std::to_string(plans) + " timed plans (1 ms), 2nd "))
      << p.reason;
  EXPECT_TRUE(contains(p.reason, "3 fastest confirmed by re-timing (median)")) << p.reason;
  EXPECT_EQ(static_cast<std::size_t>(p.trials), plans + 6);
  expect_distinct(timer.timed());
  EXPECT_EQ(timer.sm_count(), q.device.sm_count);
  // Always among the candidates: the max-occupancy block and 128/256/512 at full residency.
  const auto timed = timer.timed();
  for (const auto& [block, bps] : {std::pair{1024, 2}, {128, 16}, {256, 8}, {512, 4}}) {
    EXPECT_NE(std::find(timed.begin(), timed.end(), std::pair{block, bps}), timed.end())
        << block << "x" << bps;
  }
  std::printf("grid-stride bowl at 384x3: %d trials, reason: %s\n", p.trials, p.reason.c_str());
}

TEST_F(Autotune, FindsTheKnownOptimumOfAWholeWaveKernel) {
  lf::query q = h200_query(lf::work{});  // no work given: one wave of blocks_per_sm x SMs
  fake_timer timer(bowl(160, 12));
  q.time_plan = timer.callback();
  ASSERT_EQ(q.active_blocks_for(160), 12);
  const lf::plan p = lf::policy_from_string("autotune(max_trials=40)")->choose(q);
  EXPECT_EQ(p.block_threads, 160) << p.reason;
  EXPECT_EQ(p.blocks_per_sm, 12) << p.reason;
  EXPECT_LE(p.trials, 40);
  expect_distinct(timer.timed());
}

// The shape of a copy of 2^26 floats on an H200: a plateau from 48 to 64 resident warps per SM, a dip 4%
// below it at 40-46 warps, slower again below. Full, 3/4 and 1/2 residency (64, 48, 32 warps) all miss the
// dip, and refinement from the plateau's plans never leaves it: the coarse pass must land inside the dip
// itself.
TEST_F(Autotune, FindsADipBelowAPlateauOfFullOccupancy) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer timer([](int block, int bps) {
    const int warps = block / 32 * bps;
    if (warps >= 48) return 1.04;
    if (warps >= 36) return 1.0 + 0.002 * std::abs(warps - 42);
    return 1.05 + 0.01 * (36 - warps);
  });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  const int warps = static_cast<int>(p.block_threads) / 32 * p.blocks_per_sm;
  EXPECT_GE(warps, 40) << p.block_threads << "x" << p.blocks_per_sm << ": " << p.reason;
  EXPECT_LE(warps, 44) << p.block_threads << "x" << p.blocks_per_sm << ": " << p.reason;
  EXPECT_LE(p.trials, 64);
  expect_distinct(timer.timed());
}

// A histogram of 2^20 values on an H200 (each block ends in 256 contended atomics), as the benchmark's sweep
// timed it: one block per SM wins, 768 threads best, 1024 2% behind, the sizes just below 1024 no better than
// 1024 and those below 544 much worse. Steps of one or two warps from 1024 x 1 stall on that shelf;
// refinement needs longer steps too. 800 threads ran 0.8% behind 768: within the noise rule's 1% floor, a
// tie, which the fixed order gives to 800 (more resident warps).
TEST_F(Autotune, LongerStepsLeaveAShelfOfBlockSizes) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer timer([](int block, int bps) {
    static const std::map<int, double> one_per_sm_us = {
        {512, 3.87}, {544, 3.67}, {576, 3.67}, {608, 3.71}, {640, 3.77}, {672, 3.65},
        {704, 3.65}, {736, 3.64}, {768, 3.58}, {800, 3.61}, {832, 3.65}, {864, 3.76},
        {896, 3.68}, {928, 3.68}, {960, 3.66}, {992, 3.67}, {1024, 3.66}};
    const auto it = one_per_sm_us.find(block);
    const double one = it != one_per_sm_us.end() ? it->second : 3.9 + (512 - std::min(block, 512)) / 64.0;
    return one * (bps == 1 ? 1.0 : 1.2 + 0.1 * bps);
  });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  EXPECT_EQ(p.blocks_per_sm, 1) << p.reason;
  const auto timed = timer.timed();
  EXPECT_NE(std::find(timed.begin(), timed.end(), std::pair{768, 1}), timed.end())
      << "the shelf was not left";
  EXPECT_EQ(p.block_threads, 800) << p.reason;
  EXPECT_TRUE(contains(p.reason, "tie of 2 within 1% (1% floor)")) << p.reason;
  EXPECT_LE(p.trials, 64);
  expect_distinct(timer.timed());
}

TEST_F(Autotune, ItemsWorkTunesTheBlockOnly) {
  lf::query q = h200_query(items_16m);
  fake_timer timer([](int block, int) { return 1.0 + std::abs(block - 640) / 1024.0; });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=40)")->choose(q);
  EXPECT_EQ(p.block_threads, 640) << p.reason;
  EXPECT_EQ(p.blocks_per_sm, q.active_blocks_for(640));  // as many as fit
  EXPECT_LE(p.trials, 40);
  expect_distinct(timer.timed());
  std::set<int> blocks;
  const auto plans = searched(timer.timed());
  for (const auto& [block, bps] : plans) {
    blocks.insert(block);
    EXPECT_EQ(bps, q.active_blocks_for(block)) << "items plans leave blocks per SM to what fits";
  }
  EXPECT_EQ(blocks.size(), plans.size());
}

// With grid_stride(n) and a small n, plans past the point where min(blocks needed, blocks/SM x SMs) stops
// growing launch the same grid: only one of them is timed.
TEST_F(Autotune, NeverTimesTwoPlansThatLaunchTheSameGrid) {
  const int sms = lf::device_limits::for_arch("H200").sm_count;
  lf::query q = h200_query(lf::work{lf::work::shape::grid_stride, std::uint64_t(sms) * 256 * 2, 1});
  fake_timer timer([](int block, int bps) { return 1.0 + 1.0 / (block * bps); });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=200,max_ms=10000)")->choose(q);
  std::set<std::pair<int, long long>> launched;
  for (const auto& [block, bps] : searched(timer.timed())) {
    const auto needed = static_cast<long long>((q.work_hint.n + block - 1) / block);
    const long long grid = std::min<long long>(needed, 1LL * bps * sms);
    EXPECT_TRUE(launched.emplace(block, grid).second) << block << " threads, grid " << grid << " timed twice";
  }
  EXPECT_EQ(p.trials, timer.calls());
}

TEST_F(Autotune, StopsAtMaxTrials) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer timer(bowl(384, 3));
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=5)")->choose(q);
  EXPECT_EQ(timer.calls(), 5);
  EXPECT_EQ(p.trials, 5);
  EXPECT_TRUE(contains(p.reason, "stopped at max_trials=5")) << p.reason;
  // The first trial is the max-occupancy plan: a tiny budget still gets the safest candidate.
  EXPECT_EQ(timer.timed().front(), (std::pair{1024, 2}));
}

// The installed plugin has no clock to replace: the hook these tests use is compiled into the test build only
// (and tests/lint/plugin-exports.cmake checks that the installed one exports its entry point alone).
TEST_F(Autotune, TheInstalledPluginHasNoClockToReplace) {
#ifndef LAUNCHFIT_AUTOTUNE_INSTALLED_PLUGIN
  GTEST_SKIP() << "built without the installed plugin's path";
#else
  void* handle = dlopen(LAUNCHFIT_AUTOTUNE_INSTALLED_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  EXPECT_NE(dlsym(handle, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL), nullptr);
  EXPECT_EQ(dlsym(handle, "launchfit_autotune_test_clock"), nullptr);
  dlclose(handle);
  EXPECT_TRUE(clock_->installed()) << plugin_path() << " is not the test build";
#endif
}

// No trial starts unless one a quarter longer than the longest so far still ends within max_ms. Trials of
// 5 ms: under max_ms=12, started at 0 and 5 ms (a third, at 10 ms, would end past 12); under max_ms=16 also two
// (a third, at 10 ms, could end past 16 were it a quarter longer), where the longest alone would start it.
TEST_F(Autotune, StopsStartingTrialsOnceMaxMsIsSpent) {
  for (const int max_ms : {12, 16}) {
    lf::query q = h200_query(grid_stride_64m);
    fake_timer timer(trials_of_ms(5), full_grids_of_ms(5));
    q.time_plan = timer.callback();
    const std::string budget = "max_ms=" + std::to_string(max_ms);
    const lf::plan p = lf::policy_from_string("autotune(" + budget + ")")->choose(q);
    EXPECT_EQ(timer.calls(), 2) << budget;
    EXPECT_EQ(p.trials, timer.calls()) << budget;
    EXPECT_DOUBLE_EQ(p.tuning_ms, 10.0) << budget;
    EXPECT_TRUE(contains(p.reason, "stopped at " + budget)) << p.reason;
  }
}

// launchfit's one-off setup inside the first trial (its tuning lease, the GPU's conditions; query::setup_ms)
// is not the policy's budget: a first trial that spent 40 ms on it, then trials of 1 ms, leaves
// autotune(max_ms=50) its search. Counted as a trial of 41 ms it stopped the search after that trial
// (time_left(): 41 + 1.25 x 41 > 50).
TEST_F(Autotune, LaunchfitsSetupInTheFirstTrialIsNotTheBudgets) {
  lf::query q = h200_query(grid_stride_64m);
  double setup = 0;
  int calls = 0;
  q.time_plan = [&](const lf::plan& p) {
    if (calls++ == 0) {
      advance_virtual_clock(40);
      setup = 40;
    }
    advance_virtual_clock(1);
    return bowl(384, 3)(p.block_threads, p.blocks_per_sm);
  };
  q.setup_ms = [&] { return setup; };
  const double start = read_virtual_clock();
  const lf::plan p = lf::policy_from_string("autotune(max_ms=50)")->choose(q);
  const double took = read_virtual_clock() - start;
  EXPECT_GE(calls, 10) << p.reason;
  EXPECT_TRUE(contains(p.reason, "launchfit's setup 40 ms not counted")) << p.reason;
  EXPECT_DOUBLE_EQ(p.tuning_ms, took - 40.0) << "the plan's tuning time is its trials' (" << p.reason << ")";
  EXPECT_LE(p.tuning_ms, 50.0) << p.reason;
  // The same query asked again (launchfit asks a policy twice where the driver disagrees with the calculator):
  // the setup it already reported is not subtracted again, so the second search keeps to max_ms.
  calls = 1;  // no new setup
  const lf::plan again = lf::policy_from_string("autotune(max_ms=50)")->choose(q);
  EXPECT_FALSE(contains(again.reason, "launchfit's setup")) << again.reason;
  EXPECT_LE(again.tuning_ms, 50.0) << again.reason;
  // Without setup_ms (an older launchfit) the same first trial counts whole: 41 + 1.25 x 41 > 50.
  lf::query old = q;
  calls = 0;
  setup = 0;
  old.setup_ms = nullptr;
  const lf::plan q_old = lf::policy_from_string("autotune(max_ms=50)")->choose(old);
  EXPECT_EQ(calls, 1) << q_old.reason;
}

// Short trials leave room for confirmation within max_ms: the search keeps its time back (at most a quarter of
// max_ms), so the fastest plans are re-timed instead of chosen by one timing each. Trials of 5 ms would need
// 30 ms of 60 for it: they keep nothing back, and the search uses the whole budget.
TEST_F(Autotune, ShortTrialsKeepTimeForConfirmationLongOnesDoNot) {
  // Near-equal plans (within 3%, in no order): the search finds a new fastest plan to walk from as long as it
  // has time, as on a GPU where many plans tie.
  const auto trials_of = [](double ms) {
    return [ms](int block, int bps) {
      advance_virtual_clock(ms);
      const unsigned h = static_cast<unsigned>(block) * 2654435761u ^ static_cast<unsigned>(bps) * 40503u;
      return 1.0 + 0.03 * static_cast<double>(h % 1000) / 1000.0;
    };
  };
  lf::query q = h200_query(grid_stride_64m);
  // 2.5 ms a trial: confirmation needs 15 of 80 ms (at most 20 kept back), and the search would take about
  // 100 ms (41 plans) to end by itself.
  fake_timer fast(trials_of(2.5), full_grids_of_ms(2.5));
  q.time_plan = fast.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_ms=80,max_trials=500)")->choose(q);
  EXPECT_TRUE(contains(p.reason, "3 fastest confirmed by re-timing")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "stopped at max_ms=80")) << p.reason << " (" << fast.calls() << " timings)";
  EXPECT_LE(p.tuning_ms, 80.0) << p.reason;
  (void)searched(fast.timed());  // the re-timings are confirm()'s: 6 at most, of searched plans

  lf::query slow_q = h200_query(grid_stride_64m);
  fake_timer slow(trials_of(5), full_grids_of_ms(5));
  slow_q.time_plan = slow.callback();
  const lf::plan s = lf::policy_from_string("autotune(max_ms=60,max_trials=500)")->choose(slow_q);
  EXPECT_FALSE(contains(s.reason, "confirmed")) << s.reason;
  EXPECT_EQ(slow.calls(), 11) << s.reason;  // started at 0, 5, ..., 50 ms: 50 + 1.25 x 5 <= 60 < 55 + 1.25 x 5
  EXPECT_LE(s.tuning_ms, 60.0) << s.reason;
}

TEST_F(Autotune, TiesWithinTheNoiseBandGoToTheFixedOrder) {
  const int full_warps = lf::device_limits::for_arch("H200").max_warps_per_sm;
  {
    lf::query q = h200_query(grid_stride_64m);
    fake_timer timer([](int, int) { return 0.5; });
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.occupancy.active_warps_per_sm, full_warps) << p.to_string();
    EXPECT_EQ(p.blocks_per_sm * p.block_threads / 32, full_warps) << p.to_string();
  }
  for (const double faster : {0.999, 0.995}) {
    // 256 x 1 (8 warps) is 0.1% or 0.5% faster than everything else: within the 1% floor of the noise rule,
    // not a reason to give up occupancy.
    lf::query q = h200_query(grid_stride_64m);
    fake_timer timer([faster](int block, int bps) { return block == 256 && bps == 1 ? faster : 1.0; });
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    const auto timed = timer.timed();
    ASSERT_NE(std::find(timed.begin(), timed.end(), std::pair{256, 1}), timed.end());
    EXPECT_EQ(p.blocks_per_sm * p.block_threads / 32, full_warps) << p.to_string();
    EXPECT_TRUE(contains(p.reason, "within 1% (1% floor) broken by fixed order: most warps/SM")) << p.reason;
  }
  {
    // 3% faster is a real difference.
    lf::query q = h200_query(grid_stride_64m);
    fake_timer timer([](int block, int bps) { return block == 256 && bps == 1 ? 0.97 : 1.0; });
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block_threads, 256);
    EXPECT_EQ(p.blocks_per_sm, 1);
    EXPECT_TRUE(contains(p.reason, "fastest of")) << p.reason;
    EXPECT_TRUE(contains(p.reason, "(beyond 1% noise)")) << p.reason;
  }
}

// Two tunings of one kernel whose noise ranks three near-equal plans in different orders pick the same plan:
// the fixed order decides within the band, never which plan the noise put first. Each permutation is one
// tuning; the plans' second and third timings keep the order of the first.
TEST_F(Autotune, NearTiesInAnyOrderPickTheSamePlan) {
  const std::vector<std::pair<int, int>> near = {{256, 8}, {128, 16}, {512, 4}};
  std::vector<int> order = {0, 1, 2};
  std::set<std::pair<int, int>> chosen;
  int tunings = 0;
  do {
    lf::query q = h200_query(grid_stride_64m);
    q.time_plan = [&](const lf::plan& p) {
      const std::pair<int, int> key{p.block_threads, p.full_grid ? full_grid_bps : p.blocks_per_sm};
      for (std::size_t k = 0; k < near.size(); ++k)
        if (near[static_cast<std::size_t>(order[k])] == key) return 1.0 + 0.004 * static_cast<double>(k);
      return 1.2;
    };
    const lf::plan p = lf::policy_from_string("autotune(max_trials=64,max_ms=10000)")->choose(q);
    chosen.insert({p.block_threads, p.blocks_per_sm});
    EXPECT_TRUE(contains(p.reason, "tie of 3 within 1% (1% floor) broken by fixed order")) << p.reason;
    ++tunings;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(tunings, 6);
  // All three have 64 resident warps per SM: the fewest threads per block decides.
  EXPECT_EQ(chosen, (std::set<std::pair<int, int>>{{128, 16}})) << chosen.size() << " different plans";
}

// Items work (the block alone): the axpy whose tunings came out 64, 1,024 and 256 threads.
TEST_F(Autotune, NearTiesOfItemsWorkPickTheSameBlock) {
  const std::vector<int> near = {64, 1024, 256};
  std::vector<int> order = {0, 1, 2};
  std::set<int> chosen;
  do {
    lf::query q = h200_query(items_16m);
    q.time_plan = [&](const lf::plan& p) {
      for (std::size_t k = 0; k < near.size(); ++k)
        if (near[static_cast<std::size_t>(order[k])] == p.block_threads)
          return 0.225 + 0.0009 * static_cast<double>(k);
      return 0.3;
    };
    const lf::plan p = lf::policy_from_string("autotune(max_trials=64,max_ms=10000)")->choose(q);
    chosen.insert(p.block_threads);
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(chosen.size(), 1u) << "tunings disagree";
}

// The band is the re-timing rounds' spread when that is above 1%, at most 1.5%. Each plan is timed at its base,
// then +jitter and +jitter/2 (its search timing and confirmation's two): medians base + jitter/2, spread jitter /
// median. 256x1 (8 resident warps per SM) against 256x8 (64), which the fixed order prefers in a tie.
struct band_case {
  double jitter;     // the spread of every plan's three timings
  double best_base;  // 256x1's base; 256x8's is 1.0
  std::pair<int, int> chosen;
  const char* reason;
};
TEST_F(Autotune, TheNoiseBandIsTheRetimingSpreadAtMostOneAndAHalfPercent) {
  const band_case cases[] = {
      // Medians 1.0 apart by 1.0%: beyond the 1% floor, within the 1.2% spread: a tie, the order's plan.
      {0.012, 0.99, {256, 8}, "tie of 2 within 1.2% (re-timing spread) broken by fixed order"},
      // Spread 4%: 1% apart ties within the cap.
      {0.04, 0.99, {256, 8}, "tie of 2 within 1.5% (re-timing spread 4%, capped) broken by fixed order"},
      // 2% apart: within the spread, beyond the cap: the fastest wins (a 4% band gave it to the order).
      {0.04, 0.98, {256, 1}, "(beyond 1.5% noise)"},
      // 10% faster wins whatever the spread.
      {0.04, 0.90, {256, 1}, "(beyond 1.5% noise)"},
  };
  for (const band_case& c : cases) {
    lf::query q = h200_query(grid_stride_64m);
    std::map<std::pair<int, int>, int> calls;
    std::mutex m;
    q.time_plan = [&](const lf::plan& p) {
      std::lock_guard<std::mutex> lock(m);
      const std::pair<int, int> key{p.block_threads, p.full_grid ? full_grid_bps : p.blocks_per_sm};
      const double jitter =
          std::array<double, 3>{0.0, c.jitter, c.jitter / 2}[static_cast<std::size_t>(calls[key]++ % 3)];
      if (key == std::pair{256, 1}) return c.best_base + jitter;
      if (key == std::pair{256, 8}) return 1.0 + jitter;
      return 1.3;
    };
    const lf::plan p = lf::policy_from_string("autotune(max_trials=64,max_ms=10000)")->choose(q);
    EXPECT_EQ(std::pair(p.block_threads, p.blocks_per_sm), c.chosen) << p.reason;
    EXPECT_TRUE(contains(p.reason, c.reason)) << "expected \"" << c.reason << "\" in: " << p.reason;
    EXPECT_EQ(calls[(std::pair{256, 1})], 3) << p.reason;  // both confirmed
    EXPECT_EQ(calls[(std::pair{256, 8})], 3) << p.reason;
  }
}

// Confirmation: the 3 fastest plans are re-timed and only they compete, so a 4th plan's single timing cannot
// beat their medians. Here the first timings of 256x8, 128x16 and 512x4 were lucky (1.00-1.02, then 1.03),
// and 64x32 times 1.025 every time.
TEST_F(Autotune, OnlyConfirmedPlansCompete) {
  lf::query q = h200_query(grid_stride_64m);
  std::map<std::pair<int, int>, int> calls;
  std::mutex m;
  q.time_plan = [&](const lf::plan& p) {
    std::lock_guard<std::mutex> lock(m);
    const std::pair<int, int> key{p.block_threads, p.full_grid ? full_grid_bps : p.blocks_per_sm};
    const int n = calls[key]++;
    if (key == std::pair{256, 8}) return n == 0 ? 1.00 : 1.03;
    if (key == std::pair{128, 16}) return n == 0 ? 1.01 : 1.03;
    if (key == std::pair{512, 4}) return n == 0 ? 1.02 : 1.03;
    if (key == std::pair{64, 32}) return 1.025;
    return 1.1;
  };
  const lf::plan p = lf::policy_from_string("autotune(max_trials=64,max_ms=10000)")->choose(q);
  EXPECT_NE(std::pair(p.block_threads, p.blocks_per_sm), (std::pair{64, 32})) << p.reason;
  EXPECT_EQ(calls[(std::pair{256, 8})], 3);
  EXPECT_EQ(calls[(std::pair{128, 16})], 3);
  EXPECT_EQ(calls[(std::pair{512, 4})], 3);
  EXPECT_EQ(calls[(std::pair{64, 32})], 1);
  EXPECT_TRUE(contains(p.reason, "3 fastest confirmed by re-timing (median)")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "(1.03 ms)")) << p.reason;
}

TEST_F(Autotune, SkipsPlansThatCannotRun) {
  lf::query q = h200_query(grid_stride_64m);
  std::atomic<int> failures{0};
  fake_timer timer([&](int block, int bps) -> double {
    if (block > 256) {
      ++failures;
      throw std::runtime_error("too many resources requested");  // the bridge turns this into -1
    }
    return bowl(384, 3)(block, bps);
  });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=40)")->choose(q);
  EXPECT_EQ(p.match, "computed");
  EXPECT_LE(p.block_threads, 256);
  EXPECT_GT(failures.load(), 0);
  EXPECT_TRUE(contains(p.reason, std::to_string(failures.load()) + " could not run")) << p.reason;

  // Nothing runs: the plugin declines and the fallback decides.
  lf::query none = h200_query(grid_stride_64m);
  none.time_plan = [](const lf::plan&) -> double { return -1; };
  const lf::plan fallback = lf::policy_from_string("autotune(max_trials=6)")->choose(none);
  EXPECT_EQ(fallback.match, "fallback");
  EXPECT_TRUE(contains(fallback.reason, "declined by autotune")) << fallback.reason;
}

TEST_F(Autotune, HonoursLaunchBoundsAndTheSmemRule) {
  lf::query q = h200_query(grid_stride_64m);
  q.kernel.max_threads_per_block = 256;  // __launch_bounds__(256)
  q.smem_per_block = [](int block) { return std::size_t(block) * 96; };
  std::vector<std::pair<int, std::size_t>> seen;
  std::mutex m;
  q.time_plan = [&](const lf::plan& p) {
    std::lock_guard<std::mutex> lock(m);
    seen.emplace_back(p.block_threads, p.dynamic_smem_bytes);
    return bowl(128, 4)(p.block_threads, p.blocks_per_sm);
  };
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  ASSERT_FALSE(seen.empty());
  for (const auto& [block, smem] : seen) {
    EXPECT_LE(block, 256);
    EXPECT_EQ(smem, std::size_t(block) * 96);
    EXPECT_GT(q.active_blocks_for(block), 0);
  }
  EXPECT_LE(p.block_threads, 256);
  EXPECT_EQ(p.dynamic_smem_bytes, std::size_t(p.block_threads) * 96);
}

TEST_F(Autotune, ConcurrentChoicesAgree) {
  auto policy = lf::policy_from_string("autotune(max_trials=40)");
  std::vector<lf::plan> plans(8);
  std::vector<std::thread> threads;
  threads.reserve(plans.size());
  for (std::size_t i = 0; i < plans.size(); ++i) {
    threads.emplace_back([&, i] {
      lf::query q = h200_query(grid_stride_64m);
      q.time_plan = [](const lf::plan& p) { return bowl(384, 3)(p.block_threads, p.blocks_per_sm); };
      plans[i] = policy->choose(q);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& p : plans) {
    EXPECT_EQ(p.block_threads, 384);
    EXPECT_EQ(p.blocks_per_sm, 3);
    EXPECT_EQ(p.trials, plans.front().trials);
  }
}

TEST_F(Autotune, SizeBucketsAreLog2OfN) {
  const auto policy = lf::policy_from_string("autotune");
  using shape = lf::work::shape;
  EXPECT_EQ(policy->work_bucket({shape::items, 1, 1}), 1u);
  EXPECT_EQ(policy->work_bucket({shape::items, 1000, 1}), 10u);
  EXPECT_EQ(policy->work_bucket({shape::items, 1023, 1}), 10u);
  EXPECT_EQ(policy->work_bucket({shape::items, 1024, 1}), 11u);
  EXPECT_EQ(policy->work_bucket({shape::grid_stride, 1ull << 26, 4}), 27u);
  EXPECT_EQ(policy->work_bucket({shape::grid_stride, ~0ull, 1}), 64u);
  EXPECT_EQ(policy->work_bucket({shape::items, 0, 1}), 0u);     // nothing to do
  EXPECT_EQ(policy->work_bucket({shape::none, 12345, 1}), 0u);  // n is irrelevant
  // bucket=off: one plan for every size.
  const auto one = lf::policy_from_string("autotune(bucket=off)");
  EXPECT_EQ(one->work_bucket({shape::items, 1000, 1}), 0u);
  EXPECT_EQ(one->work_bucket({shape::grid_stride, 1ull << 26, 1}), 0u);
}

TEST_F(Autotune, TunedPlanSurvivesTheCacheFile) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer timer(bowl(384, 3));
  q.time_plan = timer.callback();
  const auto policy = lf::policy_from_string("autotune(max_trials=40)");
  const lf::plan tuned = policy->choose(q);

  const std::string file = (std::filesystem::temp_directory_path() /
                            ("launchfit-autotune-test-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(file);
  lf::stored_key key{"GPU-autotune-test",
                     90,
                     q.device.sm_count,
                     13000,
                     lf::kernel_fingerprint(q.kernel),
                     policy->to_string(),
                     "bytes=0",
                     policy->work_bucket(q.work_hint)};
  lf::set_cache_file(file);
  lf::store_plan(key, tuned);
  lf::close_cache_file();

  lf::set_cache_file(file);  // as a later process would find it
  const auto stored = lf::find_stored_plan(key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->match, "cache-file");
  EXPECT_EQ(stored->block, tuned.block);
  EXPECT_EQ(stored->blocks_per_sm, tuned.blocks_per_sm);
  EXPECT_EQ(stored->trials, tuned.trials);
  EXPECT_DOUBLE_EQ(stored->tuning_ms, tuned.tuning_ms);
  EXPECT_EQ(stored->reason, tuned.reason);
  // Another size bucket is another plan.
  lf::stored_key other = key;
  other.bucket = policy->work_bucket({lf::work::shape::grid_stride, 1ull << 20, 1});
  EXPECT_NE(other.bucket, key.bucket);
  EXPECT_FALSE(lf::find_stored_plan(other).has_value());
  const auto near = lf::find_stored_plan(other, /*exact=*/false);
  ASSERT_TRUE(near.has_value());
  EXPECT_EQ(near->match, "cache-file-other-bucket");
  lf::close_cache_file();
  std::filesystem::remove(file);
}

// autotune takes no feedback: reports from any thread reach no plugin state and change no later choice.
TEST_F(Autotune, FeedbackChangesNothing) {
  lf::query q = h200_query(grid_stride_64m);
  q.time_plan = [](const lf::plan& p) {
    return p.full_grid ? 1e3 : bowl(384, 3)(p.block_threads, p.blocks_per_sm);
  };
  const auto policy = lf::policy_from_string("autotune");
  const lf::plan p = policy->choose(q);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) lf::plugin_feedback(*policy, p, 1e-3);  // "faster" than anything timed
    });
  for (auto& t : threads) t.join();
  const lf::plan again = policy->choose(q);
  EXPECT_EQ(again.block, p.block);
  EXPECT_EQ(again.blocks_per_sm, p.blocks_per_sm);
  EXPECT_EQ(again.reason.find("in use"), std::string::npos) << again.reason;
}

// grid_stride work: the full grid is a candidate of its own, chosen when it times fastest (wide elements)
// and never otherwise (a block ending in atomics); static policies never launch it.
TEST_F(Autotune, TimesTheFullGridAndKeepsItOnlyWhenFastest) {
  lf::query q = h200_query(grid_stride_64m);
  {
    fake_timer wide(bowl(256, 8), [](int block) { return 0.9 + 0.001 * std::abs(block - 256) / 32.0; });
    q.time_plan = wide.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_TRUE(p.full_grid) << p.to_string() << ": " << p.reason;
    EXPECT_EQ(p.block_threads, 256) << p.reason;
    EXPECT_NE(p.reason.find("the full grid"), std::string::npos) << p.reason;
    EXPECT_EQ(lf::grid_for(p, grid_stride_64m).x, (1u << 26) / 256u);
    int full = 0;
    for (const auto& t : wide.timed()) full += t.second == full_grid_bps;
    EXPECT_GE(full, 3) << "the coarse pass times full grids at three sizes, refinement walks them";
  }
  {
    fake_timer epilogue(bowl(384, 3));  // full grids 1000x slower
    q.time_plan = epilogue.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_FALSE(p.full_grid) << p.reason;
    EXPECT_EQ(p.block_threads, 384) << p.reason;
    EXPECT_EQ(lf::grid_for(p, grid_stride_64m).x, static_cast<unsigned>(p.resident_blocks()));
  }
  // Work the capped grid already covers has no full-grid candidate.
  fake_timer small(bowl(256, 2), [](int) { return 1e-3; });
  q = h200_query(lf::work{lf::work::shape::grid_stride, 1ull << 12, 1});
  q.time_plan = small.callback();
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  EXPECT_FALSE(p.full_grid) << p.reason;
  for (const auto& t : small.timed()) EXPECT_NE(t.second, full_grid_bps) << t.first;
}

// The full grid's far end: where the smallest block's full grid is fastest and every other full grid ties
// within the noise, a search of 28 trials still times it (the coarse pass does; refinement from the three
// full grids it starts with would have to walk every size between).
TEST_F(Autotune, TimesTheSmallestBlocksFullGrid) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer wide(bowl(256, 8), [](int block) { return block == 32 ? 0.95 : 0.97; });
  q.time_plan = wide.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=28)")->choose(q);
  EXPECT_TRUE(p.full_grid) << p.to_string() << ": " << p.reason;
  EXPECT_EQ(p.block_threads, 32) << p.reason;
  EXPECT_LE(wide.calls(), 28);
}

// The smallest block's full grid takes no residency level from the capped plans: a kernel fastest at 32 warps
// per SM (here 1024 x 1) is still found by a search of 20 trials (the coarse pass times its octave).
TEST_F(Autotune, TheSmallestBlocksFullGridHidesNoCappedPlan) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer timer([](int block, int bps) { return block * bps == 1024 ? 0.95 : 1.0; });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=20)")->choose(q);
  EXPECT_FALSE(p.full_grid) << p.to_string() << ": " << p.reason;
  EXPECT_EQ(p.block_threads * p.blocks_per_sm, 1024) << p.to_string() << ": " << p.reason;
}

// A block's full grid is a neighbour of that block's capped plans: found where the capped search found the
// block below full residency, though the full grids the coarse pass timed (other sizes) were far slower.
TEST_F(Autotune, WalksFromACappedPlanToItsBlocksFullGrid) {
  lf::query q = h200_query(grid_stride_64m);
  fake_timer timer(bowl(192, 6), [](int block) { return block == 192 ? 0.97 : 1e3; });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  EXPECT_TRUE(p.full_grid) << p.to_string() << ": " << p.reason;
  EXPECT_EQ(p.block_threads, 192) << p.reason;
  EXPECT_EQ(lf::grid_for(p, grid_stride_64m).x, ((1u << 26) + 191u) / 192u);
}

// A tree reduction that assumes a power-of-two block: autotune never times, nor chooses, any other block,
// even where the cost model's optimum (384 x 3) is not one; multi-dimensional work is timed in rows of 32.
TEST_F(Autotune, TimesAndChoosesOnlyBlocksTheRuleAllows) {
  lf::query q = h200_query(grid_stride_64m);
  q.blocks = lf::block_rule::power_of_two();
  fake_timer timer(bowl(384, 3));
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=40)")->choose(q);
  EXPECT_EQ(p.block_threads & (p.block_threads - 1), 0) << p.to_string();
  EXPECT_EQ(p.blocks, "power of two");
  ASSERT_GT(timer.calls(), 0);
  for (const auto& [block, bps] : timer.timed()) EXPECT_EQ(block & (block - 1), 0) << block << "x" << bps;

  lf::query one = h200_query(grid_stride_64m);
  one.blocks = lf::block_rule::one_of({160, 352});
  fake_timer t2(bowl(384, 3));
  one.time_plan = t2.callback();
  const lf::plan p2 = lf::policy_from_string("autotune(max_trials=40)")->choose(one);
  EXPECT_TRUE(p2.block_threads == 160 || p2.block_threads == 352) << p2.to_string();
  for (const auto& [block, bps] : t2.timed()) EXPECT_TRUE(block == 160 || block == 352) << block;
}

// A block shape (a kernel that fixes block y at 3): every candidate timed, and the plan chosen, is a total
// the shape can make, and the plan comes back shaped {bx, 3}.
TEST_F(Autotune, TimesAndChoosesOnlyTotalsTheBlockShapeAllows) {
  lf::work w{lf::work::shape::items, 1u << 20, 1};
  w.rank = 2;
  w.ny = 3;
  lf::query q = h200_query(w);
  q.shape_rule.y = 3;
  fake_timer timer([](int block, int) { return 1.0 + std::abs(block - 384) / 1024.0; });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune(max_trials=40)")->choose(q);
  EXPECT_EQ(p.block, (lf::dims{128, 3, 1})) << p.to_string() << "; " << p.reason;
  EXPECT_EQ(p.shape_rule, q.shape_rule);
  ASSERT_GT(timer.calls(), 0);
  for (const auto& [block, bps] : timer.timed()) EXPECT_EQ(block % 96, 0) << block << "x" << bps;
}

// 2-D and 3-D work is sized and bucketed by all of its items, not its rows.
TEST_F(Autotune, BucketsMultiDimensionalWorkByAllItems) {
  const auto policy = lf::policy_from_string("autotune");
  lf::work rows{lf::work::shape::items, 1024, 1};
  rows.rank = 2;
  rows.ny = 1024;
  EXPECT_EQ(policy->work_bucket(rows), policy->work_bucket(lf::work{lf::work::shape::items, 1u << 20, 1}));
  rows.rank = 3;
  rows.nz = ~0ull;  // saturates, never wraps
  EXPECT_EQ(policy->work_bucket(rows), policy->work_bucket(lf::work{lf::work::shape::items, ~0ull, 1}));
}

// ---- 2-D blocks of its own, where the launch leaves the shape free

namespace {

// A fake time_plan for 2-D work: a cost of the block's threads (best at 256) plus one of its width, recording
// every block it timed.
class shape_timer {
 public:
  explicit shape_timer(std::function<double(unsigned x)> width_cost) : width_cost_(std::move(width_cost)) {}
  std::function<double(const lf::plan&)> callback() {
    return [this](const lf::plan& p) {
      std::lock_guard<std::mutex> lock(mutex_);
      timed_.push_back(p.block);
      return 1.0 + std::abs(p.block_threads - 256) / 512.0 + width_cost_(p.block.x);
    };
  }
  std::vector<lf::dims> timed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return timed_;
  }

 private:
  std::function<double(unsigned)> width_cost_;
  mutable std::mutex mutex_;
  std::vector<lf::dims> timed_;
};

lf::work image(std::uint64_t nx, std::uint64_t ny) {
  lf::work w{lf::work::shape::items, nx, 1};
  w.rank = 2;
  w.ny = ny;
  return w;
}

// An image whose kernel indexes by blockDim and sizes nothing by the block's shape: spec block_x_free().
lf::query free_image_query(std::uint64_t nx, std::uint64_t ny) {
  lf::query q = h200_query(image(nx, ny));
  q.shape_rule.free_x = true;
  return q;
}

// An axpy over an image on an H200 ran 3.6% slower in 32x8 blocks than in 64x4.
double axpy_like(unsigned x) { return x == 32 ? 0.04 : x == 64 ? 0.0 : x == 128 ? 0.003 : 0.02; }

}  // namespace

// 2-D work whose launch lets the block widen (block_x_free()): after the search in rows of 32, autotune times
// wider 2-D blocks of the fastest size ({64, t/64}, {128, t/128}, ...) and keeps one when it is faster; the
// plan keeps that shape.
TEST_F(Autotune, WidensTheBlockOfFreeTwoDimensionalWorkWhenFaster) {
  lf::query q = free_image_query(4096, 4096);
  ASSERT_TRUE(lf::block_shape_free(q));
  shape_timer timer(axpy_like);
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  EXPECT_EQ(p.block, (lf::dims{64, 4, 1})) << p.to_string() << "; " << p.reason;
  EXPECT_TRUE(contains(p.reason, "as 64x4")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "wider 2-D block")) << p.reason;
  EXPECT_LE(p.trials, 64);
  EXPECT_EQ(static_cast<std::size_t>(p.trials), timer.timed().size());
  int wide = 0;
  for (const lf::dims& b : timer.timed()) {
    EXPECT_EQ(b.x % 32, 0u) << b.to_string();
    EXPECT_EQ(b.z, 1u) << b.to_string();
    if (b.x != 32) {
      ++wide;
      EXPECT_EQ(b.count(), 256u) << b.to_string() << ": only the fastest size is widened";
      EXPECT_GE(b.y, 2u) << b.to_string();
    }
  }
  EXPECT_GE(wide, 6) << "each width is timed three times";
  // The launch runs that block and a grid that covers the image.
  EXPECT_EQ(lf::grid_for(p, image(4096, 4096)), (lf::dims{64, 1024, 1}));
}

// Where rows of one warp are fastest (a stencil through a shared tile), the plan keeps them.
TEST_F(Autotune, KeepsRowsOfOneWarpWhenTheyAreFastest) {
  lf::query q = free_image_query(4096, 4096);
  shape_timer timer([](unsigned x) { return x == 32 ? 0.0 : 0.02 * (x / 64.0); });
  q.time_plan = timer.callback();
  const lf::plan p = lf::policy_from_string("autotune")->choose(q);
  EXPECT_EQ(p.block, (lf::dims{32, 8, 1})) << p.to_string() << "; " << p.reason;
  EXPECT_FALSE(contains(p.reason, " as ")) << p.reason;
}

// Never without block_x_free() (a kernel may size a shared tile for rows of 32: a wider trial would overrun
// it), never wider than a row of the work, never for 1-D work, a fixed y, or shapes=off.
TEST_F(Autotune, WiderBlocksOnlyWhereTheShapeIsFreeAndTheRowsAreWideEnough) {
  {
    lf::query q = h200_query(image(4096, 4096));
    ASSERT_FALSE(lf::block_shape_free(q));
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block.x, 32u) << p.to_string() << "; " << p.reason;
    EXPECT_FALSE(contains(p.reason, "wider")) << p.reason;
    // launchfit would refuse a wider trial before timing it: the plugin must not even ask for one.
    EXPECT_FALSE(contains(p.reason, "could not run")) << p.reason;
    for (const lf::dims& b : timer.timed()) EXPECT_EQ(b.x, 32u) << b.to_string();
  }
  {
    lf::query q = free_image_query(100, 8192);  // rows of 100: at most 64 wide
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block, (lf::dims{64, 4, 1})) << p.to_string() << "; " << p.reason;
    for (const lf::dims& b : timer.timed()) EXPECT_LE(b.x, 64u) << b.to_string();
  }
  {
    // 64 x 4 over 65,536 rows needs 16,384 blocks along y; an image 4 times as tall (the same size bucket)
    // would need 65,536, past the device's 65,535: not widened.
    lf::query q = free_image_query(64, 1u << 16);
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block, (lf::dims{32, 8, 1})) << p.to_string() << "; " << p.reason;
    EXPECT_TRUE(contains(p.reason, "no wider 2-D block of this size fits these rows")) << p.reason;
    for (const lf::dims& b : timer.timed()) EXPECT_NE(b, (lf::dims{64, 4, 1})) << b.to_string();
  }
  {
    lf::query q = free_image_query(4096, 4096);
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune(shapes=off)")->choose(q);
    EXPECT_EQ(p.block, (lf::dims{32, 8, 1})) << p.to_string() << "; " << p.reason;
    for (const lf::dims& b : timer.timed()) EXPECT_EQ(b.x, 32u) << b.to_string();
  }
  {
    lf::query q = h200_query(items_16m);
    ASSERT_FALSE(lf::block_shape_free(q));
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block.y, 1u) << p.to_string();
    for (const lf::dims& b : timer.timed()) EXPECT_EQ(b.y, 1u) << b.to_string();
  }
  {
    lf::query q = free_image_query(4096, 4096);
    q.shape_rule.y = 4;  // a y the kernel fixes: the block is {t/4, 4}
    ASSERT_FALSE(lf::block_shape_free(q));
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block.y, 4u) << p.to_string();
    for (const lf::dims& b : timer.timed()) EXPECT_EQ(b.y, 4u) << b.to_string();
  }
  {
    lf::query q = free_image_query(4096, 4096);
    q.shape_rule.x_multiple = 64;  // a tile 64 wide, and wider blocks allowed: 128 x t/128, 256 x t/256, ...
    ASSERT_TRUE(lf::block_shape_free(q));
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block, (lf::dims{64, 4, 1})) << p.to_string() << "; " << p.reason;
    for (const lf::dims& b : timer.timed()) EXPECT_EQ(b.x % 64, 0u) << b.to_string();
  }
  {
    lf::query q = h200_query(image(4096, 4096));
    q.shape_rule.x_multiple = 64;  // a tile 64 wide: the launch shapes {64, t/64} itself
    ASSERT_FALSE(lf::block_shape_free(q));
    shape_timer timer(axpy_like);
    q.time_plan = timer.callback();
    const lf::plan p = lf::policy_from_string("autotune")->choose(q);
    EXPECT_EQ(p.block.x, 64u) << p.to_string();
    for (const lf::dims& b : timer.timed()) EXPECT_EQ(b.x, 64u) << b.to_string();
  }
}

// A tuned 2-D block of its own survives the plan-cache file's round trip, and the stored-plan check accepts
// it for the same launch; for the same kernel launched without block_x_free() it is refused.
TEST_F(Autotune, ABlockOfItsOwnSurvivesTheCacheFileForTheSameLaunchOnly) {
  lf::query q = free_image_query(4096, 4096);
  shape_timer timer(axpy_like);
  q.time_plan = timer.callback();
  const auto policy = lf::policy_from_string("autotune");
  const lf::plan tuned = policy->choose(q);
  ASSERT_EQ(tuned.block, (lf::dims{64, 4, 1}));
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("launchfit-autotune-shape-test-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(file);
  lf::stored_key key{"GPU-autotune-test",
                     90,
                     q.device.sm_count,
                     13000,
                     lf::kernel_fingerprint(q.kernel),
                     policy->to_string() + " rows=32 shape=" + q.shape_rule.to_string() + " work=items",
                     "bytes=0",
                     policy->work_bucket(q.work_hint)};
  lf::set_cache_file(file);
  lf::store_plan(key, tuned);
  lf::close_cache_file();
  lf::set_cache_file(file);  // as a later process would find it
  std::optional<lf::plan> stored = lf::find_stored_plan(key);
  lf::close_cache_file();
  std::filesystem::remove(file);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->block, (lf::dims{64, 4, 1}));
  lf::plan same = *stored;
  EXPECT_EQ(launchfit::detail::check_stored_plan(q, same, {}, nullptr), "");
  lf::query rows_of_32 = q;
  rows_of_32.shape_rule.free_x = false;
  lf::plan other = *stored;
  EXPECT_TRUE(contains(launchfit::detail::check_stored_plan(rows_of_32, other, {}, nullptr),
                       "block shape this launch does not make"));
}

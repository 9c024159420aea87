// SPDX-License-Identifier: MIT
// Built-in policies on built-in device tables: the arithmetic users rely on, without a GPU.

#include "launchfit/policy.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "launchfit/error.hpp"
#include "launchfit/occupancy.hpp"
#if __has_include("launchfit/param_policy.hpp")
#include "launchfit/param_policy.hpp"  // param_policy's definitions, where policy.hpp leaves them out
#endif
#include "launchfit/detail/policy_params.hpp"

namespace lf = launchfit;

namespace {

lf::query make_query(const char* part, int regs, std::size_t static_smem = 0, int max_threads = 1024) {
  lf::query q;
  q.device = lf::device_limits::for_arch(part);
  q.kernel = lf::kernel_resources::manual(regs, static_smem, max_threads, "my_kernel");
  return q;
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const lf::error& e) {
    EXPECT_EQ(e.kernel(), "my_kernel") << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no launchfit::error thrown";
  return {};
}

}  // namespace

TEST(MaxOccupancy, LightKernelOnH200Gets256ThreadBlocksAtFullOccupancy) {
  const lf::plan p = lf::max_occupancy_policy{}.choose(make_query("H200", 32));
  EXPECT_EQ(p.block_threads, 256);
  EXPECT_EQ(p.blocks_per_sm, 8);
  EXPECT_DOUBLE_EQ(p.occupancy.occupancy, 1.0);
  EXPECT_EQ(p.sm_count, 132);
  EXPECT_EQ(p.policy, "max_occupancy(prefer_block=256,block_limit=0)");
  EXPECT_NE(p.reason.find("nearest 256"), std::string::npos) << p.reason;
}

TEST(MaxOccupancy, PreferBlockZeroIsTheDriversLargestBlock) {
  const lf::plan p = lf::max_occupancy_policy{{0, 0}}.choose(make_query("H200", 32));
  EXPECT_EQ(p.block_threads, 1024);
  EXPECT_EQ(p.blocks_per_sm, 2);
  EXPECT_NE(p.reason.find("largest"), std::string::npos) << p.reason;
}

TEST(MaxOccupancy, PreferBlockPicksTheNearestOfTheBestAndNeverLosesOccupancy) {
  // 64 registers: 32 warps/SM at most, reached by 128, 256, 512 and 1024 threads (and others).
  const lf::plan near = lf::max_occupancy_policy{{500, 0}}.choose(make_query("H200", 64));
  EXPECT_EQ(near.block_threads, 512);
  const lf::plan tie = lf::max_occupancy_policy{{48, 0}}.choose(make_query("H200", 32));
  EXPECT_EQ(tie.block_threads, 64);  // 32 and 64 are equally near 48: the smaller cannot fill the SM (32 blocks max)
  // 168 registers: 384 threads fill 1 block (64 512 regs); 256 threads x 1 = 8 warps is worse. The preference
  // never trades occupancy away.
  const lf::plan heavy = lf::max_occupancy_policy{}.choose(make_query("H200", 168));
  const lf::plan driver = lf::max_occupancy_policy{{0, 0}}.choose(make_query("H200", 168));
  EXPECT_EQ(heavy.blocks_per_sm * heavy.block_threads, driver.blocks_per_sm * driver.block_threads);
  EXPECT_THROW((lf::max_occupancy_policy{{-1, 0}}.choose(make_query("H200", 32))), lf::error);
  EXPECT_THROW((lf::max_occupancy_policy{{256, -1}}.choose(make_query("H200", 32))), lf::error);
  EXPECT_NE(error_text([] { lf::max_occupancy_policy{{-1, 0}}.choose(make_query("H200", 32)); })
                .find("prefer_block must be >= 0 (0: the largest block), got -1"),
            std::string::npos);
  EXPECT_NE(error_text([] { lf::max_occupancy_policy{{256, -5}}.choose(make_query("H200", 32)); })
                .find("block_limit must be >= 0 (0: no limit), got -5"),
            std::string::npos);
  EXPECT_NE(error_text([] { lf::bytes_in_flight_policy{{32, 0, -2}}.choose(make_query("H200", 32)); })
                .find("prefer_block must be >= 0 (0: the largest block), got -2"),
            std::string::npos);
  // block_limit caps the search like cuOccupancyMaxPotentialBlockSize's blockSizeLimit.
  const lf::plan capped = lf::max_occupancy_policy{{0, 200}}.choose(make_query("H200", 32));
  EXPECT_EQ(capped.block_threads, 128);  // the largest block <= 200 that fills the SM: 16 x 128
  EXPECT_EQ(capped.blocks_per_sm, 16);
}

TEST(MaxOccupancy, Rtx4090PicksABlockThatFills1536Threads) {
  const lf::plan p = lf::max_occupancy_policy{}.choose(make_query("RTX 4090", 32));
  EXPECT_EQ(p.block_threads, 256);
  EXPECT_EQ(p.blocks_per_sm * p.block_threads, 1536);
  EXPECT_EQ((lf::max_occupancy_policy{{0, 0}}.choose(make_query("RTX 4090", 32)).block_threads), 768);
}

TEST(MaxOccupancy, AgreesWithTheOfflineCalculatorOnEveryArchitecture) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> regs(16, 255), smem_kb(0, 40), bound(1, 32);
  for (const lf::device_limits& d : lf::device_limits::builtin_table()) {
    for (int i = 0; i < 40; ++i) {
      lf::query q;
      q.device = d;
      q.kernel = lf::kernel_resources::manual(std::min(regs(rng), d.max_regs_per_thread),
                                              static_cast<std::size_t>(smem_kb(rng)) * 256, bound(rng) * 32);
      const std::size_t per_thread_smem = static_cast<std::size_t>(i % 3) * 16;
      q.smem_per_block = [per_thread_smem](int block) { return per_thread_smem * static_cast<std::size_t>(block); };
      const lf::block_size_choice want = lf::max_potential_block_size(q.device, q.kernel, q.smem_per_block);
      if (want.block_threads == 0) continue;
      const lf::plan p = lf::max_occupancy_policy{{0, 0}}.choose(q);
      EXPECT_EQ(p.block_threads, want.block_threads) << d.arch() << " regs=" << q.kernel.regs_per_thread;
      EXPECT_EQ(p.dynamic_smem_bytes, per_thread_smem * static_cast<std::size_t>(p.block_threads));
      // The default tie-break may pick another block, never fewer resident threads.
      const lf::plan preferred = lf::max_occupancy_policy{}.choose(q);
      EXPECT_EQ(preferred.blocks_per_sm * preferred.block_threads, want.occupancy.active_threads_per_sm)
          << d.arch() << " regs=" << q.kernel.regs_per_thread;
    }
  }
}

TEST(MaxOccupancy, HonoursLaunchBounds) {
  const lf::plan p = lf::max_occupancy_policy{}.choose(make_query("H100", 32, 0, 256));
  EXPECT_EQ(p.block_threads, 256);
  EXPECT_EQ(p.blocks_per_sm, 8);
}

TEST(BytesInFlight, TwoFloat4PerThreadRunsAtHalfOccupancyOnH200) {
  lf::query q = make_query("H200", 32);
  const lf::plan p = lf::bytes_in_flight_policy{{32, 0}}.choose(q);
  EXPECT_EQ(p.blocks_per_sm * p.block_threads / 32, 32);  // 32 warps x 32 threads x 32 B = 32 KB
  EXPECT_EQ(p.block_threads, 256);                         // as 4 blocks of 256, not 1 of 1024
  EXPECT_TRUE(p.warning.empty());
  EXPECT_NE(p.reason.find("32 KB"), std::string::npos) << p.reason;
  EXPECT_EQ(p.policy, "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)");
}

TEST(BytesInFlight, FewestWarpsThatReachAnExplicitTarget) {
  const lf::plan p = lf::bytes_in_flight_policy{{64, 16 * 1024}}.choose(make_query("H200", 32));
  EXPECT_EQ(p.blocks_per_sm * p.block_threads / 32, 8);
  EXPECT_EQ(p.block_threads, 256);  // 1 x 256; with prefer_block=0 the largest block: 1 x 256 as well
  const lf::plan two = lf::bytes_in_flight_policy{{64, 32 * 1024}}.choose(make_query("H200", 32));
  EXPECT_EQ(two.block_threads, 256);
  EXPECT_EQ(two.blocks_per_sm, 2);
  const lf::plan largest = lf::bytes_in_flight_policy{{64, 32 * 1024, 0}}.choose(make_query("H200", 32));
  EXPECT_EQ(largest.block_threads, 512);
  EXPECT_EQ(largest.blocks_per_sm, 1);
}

TEST(BytesInFlight, UnreachableTargetFallsBackToMaxOccupancyWithAWarning) {
  const lf::plan p = lf::bytes_in_flight_policy{{8, 64 * 1024}}.choose(make_query("H200", 32));
  EXPECT_EQ(p.blocks_per_sm * p.block_threads, 2048);  // full occupancy
  EXPECT_EQ(p.block_threads, 256);
  EXPECT_NE(p.warning.find("16 KB"), std::string::npos) << p.warning;  // 64 warps x 32 x 8 B
  EXPECT_NE(p.warning.find("64 KB"), std::string::npos) << p.warning;  // the target
  EXPECT_NE(p.warning.find("independent loads"), std::string::npos) << p.warning;
}

TEST(BytesInFlight, ANarrowKernelAtMaxOccupancyIsAdvisedNotWarned) {
  // One 4 B load per thread: max occupancy is the most any launch holds; the advice goes to the reason.
  const lf::plan p = lf::bytes_in_flight_policy{{4, 0}}.choose(make_query("H200", 32));
  EXPECT_EQ(p.blocks_per_sm * p.block_threads, 2048);
  EXPECT_TRUE(p.warning.empty()) << p.warning;
  EXPECT_NE(p.reason.find("8 KB in flight"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("independent loads"), std::string::npos) << p.reason;
}

// The bounded-regret rule: no static policy launches a grid_stride loop with more than one wave of its
// resident blocks, whatever the width of its elements, since none can see a block's epilogue (on the H200 a
// histogram whose blocks end in 256 contended atomics ran 10.6x slower with the full grid than the best
// launch). Only the user's waves(k) or a plan that timed the full grid (autotune) launches more.
TEST(BytesInFlight, WideGridStrideElementsKeepTheOneWaveCap) {
  lf::query q = make_query("H200", 32);
  const lf::work stride{lf::work::shape::grid_stride, 1ull << 26, 1};
  q.work_hint = stride;
  for (int width : {1, 4, 8, 12, 16, 24, 32, 64}) {
    const lf::plan p = lf::bytes_in_flight_policy{{width, 0}}.choose(q);
    EXPECT_FALSE(p.full_grid) << width << " B: " << p.reason;
    EXPECT_EQ(lf::grid_for(p, stride).x, static_cast<unsigned>(p.resident_blocks())) << width << " B";
  }
  for (const lf::plan& p : {lf::max_occupancy_policy{}.choose(q), lf::max_occupancy_policy{{0, 0}}.choose(q)}) {
    EXPECT_FALSE(p.full_grid);
    EXPECT_EQ(lf::grid_for(p, stride).x, static_cast<unsigned>(p.resident_blocks()));
  }
  // The user's waves(k) raises the cap.
  const lf::plan wide = lf::bytes_in_flight_policy{{16, 0}}.choose(q);
  lf::work more = stride;
  more.waves = 4;
  EXPECT_EQ(lf::grid_for(wide, more).x, static_cast<unsigned>(4 * wide.resident_blocks()));
  // A tuned plan that timed the full grid launches it; the loop covers what the grid limit leaves.
  lf::plan tuned = wide;
  tuned.full_grid = true;
  EXPECT_EQ(lf::grid_for(tuned, stride).x, (1u << 26) / static_cast<unsigned>(tuned.block_threads));
  EXPECT_EQ(lf::grid_for(tuned, lf::work{lf::work::shape::grid_stride, ~0ull, 1}, 1u << 20).x, 1u << 20);
  // ... unless the spec caps it: waves(k) keeps the cap even then.
  lf::work capped = stride;
  capped.waves = 1;
  EXPECT_EQ(lf::grid_for(tuned, capped).x, static_cast<unsigned>(tuned.resident_blocks()));
  capped.waves = 2;
  EXPECT_EQ(lf::grid_for(tuned, capped).x, static_cast<unsigned>(2 * tuned.resident_blocks()));
}

TEST(MaxOccupancy, SmallWorkFillsTheSmsBeforeMaximisingOccupancy) {
  // An n-body step of 16,384 bodies: 256-thread blocks give 64 blocks for 132 SMs; 128 threads give 128.
  lf::query q = make_query("H200", 32);
  q.work_hint = lf::work{lf::work::shape::items, 16384, 1};
  const lf::plan p = lf::max_occupancy_policy{}.choose(q);
  EXPECT_EQ(p.block_threads, 128) << p.reason;
  EXPECT_NE(p.reason.find("128 blocks for 132 SMs"), std::string::npos) << p.reason;
  // Every size of the bucket gets the same plan; large work is untouched (bucket 0).
  const lf::max_occupancy_policy mo;
  EXPECT_EQ(mo.work_bucket(lf::work{lf::work::shape::items, 16384, 1}),
            mo.work_bucket(lf::work{lf::work::shape::items, 32767, 1}));
  EXPECT_NE(mo.work_bucket(lf::work{lf::work::shape::items, 16384, 1}),
            mo.work_bucket(lf::work{lf::work::shape::items, 32768, 1}));
  EXPECT_EQ(mo.work_bucket(lf::work{lf::work::shape::items, 1u << 20, 1}), 0u);
  q.work_hint = lf::work{lf::work::shape::items, 1u << 20, 1};
  EXPECT_EQ(lf::max_occupancy_policy{}.choose(q).block_threads, 256);
  // Fewer than two warps per SM (saxpy of 4,096 items): launch-bound, left alone.
  q.work_hint = lf::work{lf::work::shape::items, 4096, 1};
  EXPECT_EQ(lf::max_occupancy_policy{}.choose(q).block_threads, 256);
  // Under a block rule, the largest allowed block that fills the SMs.
  q.work_hint = lf::work{lf::work::shape::items, 16384, 1};
  q.blocks = lf::block_rule::multiple_of(96);
  EXPECT_EQ(lf::max_occupancy_policy{}.choose(q).block_threads, 96);
}

TEST(BytesInFlight, DefaultTargetsPerArchitecture) {
  EXPECT_EQ(lf::default_bytes_in_flight_per_sm(lf::device_limits::for_arch("H200")), 32u * 1024);
  EXPECT_EQ(lf::default_bytes_in_flight_per_sm(lf::device_limits::for_arch("A100")), 16u * 1024);
  EXPECT_EQ(lf::default_bytes_in_flight_per_sm(lf::device_limits::for_arch("V100")), 12u * 1024);
  EXPECT_EQ(lf::default_bytes_in_flight_per_sm(lf::device_limits::for_arch("B200")), 64u * 1024);
  // A100 target 16 KB with 16 B per thread: 32 warps.
  const lf::plan p = lf::bytes_in_flight_policy{{16, 0}}.choose(make_query("A100", 32));
  EXPECT_EQ(p.blocks_per_sm * p.block_threads / 32, 32);
}

TEST(BytesInFlight, CalibratedTargetOverridesTheTable) {
  lf::device_limits d = lf::device_limits::for_arch("sm_75");
  lf::set_bytes_in_flight_per_sm(75, 20000);
  EXPECT_EQ(lf::default_bytes_in_flight_per_sm(d), 20000u);
}

TEST(BytesInFlight, RejectsNonPositivePerThread) {
  EXPECT_NE(error_text([] { lf::bytes_in_flight_policy{{0, 0}}.choose(make_query("H200", 32)); }).find("per_thread"),
            std::string::npos);
}

// A negative value where 0 means "the default" is refused as prefer_block=-1 is, never taken as the default:
// from the C++ parameters and from a policy string alike.
TEST(NegativeParameters, AreRefusedWhenThePlanIsMade) {
  struct refused {
    std::shared_ptr<const lf::policy> policy;
    const char* says;
  };
  for (const refused& r : {
           refused{std::make_shared<lf::cooperative_policy>(lf::cooperative_params{0, -1}),
                   "policy::choose: LAUNCHFIT_INVALID_POLICY (block must be >= 0 (0: the max-occupancy "
                   "block), got -1)"},
           refused{lf::policy_from_string("cooperative(block=-1)"),
                   "policy::choose: LAUNCHFIT_INVALID_POLICY (block must be >= 0 (0: the max-occupancy "
                   "block), got -1)"},
           refused{std::make_shared<lf::cooperative_policy>(lf::cooperative_params{-1, 0}),
                   "blocks_per_sm must be >= 0 (0: as many as co-reside), got -1"},
           refused{lf::policy_from_string("cooperative(blocks_per_sm=-1,block=256)"),
                   "blocks_per_sm must be >= 0 (0: as many as co-reside), got -1"},
           refused{std::make_shared<lf::bytes_in_flight_policy>(lf::bytes_in_flight_params{16, -5}),
                   "policy::choose: LAUNCHFIT_INVALID_POLICY (target_per_sm must be >= 0 (0: the device "
                   "default), got -5)"},
           refused{lf::policy_from_string("bytes_in_flight(target_per_sm=-5)"),
                   "target_per_sm must be >= 0 (0: the device default), got -5"},
           refused{lf::policy_from_string("bytes_in_flight(per_thread=-1)"),
                   "per_thread must be > 0 bytes (got -1)"},
           // fixed(block=-1) keeps its message: a block of no threads, as validation names it.
           refused{lf::policy_from_string("fixed(block=-1)"),
                   "validate(block): LAUNCHFIT_INVALID_PLAN (block of 0 threads)"},
       }) {
    SCOPED_TRACE(r.policy->to_string());
    const std::string what = error_text([&] { r.policy->choose(make_query("H200", 32)); });
    EXPECT_NE(what.find(r.says), std::string::npos) << what;
  }
  // 0 still means the default.
  EXPECT_EQ((lf::cooperative_policy{{0, 0}}.choose(make_query("H200", 32)).block_threads), 1024);
}

TEST(Cooperative, GridIsCoResidentBlocksTimesSms) {
  const lf::plan p = lf::cooperative_policy{}.choose(make_query("H200", 32));
  EXPECT_TRUE(p.options.cooperative);
  EXPECT_EQ(p.block_threads, 1024);
  EXPECT_EQ(p.resident_blocks(), 2 * 132);
  EXPECT_EQ(lf::grid_for(p, lf::work{}).x, 264u);
}

// blocks_per_sm given without a block: the block with the most threads resident at that many per SM. At 40
// registers a thread an H200 SM holds one block of 1024 threads or two of 768 (three of 512): the
// max-occupancy block is 768, which at one block per SM left a quarter of the threads a 1024 block runs, and
// work that 132 blocks of 1024 cover was refused.
TEST(Cooperative, ABlocksPerSmCapTakesTheBlockWithTheMostThreadsUnderIt) {
  EXPECT_EQ((lf::cooperative_policy{{0, 0}}.choose(make_query("H200", 40)).block_threads), 768);
  const lf::plan one = lf::cooperative_policy{{1, 0}}.choose(make_query("H200", 40));
  EXPECT_EQ(one.block_threads, 1024);
  EXPECT_EQ(one.resident_blocks(), 132);
  const lf::plan two = lf::cooperative_policy{{2, 0}}.choose(make_query("H200", 40));
  EXPECT_EQ(two.block_threads, 768);
  EXPECT_EQ(two.resident_blocks(), 2 * 132);
  // A block given is kept, whatever the cap.
  EXPECT_EQ((lf::cooperative_policy{{1, 256}}.choose(make_query("H200", 40)).block_threads), 256);
  // Only blocks that reach the cap count: a block that fits fewer per SM is never chosen (it was, and its plan
  // was refused for asking more blocks per SM than co-reside).
  EXPECT_EQ((lf::cooperative_policy{{3, 0}}.choose(make_query("H200", 40)).block_threads), 512);
  EXPECT_EQ((lf::cooperative_policy{{3, 0}}.choose(make_query("H200", 32)).block_threads), 672);
  EXPECT_EQ((lf::cooperative_policy{{2, 0}}.choose(make_query("H200", 64)).block_threads), 512);
  // A cap above what any block fits is refused, naming the cap.
  const std::string what = error_text([] { lf::cooperative_policy{{40, 0}}.choose(make_query("H200", 32)); });
  EXPECT_NE(what.find("blocks_per_sm 40"), std::string::npos) << what;
  // ... also under a block rule that the stand-in block of 32 threads breaks (it was named instead).
  lf::query ruled = make_query("H200", 40);
  ruled.blocks = lf::block_rule::multiple_of(256);  // 256 fits 6 per SM at 40 registers, nothing fits 7
  EXPECT_EQ((lf::cooperative_policy{{6, 0}}.choose(ruled).block_threads), 256);
  const std::string ruled_what = error_text([&] { lf::cooperative_policy{{7, 0}}.choose(ruled); });
  EXPECT_NE(ruled_what.find("blocks_per_sm 7 co-reside for no block size the launch allows"), std::string::npos)
      << ruled_what;
}

// With a cluster the cap bounds the blocks counted per SM too: cooperative(1) takes the largest block whose
// clusters fit, not the max-occupancy block.
TEST(Cooperative, ABlocksPerSmCapHoldsWithAClusterToo) {
  lf::query q = make_query("H200", 40);
  q.cluster = lf::dims{2, 1, 1};
  const lf::plan one = lf::cooperative_policy{{1, 0}}.choose(q);
  EXPECT_EQ(one.block_threads, 1024);
  const lf::plan two = lf::cooperative_policy{{2, 0}}.choose(q);
  EXPECT_EQ(two.block_threads, 768);
}

TEST(Cooperative, RefusesMoreBlocksPerSmThanFit) {
  const std::string what = error_text([] { lf::cooperative_policy{{3, 1024}}.choose(make_query("H200", 32)); });
  EXPECT_NE(what.find("blocks_per_sm 3"), std::string::npos) << what;
  EXPECT_NE(what.find("co-reside"), std::string::npos) << what;
}

TEST(Cooperative, RefusesWhenNoBlockFits) {
  lf::query q = make_query("H200", 32);
  q.dynamic_smem_bytes = 300 * 1024;  // above the 227 KB opt-in maximum
  const std::string what = error_text([&] { lf::cooperative_policy{{0, 256}}.choose(q); });
  EXPECT_NE(what.find("opt-in maximum"), std::string::npos) << what;
}

TEST(Cooperative, RefusesOnADeviceWithoutCooperativeLaunch) {
  lf::query q = make_query("H200", 32);
  q.device.cooperative_launch = false;
  EXPECT_NE(error_text([&] { lf::cooperative_policy{}.choose(q); }).find("cooperative launch"), std::string::npos);
}

TEST(Fixed, ValidatesTheCallersNumbers) {
  const lf::plan ok = lf::fixed_policy{{256, 80}}.choose(make_query("H200", 32));
  EXPECT_EQ(ok.block_threads, 256);
  EXPECT_EQ(lf::grid_for(ok, lf::work{lf::work::shape::items, 1u << 30, 1}).x, 80u);
  EXPECT_NE(error_text([] { lf::fixed_policy{{2048, 0}}.choose(make_query("H200", 32)); }).find("device maximum 1024"),
            std::string::npos);
  EXPECT_NE(error_text([] { lf::fixed_policy{{512, 0}}.choose(make_query("H200", 32, 0, 256)); })
                .find("__launch_bounds__"),
            std::string::npos);
  EXPECT_NE(error_text([] { lf::fixed_policy{{0, 0}}.choose(make_query("H200", 32)); }).find("0 threads"),
            std::string::npos);
}

TEST(Validation, TooManyRegistersForTheBlockMeansNothingFits) {
  // 255 registers x 1024 threads needs 261 120 registers: more than an SM has.
  const std::string what = error_text([] { lf::fixed_policy{{1024, 0}}.choose(make_query("H200", 255)); });
  EXPECT_NE(what.find("fits"), std::string::npos) << what;
}

TEST(Validation, SmemRuleIsEvaluatedAtTheChosenBlock) {
  lf::query q = make_query("H200", 32);
  q.smem_per_block = [](int block) { return static_cast<std::size_t>(block) * 64; };
  const lf::plan p = lf::max_occupancy_policy{}.choose(q);
  EXPECT_EQ(p.dynamic_smem_bytes, static_cast<std::size_t>(p.block_threads) * 64);
  EXPECT_GT(p.occupancy.allocated_smem_per_block_bytes, p.dynamic_smem_bytes);
}

namespace {
// A 1-D plan of `block` threads resident `blocks_per_sm` per SM on `sm_count` SMs, for grid_for().
lf::plan one_d_plan(int block, int blocks_per_sm, int sm_count) {
  lf::plan p;
  p.block = {static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = blocks_per_sm;
  p.sm_count = sm_count;
  return p;
}
}  // namespace

TEST(GridFor, ItemsPerThreadAndGridStride) {
  const lf::plan p = one_d_plan(256, 4, 132);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 1000, 1}).x, 4u);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 1024, 4}).x, 1u);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 1025, 4}).x, 2u);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::grid_stride, 1ull << 40, 1}).x, 528u);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::grid_stride, 10, 1}).x, 1u);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::none, 0, 1}).x, 528u);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 0, 1}).count(), 0u);  // a documented no-op
}

// 1-D items(n) without a cluster or block shape, the launch every hit sizes (a path of its own in grid_for):
// one block per block_threads x per_thread items, for blocks of every kind, and the grid limit still refused.
TEST(GridFor, OneDimensionalItemsAreCeilingDivisionForEveryBlock) {
  for (int block : {32, 64, 96, 128, 160, 256, 288, 320, 512, 736, 960, 1024}) {
    const lf::plan p = one_d_plan(block, 1, 132);
    for (std::uint64_t n : {1ull, 31ull, 32ull, 33ull, 1000ull, 1ull << 20, (1ull << 20) + 1, 3000000000ull}) {
      for (std::uint32_t per_thread : {0u, 1u, 3u, 4u}) {
        const std::uint64_t per_block = static_cast<std::uint64_t>(block) * std::max(per_thread, 1u);
        const std::uint64_t want = (n + per_block - 1) / per_block;
        EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, n, per_thread}).x, want)
            << "block " << block << " n " << n << " per_thread " << per_thread;
      }
    }
    const long long limit = 1000;
    EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 1000ull * block, 1}, limit).x, 1000u);
    EXPECT_THROW(lf::grid_for(p, {lf::work::shape::items, 1000ull * block + 1, 1}, limit), lf::error);
  }
}

// A cluster whose x is set but whose count is 0 (a 0 in another dimension) still rounds the grid's x up to
// it, on the 1-D items path as on every other.
TEST(GridFor, AClusterXWithAZeroDimensionStillRoundsTheGrid) {
  lf::plan p = one_d_plan(64, 1, 132);
  p.options.cluster = {3, 1, 0};
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 32768, 1}).x, 513u);
}

TEST(GridFor, SizeTOverflowOfTheGridIsAnError) {
  const lf::plan p = one_d_plan(32, 1, 1);
  EXPECT_THROW(lf::grid_for(p, {lf::work::shape::items, 1ull << 40, 1}), lf::error);
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::grid_stride, 1ull << 40, 1}).x, 1u);
}

TEST(GridFor, CooperativeItemsBeyondCoResidencyAreRefused) {
  lf::plan p = one_d_plan(256, 2, 4);
  p.options.cooperative = true;
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::items, 8 * 256, 1}).x, 8u);
  try {
    lf::grid_for(p, {lf::work::shape::items, 8 * 256 + 1, 1});
    FAIL() << "no error";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
  }
}

TEST(PolicyParams, PfrPrintsHashesAndParses) {
  lf::bytes_in_flight_policy a{{32, 0}}, b{{32, 0}}, c{{16, 0}};
  EXPECT_EQ(a.to_string(), "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)");
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_NE(lf::max_occupancy_policy{}.hash(), lf::constant_block_policy{}.hash());
  lf::fixed_params fp{};
  lf::params_assign(fp, {{"block", "128"}, {"grid", "7"}});
  EXPECT_EQ(fp.block, 128);
  EXPECT_EQ(fp.grid, 7);
  EXPECT_THROW(lf::params_assign(fp, {{"blok", "1"}}), std::invalid_argument);
  EXPECT_THROW(lf::params_assign(fp, {{"block", "12x"}}), std::invalid_argument);
}

// Every field kind PFR prints: integers of every width and sign at their extremes, bool, floating point
// (round-trips), strings.
namespace {
struct mixed_params {
  std::int64_t smallest = std::numeric_limits<std::int64_t>::min();
  std::uint64_t largest = std::numeric_limits<std::uint64_t>::max();
  int negative = -7;
  short zero = 0;
  bool flag = true;
  double ratio = 0.1;
  std::string label = "x";
  static constexpr std::array<const char*, 7> names = {"smallest", "largest", "negative", "zero",
                                                       "flag",     "ratio",   "label"};
};
}  // namespace

TEST(PolicyParams, EveryFieldKindPrints) {
  EXPECT_EQ(lf::params_to_string(mixed_params{}),
            "smallest=-9223372036854775808,largest=18446744073709551615,negative=-7,zero=0,flag=true,"
            "ratio=0.10000000000000001,label=x");
}

TEST(ReferencePolicy, AlwaysOneHundredTwentyEightThreads) {
  const lf::plan p = lf::constant_block_policy{}.choose(make_query("A100", 64));
  EXPECT_EQ(p.block_threads, 128);
  EXPECT_EQ(p.policy, "constant_block()");
}

TEST(Validation, ClusterOnADeviceWithoutClustersIsRefused) {
  lf::query q = make_query("A100", 32);  // sm_80: no thread-block clusters
  q.device.cluster_launch = false;
  lf::plan p;
  p.block = {128, 1, 1};
  p.options.cluster = {2, 1, 1};
  const std::string what = error_text([&] { lf::validate_plan(q, p); });
  EXPECT_NE(what.find("does not support thread-block clusters"), std::string::npos) << what;
}

// A built-in policy's hash is inline (builtin_hash(), so that a launch of constant parameters hashes nothing at
// run time) and must stay the value params_hash() gives every param_policy: the same name hash and each field
// mixed in order, for any parameters (negative ones too). Plan keys, and the plans found by them, depend on it.
template <class Policy>
void expect_builtin_hash_is_params_hash(std::mt19937_64& rng) {
  using params = typename Policy::params_type;
  constexpr std::size_t n = params::names.size();
  for (int round = 0; round < 200; ++round) {
    int v[n];
    for (int& x : v) {
      const auto r = static_cast<std::uint32_t>(rng());
      x = round < 20 ? static_cast<int>(r % 5) - 2 : static_cast<int>(r);
    }
    params p{};
    std::memcpy(&p, v, sizeof p);
    const Policy policy(p);
    EXPECT_EQ(policy.hash(), lf::params_hash(lf::detail::hash_string(Policy::policy_name), p))
        << Policy::policy_name << " " << policy.params();
  }
}

TEST(BuiltinPolicies, AnInlineHashIsTheParamPolicyHash) {
  std::mt19937_64 rng(7);
  expect_builtin_hash_is_params_hash<lf::max_occupancy_policy>(rng);
  expect_builtin_hash_is_params_hash<lf::bytes_in_flight_policy>(rng);
  expect_builtin_hash_is_params_hash<lf::cooperative_policy>(rng);
  expect_builtin_hash_is_params_hash<lf::fixed_policy>(rng);
  expect_builtin_hash_is_params_hash<lf::fixed_dims_policy>(rng);
  expect_builtin_hash_is_params_hash<lf::planned_policy>(rng);
  // The names' hashes made at compile time are hash_string()'s (FNV-1a: its offset basis for the empty name).
  static_assert(lf::detail::hash_text("", 0) == 0xcbf29ce484222325ULL);
  for (const char* name : {"max_occupancy", "bytes_in_flight", "cooperative", "fixed", "fixed_dims", "planned", "a"})
    EXPECT_EQ(lf::detail::hash_text(name, std::strlen(name)), lf::detail::hash_string(name)) << name;
}

// small_work_bucket() (inline, for the built-ins' work_bucket()): one bucket per power of two of the threads
// the work needs, below 2^18; 0 above, for 2-D work and for a grid.
TEST(BuiltinPolicies, SmallWorkIsBucketedPerPowerOfTwoOfItsThreads) {
  auto items = [](std::uint64_t n, std::uint32_t per_thread = 1) {
    lf::work w;
    w.kind = lf::work::shape::items;
    w.n = n;
    w.per_thread = per_thread;
    return w;
  };
  EXPECT_EQ(lf::detail::small_work_bucket(items(0)), 0u);
  EXPECT_EQ(lf::detail::small_work_bucket(items(1)), 1u);
  EXPECT_EQ(lf::detail::small_work_bucket(items(2)), 2u);
  EXPECT_EQ(lf::detail::small_work_bucket(items(3)), 2u);
  EXPECT_EQ(lf::detail::small_work_bucket(items(4)), 3u);
  EXPECT_EQ(lf::detail::small_work_bucket(items((1u << 18) - 1)), 18u);
  EXPECT_EQ(lf::detail::small_work_bucket(items(1u << 18)), 0u);
  EXPECT_EQ(lf::detail::small_work_bucket(items(9, 4)), 2u);  // 3 threads
  EXPECT_EQ(lf::detail::small_work_bucket(items(8, 4)), 2u);  // 2 threads
  lf::work rows = items(100);
  rows.rank = 2;
  EXPECT_EQ(lf::detail::small_work_bucket(rows), 0u);
  lf::work grid = items(100);
  grid.kind = lf::work::shape::grid;
  EXPECT_EQ(lf::detail::small_work_bucket(grid), 0u);
  EXPECT_EQ(lf::max_occupancy_policy(lf::max_occupancy_params{0, 0}).work_bucket(items(100)), 0u);
  EXPECT_EQ(lf::max_occupancy_policy().work_bucket(items(100)), 7u);
  EXPECT_EQ(lf::bytes_in_flight_policy().work_bucket(items(100)), 7u);
  // The inline rules a launch keys by are the policies' own answers.
  for (std::uint64_t n : {1ull, 100ull, 5000ull, 1ull << 20}) {
    for (int prefer : {0, 128, 256}) {
      const lf::max_occupancy_params p{prefer, 0};
      EXPECT_EQ(lf::max_occupancy_policy::bucket_of(p, items(n)), lf::max_occupancy_policy(p).work_bucket(items(n)));
    }
    EXPECT_EQ(lf::bytes_in_flight_policy::bucket_of({}, items(n)), lf::bytes_in_flight_policy().work_bucket(items(n)));
  }
}

// SPDX-License-Identifier: MIT
// Multi-dimensional work, block rules, clusters, programmatic launches and SM budgets on the CPU: the grid
// arithmetic, the policies' choices under a rule or a cluster, validation and the plan keys. The offline
// calculator (or a fake oracle) answers; tests/gpu/{shapes,cluster,pdl}-test.cu launch on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "launchfit/error.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"
#include "planner.hpp"
#include "test_query.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

using launchfit_test::h200_query;

lf::plan plan_of(lf::dims block, int blocks_per_sm, int sms, lf::dims cluster = {}) {
  lf::plan p;
  p.block = block;
  p.block_threads = static_cast<int>(block.count());
  p.blocks_per_sm = blocks_per_sm;
  p.sm_count = sms;
  p.options.cluster = cluster;
  return p;
}

lf::work items2(std::uint64_t nx, std::uint64_t ny) {
  lf::work w{lf::work::shape::items, nx, 1};
  w.rank = 2;
  w.ny = ny;
  return w;
}

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const lf::error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// ---- grids for multi-dimensional work ---------------------------------------------------------------------


// A plan that says full grid (a tuner's, or a stored one) is never launched over every SM where the launch has
// an SM budget (sms(k)): its grid_stride grid is capped at the budget's resident blocks, as a waves cap caps it.
TEST(Shapes, AFullGridPlanKeepsToItsSmBudget) {
  lf::plan p = plan_of({256, 1, 1}, 8, 16);  // planned for a budget of 16 SMs
  p.full_grid = true;
  const lf::work w{lf::work::shape::grid_stride, std::uint64_t{1} << 26, 1};
  EXPECT_EQ(lf::grid_for(p, w).x, (1u << 26) / 256) << "without a budget the full grid is the work's";
  p.options.sm_budget = 16;
  EXPECT_EQ(lf::grid_for(p, w).x, 8u * 16u);
}

// A count near 2^64 rounded up to whole clusters wrapped to a grid of 0, which launches nothing and says
// nothing: it is refused as above the device's limit, as the count one cluster smaller is.
TEST(Shapes, AGridRoundedToWholeClustersNeverWrapsToEmpty) {
  lf::plan x = plan_of({1, 1, 1}, 8, 132, {2, 1, 1});
  const std::string wrapped = message_of([&] { lf::grid_for(x, lf::work{lf::work::shape::items, UINT64_MAX, 1}); });
  EXPECT_TRUE(has(wrapped, "limit")) << wrapped;
  lf::plan y = plan_of({32, 1, 1}, 8, 132, {1, 2, 1});
  y.shape_rule.per_thread_y = 1;
  const std::string rows = message_of([&] { lf::grid_for(y, items2(32, UINT64_MAX)); });
  EXPECT_TRUE(has(rows, "65535")) << rows;
  lf::plan z = plan_of({32, 1, 1}, 8, 132, {1, 1, 2});
  lf::work w3 = items2(32, 2);
  w3.rank = 3;
  w3.nz = UINT64_MAX;
  const std::string depth = message_of([&] { lf::grid_for(z, w3); });
  EXPECT_TRUE(has(depth, "65535")) << depth;
}

TEST(Grid, TwoDimensionalWorkIsCeilPerDimension) {
  const lf::plan p = plan_of({32, 8, 1}, 8, 132);
  EXPECT_EQ(lf::grid_for(p, items2(1000, 777)), (lf::dims{32, 98, 1}));  // ceil(1000/32), ceil(777/8)
  lf::work w3 = items2(64, 8);
  w3.rank = 3;
  w3.nz = 5;
  EXPECT_EQ(lf::grid_for(plan_of({32, 4, 2}, 8, 132), w3), (lf::dims{2, 2, 3}));
  lf::work per = items2(1000, 16);
  per.per_thread = 4;  // along x only
  EXPECT_EQ(lf::grid_for(p, per), (lf::dims{8, 2, 1}));
}

TEST(Grid, YAndZAbove65535AreRefusedWithTheNumbers) {
  const lf::plan p = plan_of({32, 1, 1}, 8, 132);
  const std::string m = message_of([&] { lf::grid_for(p, items2(32, 70000)); });
  EXPECT_TRUE(has(m, "70000 x 1 blocks in y and z, above the grid limit 65535")) << m;
  EXPECT_TRUE(has(m, "items({32, 70000})")) << m;
  EXPECT_EQ(lf::grid_for(p, items2(32, 65535)).y, 65535u);
}

TEST(Grid, EmptyWorkInAnyDimensionLaunchesNothing) {
  const lf::plan p = plan_of({32, 8, 1}, 8, 132);
  EXPECT_EQ(lf::grid_for(p, items2(1000, 0)).count(), 0u);
  EXPECT_EQ(lf::grid_for(p, items2(0, 10)).count(), 0u);
}

TEST(Grid, CallerGridIsLaunchedAsGivenAndCheckedForCoResidency) {
  lf::plan p = plan_of({256, 1, 1}, 8, 132);
  lf::work w;
  w.kind = lf::work::shape::grid;
  w.grid = lf::dims{40, 3, 1};
  EXPECT_EQ(lf::grid_for(p, w), (lf::dims{40, 3, 1}));
  p.options.cooperative = true;
  w.grid = lf::dims{1056, 1, 1};  // exactly 8 x 132
  EXPECT_EQ(lf::grid_for(p, w).x, 1056u);
  w.grid = lf::dims{1057, 1, 1};
  const std::string m = message_of([&] { lf::grid_for(p, w); });
  EXPECT_TRUE(has(m, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")) << m;
  EXPECT_TRUE(has(m, "grid 1057 needs 1057 blocks but only 1056 co-reside")) << m;
  w.grid = lf::dims{1, 70000, 1};
  EXPECT_TRUE(has(message_of([&] { lf::grid_for(p, w); }), "exceeds the device's grid limits"));
}

TEST(Grid, GridStrideWavesCapAtWholeWaves) {
  const lf::plan p = plan_of({256, 1, 1}, 8, 132);  // 1056 resident
  lf::work w{lf::work::shape::grid_stride, 1ull << 30, 1};
  EXPECT_EQ(lf::grid_for(p, w).x, 1056u);
  w.waves = 3;
  EXPECT_EQ(lf::grid_for(p, w).x, 3168u);
  EXPECT_DOUBLE_EQ(p.waves(lf::grid_for(p, w)), 3.0);
  EXPECT_DOUBLE_EQ(p.waves(lf::dims{1109, 1, 1}), 1109.0 / 1056.0);
}

// ---- clusters ----------------------------------------------------------------------------------------------

TEST(Cluster, ItemsGridsAreRoundedUpToWholeClusters) {
  // The grid from items(n) used to be refused by launchfit itself: "grid 5 is not a multiple of cluster 2".
  lf::plan p = plan_of({256, 1, 1}, 8, 132, {2, 1, 1});
  p.resident_clusters = 496;
  EXPECT_EQ(lf::grid_for(p, lf::work{lf::work::shape::items, 5 * 256, 1}).x, 6u);
  EXPECT_EQ(lf::grid_for(p, lf::work{lf::work::shape::items, 4 * 256, 1}).x, 4u);
  lf::plan q2 = plan_of({32, 8, 1}, 8, 132, {2, 2, 1});
  q2.resident_clusters = 100;
  EXPECT_EQ(lf::grid_for(q2, items2(100, 20)), (lf::dims{4, 4, 1}));  // ceil(100/32)=4, ceil(20/8)=3 -> 4
}

TEST(Cluster, ResidencyIsClustersTimesSizeNotBlocksPerSm) {
  // Clusters of 4 on an H200: 992 blocks co-reside where 8 blocks/SM x 132 SMs would plan 1056.
  lf::plan p = plan_of({256, 1, 1}, 8, 132, {4, 1, 1});
  p.resident_clusters = 248;
  EXPECT_EQ(p.resident_blocks(), 992);
  EXPECT_EQ(lf::grid_for(p, lf::work{}).x, 992u);  // one wave: whole clusters
  EXPECT_EQ(lf::grid_for(p, lf::work{lf::work::shape::grid_stride, 1ull << 30, 1}).x, 992u);
  p.options.cooperative = true;
  EXPECT_THROW(lf::grid_for(p, lf::work{lf::work::shape::items, 993ull * 256, 1}), lf::error);
}

TEST(Cluster, OneDimensionalWorkCannotFillClustersInY) {
  lf::plan p = plan_of({256, 1, 1}, 8, 132, {2, 2, 1});
  p.resident_clusters = 200;
  const std::string m = message_of([&] { lf::grid_for(p, lf::work{lf::work::shape::items, 4096, 1}); });
  EXPECT_TRUE(has(m, "CUDA_ERROR_INVALID_CLUSTER_SIZE")) << m;
  EXPECT_TRUE(has(m, "items({nx, ny})")) << m;
}

TEST(Cluster, CallerGridsMustBeWholeClusters) {
  lf::plan p = plan_of({256, 1, 1}, 8, 132, {2, 1, 1});
  p.resident_clusters = 400;
  lf::work w;
  w.kind = lf::work::shape::grid;
  w.grid = lf::dims{5, 1, 1};
  EXPECT_TRUE(has(message_of([&] { lf::grid_for(p, w); }), "grid 5 is not made of whole clusters of 2"));
}

TEST(Cluster, ValidationSetsResidentClustersFromTheOracle) {
  lf::query q = h200_query();
  q.cluster = lf::dims{4, 1, 1};
  q.active_clusters = [](int, std::size_t) { return 60; };  // fewer than the blocks per SM allow
  lf::plan p = lf::max_occupancy_policy{}.choose(q);
  ld::launch_requirements need;
  need.cluster = q.cluster;
  ld::apply_requirements(q, p, need);
  EXPECT_EQ(p.resident_clusters, 60);
  EXPECT_EQ(p.resident_blocks(), 240);
  // Never more than the residency the policy chose, in whole clusters.
  lf::plan capped = p;
  capped.blocks_per_sm = 1;  // 132 blocks: 33 clusters of 4
  EXPECT_EQ(capped.resident_blocks(), 132);
  q.active_clusters = [](int, std::size_t) { return 0; };
  lf::plan none = lf::max_occupancy_policy{}.choose(q);
  const std::string m = message_of([&] { ld::apply_requirements(q, none, need); });
  EXPECT_TRUE(has(m, "validate(cluster)")) << m;
  EXPECT_TRUE(has(m, "cuOccupancyMaxActiveClusters: 0")) << m;
}

TEST(Cluster, CooperativeClusterGridsAreValidatedByClusterResidency) {
  // cooperative().cluster({8,1,1}): 264 blocks planned from blocks per SM where 240 co-reside in clusters.
  lf::query q = h200_query();
  q.cluster = lf::dims{8, 1, 1};
  q.active_clusters = [](int, std::size_t) { return 30; };
  lf::plan p = lf::cooperative_policy{lf::cooperative_params{2, 1024}}.choose(q);
  ld::launch_requirements need;
  need.cooperative = true;
  need.cluster = q.cluster;
  ld::apply_requirements(q, p, need);
  EXPECT_EQ(p.resident_blocks(), 240);
  EXPECT_EQ(lf::grid_for(p, lf::work{}).x, 240u);
  lf::work too_many{lf::work::shape::items, 241ull * 1024, 1};
  EXPECT_THROW(lf::grid_for(p, too_many), lf::error);
}

TEST(Cluster, MaxOccupancyChoosesTheBlockByClusterOccupancy) {
  // A fake device where large blocks lose whole clusters: 1024-thread blocks fit 2 per SM, but only 20
  // clusters of 4 co-reside; 256-thread blocks give 200 clusters. Per-SM occupancy ties them (2048 threads);
  // cluster occupancy does not.
  lf::query q = h200_query();
  q.cluster = lf::dims{4, 1, 1};
  q.active_clusters = [](int block, std::size_t) { return block >= 512 ? 20 : 200; };
  const lf::plan p = lf::max_occupancy_policy{lf::max_occupancy_params{0, 0}}.choose(q);
  EXPECT_LT(p.block_threads, 512) << p.reason;
}

TEST(Cluster, KernelClusterDimsAreRequiredAndAConflictingSpecIsRefused) {
  lf::kernel_resources k = lf::kernel_resources::manual(32);
  k.demangled = "void clustered(int*)";
  k.required_cluster[0] = 2;
  k.required_cluster[1] = 1;
  k.required_cluster[2] = 1;
  ld::launch_requirements need;
  ld::require_kernel_cluster(need, k);
  EXPECT_EQ(need.cluster, (lf::dims{2, 1, 1}));
  EXPECT_TRUE(need.cluster_from_kernel);
  ld::launch_requirements asks4;
  asks4.cluster = lf::dims{4, 1, 1};
  const std::string m = message_of([&] { ld::require_kernel_cluster(asks4, k); });
  EXPECT_TRUE(has(m, "__cluster_dims__ are 2")) << m;
  EXPECT_TRUE(has(m, "asks for cluster 4")) << m;
}

// ---- block rules -------------------------------------------------------------------------------------------

TEST(BlockRule, AllowsWhatItSays) {
  const auto pow2 = lf::block_rule::power_of_two();
  for (int b : {1, 2, 64, 128, 256, 512, 1024}) EXPECT_TRUE(pow2.allows(b)) << b;
  for (int b : {0, -4, 96, 224, 288, 320, 544, 768}) EXPECT_FALSE(pow2.allows(b)) << b;
  const auto m64 = lf::block_rule::multiple_of(64);
  EXPECT_TRUE(m64.allows(192));
  EXPECT_FALSE(m64.allows(224));
  const auto set = lf::block_rule::one_of({96, 160});
  EXPECT_TRUE(set.allows(160));
  EXPECT_FALSE(set.allows(128));
  EXPECT_EQ(set.to_string(), "one of 96,160");
  const auto bad = lf::block_rule::one_of({64, 4096});
  EXPECT_FALSE(bad.allows(64));
  EXPECT_TRUE(has(bad.to_string(), "outside 1..1024"));
  for (unsigned bad_multiple : {0u, 1025u, 4096u}) {
    const auto none = lf::block_rule::multiple_of(bad_multiple);
    EXPECT_FALSE(none.is_any());
    for (int b : {32, 256, 1024}) EXPECT_FALSE(none.allows(b)) << bad_multiple << " " << b;
    EXPECT_TRUE(has(none.to_string(), "outside 1..1024"));
  }
  EXPECT_TRUE(lf::block_rule{}.is_any());
  EXPECT_EQ(lf::block_rule{}.hash(), 0u);
  std::set<std::uint64_t> hashes{pow2.hash(), m64.hash(), set.hash(), lf::block_rule::multiple_of(32).hash(),
                                 lf::block_rule::one_of({160, 96}).hash(), bad.hash()};
  EXPECT_EQ(hashes.size(), 6u);
}

TEST(BlockRule, EveryBuiltInPolicyChoosesAnAllowedBlock) {
  // Kernels tuned at 224/288/320 threads summed wrongly when the reduction assumed a power of two.
  for (int regs : {16, 32, 40, 56, 72, 96, 128, 168, 255}) {
    lf::query q = h200_query(regs);
    q.blocks = lf::block_rule::power_of_two();
    const lf::plan mo = lf::max_occupancy_policy{}.choose(q);
    const lf::plan mo0 = lf::max_occupancy_policy{lf::max_occupancy_params{0, 0}}.choose(q);
    const lf::plan bif = lf::bytes_in_flight_policy{lf::bytes_in_flight_params{16, 0, 256}}.choose(q);
    const lf::plan coop = lf::cooperative_policy{}.choose(q);
    for (const lf::plan* p : {&mo, &mo0, &bif, &coop}) {
      EXPECT_TRUE(is_power_of_two(p->block_threads)) << regs << " regs: " << p->to_string();
      EXPECT_EQ(p->blocks, "power of two");
    }
  }
  lf::query q = h200_query(40);
  q.blocks = lf::block_rule::one_of({96, 160});
  const int b = lf::max_occupancy_policy{}.choose(q).block_threads;
  EXPECT_TRUE(b == 96 || b == 160) << b;
}

TEST(BlockRule, AFixedBlockOutsideTheRuleIsRefusedNamingTheRule) {
  lf::query q = h200_query();
  q.blocks = lf::block_rule::power_of_two();
  const std::string m = message_of([&] { lf::fixed_policy{lf::fixed_params{224, 0}}.choose(q); });
  EXPECT_TRUE(has(m, "validate(block)")) << m;
  EXPECT_TRUE(has(m, "block of 224 threads is not allowed: the launch's block rule is power of two")) << m;
  EXPECT_TRUE(has(m, launchfit_test::h200_kernel_demangled)) << m;
  EXPECT_EQ(q.active_blocks_for(224), 0);  // plugins see it through the oracle
  EXPECT_GT(q.active_blocks_for(256), 0);
}

TEST(BlockRule, AStoredPlanOutsideTheRuleIsNotUsed) {
  lf::query q = h200_query();
  q.blocks = lf::block_rule::power_of_two();
  lf::plan stored = plan_of({288, 1, 1}, 7, 132);
  EXPECT_THROW(ld::check_stored_plan(q, stored, {}, nullptr), lf::error);
}

// ---- multi-dimensional blocks ------------------------------------------------------------------------------

TEST(Shape, PoliciesShapeTwoDimensionalBlocksInRowsOf32) {
  lf::query q = h200_query();
  q.work_hint = items2(1000, 777);
  const lf::plan p = lf::max_occupancy_policy{}.choose(q);
  EXPECT_EQ(p.block.x, 32u) << p.to_string();
  EXPECT_EQ(p.block.count(), 256u);
  EXPECT_EQ(p.block, (lf::dims{32, 8, 1}));
  const lf::plan f = lf::fixed_dims_policy{lf::fixed_dims_params{32, 32, 1, 0, 1, 1}}.choose(q);
  EXPECT_EQ(f.block, (lf::dims{32, 32, 1}));
  EXPECT_EQ(lf::grid_for(f, items2(1000, 777)), (lf::dims{32, 25, 1}));
  // Rows of 32: a block that is not a multiple of 32 cannot be shaped for 2-D work.
  EXPECT_EQ(q.active_blocks_for(48), 0);
  EXPECT_THROW((lf::fixed_policy{lf::fixed_params{48, 0}}.choose(q)), lf::error);
}

// block_x_free() only lets a policy choose wider 2-D blocks of its own: what launchfit shapes is unchanged, 1-D
// work keeps its 1-D block (a block of 48 too) and 2-D work its rows of 32.
TEST(Shape, BlockXFreeChangesNothingLaunchfitShapes) {
  for (const lf::work& w : {lf::work{lf::work::shape::items, 1u << 20, 1}, items2(1000, 777)}) {
    lf::query plain = h200_query();
    plain.work_hint = w;
    lf::query free = plain;
    free.shape_rule.free_x = true;
    for (int block : {48, 96, 256, 1024})
      EXPECT_EQ(free.active_blocks_for(block), plain.active_blocks_for(block)) << block;
    const lf::plan a = lf::max_occupancy_policy{}.choose(plain);
    const lf::plan b = lf::max_occupancy_policy{}.choose(free);
    EXPECT_EQ(a.block, b.block) << b.to_string();
    EXPECT_EQ(lf::grid_for(a, w), lf::grid_for(b, w)) << b.to_string();
    if (w.rank == 1) {
      EXPECT_EQ(b.block.y, 1u) << b.to_string();
      EXPECT_EQ((lf::fixed_policy{lf::fixed_params{48, 0}}.choose(free).block), (lf::dims{48, 1, 1}));
    } else {
      EXPECT_EQ(b.block, (lf::dims{32, 8, 1})) << b.to_string();
    }
    EXPECT_TRUE(has(b.to_string(), "shape=x=32n,free_x")) << b.to_string();  // carried, and said
  }
}

TEST(Shape, FixedDimsAreValidatedPerDimension) {
  lf::query q = h200_query();
  EXPECT_THROW((lf::fixed_dims_policy{lf::fixed_dims_params{32, 64, 1, 0, 1, 1}}.choose(q)), lf::error);  // 2048
  EXPECT_THROW((lf::fixed_dims_policy{lf::fixed_dims_params{1, 1, 128, 0, 1, 1}}.choose(q)), lf::error);  // z > 64
  EXPECT_THROW((lf::fixed_dims_policy{lf::fixed_dims_params{0, 1, 1, 0, 1, 1}}.choose(q)), lf::error);
  EXPECT_EQ(lf::fixed({32, 32}).policy_value().to_string(), "fixed_dims(bx=32,by=32,bz=1,gx=0,gy=1,gz=1)");
}

TEST(Shape, AStoredTuningPlanMustHaveTheShapeThisLaunchMakes) {
  lf::query q = h200_query();
  q.work_hint = items2(4096, 4096);
  lf::plan shaped = plan_of({32, 8, 1}, 8, 132);
  EXPECT_EQ(ld::check_stored_plan(q, shaped, {}, nullptr), "");
  lf::plan other = plan_of({16, 16, 1}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(q, other, {}, nullptr), "block shape this launch does not make"));
  lf::plan flat = plan_of({256, 1, 1}, 8, 132);
  EXPECT_NE(ld::check_stored_plan(q, flat, {}, nullptr), "");  // a 1-D block for 2-D work
  // Without block_x_free() a kernel may rely on rows of one warp (a tile sized for {32, t/32}): a wider block
  // from a file is refused.
  EXPECT_FALSE(lf::block_shape_free(q));
  lf::plan wide0 = plan_of({64, 4, 1}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(q, wide0, {}, nullptr), "block shape this launch does not make"));
  // With it (2-D work whose kernel indexes by blockDim): a tuned block of its own is x a multiple of 32, y >= 2.
  lf::query open = q;
  open.shape_rule.free_x = true;
  ASSERT_TRUE(lf::block_shape_free(open));
  lf::plan wide = plan_of({64, 4, 1}, 8, 132);
  EXPECT_EQ(ld::check_stored_plan(open, wide, {}, nullptr), "");
  EXPECT_EQ(wide.block, (lf::dims{64, 4, 1}));
  lf::plan rows = plan_of({32, 8, 1}, 8, 132);
  EXPECT_EQ(ld::check_stored_plan(open, rows, {}, nullptr), "");
  lf::plan deep = plan_of({64, 2, 2}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(open, deep, {}, nullptr), "block shape this launch does not make"));
  lf::plan odd = plan_of({48, 4, 1}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(open, odd, {}, nullptr), "block shape this launch does not make"));
  // 1-D work, or a fixed y, leave the shape to launchfit even with block_x_free(): refused there.
  lf::query one = h200_query();
  one.work_hint = lf::work{lf::work::shape::items, 1u << 24, 1};
  one.shape_rule.free_x = true;
  EXPECT_FALSE(lf::block_shape_free(one));
  lf::plan wide1 = plan_of({64, 4, 1}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(one, wide1, {}, nullptr), "block shape this launch does not make"));
  lf::query fixed_y = open;
  fixed_y.shape_rule.y = 4;
  EXPECT_FALSE(lf::block_shape_free(fixed_y));
  lf::query ruled = q;
  ruled.shape_rule.x_multiple = 64;
  EXPECT_FALSE(lf::block_shape_free(ruled));
  lf::plan wide2 = plan_of({128, 2, 1}, 8, 132);  // the launch makes {64, 4}
  EXPECT_TRUE(has(ld::check_stored_plan(ruled, wide2, {}, nullptr), "block shape this launch does not make"));
  // A wider x must stay a multiple of the launch's block_x_multiple.
  ruled.shape_rule.free_x = true;
  ASSERT_TRUE(lf::block_shape_free(ruled));
  lf::plan wide3 = plan_of({128, 2, 1}, 8, 132);
  EXPECT_EQ(ld::check_stored_plan(ruled, wide3, {}, nullptr), "");
  lf::plan wide4 = plan_of({96, 2, 1}, 6, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(ruled, wide4, {}, nullptr), "block shape this launch does not make"));
}

// ---- block shapes: a y the kernel fixes, x multiples, rows per thread
// ----------------------------------------

namespace {

lf::block_shape shape_of(unsigned y, unsigned x_multiple = 0, std::uint32_t per_thread_y = 1,
                         unsigned z = 1) {
  lf::block_shape b;
  b.y = static_cast<std::uint16_t>(y);
  b.x_multiple = static_cast<std::uint16_t>(x_multiple);
  b.per_thread_y = per_thread_y;
  b.z = static_cast<std::uint16_t>(z);
  return b;
}

// A quasirandom generator's launch: 3 dimensions in threadIdx.y, block {bx, 3}, items({n, 3}).
lf::query quasirandom_query(int regs = 32) {
  lf::query q = h200_query(regs);
  q.work_hint = items2(1u << 20, 3);
  q.shape_rule = shape_of(3);
  return q;
}

}  // namespace

TEST(BlockShape, AllowsTheTotalsItCanShapeAndShapesThem) {
  const lf::block_shape three = shape_of(3);
  EXPECT_FALSE(three.is_default());
  EXPECT_EQ(three.thread_step(), 96u);
  for (int t : {96, 192, 288, 960}) EXPECT_TRUE(three.allows(t)) << t;
  for (int t : {32, 64, 100, 256, 1024}) EXPECT_FALSE(three.allows(t)) << t;
  EXPECT_EQ(three.block_for(192), (lf::dims{64, 3, 1}));
  EXPECT_TRUE(three.fits({64, 3, 1}));
  EXPECT_FALSE(three.fits({48, 3, 1}));  // x not a multiple of 32
  EXPECT_FALSE(three.fits({32, 8, 1}));
  // Free y with a tile width: {m, threads / m}.
  const lf::block_shape tile64 = shape_of(0, 64);
  EXPECT_EQ(tile64.block_for(256), (lf::dims{64, 4, 1}));
  EXPECT_FALSE(tile64.allows(96));
  EXPECT_TRUE(tile64.fits({128, 2, 1}));
  // Fixed y and z, x a multiple of 8: {threads / (y z), y, z}.
  const lf::block_shape box = shape_of(4, 8, 1, 2);
  EXPECT_EQ(box.block_for(128), (lf::dims{16, 4, 2}));
  EXPECT_FALSE(box.allows(96));  // 96 / 8 = 12, not a multiple of 8
  // 32 is the default multiple; per_thread_y 0 is 1.
  EXPECT_TRUE(shape_of(0, 32).is_default());
  EXPECT_TRUE(shape_of(0, 0, 0).is_default());
  EXPECT_EQ(shape_of(3, 32), three);
  EXPECT_EQ(shape_of(3, 32).hash(), three.hash());
}

TEST(BlockShape, NamesItselfWithoutSpacesAndReadsBack) {
  EXPECT_EQ(shape_of(3).to_string(), "x=32n,y=3");
  EXPECT_EQ(shape_of(8, 0, 4).to_string(), "x=32n,y=8,per_thread_y=4");
  EXPECT_EQ(shape_of(4, 8, 1, 2).to_string(), "x=8n,y=4,z=2");
  lf::block_shape wide;
  wide.free_x = true;
  EXPECT_EQ(wide.to_string(), "x=32n,free_x");
  EXPECT_TRUE(wide.is_default());  // it shapes nothing by itself
  EXPECT_TRUE(wide.is_set());
  EXPECT_NE(wide.hash(), 0u);
  EXPECT_NE(wide, lf::block_shape{});
  for (const lf::block_shape& b : {shape_of(3), shape_of(8, 0, 4), shape_of(4, 8, 1, 2), shape_of(0, 64), wide}) {
    const auto back = ld::parse_block_shape(b.to_string());
    ASSERT_TRUE(back.has_value()) << b.to_string();
    EXPECT_EQ(*back, b) << b.to_string();
  }
  for (const char* bad : {"", "x=32", "x=0n", "x=2000n", "x=32n,y=3,y=4", "y=3", "x=32n,z=65",
                          "x=32n,per_thread_y=0", "x=32n,y=3 ", "x=-32n", "invalid(x=32n)", "x=32n,free_x,y=3",
                          "x=32n,free_x,free_x", "x=32n,free"})
    EXPECT_FALSE(ld::parse_block_shape(bad).has_value()) << bad;
}

TEST(BlockShape, EveryBuiltInPolicyChoosesATotalTheShapeAllowsAndShapesIt) {
  for (int regs : {16, 32, 40, 56, 72, 96, 128, 168, 255}) {
    const lf::query q = quasirandom_query(regs);
    lf::query resident = q;
    resident.work_hint = lf::work{};  // cooperative: one full wave
    const lf::plan mo = lf::max_occupancy_policy{}.choose(q);
    const lf::plan mo0 = lf::max_occupancy_policy{lf::max_occupancy_params{0, 0}}.choose(q);
    const lf::plan bif = lf::bytes_in_flight_policy{lf::bytes_in_flight_params{16, 0, 256}}.choose(q);
    const lf::plan coop = lf::cooperative_policy{}.choose(resident);
    const lf::plan fixed = lf::fixed_policy{lf::fixed_params{192, 0}}.choose(q);
    for (const lf::plan* p : {&mo, &mo0, &bif, &coop, &fixed}) {
      EXPECT_EQ(p->block.y, 3u) << regs << " regs: " << p->to_string();
      EXPECT_EQ(p->block.z, 1u) << regs << " regs: " << p->to_string();
      EXPECT_EQ(p->block.x % 32, 0u) << regs << " regs: " << p->to_string();
      EXPECT_EQ(p->shape_rule, q.shape_rule) << p->to_string();
      EXPECT_TRUE(has(p->to_string(), " block_shape=x=32n,y=3")) << p->to_string();
    }
    EXPECT_EQ(fixed.block, (lf::dims{64, 3, 1}));
    // The driver's choice under the shape: the most resident threads among the totals it allows.
    int best = 0;
    for (int t = 96; t <= q.max_block_threads(); t += 96) best = std::max(best, t * q.active_blocks_for(t));
    EXPECT_EQ(static_cast<int>(mo0.block.count()) * mo0.blocks_per_sm, best)
        << regs << " regs: " << mo0.to_string();
  }
  // A block the shape cannot make is refused, naming the shape.
  const lf::query q = quasirandom_query();
  EXPECT_EQ(q.active_blocks_for(256), 0);  // plugins see it through the oracle
  EXPECT_GT(q.active_blocks_for(288), 0);
  std::string m = message_of([&] { lf::fixed_policy{lf::fixed_params{256, 0}}.choose(q); });
  EXPECT_TRUE(
      has(m,
          "block of 256 threads is not allowed: the launch's block shape x=32n,y=3 needs a multiple of 96 "
          "threads"))
      << m;
  EXPECT_TRUE(has(m, launchfit_test::h200_kernel_demangled)) << m;
  m = message_of([&] { lf::fixed_dims_policy{lf::fixed_dims_params{96, 2, 1, 0, 1, 1}}.choose(q); });
  EXPECT_TRUE(has(m, "block 96x2 does not have the launch's block shape x=32n,y=3")) << m;
  const lf::plan own = lf::fixed_dims_policy{lf::fixed_dims_params{32, 3, 1, 0, 1, 1}}.choose(q);
  EXPECT_EQ(own.block, (lf::dims{32, 3, 1}));
  // A shape no block has is refused as such.
  lf::query bad = q;
  bad.shape_rule.invalid = true;
  m = message_of([&] { lf::max_occupancy_policy{}.choose(bad); });
  EXPECT_TRUE(has(m, "validate(shape)")) << m;
}

TEST(BlockShape, TheTransposeShapeGives32x8BlocksUnderLaunchBoundsOf256) {
  // cuda-samples' transpose: a 32x32 tile, block 32x8, 4 rows per thread, __launch_bounds__(256).
  lf::query q = h200_query();
  q.kernel.max_threads_per_block = 256;
  q.kernel.static_smem_bytes = 32 * 33 * 4;
  q.work_hint = items2(1000, 777);
  q.shape_rule = shape_of(8, 0, 4);
  for (const lf::plan& p : {lf::max_occupancy_policy{}.choose(q),
                            lf::max_occupancy_policy{lf::max_occupancy_params{0, 0}}.choose(q),
                            lf::bytes_in_flight_policy{lf::bytes_in_flight_params{8, 0, 256}}.choose(q),
                            lf::fixed_policy{lf::fixed_params{256, 0}}.choose(q)}) {
    EXPECT_EQ(p.block, (lf::dims{32, 8, 1})) << p.to_string();
    // grid = ceil(1000 / 32) x ceil(777 / (8 x 4)): one block per 32x32 tile.
    EXPECT_EQ(lf::grid_for(p, items2(1000, 777)), (lf::dims{32, 25, 1})) << p.to_string();
  }
}

TEST(BlockShape, TheGridFollowsTheShape) {
  lf::plan transpose = plan_of({32, 8, 1}, 8, 132);
  transpose.shape_rule = shape_of(8, 0, 4);
  EXPECT_EQ(lf::grid_for(transpose, items2(1000, 777)), (lf::dims{32, 25, 1}));
  EXPECT_EQ(lf::grid_for(transpose, items2(1024, 1024)), (lf::dims{32, 32, 1}));
  lf::plan rows = plan_of({64, 4, 1}, 8, 132);
  rows.shape_rule = shape_of(0, 64, 2);  // free y: 4 rows of 64, 2 rows each: 8 rows per block
  EXPECT_EQ(lf::grid_for(rows, items2(1000, 777)), (lf::dims{16, 98, 1}));
  // 1-D work with a shape runs along block x: the quasirandom generator's items(n), grid_stride(n), none.
  lf::plan qrng = plan_of({64, 3, 1}, 10, 132);
  qrng.shape_rule = shape_of(3);
  EXPECT_EQ(lf::grid_for(qrng, lf::work{lf::work::shape::items, 100000, 1}), (lf::dims{1563, 1, 1}));
  EXPECT_EQ(lf::grid_for(qrng, items2(100000, 3)), (lf::dims{1563, 1, 1}));
  EXPECT_EQ(lf::grid_for(qrng, lf::work{lf::work::shape::grid_stride, 1u << 30, 1}), (lf::dims{1320, 1, 1}));
  EXPECT_EQ(lf::grid_for(qrng, lf::work{}), (lf::dims{1320, 1, 1}));
  // Without a shape a 2-D block over 1-D work still covers its threads, as before.
  lf::plan plain = plan_of({64, 3, 1}, 10, 132);
  EXPECT_EQ(lf::grid_for(plain, lf::work{lf::work::shape::items, 100000, 1}), (lf::dims{521, 1, 1}));
}

TEST(BlockShape, StoredPlansMustHaveTheShape) {
  lf::query q = quasirandom_query();
  lf::plan rows_of_32 = plan_of({32, 8, 1}, 8, 132);  // what the launch made before the shape was given
  EXPECT_NE(ld::check_stored_plan(q, rows_of_32, {}, nullptr), "");
  lf::plan flat = plan_of({96, 1, 1}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(q, flat, {}, nullptr), "block shape this launch does not make"));
  lf::plan wide = plan_of({64, 3, 1}, 10, 132);
  EXPECT_EQ(ld::check_stored_plan(q, wide, {}, nullptr), "");
  EXPECT_EQ(wide.shape_rule, q.shape_rule);  // carried, for the grid
  // A built-in policy's stored plan is held to the rule by validation too.
  lf::plan computed = lf::max_occupancy_policy{}.choose(q);
  lf::plan other = plan_of({64, 4, 1}, 8, 132);
  EXPECT_THROW(ld::check_stored_plan(q, other, {}, &computed), lf::error);
}

TEST(BlockShape, IsPartOfThePlanKey) {
  ld::launch_request base = ld::make_request(lf::max_occupancy().items({4096, 3}));
  std::set<std::uint64_t> keys{ld::shape_bits(base)};
  for (const auto& s :
       {lf::max_occupancy().items({4096, 3}).block_y(3), lf::max_occupancy().items({4096, 3}).block_y(4),
        lf::max_occupancy().items({4096, 3}).block_y(3).block_z(2),
        lf::max_occupancy().items({4096, 3}).block_y(3).per_thread_y(2),
        lf::max_occupancy().items({4096, 3}).block_x_multiple(64),
        lf::max_occupancy().items({4096, 3}).block_y(3).block_x_multiple(64),
        lf::max_occupancy().items({4096, 3}).per_thread_y(4), lf::max_occupancy().items({4096, 3}).block_x_free(),
        lf::max_occupancy().items({4096, 3}).block_x_multiple(64).block_x_free()}) {
    keys.insert(ld::shape_bits(ld::make_request(s)));
  }
  EXPECT_EQ(keys.size(), 10u);
  EXPECT_TRUE(ld::make_request(lf::max_occupancy().items({4096, 3}).block_x_free()).shape_rule.free_x);
  // The default multiple spelled out is the same launch, and the same key.
  EXPECT_EQ(
      ld::shape_bits(ld::make_request(lf::max_occupancy().items({4096, 3}).block_y(3).block_x_multiple(32))),
      ld::shape_bits(ld::make_request(lf::max_occupancy().items({4096, 3}).block_y(3))));
}

// With block_x_free() a work-dependent plan is keyed by the row width's octave as well as its size bucket: a
// wide block tuned on 4096-wide rows is never taken for rows of 1024 with as many pixels.
TEST(BlockShape, AFreeXPlanIsBucketedByItsRowWidth) {
  lf::block_shape free;
  free.free_x = true;
  const lf::block_shape plain;
  EXPECT_EQ(ld::plan_bucket(25, items2(4096, 4096), plain), 25u);
  EXPECT_EQ(ld::plan_bucket(0, items2(4096, 4096), free), 0u);  // a plan for every size stays one plan
  EXPECT_EQ(ld::plan_bucket(25, lf::work{lf::work::shape::items, 1u << 24, 1}, free), 25u);  // 1-D work
  const std::uint64_t wide = ld::plan_bucket(25, items2(4096, 4096), free);
  EXPECT_NE(wide, 25u);
  EXPECT_EQ(ld::plan_bucket(25, items2(4097, 4000), free), wide);  // the same octave
  EXPECT_EQ(ld::plan_bucket(25, items2(8191, 2048), free), wide);
  EXPECT_NE(ld::plan_bucket(25, items2(1024, 16384), free), wide);
  EXPECT_NE(ld::plan_bucket(25, items2(8192, 2048), free), wide);
  EXPECT_NE(ld::plan_bucket(26, items2(4096, 4096), free), wide);
  // Through the spec, as launches build it.
  const auto r = ld::make_request(lf::max_occupancy().items({4096, 4096}).block_x_free());
  EXPECT_EQ(r.bucket, ld::plan_bucket(lf::max_occupancy_policy{}.work_bucket(r.shape), r.shape, free));
}

TEST(BlockShape, SettersReachTheRequestAndPlannedPassesItOn) {
  const auto s = lf::max_occupancy().items({1000, 777}).block_y(8).per_thread_y(4).block_x_multiple(64);
  const ld::launch_request r = ld::make_request(s);
  EXPECT_EQ(r.shape_rule, shape_of(8, 64, 4));
  EXPECT_EQ(lf::fixed(256).block_y(2000).shape_rule().invalid, true);
  EXPECT_EQ(lf::fixed(256).block_z(65).shape_rule().invalid, true);
  EXPECT_EQ(lf::fixed(256).per_thread_y(0).shape_rule().per_thread_y, 1u);
  lf::plan p = plan_of({64, 8, 1}, 4, 132);
  p.shape_rule = shape_of(8, 64, 4);
  EXPECT_EQ(lf::planned(p).shape_rule(), p.shape_rule);
  EXPECT_EQ(lf::max_occupancy().shape(p.shape_rule).shape_rule(), p.shape_rule);
}

// ---- programmatic dependent launch ----------------------------------------------------------------------

TEST(Pdl, IsPartOfThePlanAndRefusedBelowSm90) {
  lf::query q = h200_query();
  ld::launch_requirements need;
  need.programmatic = true;
  lf::plan p = lf::max_occupancy_policy{}.choose(q);
  ld::apply_requirements(q, p, need);
  EXPECT_TRUE(p.options.programmatic);
  lf::query a100 = h200_query();
  a100.device = lf::device_limits::for_arch("A100");
  lf::plan old = lf::max_occupancy_policy{}.choose(a100);
  const std::string m = message_of([&] { ld::apply_requirements(a100, old, need); });
  EXPECT_TRUE(has(m, "validate(pdl)")) << m;
  EXPECT_TRUE(has(m, "needs sm_90 or newer")) << m;
  lf::plan stored = plan_of({256, 1, 1}, 8, 132);
  EXPECT_TRUE(has(ld::check_stored_plan(q, stored, need, nullptr), "programmatic"));
}

// ---- SM budget -------------------------------------------------------------------------------------------

TEST(SmBudget, ResidentGridsAreSizedForTheBudget) {
  lf::query q = h200_query();
  q.device.sm_count = 100;  // sms(100) on a 132-SM H200
  const lf::plan coop = lf::cooperative_policy{}.choose(q);
  EXPECT_EQ(coop.sm_count, 100);
  EXPECT_EQ(lf::grid_for(coop, lf::work{}).x, static_cast<unsigned>(coop.blocks_per_sm * 100));
  const lf::plan mo = lf::max_occupancy_policy{}.choose(q);
  EXPECT_EQ(lf::grid_for(mo, lf::work{lf::work::shape::grid_stride, 1ull << 30, 1}).x,
            static_cast<unsigned>(mo.blocks_per_sm * 100));
}

// ---- plan keys -------------------------------------------------------------------------------------------

TEST(Keys, RulesShapesBudgetsAndPdlEachGetTheirOwnPlan) {
  ld::launch_request base;
  base.shape.kind = lf::work::shape::items;  // (a spec without work has a plan of its own: see plan-contract-test)
  std::set<std::uint64_t> shapes, launches;
  auto add = [&](const ld::launch_request& r) {
    shapes.insert(ld::shape_bits(r));
    launches.insert(ld::launch_bits(r));
  };
  add(base);
  EXPECT_EQ(ld::shape_bits(base), 0u);
  ld::launch_request pow2 = base;
  pow2.blocks = lf::block_rule::power_of_two();
  ld::launch_request m64 = base;
  m64.blocks = lf::block_rule::multiple_of(64);
  ld::launch_request two_d = base;
  two_d.shape.rank = 2;
  ld::launch_request budget = base;
  budget.options.sm_budget = 100;
  ld::launch_request budget2 = base;
  budget2.options.sm_budget = 66;
  for (const auto* r : {&pow2, &m64, &two_d, &budget, &budget2}) add(*r);
  EXPECT_EQ(shapes.size(), 6u);
  ld::launch_request pdl = base;
  pdl.options.programmatic = true;
  ld::launch_request np = base;
  np.options.cluster = lf::dims{16, 1, 1};
  np.options.non_portable_cluster = true;
  ld::launch_request c16 = base;
  c16.options.cluster = lf::dims{16, 1, 1};
  for (const auto* r : {&pdl, &np, &c16}) add(*r);
  EXPECT_EQ(launches.size(), 4u);
}

TEST(Spec, SettersReachTheRequest) {
  const auto s = lf::max_occupancy()
                     .items({1000, 777})
                     .blocks(lf::block_rule::power_of_two())
                     .cluster({2, 1, 1}, true)
                     .pdl()
                     .sms(64);
  const ld::launch_request r = ld::make_request(s);
  EXPECT_EQ(r.shape.rank, 2);
  EXPECT_EQ(r.shape.n, 1000u);
  EXPECT_EQ(r.shape.ny, 777u);
  EXPECT_TRUE(r.options.programmatic);
  EXPECT_TRUE(r.options.non_portable_cluster);
  EXPECT_EQ(r.options.sm_budget, 64);
  EXPECT_EQ(r.options.cluster, (lf::dims{2, 1, 1}));
  EXPECT_TRUE(r.blocks.allows(256));
  EXPECT_FALSE(r.blocks.allows(224));
  const auto g = lf::cooperative().grid({264, 1, 1});
  EXPECT_EQ(g.work_shape().kind, lf::work::shape::grid);
  EXPECT_EQ(g.work_shape().grid.x, 264u);
  EXPECT_EQ(lf::max_occupancy().grid_stride(10).waves(0).work_shape().waves, 1u);
}

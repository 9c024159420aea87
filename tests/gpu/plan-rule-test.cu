// SPDX-License-Identifier: MIT
// One plan rule, on a GPU: plan_for(k, spec) answers exactly what launch(k, spec, ...) runs for every spec
// launch() accepts (items, grid_stride, grid(), no work, cooperative, cluster), a spec without work runs one
// full wave, the n-body port (plan without the work, launch .grid(grid_for(p, spec.work_shape()))) stays
// right, and no LAUNCHFIT_POLICY override (every built-in, a plugin, bad parameters) turns the cuda-samples
// conjugate-gradient pattern (plan_for + launch of a cooperative spec without work) into an exception.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"
#include "test_doubles.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;
using launchfit_test::device_buffer;

namespace {

// Counts every block that ran (and checks nothing: any grid is right for it).
__global__ void count_blocks(unsigned* blocks) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(blocks, 1u);
}

// A grid-sync kernel: correct only when every block co-resides (a cooperative launch). Stands for the
// conjugate-gradient solver of the CUDA samples, whose plan_for() + launch is the pattern overrides must
// keep.
__global__ void cg_exchange(int* slots, int* seen) {
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0) slots[blockIdx.x] = int(blockIdx.x) + 1;
  grid.sync();
  if (threadIdx.x == 0) seen[blockIdx.x] = slots[(blockIdx.x + 1) % gridDim.x];
}

// n-body-like: each block takes tiles of `tile` bodies, one per thread, in a grid-stride loop over tiles;
// correct only with blocks of exactly `tile` threads (the port computes `tile` from the planned block).
__global__ void tiles_of(float* out, const float* in, int n, int tile) {
  if (static_cast<int>(blockDim.x) != tile) return;  // a launch that diverged from its plan leaves zeros
  for (int t = blockIdx.x; t * tile < n; t += gridDim.x) {
    const int i = t * tile + threadIdx.x;
    if (i < n) out[i] = 2.0f * in[i];
  }
}

class PlanRule : public testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    lf::set_policy_overrides("");
    lf::cache().clear();
  }
  void TearDown() override { lf::set_policy_overrides(""); }
};

// plan_for() then launch() of the same spec: the same cached plan, and the grid grid_for() gives for it.
template <class Spec>
void expect_same_plan_and_grid(const char* what, const Spec& spec) {
  SCOPED_TRACE(what);
  device_buffer<unsigned> blocks(1);
  blocks.zero();
  const lf::plan& p = lf::plan_for(count_blocks, spec);
  const lf::launched ran = lf::launch(count_blocks, spec, blocks.ptr);
  EXPECT_EQ(&ran.plan(), &p) << "plan_for() answered another plan than the launch ran";
  EXPECT_EQ(ran.block, p.block);
  EXPECT_EQ(ran.grid, lf::grid_for(p, spec.work_shape()));
  EXPECT_EQ(blocks.download()[0], ran.grid.count());
  if (spec.work_shape().kind == lf::work::shape::none)
    EXPECT_EQ(ran.grid.count(), static_cast<unsigned long long>(p.resident_blocks())) << "one full wave";
}

TEST_F(PlanRule, EverySpecFormIsPlannedAsItIsLaunched) {
  const unsigned n = 1 << 20;
  expect_same_plan_and_grid("max_occupancy().items(n)", lf::max_occupancy().items(n));
  expect_same_plan_and_grid("max_occupancy().items(16384)", lf::max_occupancy().items(16384));
  expect_same_plan_and_grid("bytes_in_flight(16).items(n)", lf::bytes_in_flight(16).items(n));
  expect_same_plan_and_grid("max_occupancy().items({nx, ny})", lf::max_occupancy().items({2048, 512}));
  expect_same_plan_and_grid("fixed({16, 16}).items({nx, ny})", lf::fixed({16, 16}).items({2048, 512}));
  expect_same_plan_and_grid("max_occupancy().grid_stride(n)", lf::max_occupancy().grid_stride(n));
  expect_same_plan_and_grid("bytes_in_flight(32).grid_stride(n).waves(2)",
                            lf::bytes_in_flight(32).grid_stride(n).waves(2));
  expect_same_plan_and_grid("max_occupancy().grid({264})", lf::max_occupancy().grid({264}));
  expect_same_plan_and_grid("fixed(128).grid({100, 3})", lf::fixed(128).grid({100, 3}));
  // No work: one full wave, under every policy (the ones that decide by the work too).
  expect_same_plan_and_grid("max_occupancy()", lf::max_occupancy());
  expect_same_plan_and_grid("max_occupancy(0)", lf::max_occupancy(0));
  expect_same_plan_and_grid("bytes_in_flight(16)", lf::bytes_in_flight(16));
  expect_same_plan_and_grid("fixed(256)", lf::fixed(256));
  expect_same_plan_and_grid("max_occupancy().sms(66)", lf::max_occupancy().sms(66));
  // Cooperative: without work, with grid-stride work, with a caller's co-resident grid.
  expect_same_plan_and_grid("cooperative()", lf::cooperative());
  expect_same_plan_and_grid("cooperative(1)", lf::cooperative(1));
  expect_same_plan_and_grid("cooperative().grid_stride(n)", lf::cooperative().grid_stride(n));
  expect_same_plan_and_grid("max_occupancy().cooperative()", lf::max_occupancy().cooperative());
  expect_same_plan_and_grid("cooperative().grid({132})", lf::cooperative().grid({132}));
  // Clusters: items, no work, cooperative.
  expect_same_plan_and_grid("max_occupancy().items(n).cluster({2})",
                            lf::max_occupancy().items(n).cluster({2, 1, 1}));
  expect_same_plan_and_grid("max_occupancy().cluster({4})", lf::max_occupancy().cluster({4, 1, 1}));
  expect_same_plan_and_grid("cooperative().cluster({2})", lf::cooperative().cluster({2, 1, 1}));
}

TEST_F(PlanRule, PlanWithoutTheWorkThenLaunchTheGridItGives) {
  // The n-body port: plan without the work, compute the tile from the plan, launch one wave as a grid.
  const int n = 16384;  // small: max_occupancy() would plan items(n) with smaller blocks
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 1000) + 0.5f;
  device_buffer<float> in(n), out(n);
  in.upload(h);
  out.zero();
  const auto spec = lf::max_occupancy();
  const lf::plan& p = lf::plan_for(tiles_of, spec);
  EXPECT_TRUE(p.without_work) << p.to_string();
  const lf::dims wave = lf::grid_for(p, spec.work_shape());
  EXPECT_EQ(wave.count(), static_cast<unsigned long long>(p.resident_blocks()));
  const lf::launched ran =
      lf::launch(tiles_of, lf::max_occupancy().grid(wave), out.ptr, in.ptr, n, p.block_threads);
  EXPECT_EQ(ran.block, p.block);
  EXPECT_EQ(ran.grid, wave);
  std::size_t wrong = 0;
  const std::vector<float> o = out.download();
  for (int i = 0; i < n; ++i) wrong += o[i] != 2.0f * h[i];
  EXPECT_EQ(wrong, 0u) << "planned " << p.to_string() << ", launched block " << ran.block.to_string();

  // Sizing items(n) with that plan is refused: the spec with items(n) runs another block here.
  try {
    (void)lf::grid_for(p, lf::max_occupancy().items(n).work_shape());
    ADD_FAILURE() << "grid_for() sized items(n) with a plan made without the work";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::missing_work) << e.what();
  }
  // Launched with items(n) all the same, the arguments made for the plan do not fit: the launch says so once.
  const lf::plan& with_work = lf::plan_for(tiles_of, lf::max_occupancy().items(n));
  ASSERT_NE(with_work.block, p.block) << "small work should fill the SMs with smaller blocks";
  EXPECT_FALSE(with_work.without_work);
  EXPECT_NE(with_work.warning.find("without work was planned with block " + p.block.to_string()),
            std::string::npos)
      << with_work.warning;
  // A policy that does not decide by the work: planned without it, launched with it, the same block.
  const lf::plan& driver = lf::plan_for(tiles_of, lf::max_occupancy(0));
  EXPECT_FALSE(driver.without_work);
  out.zero();
  const lf::launched same =
      lf::launch(tiles_of, lf::max_occupancy(0).items(n), out.ptr, in.ptr, n, driver.block_threads);
  EXPECT_EQ(same.block, driver.block);
}

// The conjugate-gradient pattern under one override: plan_for(k, cooperative()) and its launch, no exception,
// the same plan, every block co-resident. Returns the plan's warning.
std::string run_cg_under(const std::string& override_policy) {
  SCOPED_TRACE(override_policy);
  lf::set_policy_overrides("*cg_exchange=" + override_policy);
  std::string warning;
  try {
    const auto spec = lf::cooperative();
    const lf::plan& p = lf::plan_for(cg_exchange, spec);
    EXPECT_TRUE(p.options.cooperative) << p.to_string();
    const int grid = static_cast<int>(lf::grid_for(p, spec.work_shape()).count());
    device_buffer<int> slots(grid), seen(grid);
    seen.zero();
    const lf::launched ran = lf::launch(cg_exchange, spec, slots.ptr, seen.ptr);
    EXPECT_EQ(&ran.plan(), &p);
    EXPECT_EQ(static_cast<int>(ran.grid.count()), grid);
    const std::vector<int> h = seen.download();
    int bad = 0;
    for (int b = 0; b < grid; ++b) bad += h[b] != (b + 1) % grid + 1;
    EXPECT_EQ(bad, 0) << "blocks that did not co-reside, of " << grid << " (" << p.to_string() << ")";
    warning = p.warning;
    std::printf("%-40s %-60s %s\n", override_policy.c_str(), p.to_string().c_str(),
                warning.empty() ? "" : "(the spec's own policy: the override cannot serve it)");
  } catch (const lf::error& e) {
    ADD_FAILURE() << "the override made the program throw: " << e.what();
  }
  return warning;
}

TEST_F(PlanRule, NoOverrideBreaksACooperativeProgram) {
  const std::string plugins = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../plugins/liblf_";
  for (const char* plugin : {"good", "error", "invalid", "decline"})
    lf::load_plugin(plugins + plugin + ".so");
  int gave_way = 0, served = 0;
  for (const char* over : {"max_occupancy()",
                           "max_occupancy(0)",
                           "max_occupancy(prefer_block=128)",
                           "bytes_in_flight(16)",
                           "bytes_in_flight(64)",
                           "bytes_in_flight(per_thread=0)",
                           "cooperative()",
                           "cooperative(1)",
                           "cooperative(64)",
                           "fixed(256)",
                           "fixed(256, 100)",
                           "fixed(1024, 100000)",
                           "fixed(2048)",
                           "fixed({32, 8})",
                           "fixed_dims(bx=16,by=16)",
                           "planned(bx=256)",
                           "planned()",
                           "constant_block()",
                           "test_good",
                           "test_good(block=4096)",
                           "test_error",
                           "test_invalid",
                           "test_decline"}) {
    const std::string warning = run_cg_under(over);
    if (warning.find("cannot serve") != std::string::npos) {
      ++gave_way;
      EXPECT_NE(warning.find("LAUNCHFIT_POLICY override '*cg_exchange'"), std::string::npos)
          << "the warning names the override: " << warning;
      EXPECT_NE(warning.find("the spec's own policy cooperative("), std::string::npos) << warning;
    } else {
      ++served;
    }
  }
  EXPECT_GE(gave_way, 6);
  EXPECT_GE(served, 12);
}

TEST_F(PlanRule, AnOverridesFixedGridThatWouldLeaveItemsUndoneGivesWay) {
  const int n = 1 << 20;
  std::vector<float> h(n, 1.0f);
  device_buffer<float> in(n), out(n);
  in.upload(h);
  out.zero();
  lf::set_policy_overrides("*tiles_of=fixed(256, 80)");
  const auto spec = lf::fixed(256).items(n);
  const lf::plan& p = lf::plan_for(tiles_of, spec);
  const lf::launched ran = lf::launch(tiles_of, spec, out.ptr, in.ptr, n, p.block_threads);
  EXPECT_EQ(&ran.plan(), &p);
  EXPECT_EQ(ran.grid.x, static_cast<unsigned>(n / 256))
      << "the spec's own grid, not the override's 80 blocks";
  EXPECT_NE(p.warning.find("cannot serve"), std::string::npos) << p.warning;
  std::size_t wrong = 0;
  for (float v : out.download()) wrong += v != 2.0f;
  EXPECT_EQ(wrong, 0u);
  // For grid-stride work the override's fixed grid serves: the kernel loops.
  const auto looping = lf::fixed(256).grid_stride(n);
  EXPECT_EQ(lf::launch(tiles_of, looping, out.ptr, in.ptr, n, 256).grid.x, 80u);
}

}  // namespace

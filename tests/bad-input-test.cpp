// SPDX-License-Identifier: MIT
// Bad inputs, on the CPU: every refusal is a launchfit::error whose message names the kernel, the plan and
// the limit it broke; the few inputs that are not errors (zero items, an unusable cache file) do what the
// documentation promises. tests/BAD-INPUT.md lists every row of the table and the test that covers it;
// rows already covered by another test file are not repeated here. Launch-level rows (what reaches the
// driver, and that nothing runs) are in tests/gpu/bad-input-test.cu.

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "captured_log.hpp"
#include "error_of.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/policy.hpp"
#include "plan_file_format.hpp"
#include "tool_run.hpp"

namespace lf = launchfit;
namespace fs = std::filesystem;

namespace {

lf::query h200(int regs = 32, std::size_t static_smem = 0, int max_threads = 1024) {
  lf::query q;
  q.device = lf::device_limits::for_arch("H200");
  q.kernel =
      lf::kernel_resources::manual(regs, static_smem, max_threads, "void my_kernel<float>(float*, int)");
  return q;
}

using launchfit_test::captured_log;
using launchfit_test::error_of;
using launchfit_test::has;

// A plan-validation refusal: the code, the check, the kernel and the plan are all in the error.
void expect_plan_error(const lf::error& e, const std::string& check, const std::string& message_part) {
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_PLAN") << e.what();
  EXPECT_EQ(e.call(), "validate(" + check + ")") << e.what();
  EXPECT_EQ(e.kernel(), "void my_kernel<float>(float*, int)") << e.what();
  EXPECT_TRUE(has(e.config(), "block=")) << e.what();
  EXPECT_TRUE(has(e.message(), message_part)) << e.what();
  // what() alone is enough to act on: it repeats every part.
  const std::string what = e.what();
  EXPECT_TRUE(has(what, "my_kernel") && has(what, message_part) && has(what, e.config())) << what;
}

// Any plan a third-party policy may return (the built-ins cannot produce most of these).
struct shaped_params {
  int block_x = 128, block_y = 1, block_z = 1;
  int grid_x = 0, grid_y = 1, grid_z = 1;
  int blocks_per_sm = 0;
  bool cooperative = false;
  static constexpr std::array<const char*, 8> names{"block_x", "block_y", "block_z",       "grid_x",
                                                    "grid_y",  "grid_z",  "blocks_per_sm", "cooperative"};
};

class shaped_policy final : public lf::param_policy<shaped_policy, shaped_params> {
 public:
  static constexpr const char* policy_name = "test_shaped";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query&) const override {
    lf::plan p;
    p.block = lf::dims{static_cast<unsigned>(params_.block_x), static_cast<unsigned>(params_.block_y),
                       static_cast<unsigned>(params_.block_z)};
    p.grid = lf::dims{static_cast<unsigned>(params_.grid_x), static_cast<unsigned>(params_.grid_y),
                      static_cast<unsigned>(params_.grid_z)};
    p.blocks_per_sm = params_.blocks_per_sm;
    p.options.cooperative = params_.cooperative;
    p.reason = "shaped by the test";
    return p;
  }
};

lf::plan plan_of(int block, int blocks_per_sm, int sms, bool cooperative = false, unsigned grid = 0) {
  lf::plan p;
  p.block = {static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = blocks_per_sm;
  p.sm_count = sms;
  p.options.cooperative = cooperative;
  p.grid = {grid, 1, 1};
  return p;
}

}  // namespace

// ---- the kernel -------------------------------------------------------------------------------------------
// (a null runtime-API function pointer needs the CUDA runtime to compile: tests/gpu/bad-input-test.cu)

TEST(BadKernel, EmptyDriverKernelIsRefusedBeforeAnyCudaCall) {
  const lf::kernel empty;
  ASSERT_FALSE(empty.valid());
  for (int i = 0; i < 2; ++i) {
    const lf::error e = error_of([&] {
      if (i == 0) lf::launch(empty, lf::max_occupancy().items(10), 1, 2.0f);
      if (i == 1) (void)lf::plan_for(empty, lf::fixed(64));
    });
    EXPECT_EQ(e.call(), "launchfit::launch") << e.what();
    EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_INVALID_HANDLE") << e.what();
    EXPECT_EQ(e.message(), "null or empty kernel") << e.what();
  }
}

// ---- the block
// ----------------------------------------------------------------------------------------------

TEST(BadBlock, EveryDimensionAndTheProductAreChecked) {
  const lf::query q = h200();
  // x*y*z above 1024 although every dimension is legal.
  expect_plan_error(error_of([&] {
                      shaped_policy{{32, 64, 1}}.choose(q);
                    }),
                    "block", "block of 2048 threads exceeds the device maximum 1024");
  expect_plan_error(error_of([&] {
                      shaped_policy{{1, 1, 128}}.choose(q);
                    }),
                    "block", "block dimension z=128 exceeds the device maximum 64");
  expect_plan_error(error_of([&] {
                      shaped_policy{{2048, 1, 1}}.choose(q);
                    }),
                    "block", "block dimension x=2048 exceeds the device maximum 1024");
  expect_plan_error(error_of([&] { shaped_policy{{64, 0, 1}}.choose(q); }), "block", "block of 0 threads");
  // A negative block from the caller is a block of no threads, not a huge unsigned one.
  expect_plan_error(error_of([&] { lf::fixed_policy{{-5, 0}}.choose(q); }), "block", "block of 0 threads");
  // 16x16 under __launch_bounds__(128).
  expect_plan_error(error_of([&] {
                      shaped_policy{{16, 16, 1}}.choose(h200(32, 0, 128));
                    }),
                    "block",
                    "256 threads exceeds the kernel's maxThreadsPerBlock 128 (its __launch_bounds__");
}

TEST(BadBlock, PolicyStringsWithBadNumbersNameTheColumn) {
  for (const char* text : {"fixed(block=99999999999)", "fixed(block=abc)", "fixed(block=1.5)"}) {
    SCOPED_TRACE(text);
    const lf::error e = error_of([&] { lf::policy_from_string(text); });
    EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_BAD_POLICY_STRING") << e.what();
    EXPECT_TRUE(has(e.message(), "col 13: policy 'fixed': parameter 'block'")) << e.what();
  }
  const lf::error neg = error_of([] { lf::policy_from_string("fixed(grid=-1)")->choose(h200()); });
  EXPECT_EQ(neg.cuda_error(), "LAUNCHFIT_INVALID_POLICY") << neg.what();
  EXPECT_TRUE(has(neg.message(), "grid must be >= 0")) << neg.what();
  EXPECT_EQ(neg.kernel(), "void my_kernel<float>(float*, int)");
}

// ---- shared memory
// ------------------------------------------------------------------------------------------

TEST(BadSmem, DynamicAboveTheOptInMaximumIsRefusedByEveryPolicy) {
  lf::query q = h200();
  const std::size_t optin = q.device.smem_per_block_optin_bytes;
  ASSERT_EQ(optin, 227u * 1024);
  q.dynamic_smem_bytes = optin + 1;
  const std::string limit = "exceeds the opt-in maximum " + std::to_string(optin) + " B per block";
  const std::shared_ptr<const lf::policy> policies[] = {
      std::make_shared<lf::max_occupancy_policy>(), std::make_shared<lf::bytes_in_flight_policy>(),
      std::make_shared<lf::fixed_policy>(), std::make_shared<lf::cooperative_policy>(),
      std::make_shared<lf::constant_block_policy>()};
  for (const auto& p : policies) {
    SCOPED_TRACE(p->to_string());
    const lf::error e = error_of([&] { p->choose(q); });
    expect_plan_error(e, "smem", limit);
    EXPECT_TRUE(has(e.message(), "0 static + " + std::to_string(optin + 1) + " dynamic")) << e.what();
    EXPECT_TRUE(has(e.config(), "policy=" + p->to_string())) << e.what();
  }
}

TEST(BadSmem, StaticPlusDynamicAndPerBlockRulesAreCheckedTogether) {
  lf::query q = h200(32, 48 * 1024);
  q.dynamic_smem_bytes = 180 * 1024;  // fine alone, too much with 48 KB of static smem
  expect_plan_error(error_of([&] {
                      lf::fixed_policy{{256, 0}}.choose(q);
                    }),
                    "smem",
                    "shared memory 233472 B (49152 static + 184320 dynamic) exceeds the opt-in maximum");
  // A rule that needs 1 KB per thread fits no block of 256 threads: evaluated at the block chosen.
  lf::query r = h200();
  r.smem_per_block = [](int block) { return static_cast<std::size_t>(block) * 1024; };
  expect_plan_error(error_of([&] {
                      lf::fixed_policy{{256, 0}}.choose(r);
                    }),
                    "smem", "(0 static + 262144 dynamic)");
  // max_occupancy searches for a block the rule allows instead of refusing.
  const lf::plan p = lf::max_occupancy_policy{}.choose(r);
  EXPECT_LE(p.dynamic_smem_bytes, r.device.smem_per_block_optin_bytes);
  EXPECT_EQ(p.dynamic_smem_bytes, static_cast<std::size_t>(p.block_threads) * 1024);
}

// ---- the grid
// -------------------------------------------------------------------------------------------------

TEST(BadGrid, FixedGridOutsideTheDeviceLimitsIsRefused) {
  const lf::query q = h200();
  expect_plan_error(error_of([&] {
                      shaped_policy{{128, 1, 1, 4, 65536, 1}}.choose(q);
                    }),
                    "grid", "grid dimension y=65536 outside 1..65535");
  expect_plan_error(error_of([&] {
                      shaped_policy{{128, 1, 1, 4, 1, 0}}.choose(q);
                    }),
                    "grid", "grid dimension z=0 outside 1..65535");
  // fixed(grid) is an int: its largest value is the device's x limit, which is legal.
  const lf::plan widest = lf::fixed_policy{{128, std::numeric_limits<int>::max()}}.choose(q);
  EXPECT_EQ(widest.grid.x, 2147483647u);
}

TEST(BadGrid, ItemsThatOverflowTheGridNameTheNumbersAndTheFix) {
  const lf::plan p = plan_of(32, 1, 132);
  const lf::error e = error_of([&] { lf::grid_for(p, {lf::work::shape::items, 1ull << 40, 1}); });
  EXPECT_EQ(e.call(), "grid_for");
  EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(e.message(),
            "items(1099511627776) with 32 items per block needs 34359738368 blocks, above the grid limit "
            "2147483647; use grid_stride() or per_thread()");
  EXPECT_TRUE(has(e.config(), "block=32")) << e.what();
  // The largest size_t n, with the largest block and per-thread count: no arithmetic overflow.
  const lf::error max_n = error_of([] {
    lf::grid_for(plan_of(1024, 2, 132),
                 {lf::work::shape::items, std::numeric_limits<std::uint64_t>::max(), 1});
  });
  EXPECT_TRUE(has(max_n.message(), "needs 18014398509481984 blocks")) << max_n.what();
  const lf::dims g =
      lf::grid_for(plan_of(1024, 2, 132), {lf::work::shape::items, std::numeric_limits<std::uint64_t>::max(),
                                           std::numeric_limits<std::uint32_t>::max()});
  EXPECT_EQ(g.x, 4194305u);  // ceil(2^64-1 / (1024 x (2^32-1)))
  // A device reporting a smaller limit is honoured.
  EXPECT_THROW(lf::grid_for(plan_of(256, 1, 1), {lf::work::shape::items, 65536ull * 256 + 1, 1}, 65535),
               lf::error);
  EXPECT_EQ(lf::grid_for(plan_of(256, 1, 1), {lf::work::shape::items, 65535ull * 256, 1}, 65535).x, 65535u);
  // grid_stride never overflows: it is capped at the resident blocks.
  EXPECT_EQ(lf::grid_for(p, {lf::work::shape::grid_stride, std::numeric_limits<std::uint64_t>::max(), 1}).x,
            132u);
}

// ---- cooperative grids
// ----------------------------------------------------------------------------------------

TEST(BadCooperative, NoBlockFitsBecauseOfRegisters) {
  // 255 registers x 512 threads: 130 560 registers, more than an SM's 65 536.
  const lf::error e = error_of([] { lf::cooperative_policy{{0, 512}}.choose(h200(255)); });
  expect_plan_error(e, "occupancy", "no block of 512 threads with 0 B dynamic smem fits on an SM");
  // Which limit, with its numbers (the same words as launchfit::occupancy and launchfit-calc).
  EXPECT_TRUE(
      has(e.message(),
          "limited by registers: a block of 512 threads exceeds the register limit on threads per block: "
          "255 registers per thread x 32 threads = 8160 registers per warp, 8192 allocated (rounded up "
          "to the 256-register allocation unit); 65536 registers per block / 8192 = 8 warps: at most 256 "
          "threads per block"))
      << e.what();
  EXPECT_TRUE(has(e.config(), "cooperative")) << e.what();
}

TEST(BadCooperative, AFixedGridAboveCoResidencyIsRefused) {
  // 1024-thread blocks: 2 per SM x 132 SMs co-reside.
  const lf::error e = error_of([] { shaped_policy{{1024, 1, 1, 265, 1, 1, 0, true}}.choose(h200()); });
  expect_plan_error(e, "cooperative", "cooperative grid of 265 blocks exceeds the 264 that co-reside");
  const lf::plan ok = shaped_policy{{1024, 1, 1, 264, 1, 1, 0, true}}.choose(h200());
  EXPECT_EQ(ok.grid.x, 264u);
}

// ---- zero work: the documented no-op
// ----------------------------------------------------------------------------

TEST(ZeroWork, EveryShapeOfNoItemsGivesAnEmptyGrid) {
  const lf::plan computed = plan_of(256, 4, 132);
  const lf::plan fixed_grid = plan_of(256, 4, 132, false, 80);
  const lf::plan coop = plan_of(256, 4, 132, true);
  for (const lf::plan& p : {computed, fixed_grid, coop}) {
    SCOPED_TRACE(p.to_string());
    for (const lf::work& w : {lf::work{lf::work::shape::items, 0, 1}, lf::work{lf::work::shape::items, 0, 8},
                              lf::work{lf::work::shape::grid_stride, 0, 1}}) {
      lf::dims g{};
      EXPECT_NO_THROW(g = lf::grid_for(p, w));
      EXPECT_EQ(g.count(), 0u);
    }
  }
  // No work shape at all is not "zero items": a fixed grid is launched as given, else one full wave.
  EXPECT_EQ(lf::grid_for(fixed_grid, lf::work{}).x, 80u);
  EXPECT_EQ(lf::grid_for(computed, lf::work{}).x, 528u);
}

// ---- policies
// -------------------------------------------------------------------------------------------------

TEST(BadPolicy, NullAndUnknownPoliciesThroughUse) {
  const lf::error null_policy = error_of([] { lf::use(std::shared_ptr<const lf::policy>{}); });
  EXPECT_EQ(null_policy.cuda_error(), "LAUNCHFIT_INVALID_POLICY");
  EXPECT_EQ(null_policy.message(), "null policy");
  const lf::error unknown = error_of([] { lf::use("max_occupency(block=1)"); });
  EXPECT_EQ(unknown.cuda_error(), "LAUNCHFIT_BAD_POLICY_STRING");
  EXPECT_TRUE(has(unknown.message(), "col 1: unknown policy 'max_occupency' (known: ")) << unknown.what();
  EXPECT_TRUE(has(unknown.message(), "max_occupancy")) << unknown.what();
  const lf::error bad_param = error_of([] { lf::use("cooperative(block_per_sm=2)"); });
  EXPECT_TRUE(has(bad_param.message(),
                  "col 13: policy 'cooperative': unknown parameter 'block_per_sm' (known: "
                  "blocks_per_sm, block)"))
      << bad_param.what();
}

TEST(BadPolicy, EmptyDeviceLimitsAreRefusedNotDividedBy) {
  lf::query q;  // no device
  q.kernel = lf::kernel_resources::manual(32, 0, 1024, "k");
  const lf::error e = error_of([&] { lf::max_occupancy_policy{}.choose(q); });
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_QUERY");
  EXPECT_EQ(e.message(), "device limits are empty");
  EXPECT_EQ(e.kernel(), "k");
}

TEST(BadPolicy, AnOverrideThatIsValidSyntaxButAnInvalidPlanIsRefusedAtTheKernel) {
  lf::set_policy_overrides("my_kernel=fixed(block=2048)");
  const auto chosen = lf::policy_override_for("void my_kernel<float>(float*, int)");
  ASSERT_TRUE(chosen);
  expect_plan_error(error_of([&] { chosen->choose(h200()); }), "block",
                    "block dimension x=2048 exceeds the device maximum 1024");
  // A bad replacement is refused and the overrides in force stay as they were.
  const lf::error e =
      error_of([] { lf::set_policy_overrides("my_kernel=fixed(block=256);x=fixed(blok=1)"); });
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_BAD_POLICY_STRING");
  EXPECT_TRUE(has(e.message(), "col 36: policy 'fixed': unknown parameter 'blok'")) << e.what();
  const auto still = lf::policy_override_for("my_kernel");
  ASSERT_TRUE(still);
  EXPECT_EQ(still->to_string(), "fixed(block=2048,grid=0)");
  lf::set_policy_overrides("");
  EXPECT_FALSE(lf::policy_override_for("my_kernel"));
}

// ---- cache file (more shapes of unusable file; the main ones are in cache-file-test.cpp)
// --------------------------

class BadCacheFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-bad-input-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    lf::close_cache_file();
    fs::remove_all(dir_);
  }
  static lf::stored_key key() {
    return lf::stored_key{"GPU-00000000-0000-0000-0000-000000000000",
                          90,
                          132,
                          13000,
                          "my_kernel|32|0|0|1024|90|90",
                          "fixed(block=128,grid=0)",
                          "bytes=0",
                          0};
  }
  static lf::plan sample() {
    lf::plan p = plan_of(128, 16, 132);
    p.policy = "fixed(block=128,grid=0)";
    return p;
  }
  fs::path dir_;
};

TEST_F(BadCacheFile, ADirectoryOrAnEmptyFileWarnsAtMostOnceAndPlansStayInMemory) {
  {
    captured_log log(spdlog::level::debug);
    fs::create_directories(dir_ / "plans.json");  // the path names a directory
    EXPECT_NO_THROW(lf::set_cache_file((dir_ / "plans.json").string()));
    EXPECT_NO_THROW(lf::store_plan(key(), sample()));
    EXPECT_NO_THROW(lf::store_plan(key(), sample()));
    ASSERT_TRUE(lf::find_stored_plan(key()));
    EXPECT_EQ(lf::find_stored_plan(key())->block_threads, 128);
    EXPECT_EQ(log.warnings(), 1) << log.text();
    EXPECT_TRUE(has(log.text(), "plans.json")) << log.text();
    EXPECT_TRUE(has(log.text(), "plans are kept in memory only")) << log.text();
    EXPECT_TRUE(fs::is_directory(dir_ / "plans.json"));  // never replaced
  }
  {
    captured_log log(spdlog::level::debug);
    std::ofstream(dir_ / "empty.json").close();  // zero bytes: a new file, not a corrupt one
    lf::set_cache_file((dir_ / "empty.json").string());
    lf::store_plan(key(), sample());
    EXPECT_EQ(log.warnings(), 0) << log.text();
    lf::set_cache_file((dir_ / "empty.json").string());  // read back
    ASSERT_TRUE(lf::find_stored_plan(key()));
    EXPECT_EQ(lf::find_stored_plan(key())->block_threads, 128);
  }
}

// ---- stored entries: the lookup and launchfit-plans check give one verdict
// -----------------------------------

namespace {

const std::string plans_tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";

// A stored entry an H200 (cc 9.0, 132 SMs) could have written (kernel of 32 registers, block 256, 8 blocks
// per SM, max_occupancy()), then changed by a case.
struct stored_case {
  const char* what;
  const char* says;                               // the refusal, or "" for an entry both keep
  std::function<void(lf::stored_key&)> key_edit;  // applied to the entry's key before it is written
  std::function<void(nlohmann::json&)> edit;      // applied to the entry as written (its JSON object)
};

lf::stored_key stored_case_key(const std::string& name, int max_threads = 1024) {
  lf::device_limits d = lf::device_limits::for_arch("H200");
  d.uuid = "GPU-00000000-0000-0000-0000-000000000000";
  d.name = "NVIDIA H200";
  return lf::stored_key_for(d, 12080, lf::kernel_resources::manual(32, 0, max_threads, name),
                            "max_occupancy()", "bytes=0", 0);
}

std::string stored_case_file(const lf::stored_key& key, const std::function<void(nlohmann::json&)>& edit) {
  launchfit::detail::stored_entry e;
  e.key = key;
  e.plan = plan_of(256, 8, 132);
  e.plan.policy = "max_occupancy()";
  e.stored_at_ms = 1000;
  nlohmann::json doc = nlohmann::json::parse(launchfit::detail::serialize_cache_file({e}));
  if (edit) edit(doc["entries"][0]);
  return doc.dump();
}

// A block and its (consistent) thread count, as the library writes them.
std::function<void(nlohmann::json&)> with_block(unsigned x, unsigned y, unsigned z) {
  return [=](nlohmann::json& e) {
    e["plan"]["block"] = {x, y, z};
    e["plan"]["block_threads"] = x * y * z;
  };
}

}  // namespace

// Every hostile entry is refused by both or kept by both: the library's reader (set_cache_file, then
// find_stored_plan for the entry's own key) and `launchfit-plans check` call the one entry check. What needs
// the live kernel (its real maxThreadsPerBlock, the driver's residency) is the planner's to check; what the
// entry itself states must hold together on the architecture its key names.
TEST_F(BadCacheFile, TheLookupAndCheckAcceptAndRefuseExactlyTheSameEntries) {
  if (!std::ifstream(plans_tool).good())
    GTEST_SKIP() << plans_tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  using nlohmann::json;
  const std::vector<stored_case> cases = {
      {"a valid entry", "", nullptr, nullptr},
      {"a 2-D block of 256 threads", "", nullptr, with_block(32, 8, 1)},
      {"a compute capability the table does not know (the format's bounds only)", "",
       [](lf::stored_key& k) { k.cc = 99; }, nullptr},
      {"a stored_at far in the future (its age is not believed, its plan is)", "", nullptr,
       [](json& e) { e["stored_at"] = std::uint64_t(1) << 53; }},
      {"block [0,1,1]", "'block' is out of range [1, 1024]", nullptr, with_block(0, 1, 1)},
      {"block [256,0,1]", "'block' is out of range [1, 1024]", nullptr, with_block(256, 0, 1)},
      {"block of 1024 threads under a kernel of 128 max threads",
       "the entry's plan has a block of 1024 threads, above the 128 its key's kernel allows",
       [](lf::stored_key& k) { k = stored_case_key("_Z6boundsPf", 128); }, with_block(1024, 1, 1)},
      {"blocks_per_sm 1000", "blocks_per_sm 1000, above the 32 blocks an SM of sm_90 holds", nullptr,
       [](json& e) { e["plan"]["blocks_per_sm"] = 1000; }},
      {"blocks_per_sm 32 of 256-thread blocks (8192 threads on an SM of 2048)",
       "blocks_per_sm 32 of 8 warps, above the 64 warps an SM of sm_90 holds", nullptr,
       [](json& e) { e["plan"]["blocks_per_sm"] = 32; }},
      {"block_threads 64 with block 256", "'block_threads' is 64, but block 256 holds 256 threads", nullptr,
       [](json& e) { e["plan"]["block_threads"] = 64; }},
      {"block z of 65 (the device's maximum is 64)", "block dimension z=65 exceeds the device maximum 64",
       nullptr, with_block(1, 1, 65)},
      {"a kernel fingerprint that is not one", "the key's kernel 'saxpy' is not a kernel fingerprint",
       [](lf::stored_key& k) { k.kernel = "saxpy"; }, nullptr},
      {"a fingerprint with 300 registers per thread", "is not a kernel fingerprint",
       [](lf::stored_key& k) { k.kernel = "_Z5saxpyPf|300|0|0|1024|90|90"; }, nullptr},
      {"no block fits an SM (255 registers x 1024 threads)",
       "no block of 1024 threads with 0 B dynamic smem fits",
       [](lf::stored_key& k) { k.kernel = "_Z5saxpyPf|255|0|0|1024|90|90"; },
       [](json& e) {
         with_block(1024, 1, 1)(e);
         e["plan"]["blocks_per_sm"] = 1;
       }},
      {"dynamic smem above the opt-in maximum", "exceeds the opt-in maximum 232448 B per block",
       [](lf::stored_key& k) { k.smem_rule = "bytes=300000"; },
       [](json& e) { e["plan"]["dynamic_smem_bytes"] = 300000; }},
      {"sm_count 0 in the key", "the key's sm_count is 0", [](lf::stored_key& k) { k.sm_count = 0; },
       nullptr},
      {"a fixed grid of 0 in y", "'grid' is out of range", nullptr,
       [](json& e) {
         e["plan"]["grid"] = {4, 0, 1};
       }},
  };
  const fs::path file = dir_ / "plans.json";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const stored_case& c = cases[i];
    const bool valid = std::string(c.says).empty();
    lf::stored_key key = stored_case_key("_Z5saxpyPf");
    if (c.key_edit) c.key_edit(key);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << stored_case_file(key, c.edit);

    captured_log log(spdlog::level::warn);
    lf::set_cache_file(file.string(), lf::cache_file_mode::frozen);
    const bool served = lf::find_stored_plan(key).has_value();
    lf::close_cache_file();
    const launchfit_test::tool_outcome checked =
        launchfit_test::run_tool(plans_tool, "check '" + file.string() + "'");
    ASSERT_TRUE(checked.exit_code == 0 || checked.exit_code == 1) << c.what << "\n"
                                                                  << checked.out << checked.err;
    const bool passed = checked.exit_code == 0;

    EXPECT_EQ(served, passed) << "case " << i << " (" << c.what << "): the lookup "
                              << (served ? "serves" : "refuses") << " it, check "
                              << (passed ? "passes" : "refuses") << " it\n"
                              << checked.out << log.text();
    EXPECT_EQ(served, valid) << "case " << i << " (" << c.what << ")\n" << checked.out << log.text();
    if (!valid) {
      // Both name the entry and say why, in the same words.
      EXPECT_TRUE(has(checked.out, "entry 0") && has(checked.out, c.says)) << c.what << "\n" << checked.out;
      EXPECT_TRUE(has(log.text(), "entry 0") && has(log.text(), c.says)) << c.what << "\n" << log.text();
    } else if (has(log.text(), "ahead of this clock")) {
      // An entry served although its stamp lay in the future: the first such stamp of the process is said
      // once (then only counted), as a warning that names it; nothing else is.
      EXPECT_EQ(log.warnings(), 1) << c.what << "\n" << log.text();
      EXPECT_TRUE(has(log.text(), "read as of unknown age")) << c.what << "\n" << log.text();
    } else {
      EXPECT_EQ(log.warnings(), 0) << c.what << "\n" << log.text();
    }
  }
}

namespace {

std::uint64_t wall_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// The block of `key`'s entry in a plan file, 0 when it holds none.
unsigned block_in(const fs::path& file, const lf::stored_key& key) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& e : launchfit::detail::parse_cache_file(text.str()).entries)
    if (e.key.kernel == key.kernel && e.key.bucket == key.bucket)
      return static_cast<unsigned>(e.plan.block_threads);
  return 0;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

}  // namespace

// `launchfit-plans merge` keeps the newest of two plans for one key: a stamp from the future (2^53 ms, the
// year 287396) is read as of unknown age and wins nothing, now or in any later merge of the file it was
// merged into.
TEST_F(BadCacheFile, AStampFromTheFutureWinsNoMerge) {
  if (!std::ifstream(plans_tool).good())
    GTEST_SKIP() << plans_tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const lf::stored_key k = stored_case_key("_Z5saxpyPf");
  launchfit::detail::stored_entry honest{k, plan_of(128, 16, 132), wall_ms() - 3600 * 1000};
  honest.plan.policy = "max_occupancy()";
  launchfit::detail::stored_entry forged{k, plan_of(512, 4, 132), std::uint64_t(1) << 53};
  forged.plan.policy = "max_occupancy()";
  std::ofstream(dir_ / "honest.json", std::ios::binary) << launchfit::detail::serialize_cache_file({honest});
  std::ofstream(dir_ / "forged.json", std::ios::binary) << launchfit::detail::serialize_cache_file({forged});

  const auto merged = launchfit_test::run_tool(plans_tool, "merge " + quoted(dir_ / "out.json") + " " +
                                                               quoted(dir_ / "honest.json") + " " +
                                                               quoted(dir_ / "forged.json"));
  EXPECT_EQ(merged.exit_code, 0) << merged.out << merged.err;
  EXPECT_EQ(block_in(dir_ / "out.json", k), 128u) << merged.out;
  // The other order, and the merged file merged again: the forged plan never wins.
  const auto again = launchfit_test::run_tool(plans_tool, "merge " + quoted(dir_ / "out2.json") + " " +
                                                              quoted(dir_ / "forged.json") + " " +
                                                              quoted(dir_ / "honest.json"));
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(block_in(dir_ / "out2.json", k), 128u) << again.out;
  // `check` passes the forged entry (its plan is valid, as a lookup finds it) and says what it did not
  // believe.
  const auto checked = launchfit_test::run_tool(plans_tool, "check " + quoted(dir_ / "forged.json"));
  EXPECT_EQ(checked.exit_code, 0) << checked.out;
  EXPECT_TRUE(has(checked.out, "note: entry 0 (kernel _Z5saxpyPf): 'stored_at' 9007199254740992 is "))
      << checked.out;
  EXPECT_TRUE(has(checked.out, "read as of unknown age")) << checked.out;
}

// `launchfit-plans pull` replaces a local plan only by a newer one: a store value whose stamp lies in the
// future (written there by anything that can reach the store) leaves the local plan as it was.
TEST_F(BadCacheFile, AStampFromTheFutureInAStoreDoesNotReplaceALocalPlanOnPull) {
  if (!std::ifstream(plans_tool).good())
    GTEST_SKIP() << plans_tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const char* redis = std::getenv("LAUNCHFIT_TEST_REDIS");
  if (!redis || !*redis) GTEST_SKIP() << "LAUNCHFIT_TEST_REDIS=redis://127.0.0.1:<port> not set";
  const std::string server = redis;
  const std::string port = server.substr(server.rfind(':') + 1);
  if (port.find('/') != std::string::npos) GTEST_SKIP() << "LAUNCHFIT_TEST_REDIS names a database";
  // A database of its own (pull reads every key of one), emptied first.
  const std::string db = std::to_string(1 + ::getpid() % 15);
  const std::string url = server + "/" + db;
  const std::string cli = "-p " + port + " -n " + db;
  if (std::system(("redis-cli " + cli + " flushdb >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no redis-cli reaching " << server;
  // A kernel of its own, so that other tests' keys in that server do not matter.
  const lf::stored_key k = stored_case_key("_Z12pull_" + std::to_string(::getpid()) + "Pf");
  launchfit::detail::stored_entry honest{k, plan_of(128, 16, 132), wall_ms() - 3600 * 1000};
  honest.plan.policy = "max_occupancy()";
  std::ofstream(dir_ / "local.json", std::ios::binary) << launchfit::detail::serialize_cache_file({honest});
  const auto pushed = launchfit_test::run_tool(plans_tool, "push " + quoted(dir_ / "local.json") + " " + url);
  ASSERT_EQ(pushed.exit_code, 0) << pushed.out << pushed.err;

  // The stored value, found by the kernel's name, rewritten with another plan and a stamp of 2^53 ms.
  const auto keys = launchfit_test::run_tool("redis-cli", cli + " --scan --pattern 'launchfit:*'");
  std::string stored_under;
  std::istringstream lines(keys.out);
  for (std::string name; std::getline(lines, name) && stored_under.empty();) {
    const auto value = launchfit_test::run_tool("redis-cli", cli + " GET '" + name + "'");
    if (has(value.out, "_Z12pull_" + std::to_string(::getpid()) + "Pf")) stored_under = name;
  }
  ASSERT_FALSE(stored_under.empty()) << keys.out;
  const auto raw = launchfit_test::run_tool("redis-cli", cli + " GET '" + stored_under + "'");
  nlohmann::json doc = nlohmann::json::parse(raw.out);
  doc["entries"][0]["stored_at"] = std::uint64_t(1) << 53;
  doc["entries"][0]["plan"]["block"] = {512, 1, 1};
  doc["entries"][0]["plan"]["block_threads"] = 512;
  doc["entries"][0]["plan"]["blocks_per_sm"] = 4;
  std::ofstream(dir_ / "forged.value", std::ios::binary) << doc.dump();
  const auto set = launchfit_test::run_tool(
      "redis-cli", cli + " -x SET '" + stored_under + "' < " + quoted(dir_ / "forged.value"));
  ASSERT_TRUE(has(set.out, "OK")) << set.out << set.err;

  const auto pulled = launchfit_test::run_tool(plans_tool, "pull " + url + " " + quoted(dir_ / "local.json"));
  EXPECT_EQ(pulled.exit_code, 0) << pulled.out << pulled.err;
  EXPECT_EQ(block_in(dir_ / "local.json", k), 128u) << pulled.out << pulled.err;
  launchfit_test::run_tool("redis-cli", cli + " DEL '" + stored_under + "'");
}

// SPDX-License-Identifier: MIT
// Bad inputs on a real GPU: every refused launch throws launchfit::error naming the kernel, the plan and
// the limit, before anything reaches the device. Each test poisons a sentinel buffer that any launch of the
// kernel would overwrite and checks it is untouched afterwards, that the context is still usable (a correct
// launch follows) and that unrelated device data is intact. tests/BAD-INPUT.md maps every row of the
// bad-input table to its test; rows covered by launch-test.cu / fault-test.cu are not repeated here.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/plugin.hpp"
#include "../captured_log.hpp"
#include "../error_of.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;
namespace fs = std::filesystem;

namespace {

constexpr int n = 4096;
constexpr unsigned poison_byte = 0xAB;
constexpr int poison = static_cast<int>(0xABABABABu);

// Writes i + 1 to every i < capacity, whatever the work shape said: any launch at all shows in `out`.
__global__ void write_index(int* out, int capacity) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < capacity) out[i] = i + 1;
}

// The same through dynamic shared memory (at least blockDim.x ints).
__global__ void smem_write(int* out, int capacity) {
  extern __shared__ int staged[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  staged[threadIdx.x] = i + 1;
  __syncthreads();
  if (i < capacity) out[i] = staged[blockDim.x - 1 - threadIdx.x] + 2 * int(threadIdx.x) - int(blockDim.x) + 1;
}

// Needs every block resident: the grid syncs between clearing and writing.
__global__ void coop_write(int* out, int capacity) {
  cg::grid_group grid = cg::this_grid();
  const unsigned long long stride = grid.size();
  for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(capacity); i += stride) out[i] = 0;
  grid.sync();
  for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(capacity); i += stride)
    out[i] = static_cast<int>(i) + 1;
}

// A host function with a kernel's signature: not a kernel.
void host_only(int* out, int capacity) {
  for (int i = 0; i < capacity; ++i) out[i] = -1;
}

// A third-party policy returning a grid that no device accepts, or a cooperative grid of a given size.
struct shaped_grid_params {
  int grid_x = 1, grid_y = 1;
  int cooperative = 0;
  static constexpr std::array<const char*, 3> names{"grid_x", "grid_y", "cooperative"};
};

class shaped_grid_policy final : public lf::param_policy<shaped_grid_policy, shaped_grid_params> {
 public:
  static constexpr const char* policy_name = "test_shaped_grid";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query&) const override {
    lf::plan p;
    p.block = lf::dims{64, 1, 1};
    p.grid = lf::dims{static_cast<unsigned>(params_.grid_x), static_cast<unsigned>(params_.grid_y), 1};
    p.options.cooperative = params_.cooperative != 0;
    p.reason = "shaped by the test";
    return p;
  }
};

using launchfit_test::captured_log;
using launchfit_test::error_of;
using launchfit_test::has;

// compute-sanitizer injects itself through CUDA_INJECTION64_PATH and NV_SANITIZER_* variables; a death
// test's re-executed child would run under it too, which the tool may not survive.
bool under_compute_sanitizer() {
  for (char** e = environ; e && *e; ++e) {
    const std::string var = *e;
    if (var.rfind("NV_SANITIZER", 0) == 0) return true;
    if (var.rfind("CUDA_INJECTION64_PATH=", 0) == 0 && has(var, "anitizer")) return true;
  }
  return false;
}

// The parts every refusal must have: the check, the code, the kernel and the plan.
void expect_refusal(const lf::error& e, const std::string& call, const std::string& code, const std::string& kernel,
                    const std::string& message_part) {
  EXPECT_EQ(e.call(), call) << e.what();
  EXPECT_EQ(e.cuda_error(), code) << e.what();
  EXPECT_TRUE(has(e.kernel(), kernel)) << e.what();
  EXPECT_TRUE(has(e.config(), "block=")) << e.what();
  EXPECT_TRUE(has(e.message(), message_part)) << e.what();
  std::printf("refused: %s\n", e.what());
}

class BadLaunch : public testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    LF_CUDA_CHECK(cudaFree(nullptr));  // the primary context, current
    LF_CUDA_CHECK(cudaMalloc(&sentinel_, n * sizeof(int)));
    LF_CUDA_CHECK(cudaMalloc(&keep_, n * sizeof(int)));
    std::mt19937 rng(1234);
    keep_host_.resize(n);
    for (int& v : keep_host_) v = static_cast<int>(rng());
    LF_CUDA_CHECK(cudaMemcpy(keep_, keep_host_.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    poison_sentinel();
    lf::cache().clear();  // every test chooses its plans afresh
    ready_ = true;
  }
  void TearDown() override {
    if (!ready_) return;
    // The refusals left no error behind, and the data nobody launched on is intact.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<int> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), keep_, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h, keep_host_) << "device data changed";
    cudaFree(sentinel_);
    cudaFree(keep_);
  }

  void poison_sentinel() { ASSERT_EQ(cudaMemset(sentinel_, poison_byte, n * sizeof(int)), cudaSuccess); }

  // Nothing ran: every element still holds the poison.
  void expect_untouched(const char* what) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    std::vector<int> h(n);
    ASSERT_EQ(cudaMemcpy(h.data(), sentinel_, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    int changed = 0;
    for (int v : h) changed += v != poison;
    EXPECT_EQ(changed, 0) << what << ": a refused launch wrote to the sentinel";
  }

  // A correct launch ran: every element is i + 1.
  void expect_written(const char* what) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    std::vector<int> h(n);
    ASSERT_EQ(cudaMemcpy(h.data(), sentinel_, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += h[i] != i + 1;
    EXPECT_EQ(wrong, 0) << what << ": elements not written correctly";
  }

  // After the refusals, the same kernel still launches and computes the right answer.
  void expect_recovers() {
    poison_sentinel();
    lf::launch(write_index, lf::max_occupancy().items(n), sentinel_, n);
    expect_written("valid launch after the refusals");
  }

  int optin_smem() {
    int dev = 0, bytes = 0;
    EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), cudaSuccess);
    return bytes;
  }

  int* sentinel_ = nullptr;
  int* keep_ = nullptr;
  std::vector<int> keep_host_;
  bool ready_ = false;
};

}  // namespace

// ---- the kernel -------------------------------------------------------------------------------------------------

// Checked before any CUDA call: runs (and passes) on machines without a GPU too.
TEST(BadKernel, NullFunctionPointerIsRefusedBeforeAnyCudaCall) {
  void (*none)(int*, int) = nullptr;
  const lf::error e = error_of([&] { lf::launch(none, lf::max_occupancy().items(n), static_cast<int*>(nullptr), n); });
  EXPECT_EQ(e.call(), "launchfit::launch");
  EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(e.message(), "null kernel function pointer");
  const lf::error p = error_of([&] { (void)lf::plan_for(none, lf::fixed(64)); });
  EXPECT_EQ(p.cuda_error(), "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(p.message(), "null or empty kernel");
}

TEST_F(BadLaunch, HostFunctionIsNotAKernel) {
  const lf::error e = error_of([&] { lf::launch(host_only, lf::max_occupancy().items(n), sentinel_, n); });
  EXPECT_EQ(e.call(), "cudaGetFuncBySymbol") << e.what();
  EXPECT_EQ(e.cuda_error(), "cudaErrorInvalidDeviceFunction") << e.what();
  std::printf("refused: %s\n", e.what());
  expect_untouched("host function");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the runtime error was not cleared";
  // Asked again, the same answer (a failed plan is not cached).
  EXPECT_EQ(error_of([&] { lf::launch(host_only, lf::fixed(64).items(n), sentinel_, n); }).call(),
            "cudaGetFuncBySymbol");
  expect_recovers();
}

// ---- the block ------------------------------------------------------------------------------------------------------
// (above the kernel's __launch_bounds__: launch-test.cu, BlockAboveLaunchBoundsIsRefusedAndNothingRuns)

TEST_F(BadLaunch, BlockAboveTheDeviceMaximumIsRefused) {
  for (int block : {1025, 2048, 1 << 20}) {
    const lf::error e = error_of([&] { lf::launch(write_index, lf::fixed(block).items(n), sentinel_, n); });
    expect_refusal(e, "validate(block)", "LAUNCHFIT_INVALID_PLAN", "write_index",
                   "block dimension x=" + std::to_string(block) + " exceeds the device maximum 1024");
    EXPECT_TRUE(has(e.config(), "block=" + std::to_string(block))) << e.what();
  }
  const lf::error s = error_of([&] { lf::launch(write_index, lf::use("fixed(block=1536)").items(n), sentinel_, n); });
  EXPECT_TRUE(has(s.message(), "x=1536 exceeds the device maximum 1024")) << s.what();
  expect_untouched("block above 1024");
  expect_recovers();
}

TEST_F(BadLaunch, BlockOfZeroIsRefused) {
  for (int block : {0, -1}) {
    const lf::error e = error_of([&] { lf::launch(write_index, lf::fixed(block, 4), sentinel_, n); });
    expect_refusal(e, "validate(block)", "LAUNCHFIT_INVALID_PLAN", "write_index", "block of 0 threads");
  }
  expect_untouched("block of 0");
  expect_recovers();
}

// With nothing logged at info, a miss skips demangling the kernel's name; a refusal still names the kernel.
TEST_F(BadLaunch, RefusalsNameTheKernelWhenNothingIsLogged) {
  const auto level = lf::logger()->level();
  for (const auto quiet : {spdlog::level::warn, spdlog::level::off}) {
    lf::logger()->set_level(quiet);
    lf::cache().clear();
    const lf::error block = error_of([&] { lf::launch(write_index, lf::fixed(2048).items(n), sentinel_, n); });
    const lf::error negative =
        error_of([&] { lf::launch(write_index, lf::max_occupancy(-1).items(n), sentinel_, n); });
    const lf::error per_thread =
        error_of([&] { lf::launch(write_index, lf::bytes_in_flight(0).items(n), sentinel_, n); });
    // A plan made quietly, refused at launch: the name is made when the error is.
    const lf::error grid =
        error_of([&] { lf::launch(write_index, lf::fixed(32).items(std::uint64_t(1) << 40), sentinel_, n); });
    EXPECT_TRUE(has(grid.message(), "above the grid limit")) << grid.what();
    for (const lf::error* e : {&block, &negative, &per_thread, &grid}) {
      EXPECT_TRUE(has(e->kernel(), "write_index(int*, int)")) << e->what();
      EXPECT_TRUE(has(e->what(), "write_index(int*, int)")) << e->what();
    }
    EXPECT_TRUE(has(block.message(), "exceeds the device maximum 1024")) << block.what();
    EXPECT_TRUE(has(negative.message(), "prefer_block must be >= 0")) << negative.what();
    EXPECT_TRUE(has(per_thread.message(), "per_thread must be > 0")) << per_thread.what();
  }
  lf::logger()->set_level(level);
  expect_untouched("refusals while quiet");
  expect_recovers();
}

// ---- shared memory ----------------------------------------------------------------------------------------------------

TEST_F(BadLaunch, DynamicSmemAboveTheOptInMaximumIsRefusedByEveryPolicy) {
  const int optin = optin_smem();
  ASSERT_GT(optin, 48 * 1024);
  const std::size_t too_much = static_cast<std::size_t>(optin) + 1;
  const std::string limit = "exceeds the opt-in maximum " + std::to_string(optin) + " B per block";
  const lf::error errors[] = {
      error_of([&] { lf::launch(smem_write, lf::max_occupancy().items(n).smem(too_much), sentinel_, n); }),
      error_of([&] { lf::launch(smem_write, lf::bytes_in_flight(16).items(n).smem(too_much), sentinel_, n); }),
      error_of([&] { lf::launch(smem_write, lf::fixed(256).items(n).smem(too_much), sentinel_, n); }),
      error_of([&] {
        lf::launch(smem_write, lf::fixed(256).items(n).smem_per_block([](int b) { return std::size_t(b) * 1024; }),
                   sentinel_, n);
      }),
  };
  for (const lf::error& e : errors) expect_refusal(e, "validate(smem)", "LAUNCHFIT_INVALID_PLAN", "smem_write", limit);
  expect_untouched("smem above the opt-in maximum");
  // Exactly the maximum is legal: launchfit raises the function's limit and the kernel runs.
  lf::launch(smem_write, lf::fixed(256).items(n).smem(static_cast<std::size_t>(optin)), sentinel_, n);
  expect_written("smem at the opt-in maximum");
}

// ---- the grid ------------------------------------------------------------------------------------------------------------

TEST_F(BadLaunch, ItemsThatOverflowTheGridAreRefusedWithTheNumbers) {
  const lf::error e =
      error_of([&] { lf::launch(write_index, lf::fixed(32).items(std::uint64_t(1) << 40), sentinel_, n); });
  expect_refusal(e, "grid_for", "CUDA_ERROR_INVALID_VALUE", "write_index",
                 "items(1099511627776) with 32 items per block needs 34359738368 blocks, above the grid limit "
                 "2147483647; use grid_stride() or per_thread()");
  const lf::error m = error_of([&] {
    lf::launch(write_index, lf::max_occupancy().items(std::numeric_limits<std::uint64_t>::max()), sentinel_, n);
  });
  expect_refusal(m, "grid_for", "CUDA_ERROR_INVALID_VALUE", "write_index", "above the grid limit 2147483647");
  expect_untouched("grid overflow");
  // The same size as a grid-stride loop is fine (capped at the resident blocks).
  lf::launch(write_index, lf::max_occupancy().grid_stride(std::uint64_t(1) << 40), sentinel_, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_recovers();
}

TEST_F(BadLaunch, AFixedGridOutsideTheDeviceLimitsIsRefused) {
  auto tall = std::make_shared<const shaped_grid_policy>(shaped_grid_params{1, 65536, 0});
  const lf::error e = error_of([&] { lf::launch(write_index, lf::use(tall).items(n), sentinel_, n); });
  expect_refusal(e, "validate(grid)", "LAUNCHFIT_INVALID_PLAN", "write_index",
                 "grid dimension y=65536 outside 1..65535");
  expect_untouched("grid above the device limits");
  expect_recovers();
}

// ---- cooperative grids ------------------------------------------------------------------------------------------------
// (blocks_per_sm above what fits, message only: launch-test.cu, CooperativeRefusesMoreBlocksPerSmThanFitBeforeLaunching)

TEST_F(BadLaunch, CooperativeLaunchesThatCannotCoResideAreRefusedBeforeLaunching) {
  const int optin = optin_smem();
  // No block fits: more shared memory than a block may have.
  const lf::error none = error_of([&] {
    lf::launch(coop_write, lf::cooperative().smem(static_cast<std::size_t>(optin) + 1), sentinel_, n);
  });
  expect_refusal(none, "validate(smem)", "LAUNCHFIT_INVALID_PLAN", "coop_write", "exceeds the opt-in maximum");
  EXPECT_TRUE(has(none.config(), "cooperative")) << none.what();

  const lf::plan& fits = lf::plan_for(coop_write, lf::cooperative());
  ASSERT_TRUE(fits.options.cooperative);
  const long long resident = fits.resident_blocks();
  // More blocks per SM than co-reside.
  const lf::error bps = error_of([&] {
    lf::launch(coop_write, lf::cooperative(fits.blocks_per_sm + 1, fits.block_threads), sentinel_, n);
  });
  expect_refusal(bps, "validate(cooperative)", "LAUNCHFIT_INVALID_PLAN", "coop_write",
                 "blocks_per_sm " + std::to_string(fits.blocks_per_sm + 1) + " exceeds the " +
                     std::to_string(fits.blocks_per_sm) + " blocks per SM that co-reside");
  // More items than one thread each in the co-resident grid.
  const std::uint64_t too_many = static_cast<std::uint64_t>(resident) * fits.block_threads + 1;
  const lf::error items = error_of([&] { lf::launch(coop_write, lf::cooperative().items(too_many), sentinel_, n); });
  expect_refusal(items, "grid_for", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "coop_write",
                 "needs " + std::to_string(resident + 1) + " blocks but only " + std::to_string(resident) +
                     " co-reside; use grid_stride()");
  // A third-party policy asking for one block more than co-resides. The launch says it is cooperative: a policy
  // cannot make it so (one that adds the option is refused, CPU: PlanContract.APolicyPlanThatAddsALaunchOption...).
  const lf::plan& small = lf::plan_for(coop_write, lf::use(std::make_shared<const shaped_grid_policy>(
                                                       shaped_grid_params{1, 1, 1})).cooperative());
  const long long small_resident = small.resident_blocks();
  auto over = std::make_shared<const shaped_grid_policy>(
      shaped_grid_params{static_cast<int>(small_resident + 1), 1, 1});
  const lf::error grid = error_of([&] { lf::launch(coop_write, lf::use(over).cooperative(), sentinel_, n); });
  const lf::error added = error_of([&] {
    lf::launch(coop_write, lf::use(std::make_shared<const shaped_grid_policy>(shaped_grid_params{1, 1, 1})), sentinel_, n);
  });
  expect_refusal(added, "plan(cooperative)", "LAUNCHFIT_INVALID_PLAN", "coop_write",
                 "chose a cooperative launch but the launch does not require one");
  expect_refusal(grid, "validate(cooperative)", "LAUNCHFIT_INVALID_PLAN", "coop_write",
                 "cooperative grid of " + std::to_string(small_resident + 1) + " blocks exceeds the " +
                     std::to_string(small_resident) + " that co-reside");
  expect_untouched("cooperative refusals");

  // What does fit runs and syncs: every element written after the grid-wide barrier.
  lf::launch(coop_write, lf::cooperative(), sentinel_, n);
  expect_written("co-resident cooperative grid");
  poison_sentinel();
  lf::launch(coop_write, lf::cooperative().items(std::uint64_t(resident) * fits.block_threads), sentinel_, n);
  expect_written("cooperative grid of exactly the co-resident blocks");
}

// ---- zero work: the documented no-op ---------------------------------------------------------------------------------

TEST_F(BadLaunch, ZeroItemsLaunchesNothingUnderEveryPolicyAndShape) {
  EXPECT_NO_THROW(lf::launch(write_index, lf::max_occupancy().items(0), sentinel_, n));
  EXPECT_NO_THROW(lf::launch(write_index, lf::max_occupancy().items(0).per_thread(4), sentinel_, n));
  EXPECT_NO_THROW(lf::launch(write_index, lf::bytes_in_flight(8).grid_stride(0), sentinel_, n));
  EXPECT_NO_THROW(lf::launch(write_index, lf::fixed(64).items(0), sentinel_, n));
  EXPECT_NO_THROW(lf::launch(write_index, lf::fixed(64, 8).items(0), sentinel_, n));  // even a fixed grid
  EXPECT_NO_THROW(lf::launch(coop_write, lf::cooperative().items(0), sentinel_, n));
  EXPECT_NO_THROW(lf::launch(smem_write, lf::max_occupancy().items(0).smem(4096), sentinel_, n));
  expect_untouched("zero items");
  // The plans were still made (and validated), so the next real launch is a cache hit.
  const std::size_t plans = lf::cache().size();
  EXPECT_GE(plans, 6u);
  // (fixed() plans the same for every n; max_occupancy plans small work per power of two of its size.)
  lf::launch(write_index, lf::fixed(64).items(n), sentinel_, n);
  expect_written("items(n) after items(0)");
  EXPECT_EQ(lf::cache().size(), plans);
}

// ---- policies from operators: overrides and LAUNCHFIT_POLICY ------------------------------------------------------------

TEST_F(BadLaunch, AnOverrideWithAnInvalidPlanGivesWayToTheSpecsOwnPolicyWithAWarning) {
  // An operator's override never breaks a launch that works: its invalid plan is not launched, the spec's own
  // policy decides, and the plan's warning names the override and why.
  lf::set_policy_overrides("*write_index=fixed(block=2048)");
  lf::cache().clear();  // overrides apply to plans made after they are set
  const lf::launched ran = lf::launch(write_index, lf::max_occupancy().items(n), sentinel_, n);
  expect_written("override with an invalid plan: the spec's own plan");
  EXPECT_EQ(ran.plan().policy.rfind("max_occupancy(", 0), 0u) << ran.plan().policy;
  EXPECT_TRUE(has(ran.plan().warning, "LAUNCHFIT_POLICY override '*write_index' = fixed(block=2048,grid=0) cannot "
                                      "serve this launch"))
      << ran.plan().warning;
  EXPECT_TRUE(has(ran.plan().warning, "block dimension x=2048 exceeds the device maximum 1024")) << ran.plan().warning;
  poison_sentinel();
  // Another kernel is not affected.
  lf::launch(smem_write, lf::max_occupancy().items(n).smem_per_block([](int b) { return std::size_t(b) * 4; }),
             sentinel_, n);
  expect_written("kernel without an override");
  lf::set_policy_overrides("");
  lf::cache().clear();
  expect_recovers();
}

// An operator's override never turns a launch that works into an exception: a bad entry of LAUNCHFIT_POLICY is
// left out (one error line at its column), and the good entries apply. (Every launch of every kernel threw.)
TEST_F(BadLaunch, ABadLaunchfitPolicyEntryIsLeftOutAndTheOthersApply) {
  // LAUNCHFIT_POLICY is read once per process: the check runs in a child process of its own. Exit codes
  // say which part failed.
  if (under_compute_sanitizer()) GTEST_SKIP() << "a death test's child process under compute-sanitizer";
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_POLICY", "*write_index=fixed(block=128);reduce*=bytes_in_flight(per_thread=)", 1);
        int code = 0;
        for (int attempt = 0; attempt < 2 && code == 0; ++attempt) {
          try {
            const lf::launched l = lf::launch(write_index, lf::max_occupancy().items(n), sentinel_, n);
            if (l.plan().block_threads != 128) code = 10;  // the good entry applies
          } catch (const lf::error& e) {
            std::fprintf(stderr, "threw: %s\n", e.what());
            code = 11;
          }
        }
        if (code == 0 && cudaDeviceSynchronize() != cudaSuccess) code = 14;
        std::vector<int> h(n);
        if (code == 0 && cudaMemcpy(h.data(), sentinel_, n * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess)
          code = 15;
        for (int i = 0; i < n; ++i)
          if (code == 0 && h[i] != i + 1) code = 16;  // every element written
        std::fflush(stderr);
        std::exit(code);  // not _Exit: let the CUDA runtime shut down as in any program
      },
      testing::ExitedWithCode(0), "");
}

// ---- plugins -------------------------------------------------------------------------------------------------------------
// (missing file, missing symbol, wrong ABI: refused at load_plugin, before any launch; plugin-test.cpp)

TEST_F(BadLaunch, PluginErrorsAndInvalidPlansLaunchNothingAndFallbacksRun) {
  const std::string dir = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../plugins/";
  for (const char* name : {"error", "invalid", "decline"}) {
    ASSERT_NO_THROW(lf::load_plugin(dir + "liblf_" + name + ".so")) << "test plugins are built in tests/plugins";
  }
  const lf::error err = error_of([&] { lf::launch(write_index, lf::use("test_error").items(n), sentinel_, n); });
  EXPECT_EQ(err.cuda_error(), "LAUNCHFIT_PLUGIN_ERROR") << err.what();
  EXPECT_TRUE(has(err.message(), "plugin 'test_error' failed: no tuning data for kernel")) << err.what();
  EXPECT_TRUE(has(err.kernel(), "write_index")) << err.what();
  const lf::error inv = error_of([&] { lf::launch(write_index, lf::use("test_invalid").items(n), sentinel_, n); });
  expect_refusal(inv, "validate(block)", "LAUNCHFIT_INVALID_PLAN", "write_index",
                 "plugin 'test_invalid' returned an invalid plan: block dimension x=2048 exceeds the device maximum 1024");
  const lf::error missing = error_of([&] { lf::load_plugin(dir + "liblf_does_not_exist.so"); });
  EXPECT_EQ(missing.cuda_error(), "LAUNCHFIT_PLUGIN_REFUSED");
  expect_untouched("plugin error / invalid plan");

  // Opted-in fallbacks: the plugin fails, the fallback's plan runs, the results are right.
  lf::launch(write_index, lf::use("test_error(fallback=fixed)").items(n), sentinel_, n);
  expect_written("plugin error with fallback=fixed");
  poison_sentinel();
  lf::launch(write_index, lf::use("test_invalid(fallback=max_occupancy)").items(n), sentinel_, n);
  expect_written("invalid plan with fallback=max_occupancy");
  poison_sentinel();
  lf::launch(write_index, lf::use("test_decline").items(n), sentinel_, n);
  expect_written("declining plugin");
  EXPECT_EQ(lf::plan_for(write_index, lf::use("test_error(fallback=fixed)")).block_threads, 256);
}

// ---- the cache file ------------------------------------------------------------------------------------------------------

class BadCacheFile : public BadLaunch {
 protected:
  void SetUp() override {
    BadLaunch::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    dir_ = fs::temp_directory_path() / ("launchfit-gpu-bad-input-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    lf::close_cache_file();
    if (!dir_.empty()) fs::remove_all(dir_);
    BadLaunch::TearDown();
  }
  void write_text(const fs::path& p, const std::string& text) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << text;
  }
  fs::path dir_;
};

TEST_F(BadCacheFile, UnusableFilesWarnOnceAndLaunchesStillRunCorrectly) {
  struct bad_file {
    const char* what;
    std::string content;  // empty: the path lies under a regular file (unwritable directory)
    const char* warning;
  };
  const bad_file files[] = {
      {"truncated", "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [\n{\"key\":{\"device_uuid\":\"GPU-",
       "not valid JSON (truncated or damaged)"},
      {"not launchfit's layout", R"({"format":"launchfit-plan-cache","version":1,"entries":[{"device_uuid":"GPU-)",
       "it names the format, but is not a file launchfit wrote"},
      {"wrong version", R"({"format":"launchfit-plan-cache","version":999,"entries":[]})", "format version 999"},
      {"foreign JSON", R"({"name":"my-project","dependencies":{"left-pad":"1.0"}})", "not a launchfit plan cache"},
      {"unwritable directory", "", "cannot write it"},
  };
  int round = 0;
  for (const bad_file& b : files) {
    SCOPED_TRACE(b.what);
    fs::path path = dir_ / ("plans-" + std::to_string(round++) + ".json");
    if (b.content.empty()) {
      write_text(dir_ / "not-a-dir", "x");
      path = dir_ / "not-a-dir" / "plans.json";
    } else {
      write_text(path, b.content);
    }
    captured_log log(spdlog::level::info);
    lf::set_cache_file(path.string());
    lf::cache().clear();
    poison_sentinel();
    EXPECT_NO_THROW(lf::launch(write_index, lf::max_occupancy().items(n), sentinel_, n));
    EXPECT_NO_THROW(lf::launch(smem_write, lf::fixed(128).items(n).smem(512), keep_, 0));  // a second new plan
    expect_written(b.what);
    lf::flush_cache_file();  // plans are written behind the launch: a write failure is known after the flush
    EXPECT_EQ(log.warnings(), 1) << log.text();
    EXPECT_TRUE(has(log.text(), b.warning)) << log.text();
    EXPECT_TRUE(has(log.text(), path.string())) << log.text();
    if (!b.content.empty() && std::string(b.what) != "truncated") {
      std::ifstream f(path, std::ios::binary);
      std::stringstream s;
      s << f.rdbuf();
      EXPECT_EQ(s.str(), b.content) << "a file that is not ours was overwritten";
    }
    lf::close_cache_file();
  }
}

TEST_F(BadCacheFile, AnInvalidStoredPlanIsIgnoredWithAWarningAndReplaced) {
  const fs::path path = dir_ / "plans.json";
  lf::set_cache_file(path.string());
  lf::launch(write_index, lf::fixed(128).items(n), sentinel_, n);
  expect_written("first launch");

  // The key launchfit stores this plan under.
  cudaFunction_t fn = nullptr;
  LF_CUDA_CHECK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(write_index)));
  const lf::device_limits dev = lf::device_limits::query_current();
  int driver = 0;
  LF_CUDA_CHECK(cudaDriverGetVersion(&driver));
  const lf::stored_key key{dev.uuid, dev.cc(), dev.sm_count, driver,
                           lf::kernel_fingerprint(lf::query_resources(reinterpret_cast<CUfunction>(fn))),
                           "fixed(block=128,grid=0) work=items", "bytes=0", 0};
  const auto stored = lf::find_stored_plan(key);
  ASSERT_TRUE(stored) << "the plan was not stored under the expected key";
  ASSERT_EQ(stored->block_threads, 128);

  // Someone edits the file: 1x1x128 (128 threads), but no device takes a z of 128. The entry is refused as the
  // file is read, with one warning naming the kernel and the limit, and never served. (Edited in the file:
  // launchfit itself never writes an entry its readers refuse.)
  ASSERT_TRUE(lf::flush_cache_file());
  std::string text;
  {
    std::ifstream f(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  lf::detail::cache_file_contents file = lf::detail::parse_cache_file(text);
  ASSERT_EQ(file.status, lf::detail::cache_file_status::ok) << file.problem;
  int edited = 0;
  for (lf::detail::stored_entry& e : file.entries) {
    if (e.key.kernel != key.kernel || e.key.policy != key.policy) continue;
    e.plan.block = lf::dims{1, 1, 128};
    ++edited;
  }
  ASSERT_EQ(edited, 1);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << lf::detail::serialize_cache_file(file.entries);
  captured_log log(spdlog::level::info);
  lf::set_cache_file(path.string());  // read back from disk
  EXPECT_FALSE(lf::find_stored_plan(key)) << "an entry no device can launch was served from the file";

  lf::cache().clear();
  poison_sentinel();
  EXPECT_NO_THROW(lf::launch(write_index, lf::fixed(128).items(n), sentinel_, n));
  expect_written("launch with a broken stored plan");
  EXPECT_EQ(log.warnings(), 1) << log.text();
  EXPECT_TRUE(has(log.text(), "plan cache file")) << log.text();
  EXPECT_TRUE(has(log.text(), "write_index")) << log.text();
  EXPECT_TRUE(has(log.text(), "block dimension z=128 exceeds the device maximum 64")) << log.text();
  EXPECT_TRUE(has(log.text(), "the entry is not used")) << log.text();
  // The launch's own plan (the same spec: a spec without work has a plan of its own, which would read the
  // replaced entry back from the file).
  const lf::plan& p = lf::plan_for(write_index, lf::fixed(128).items(n));
  EXPECT_EQ(p.block, (lf::dims{128, 1, 1}));
  EXPECT_EQ(p.match, "computed");
  const auto replaced = lf::find_stored_plan(key);
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->block, (lf::dims{128, 1, 1})) << "the broken entry was not replaced";
}

// ---- no GPU, no driver: launch-test.cpp (LaunchWithoutGpu) on a machine without one -----------------------------------
// ---- a launch after a kernel faulted: fault-test.cu (its own process; the fault poisons the context) ------------------
// ---- driver-API kernel with the wrong argument count or size: launch-test.cu (DriverLaunch) ----------------------------

// SPDX-License-Identifier: MIT
// Plans are never stale or wrong: after a device reset or a new context, with smem rules of one type and
// other captured values, under LAUNCHFIT_POLICY overrides, with forged cache-file entries, with probed
// smem candidates, and with a reset callback that launches its own kernel while it is tuned.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "../captured_log.hpp"
#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;

namespace {

__global__ void add_one(int* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

// Reports the dynamic shared memory the launch gave it and the block it ran with.
__global__ void report_dynamic_smem(unsigned* out) {
  unsigned bytes = 0;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = bytes;
    out[1] = blockDim.x;
  }
}

// A grid-sync kernel: correct only when every block co-resides (a cooperative launch).
__global__ void exchange_after_sync(int* slots, int* seen) {
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0) slots[blockIdx.x] = int(blockIdx.x) + 1;
  grid.sync();
  if (threadIdx.x == 0) seen[blockIdx.x] = slots[(blockIdx.x + 1) % gridDim.x];
}

// Each block covers one tile of `tile` items, one per thread: correct only when launched with blocks of
// exactly `tile` threads (the classic occupancy-API port computes `tile` from the planned block).
__global__ void scale_tiles(float* out, const float* in, int n, int tile) {
  if (static_cast<int>(blockDim.x) != tile) return;  // a launch that diverged from its plan leaves zeros
  const int i = blockIdx.x * tile + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];
}

__global__ void smem_probe_a(unsigned* out) {
  extern __shared__ unsigned s[];
  s[threadIdx.x] = threadIdx.x;
  if (threadIdx.x == 0) out[0] = s[0];
}
__global__ void smem_probe_b(unsigned* out) {
  extern __shared__ unsigned s[];
  s[threadIdx.x] = threadIdx.x;
  if (threadIdx.x == 0) out[0] = s[0];
}

struct device_ints {
  int* p = nullptr;
  explicit device_ints(std::size_t n) { cudaMalloc(&p, n * sizeof(int)); }
  ~device_ints() { cudaFree(p); }
};

std::vector<int> copy_back(const int* d, int n) {
  std::vector<int> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
  return h;
}

void run_add_one(int n) {
  device_ints d(n);
  ASSERT_EQ(cudaMemset(d.p, 0, n * sizeof(int)), cudaSuccess);
  lf::launch(add_one, lf::max_occupancy().items(n), d.p, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> h = copy_back(d.p, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], 1) << "element " << i;
}

class PlanIdentity : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  }
  void TearDown() override { lf::set_policy_overrides(""); }
};

// ---- 1. device reset ---------------------------------------------------------------------------------------

TEST_F(PlanIdentity, ARuntimeKernelLaunchesAfterCudaDeviceReset) {
  run_add_one(1000);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  run_add_one(1000);  // was: cuLaunchKernelEx: CUDA_ERROR_INVALID_HANDLE (a dead CUfunction reused)
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  run_add_one(5000);
}

TEST_F(PlanIdentity, AModuleKernelLaunchesAfterAPrimaryContextReset) {
  auto primary_reset = LF_DRIVER(cuDevicePrimaryCtxReset);
  ASSERT_NE(primary_reset, nullptr);
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("fill_sized");
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    float* out = nullptr;
    ASSERT_EQ(cudaMalloc(&out, 4096 * sizeof(float)), cudaSuccess);
    lf::launch(k, lf::max_occupancy().items(4096), out, 4096ULL, 2.5f);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> h(4096);
    cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (float v : h) ASSERT_EQ(v, 2.5f) << "round " << round;
    cudaFree(out);
    ASSERT_EQ(primary_reset(0), CUDA_SUCCESS);
  }
}

TEST_F(PlanIdentity, ANewContextAfterADestroyedOneGetsItsOwnPlan) {
  auto ctx_create = LF_DRIVER(cuCtxCreate);
  auto ctx_destroy = LF_DRIVER(cuCtxDestroy);
  auto ctx_get_id = LF_DRIVER(cuCtxGetId);
  auto mem_alloc = LF_DRIVER(cuMemAlloc);
  auto mem_free = LF_DRIVER(cuMemFree);
  auto ctx_sync = LF_DRIVER(cuCtxSynchronize);
  ASSERT_TRUE(ctx_create && ctx_destroy && ctx_get_id && mem_alloc && mem_free && ctx_sync);
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("fill_sized");
  std::vector<unsigned long long> ids;
  for (int round = 0; round < 3; ++round) {
    CUcontext c = nullptr;
    ASSERT_EQ(ctx_create(&c, nullptr, 0, 0), CUDA_SUCCESS);
    unsigned long long id = 0;
    ASSERT_EQ(ctx_get_id(c, &id), CUDA_SUCCESS);
    ids.push_back(id);
    CUdeviceptr out = 0;
    ASSERT_EQ(mem_alloc(&out, 1024 * sizeof(float)), CUDA_SUCCESS);
    lf::launch(k, lf::max_occupancy().items(1024), reinterpret_cast<float*>(out), 1024ULL, 1.0f);
    ASSERT_EQ(ctx_sync(), CUDA_SUCCESS);
    std::vector<float> h(1024);
    ASSERT_EQ(cudaMemcpy(h.data(), reinterpret_cast<void*>(out), h.size() * sizeof(float), cudaMemcpyDefault),
              cudaSuccess);
    for (float v : h) ASSERT_EQ(v, 1.0f);
    bool found = false;
    for (const lf::cached_plan& p : lf::cache().plans()) found |= p.kernel == "fill_sized" && p.key.context == id;
    EXPECT_TRUE(found) << "no plan keyed by the new context's identity " << id;
    mem_free(out);
    ASSERT_EQ(ctx_destroy(c), CUDA_SUCCESS);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
}

// ---- 2. smem rules by value ----------------------------------------------------------------------------------

auto rule_with(std::size_t per) {
  return [per](int block) { return per * static_cast<std::size_t>(block) + 1024; };
}

TEST_F(PlanIdentity, SmemRulesOfOneTypeWithOtherCapturesGiveTheKernelItsOwnBytes) {
  unsigned* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 2 * sizeof(unsigned)), cudaSuccess);
  for (std::size_t per : {8, 200, 8, 64, 200}) {
    lf::launch(report_dynamic_smem, lf::max_occupancy().smem_per_block(rule_with(per)).items(1), out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    unsigned h[2] = {};
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    EXPECT_EQ(h[0], per * h[1] + 1024) << "per=" << per << " block=" << h[1];  // was 9216 for per=200
    const lf::plan& p = lf::plan_for(report_dynamic_smem, lf::max_occupancy().smem_per_block(rule_with(per)).items(1));
    EXPECT_EQ(p.dynamic_smem_bytes, per * p.block_threads + 1024);
  }
  cudaFree(out);
}

// ---- 3/4. overrides ---------------------------------------------------------------------------------------------

TEST_F(PlanIdentity, AnOverrideOnACooperativeLaunchKeepsItCooperative) {
  // (the conjugate-gradient pattern: plan_for() of a cooperative spec without work, under the override)
  lf::set_policy_overrides("*exchange_after_sync=max_occupancy()");  // an anonymous-namespace kernel
  const lf::plan& p = lf::plan_for(exchange_after_sync, lf::cooperative());
  EXPECT_TRUE(p.options.cooperative) << p.to_string();
  EXPECT_EQ(p.policy.rfind("max_occupancy", 0), 0u) << p.policy;
  const int grid = static_cast<int>(p.resident_blocks());
  device_ints slots(grid), seen(grid);
  lf::launch(exchange_after_sync, lf::cooperative(), slots.p, seen.p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> h = copy_back(seen.p, grid);
  for (int b = 0; b < grid; ++b) ASSERT_EQ(h[b], (b + 1) % grid + 1) << "block " << b;
}

TEST_F(PlanIdentity, ChangingOverridesReplans) {
  const int before = lf::plan_for(add_one, lf::max_occupancy().items(1 << 20)).block_threads;
  lf::set_policy_overrides("*add_one=fixed(block=96)");
  EXPECT_EQ(lf::plan_for(add_one, lf::max_occupancy().items(1 << 20)).block_threads, 96);
  lf::set_policy_overrides("*add_one=fixed(block=160)");
  EXPECT_EQ(lf::plan_for(add_one, lf::max_occupancy().items(1 << 20)).block_threads, 160);
  lf::set_policy_overrides("");
  EXPECT_EQ(lf::plan_for(add_one, lf::max_occupancy().items(1 << 20)).block_threads, before);
}

// A tuning-like policy with size buckets: 64 threads for small work, 256 for large.
class bucketed_policy final : public lf::policy {
 public:
  std::string name() const override { return "bucketed_for_test"; }
  std::string params() const override { return ""; }
  std::uint64_t hash() const override { return 0xB0C4E7ULL; }
  std::uint64_t work_bucket(const lf::work& w) const override { return w.n < 100000 ? 1 : 2; }
  lf::plan choose(const lf::query& q) const override {
    lf::plan p;
    p.block = lf::dims{q.work_hint.n < 100000 ? 64u : 256u, 1, 1};
    p.policy = to_string();
    p.reason = "bucket by n";
    lf::validate_plan(q, p);
    return p;
  }
};

TEST_F(PlanIdentity, AnOverridesSizeBucketComesFromTheOverride) {
  static const bool registered = [] {
    lf::register_policy("bucketed_for_test",
                        [](const std::map<std::string, std::string>&) { return std::make_shared<bucketed_policy>(); });
    return true;
  }();
  (void)registered;
  lf::set_policy_overrides("*add_one=bucketed_for_test()");
  EXPECT_EQ(lf::plan_for(add_one, lf::max_occupancy().items(1000)).block_threads, 64);
  EXPECT_EQ(lf::plan_for(add_one, lf::max_occupancy().items(1 << 20)).block_threads, 256);  // was 64
  EXPECT_EQ(lf::plan_for(add_one, lf::max_occupancy().items(1000)).block_threads, 64);
}

// ---- 5. stored plans are untrusted ---------------------------------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

TEST_F(PlanIdentity, AForgedCooperativeOrClusteredCacheFileEntryIsNotLaunched) {
  const std::string path = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/forged-plans.json";
  std::remove(path.c_str());
  lf::set_cache_file(path);
  lf::cache().clear();
  const lf::plan honest = lf::plan_for(add_one, lf::max_occupancy().items(1 << 20));
  lf::close_cache_file();  // writes what is pending
  std::string text = slurp(path);
  ASSERT_NE(text.find("\"cooperative\":false"), std::string::npos) << text;
  text = replace_all(text, "\"cooperative\":false", "\"cooperative\":true");
  text = replace_all(text, "\"cluster\":[1,1,1]", "\"cluster\":[3,1,1]");
  text = replace_all(text, "\"reason\":\"", "\"reason\":\"forged\\n[error] line ");
  std::ofstream(path, std::ios::trunc) << text;

  lf::set_cache_file(path);
  lf::cache().clear();
  const lf::plan& again = lf::plan_for(add_one, lf::max_occupancy().items(1 << 20));
  EXPECT_FALSE(again.options.cooperative);
  EXPECT_EQ(again.options.cluster.count(), 1u);
  EXPECT_EQ(again.match, "computed");
  EXPECT_EQ(again.block_threads, honest.block_threads);
  EXPECT_EQ(again.reason.find('\n'), std::string::npos);
  run_add_one(3000);  // launches plainly and correctly
  lf::close_cache_file();
  std::remove(path.c_str());
}

// A kernel of its own: no plan of another test is in memory or in the file.
__global__ void bucket_add(int* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

// A built-in's plans for small work are made per size bucket (fill the SMs first). After cache().clear(), a
// size whose bucket has no stored plan yet is planned by the policy and stored; the plan stored for another
// bucket is never taken as a guess (a built-in's own answer is none), so nothing is "ignored" with a warning.
TEST_F(PlanIdentity, ABuiltInsSizeBucketIsKeptAfterTheCacheIsCleared) {
  const std::string path = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/bucket-plans.json";
  std::remove(path.c_str());
  lf::set_cache_file(path);
  lf::cache().clear();
  const int sizes[] = {1 << 12, 1 << 14, 1 << 16, 1 << 20};
  std::vector<unsigned> blocks;
  for (int n : sizes) blocks.push_back(lf::plan_for(bucket_add, lf::max_occupancy().items(n)).block_threads);
  ASSERT_TRUE(lf::flush_cache_file());
  lf::cache().clear();
  {
    launchfit_test::captured_log log(spdlog::level::warn);
    for (std::size_t i = 0; i < 4; ++i) {
      const lf::plan& p = lf::plan_for(bucket_add, lf::max_occupancy().items(sizes[i]));
      EXPECT_EQ(p.block_threads, blocks[i]) << "n = " << sizes[i];
    }
    EXPECT_EQ(log.text().find("ignored"), std::string::npos) << log.text();
  }
  // In reverse order, after another clear: every bucket from the file, nothing ignored.
  lf::cache().clear();
  {
    launchfit_test::captured_log log(spdlog::level::warn);
    for (int i = 3; i >= 0; --i)
      EXPECT_EQ(lf::plan_for(bucket_add, lf::max_occupancy().items(sizes[i])).block_threads, blocks[i]);
    EXPECT_EQ(log.text().find("ignored"), std::string::npos) << log.text();
  }
  lf::close_cache_file();
  std::remove(path.c_str());
}

// ---- 8. probing never raises the user's smem limit ---------------------------------------------------------

// The limit of the function launched in this context (what launchfit sets), and the runtime's view.
int max_dynamic_smem(const void* k) {
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, k) != cudaSuccess) return -1;
  auto get = LF_DRIVER(cuFuncGetAttribute);
  int v = -1;
  get(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, reinterpret_cast<CUfunction>(f));
  return v;
}
int runtime_max_dynamic_smem(const void* k) {
  cudaFuncAttributes a{};
  cudaFuncGetAttributes(&a, k);
  return a.maxDynamicSharedSizeBytes;
}

TEST_F(PlanIdentity, PlanningSetsOnlyTheSmemTheLaunchedPlanNeeds) {
  const int initial = max_dynamic_smem(reinterpret_cast<const void*>(smem_probe_a));
  // 200 B per thread: candidates up to 1024 threads would need 205,824 B; the plan needs far less.
  const lf::plan& p = lf::plan_for(smem_probe_a, lf::max_occupancy().smem_per_block(rule_with(200)).items(1 << 20));
  const int after = max_dynamic_smem(reinterpret_cast<const void*>(smem_probe_a));
  EXPECT_EQ(after, std::max<int>(initial, static_cast<int>(p.dynamic_smem_bytes)))
      << "plan " << p.to_string() << ", initial limit " << initial;

  // Monotonic: a user's higher limit is never lowered (the plan needs 109,824 B, the user set 150,000 B).
  ASSERT_EQ(cudaFuncSetAttribute(smem_probe_b, cudaFuncAttributeMaxDynamicSharedMemorySize, 150000), cudaSuccess);
  const int user_driver_view = max_dynamic_smem(reinterpret_cast<const void*>(smem_probe_b));
  const lf::plan& pb = lf::plan_for(smem_probe_b, lf::max_occupancy().smem_per_block(rule_with(200)).items(1 << 20));
  EXPECT_EQ(runtime_max_dynamic_smem(reinterpret_cast<const void*>(smem_probe_b)), 150000);
  EXPECT_EQ(max_dynamic_smem(reinterpret_cast<const void*>(smem_probe_b)),
            std::max<int>(user_driver_view, static_cast<int>(pb.dynamic_smem_bytes)));
  unsigned* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, sizeof(unsigned)), cudaSuccess);
  lf::launch(smem_probe_a, lf::max_occupancy().smem_per_block(rule_with(200)).items(1), out);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(out);
}

// ---- 9. no lock held while user code runs -----------------------------------------------------------------------

// Times two candidates through the query's time_plan, then picks the faster.
class two_candidates_policy final : public lf::policy {
 public:
  std::string name() const override { return "two_candidates_for_test"; }
  std::string params() const override { return ""; }
  std::uint64_t hash() const override { return 0x2CA4DULL; }
  lf::plan choose(const lf::query& q) const override {
    lf::plan best;
    double best_ms = -1;
    for (unsigned block : {64u, 128u}) {
      lf::plan p;
      p.block = lf::dims{block, 1, 1};
      p.policy = to_string();
      lf::validate_plan(q, p);
      const double ms = q.time_plan ? q.time_plan(p) : 0;
      if (best_ms < 0 || ms < best_ms) {
        best = p;
        best_ms = ms;
      }
    }
    best.reason = "the faster of two";
    return best;
  }
};

TEST_F(PlanIdentity, AResetCallbackThatLaunchesTheSameKernelDoesNotDeadlock) {
  static const bool registered = [] {
    lf::register_policy("two_candidates_for_test", [](const std::map<std::string, std::string>&) {
      return std::make_shared<two_candidates_policy>();
    });
    return true;
  }();
  (void)registered;
  const int n = 4096;
  device_ints d(n);
  auto run = std::async(std::launch::async, [&] {
    cudaSetDevice(0);
    int resets = 0;
    auto spec = lf::use("two_candidates_for_test()").items(n).reset([&] {
      ++resets;
      cudaMemset(d.p, 0, n * sizeof(int));
      lf::launch(add_one, lf::use("two_candidates_for_test()").items(n), d.p, n);  // the same plan key
    });
    lf::launch(add_one, spec, d.p, n);
    cudaDeviceSynchronize();
    return resets;
  });
  if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "a reset callback launching its own kernel deadlocked the launch\n");
    std::_Exit(1);
  }
  EXPECT_GT(run.get(), 0);
  // The reset ran last: zero + its own launch + the real launch.
  const std::vector<int> h = copy_back(d.p, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], 2) << "element " << i;
}

}  // namespace

// plan_for() on a launch a tuning policy may time has no arguments to time with: it answers with an untuned
// plan for that call only, so the first real launch still tunes (it used to cache the fallback for good).
TEST_F(PlanIdentity, PlanForBeforeTheFirstTunedLaunchRefusesAndTheLaunchStillTunes) {
  const std::string plugin = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../../plugins/liblaunchfit-autotune.so";
  try {
    lf::load_plugin(plugin);
  } catch (const lf::error& e) {
    if (std::string(e.what()).find("already") == std::string::npos) GTEST_SKIP() << e.what();
  }
  lf::cache().clear();
  const int n = 1 << 20;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, n * sizeof(int)), cudaSuccess);
  const auto spec = lf::use("autotune(max_trials=8)").items(n).rerunnable();
  const std::string file = ::testing::TempDir() + "plan-for-tuned-" + std::to_string(::getpid()) + ".json";
  std::remove(file.c_str());
  lf::set_cache_file(file);
  const auto stored_entries = [&] {
    EXPECT_TRUE(lf::flush_cache_file());
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    std::size_t count = 0;
    for (std::size_t at = text.str().find("autotune"); at != std::string::npos;
         at = text.str().find("autotune", at + 1))
      ++count;
    return count;
  };
  // No plan exists before the tuning launch: plan_for() says so instead of answering with a plan the launch
  // would not run (it used to return an untuned plan), and stores nothing the fleet would then reuse.
  try {
    (void)lf::plan_for(add_one, spec);
    ADD_FAILURE() << "plan_for() answered before the first tuned launch";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::not_planned_yet) << e.what();
    EXPECT_NE(e.kernel().find("add_one"), std::string::npos) << e.what();
  }
  EXPECT_EQ(stored_entries(), 0u) << "an untuned plan was stored by plan_for()";
  const lf::launched ran = lf::launch(add_one, spec, d, 0);  // n = 0: touches nothing, re-running is harmless
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_GT(ran.plan().trials, 0) << ran.plan().to_string() << " " << ran.plan().reason;
  EXPECT_EQ(&lf::plan_for(add_one, spec), &ran.plan());  // and plan_for() now answers with the tuned plan
  EXPECT_GT(stored_entries(), 0u) << "the tuned plan was not stored";
  lf::close_cache_file();
  std::remove(file.c_str());
  cudaFree(d);
}

// ---- the plan contract: plan, compute block-dependent arguments, launch -------------------------------------

class PlanContract : public PlanIdentity {
 protected:
  static constexpr int n = 16384;  // small work: max_occupancy fills the SMs with smaller blocks
  void SetUp() override {
    PlanIdentity::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    std::vector<float> h(n);
    for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 1000) + 0.5f;
    ASSERT_EQ(cudaMalloc(&in, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  void TearDown() override {
    cudaFree(in);
    cudaFree(out);
    PlanIdentity::TearDown();
  }
  // Elements not equal to 2 x in.
  std::size_t wrong() {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> h(n), o(n);
    cudaMemcpy(h.data(), in, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(o.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost);
    std::size_t bad = 0;
    for (int i = 0; i < n; ++i) bad += o[i] != 2.0f * h[i];
    cudaMemset(out, 0, n * sizeof(float));
    return bad;
  }
  float* in = nullptr;
  float* out = nullptr;
};

TEST_F(PlanContract, ThePlanOfASpecIsWhatItsLaunchRuns) {
  lf::cache().clear();
  const auto spec = lf::max_occupancy().items(n);
  const lf::plan& p = lf::plan_for(scale_tiles, spec);
  const lf::launched ran = lf::launch(scale_tiles, spec, out, in, n, p.block_threads);
  EXPECT_EQ(&ran.plan(), &p);
  EXPECT_EQ(ran.block, p.block);
  EXPECT_EQ(wrong(), 0u) << "planned " << p.to_string() << ", launched block " << ran.block.to_string();
  std::printf("plan_for(max_occupancy().items(%d)): %s (%s)\n", n, p.to_string().c_str(), p.reason.c_str());
}

TEST_F(PlanContract, PlanForWithoutTheWorkAnswersItsWaveAndSizesNoOtherWork) {
  // The port that used to diverge: plan_for() without the work answered 256 threads, the launch with
  // items(16384) ran 128, and the kernel got a tile computed for the wrong block. Now plan_for() answers the
  // spec without work (one full wave) as its launch runs it, and that plan sizes no items(n): the spec with
  // items(n) plans another block here.
  const lf::plan& p = lf::plan_for(scale_tiles, lf::max_occupancy());
  EXPECT_TRUE(p.without_work) << p.to_string();
  try {
    (void)lf::grid_for(p, lf::max_occupancy().items(n).work_shape());
    ADD_FAILURE() << "grid_for() sized items(n) with a plan made without the work";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::missing_work) << e.what();
  }
  // An override that decides by the work plans the spec without work the same way.
  lf::set_policy_overrides("*scale_tiles*=max_occupancy(prefer_block=256)");
  const lf::plan& overridden = lf::plan_for(scale_tiles, lf::max_occupancy(0));
  EXPECT_TRUE(overridden.without_work) << overridden.to_string();
  EXPECT_EQ(overridden.policy.rfind("max_occupancy(prefer_block=256", 0), 0u) << overridden.policy;
  lf::set_policy_overrides("");
  // max_occupancy(0) is the driver's block for every work: planned without it, launched with it, the same.
  const lf::plan& driver = lf::plan_for(scale_tiles, lf::max_occupancy(0));
  EXPECT_FALSE(driver.without_work);
  const lf::launched ran = lf::launch(scale_tiles, lf::max_occupancy(0).items(n), out, in, n, driver.block_threads);
  EXPECT_EQ(ran.block, driver.block);
  EXPECT_EQ(wrong(), 0u);
}

TEST_F(PlanContract, APlanLaunchedVerbatimKeepsItsBlockForAnyWork) {
  const lf::plan p = lf::plan_for(scale_tiles, lf::max_occupancy().items(n));
  // Launched for other work (a larger n would choose another block): the planned block all the same.
  const lf::launched ran = lf::launch(scale_tiles, lf::planned(p).items(n), out, in, n, p.block_threads);
  EXPECT_EQ(ran.block, p.block);
  EXPECT_EQ(ran.grid.x, static_cast<unsigned>((n + p.block_threads - 1) / p.block_threads));
  EXPECT_EQ(wrong(), 0u);
  // Overrides never replace a verbatim plan: it was made under them already.
  lf::set_policy_overrides("*scale_tiles*=fixed(block=64)");
  const lf::launched again = lf::launch(scale_tiles, lf::planned(p).items(n), out, in, n, p.block_threads);
  EXPECT_EQ(again.block, p.block);
  EXPECT_EQ(wrong(), 0u);
  // ... while the spec itself now plans under the override, and its plan and launch still agree.
  const lf::plan& overridden = lf::plan_for(scale_tiles, lf::max_occupancy().items(n));
  EXPECT_EQ(overridden.block_threads, 64);
  const lf::launched o = lf::launch(scale_tiles, lf::max_occupancy().items(n), out, in, n, overridden.block_threads);
  EXPECT_EQ(o.block.x, 64u);
  EXPECT_EQ(wrong(), 0u);
}

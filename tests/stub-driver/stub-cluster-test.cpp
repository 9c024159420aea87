// SPDX-License-Identifier: MIT
// Clusters through the stub driver, where a refused plan must leave nothing behind (no raised smem limit, no
// stored entry, no launch) and a plan must not be refused where the same kernel alone plans. ctest runs this
// twice: as a driver without cuOccupancyMaxActiveClusters answers (cluster residency estimated), and with
// LAUNCHFIT_STUB_ACTIVE_CLUSTERS=1, the stub placing clusters within GPCs as a GPU does and refusing a
// cooperative launch of more clusters than co-reside.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "error_of.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/error.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/param_policy.hpp"
#include "stub_driver.h"
#include "stub_plan.hpp"

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

using launchfit_test::family_functions;
using launchfit_test::family_tags;

const std::size_t axpy_params[] = {sizeof(float), sizeof(void*), sizeof(void*), sizeof(int)};

CUfunction axpy_kernel(const char* name) { return launchfit_stub_function(name, 16, 0, 1024, axpy_params, 4); }

float* device_pointer(std::uintptr_t n) { return reinterpret_cast<float*>(n); }

bool clusters_placed() {
  const char* v = std::getenv("LAUNCHFIT_STUB_ACTIVE_CLUSTERS");
  return v && std::strcmp(v, "1") == 0;
}

// The stub's own entry point, as launchfit finds it.
template <class Fn>
Fn* entry(const char* name) {
  void* p = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2(name, &p, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS) << name;
  return reinterpret_cast<Fn*>(p);
}

int smem_limit_of(CUfunction f) {
  int v = -1;
  EXPECT_EQ(entry<decltype(cuFuncGetAttribute)>("cuFuncGetAttribute")(
                &v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            CUDA_SUCCESS);
  return v;
}

CUresult set_smem_limit(CUfunction f, int bytes) {
  return entry<decltype(cuFuncSetAttribute)>("cuFuncSetAttribute")(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                                     bytes);
}

struct cluster_limit {  // on every path: no later test meets it
  explicit cluster_limit(int most) { launchfit_stub_set_cluster_limit(most); }
  ~cluster_limit() { launchfit_stub_set_cluster_limit(0); }
};

template <class Spec>
const lf::plan& family_plan(const Spec& s, std::uintptr_t id, const ld::family_member* members, std::size_t count) {
  ld::launch_request r = ld::make_request(s);
  launchfit_test::as_family(r, id, members, count);
  return ld::plan_for(r);
}

}  // namespace

// A cluster refused after launchfit raised the function's smem limit for it gives the limit back: the function
// is as the program left it. The same function's launch that co-schedules keeps the raised limit.
TEST(StubClusters, ARefusedClusterLeavesTheFunctionsSmemLimitAsItWas) {
  const CUfunction f = axpy_kernel("_Z8refusalfPKfPfi");
  ASSERT_EQ(smem_limit_of(f), 48 * 1024);
  const auto spec = lf::fixed(128).items(1 << 16).smem(96 * 1024).cluster({4, 1, 1});
  {
    const cluster_limit most(2);
    launchfit_stub_reset_calls();
    const lf::error refused = launchfit_test::error_of([&] {
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
    });
    EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
    EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u);
  }
  EXPECT_EQ(smem_limit_of(f), 48 * 1024) << "the refused plan's smem limit stayed on the function";
  // A limit the program raised itself stays where it put it.
  ASSERT_EQ(set_smem_limit(f, 64 * 1024), CUDA_SUCCESS);
  {
    const cluster_limit most(2);
    (void)launchfit_test::error_of([&] {
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
    });
  }
  EXPECT_EQ(smem_limit_of(f), 64 * 1024);
  const lf::launched l = lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
  EXPECT_EQ(l.dynamic_smem_bytes, 96u * 1024u);
  EXPECT_EQ(smem_limit_of(f), 96 * 1024) << "a launched plan keeps its limit";
}

// A plan refused after the policy chose it (here its cluster size) is neither written to the plan file nor
// published: a later process would adopt it and be refused again.
TEST(StubClusters, ARefusedPlanIsNotStored) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("launchfit-stub-refused-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(file);
  lf::set_cache_file(file);
  const CUfunction f = axpy_kernel("_Z9unstoredfPKfPfi");
  const CUfunction kept = axpy_kernel("_Z6storedfPKfPfi");
  {
    const cluster_limit most(2);
    const lf::error refused = launchfit_test::error_of([&] {
      lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).cluster({4, 1, 1}), 1.0f, device_pointer(0x1000),
                 device_pointer(0x2000), 1 << 16);
    });
    EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
  }
  lf::launch(lf::kernel(kept), lf::fixed(128).items(1 << 16).cluster({4, 1, 1}), 1.0f, device_pointer(0x1000),
             device_pointer(0x2000), 1 << 16);
  lf::close_cache_file();
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(file);
  EXPECT_NE(text.find("_Z6storedfPKfPfi"), std::string::npos) << "nothing was stored at all:\n" << text;
  EXPECT_EQ(text.find("_Z9unstoredfPKfPfi"), std::string::npos) << "the refused plan was stored:\n" << text;
}

// A family with a cluster plans as its members alone do: where a member's driver cannot count its clusters
// (blocks above its smem limit, or no cuOccupancyMaxActiveClusters) the residency is estimated, never read as
// "no cluster co-resides" (which refused the family with an error about its block rule).
TEST(StubClusters, AFamilyWithAClusterPlansAsItsMembersDo) {
  family_functions[0] = axpy_kernel("_Z9member128fPKfPfi");
  family_functions[1] = axpy_kernel("_Z9member256fPKfPfi");
  static const ld::family_member members[] = {{128, &family_tags[0]}, {256, &family_tags[1]}};
  const CUfunction alone = axpy_kernel("_Z5alonefPKfPfi");
  std::uintptr_t id = 0x7100;
  for (const std::size_t smem : {std::size_t{16 * 1024}, std::size_t{64 * 1024}}) {
    SCOPED_TRACE("smem " + std::to_string(smem));
    const auto spec = lf::max_occupancy().items(1 << 20).smem(smem).cluster({2, 1, 1});
    const lf::plan& single = lf::plan_for(lf::kernel(alone), spec);
    EXPECT_GT(single.resident_clusters, 0) << single.to_string();
    try {
      const lf::plan& p = family_plan(spec, id++, members, 2);
      EXPECT_TRUE(p.block_threads == 128 || p.block_threads == 256) << p.to_string();
      EXPECT_GT(p.resident_clusters, 0) << p.to_string();
      EXPECT_EQ(p.options.cluster, (lf::dims{2, 1, 1}));
    } catch (const lf::error& e) {
      ADD_FAILURE() << "the family was refused where its member alone plans: " << e.what();
    }
  }
}

// A cooperative launch of clusters whose blocks ask more smem than the function's limit: its clusters were
// counted from an estimate (the driver counts none above the limit), which can be more than co-reside, and
// the driver refused the launch of the cached plan every time. Asked again once the limit is raised, a grid
// that cannot co-reside is refused before anything launches; below the limit the same launch runs.
TEST(StubClusters, ACooperativeClusterAboveTheSmemLimitIsCountedByTheDriver) {
  if (!clusters_placed()) GTEST_SKIP() << "needs the stub's cluster placement (LAUNCHFIT_STUB_ACTIVE_CLUSTERS=1)";
  const auto spec_at = [](std::size_t smem) { return lf::cooperative().smem(smem).cluster({4, 1, 1}); };
  const CUfunction small = axpy_kernel("_Z9coopsmallfPKfPfi");
  const lf::launched l =
      lf::launch(lf::kernel(small), spec_at(40 * 1024), 1.0f, device_pointer(0x1000), device_pointer(0x2000), 7);
  EXPECT_EQ(l.grid.x % 4, 0u);
  const CUfunction large = axpy_kernel("_Z9cooplargefPKfPfi");
  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    launchfit_stub_reset_calls();
    try {
      const lf::launched big =
          lf::launch(lf::kernel(large), spec_at(200 * 1024), 1.0f, device_pointer(0x1000), device_pointer(0x2000), 7);
      // One block per SM, clusters of 4 within GPCs of 18 and 16 SMs: 32 co-reside, not 132 / 4 = 33.
      EXPECT_LE(big.grid.x, 128u) << big.plan().to_string();
    } catch (const lf::error& e) {
      EXPECT_NE(e.call(), "cuLaunchKernelEx") << "the driver refused a launch launchfit planned: " << e.what();
      EXPECT_TRUE(e.code() == lf::errc::invalid_plan || e.code() == lf::errc::cooperative_too_large ||
                  e.code() == lf::errc::cluster)
          << e.what();
      EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u) << e.what();
      EXPECT_EQ(smem_limit_of(large), 48 * 1024) << "the refused plan's smem limit stayed on the function";
    }
  }
}

// A plan is what a fresh process plans: launchfit's own raise of a function's smem limit for an earlier plan
// does not change a later plan of the same kernel (after cache().clear(), or under another key). The driver
// counts clusters only within a function's limit: planned again above the raised limit, the cooperative
// launch below chose block 512 by the driver's counts (a grid of 136 blocks, 128 co-resident: refused) where
// the first plan chose 1024 and launched; a smem rule's plan moved from block 192 to 384.
TEST(StubClusters, APlanAfterCacheClearIsTheFirstPlanWhereLaunchfitRaisedTheSmemLimit) {
  if (!clusters_placed()) GTEST_SKIP() << "needs the stub's cluster placement (LAUNCHFIT_STUB_ACTIVE_CLUSTERS=1)";
  const auto plan_of = [](const lf::kernel& k, const auto& spec) {
    try {
      const lf::launched l = lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1);
      return l.block.to_string() + " grid " + l.grid.to_string() + " smem " + std::to_string(l.dynamic_smem_bytes);
    } catch (const lf::error& e) {
      return std::string("refused: ") + e.what();
    }
  };
  const lf::kernel coop(axpy_kernel("_Z6coop8kfPKfPfi"));
  const auto coop_spec = lf::cooperative(1).cluster({8, 1, 1}).smem(49153).items(67584);
  const std::string first = plan_of(coop, coop_spec);
  EXPECT_EQ(first.find("refused"), std::string::npos) << first;
  EXPECT_EQ(plan_of(coop, coop_spec), first) << "the hit";
  lf::cache().clear();
  EXPECT_EQ(plan_of(coop, coop_spec), first) << "after cache().clear()";

  const lf::kernel rule(launchfit_stub_function("_Z8rule168fPKfPfi", 168, 0, 1024, axpy_params, 4));
  const auto rule_spec = lf::max_occupancy().cluster({3, 1, 1}).smem_per_block([](int b) -> std::size_t {
    return 100000 + 2 * static_cast<std::size_t>(b);
  }).items(108);
  const std::string ruled = plan_of(rule, rule_spec);
  EXPECT_EQ(ruled.find("refused"), std::string::npos) << ruled;
  lf::cache().clear();
  EXPECT_EQ(plan_of(rule, rule_spec), ruled) << "after cache().clear()";
}

// A family is launched with one cluster for whichever member the policy chooses: members compiled with
// different __cluster_dims__ (or some with and some without) cannot all get what they require, and the launch
// is refused before anything runs, naming each member's dims (only the widest member's were looked at: a
// narrower member with dims of its own was launched in a grid of no whole clusters, which the driver refuses,
// and the plan was cached). Members that agree are planned with their dims.
TEST(StubClusters, AFamilysMembersMustAgreeOnTheirCompiledClusterDims) {
  family_functions[2] = axpy_kernel("_Z8dims64_afPKfPfi");
  family_functions[3] = axpy_kernel("_Z9dims128_afPKfPfi");
  launchfit_stub_set_compiled_cluster(family_functions[2], 2, 1, 1);
  static const ld::family_member mixed[] = {{64, &family_tags[2]}, {128, &family_tags[3]}};
  const lf::error refused =
      launchfit_test::error_of([&] { (void)family_plan(lf::fixed(64).items(192), 0x7201, mixed, 2); });
  EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("different __cluster_dims__"), std::string::npos) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("dims64_a(float, float const*, float*, int): 2, "),
            std::string::npos)
      << refused.what();
  EXPECT_NE(std::string(refused.what()).find("dims128_a(float, float const*, float*, int): none"),
            std::string::npos)
      << refused.what();
  launchfit_stub_set_compiled_cluster(family_functions[3], 2, 1, 1);
  const lf::plan& p = family_plan(lf::fixed(64).items(192), 0x7203, mixed, 2);
  EXPECT_EQ(p.options.cluster, (lf::dims{2, 1, 1})) << p.to_string();
  EXPECT_TRUE(p.options.cluster_from_kernel) << p.to_string();
}

// A plan of the same function made while another plan's raise of its smem limit was still being checked
// finds the limit raised, and notes its own need all the same: when the other plan is refused, the limit is
// not given back under the plan that relies on it. (The other launch is made from inside the first plan's
// smem rule, which launchfit asks again once the limit is raised: a second thread's launch at that moment.)
TEST(StubClusters, ARefusedPlansLimitIsNotGivenBackUnderAPlanThatReliesOnIt) {
  static CUfunction f = nullptr;
  static bool other_launched = false;
  f = axpy_kernel("_Z7reliantfPKfPfi");
  ASSERT_EQ(smem_limit_of(f), 48 * 1024);
  const auto rule = [](int) -> std::size_t {
    if (!other_launched && smem_limit_of(f) >= 96 * 1024) {
      other_launched = true;
      lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).smem(96 * 1024), 1.0f, device_pointer(0x1000),
                 device_pointer(0x2000), 1 << 16);
    }
    return 96 * 1024;
  };
  {
    const cluster_limit most(2);
    const lf::error refused = launchfit_test::error_of([&] {
      lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).cluster({4, 1, 1}).smem_per_block(rule), 1.0f,
                 device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
    });
    EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
  }
  ASSERT_TRUE(other_launched) << "the scenario did not happen";
  EXPECT_EQ(smem_limit_of(f), 96 * 1024) << "the limit was given back under a cached plan of 96 KB";
  launchfit_stub_reset_calls();
  EXPECT_NO_THROW(lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).smem(96 * 1024), 1.0f,
                             device_pointer(0x1000), device_pointer(0x2000), 1 << 16));
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 1u);
}

// Steps of two threads, each waited for at most 10 s (a test that fails never hangs).
struct steps {
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  void reach(int step) {
    {
      std::lock_guard<std::mutex> lock(m);
      done = std::max(done, step);
    }
    cv.notify_all();
  }
  bool wait_for(int step) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return done >= step; });
  }
};
steps race;
constexpr int a_raised = 1, b_resolved = 2, a_refused = 3;
std::atomic<std::thread::id> thread_a;

// B's policy: chosen after B's kernel was resolved, it lets A be refused before it answers.
struct waiting_params {
  int block = 128;
  static constexpr std::array<const char*, 1> names{"block"};
};
class waits_for_a : public lf::param_policy<waits_for_a, waiting_params> {
 public:
  static constexpr const char* policy_name = "waits_for_a";

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    race.reach(b_resolved);
    EXPECT_TRUE(race.wait_for(a_refused)) << "A was not refused within 10 s";
    return launchfit_test::full_residency_plan(q, static_cast<unsigned>(params_.block), "waits for A");
  }
};

// Two plans of one function under two keys, on two threads: A raises the function's smem limit to 96 KB and is
// refused after the raise (its cluster of 4 does not co-schedule); B's kernel is resolved while A's raise is
// still in force (the limit reads 96 KB), and B is chosen after A was refused. A's refusal gives its raise back
// only to what B holds: B's queries at the limit it was resolved with count what co-resides (the driver counts
// nothing above a function's limit: B was refused, "no cluster co-resides", for a launch that runs), B is
// launched, and the limit stays at B's 96 KB.
TEST(StubClusters, APlanResolvedWhileAnotherPlansRaiseIsInForceKeepsThatLimitUntilItIsChosen) {
  const CUfunction f = axpy_kernel("_Z6racingfPKfPfi");
  ASSERT_EQ(smem_limit_of(f), 48 * 1024);
  const int n = 1 << 16;
  const cluster_limit most(2);
  thread_a = std::thread::id{};
  launchfit_stub_on_call(
      "cuOccupancyMaxPotentialClusterSize",
      [](void*) {
        if (std::this_thread::get_id() != thread_a.load()) return;
        race.reach(a_raised);  // A's cluster size is checked after its raise: A holds it here
        EXPECT_TRUE(race.wait_for(b_resolved)) << "B was not resolved within 10 s";
      },
      nullptr);
  struct unhook {  // on every path: no later test meets the hook
    ~unhook() { launchfit_stub_on_call("cuOccupancyMaxPotentialClusterSize", nullptr, nullptr); }
  } unhooked;
  std::string a_error;
  std::thread a([&] {
    thread_a = std::this_thread::get_id();
    try {
      lf::launch(lf::kernel(f), lf::fixed(128).items(n).smem(96 * 1024).cluster({4, 1, 1}), 1.0f,
                 device_pointer(0x1000), device_pointer(0x2000), n);
    } catch (const lf::error& e) {
      a_error = e.what();
    }
    thread_a = std::thread::id{};
    race.reach(a_refused);
  });
  ASSERT_TRUE(race.wait_for(a_raised)) << "A did not raise the limit within 10 s";
  EXPECT_EQ(smem_limit_of(f), 96 * 1024) << "A's raise";
  try {
    const lf::launched b = lf::launch(lf::kernel(f), lf::spec<waits_for_a>(waits_for_a{}).items(n).smem(96 * 1024).cluster({2, 1, 1}),
                                      1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
    EXPECT_EQ(b.dynamic_smem_bytes, 96u * 1024u);
  } catch (const lf::error& e) {
    ADD_FAILURE() << "B was refused at the limit A's refusal gave back: " << e.what();
  }
  a.join();
  EXPECT_NE(a_error.find("cluster"), std::string::npos) << "A: " << a_error;
  EXPECT_EQ(smem_limit_of(f), 96 * 1024) << "B's limit";
}

// A raise the driver refuses notes no need: a later refused plan gives its limit back to what it was.
TEST(StubClusters, ARaiseTheDriverRefusedLeavesNoNeedBehind) {
  const CUfunction f = axpy_kernel("_Z9unraisedfPKfPfi");
  launchfit_stub_fail("cuFuncSetAttribute", CUDA_ERROR_INVALID_VALUE, 1);
  const lf::error failed = launchfit_test::error_of([&] {
    lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).smem(200 * 1024), 1.0f, device_pointer(0x1000),
               device_pointer(0x2000), 1 << 16);
  });
  EXPECT_NE(std::string(failed.what()).find("cuFuncSetAttribute"), std::string::npos) << failed.what();
  ASSERT_EQ(smem_limit_of(f), 48 * 1024);
  {
    const cluster_limit most(2);
    (void)launchfit_test::error_of([&] {
      lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).smem(96 * 1024).cluster({4, 1, 1}), 1.0f,
                 device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
    });
  }
  EXPECT_EQ(smem_limit_of(f), 48 * 1024) << "the refused raise's need kept the limit up";
}

// A function whose limit the program lowered below the default is raised for a plan above it, also where the
// plan is within what every block may have without opting in.
TEST(StubClusters, ALimitTheProgramLoweredIsRaisedForAPlanAboveIt) {
  const CUfunction f = axpy_kernel("_Z7loweredfPKfPfi");
  ASSERT_EQ(set_smem_limit(f, 16 * 1024), CUDA_SUCCESS);
  launchfit_stub_reset_calls();
  const lf::launched l = lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).smem(32 * 1024), 1.0f,
                                    device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
  EXPECT_EQ(l.dynamic_smem_bytes, 32u * 1024u);
  EXPECT_EQ(smem_limit_of(f), 32 * 1024);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 1u);
}

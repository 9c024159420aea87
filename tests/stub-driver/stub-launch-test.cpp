// SPDX-License-Identifier: MIT
// Launches of driver-API kernels through the stub driver (stub_driver.h), without a GPU: what reaches
// cuLaunchKernelEx is the plan launchfit reports, attributes included; a launch launchfit refuses reaches
// nothing; the hit path asks the driver for the launch alone; a plan made inside a capture stops asking about
// captures after its watch.

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/log.hpp"
#include "launchfit/error.hpp"
#include "launchfit/args.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/plugin.hpp"
#include "nvml.hpp"
#include "captured_log.hpp"
#include "error_of.hpp"
#include "plan_cache.hpp"
#include "stub_driver.h"
#include "stub_plan.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

const std::size_t axpy_params[] = {sizeof(float), sizeof(void*), sizeof(void*), sizeof(int)};

CUfunction axpy_kernel(const char* name, int regs = 16) {
  return launchfit_stub_function(name, regs, 0, 1024, axpy_params, 4);
}

CUstream stream_of(std::uintptr_t n) { return reinterpret_cast<CUstream>(n); }

struct launch_seen {
  CUlaunchConfig config{};
  CUlaunchAttribute attrs[8]{};
};

launch_seen last_launch(CUfunction f) {
  launch_seen s;
  EXPECT_EQ(launchfit_stub_last_launch(f, &s.config, s.attrs, 8), 1) << "no launch reached the driver";
  return s;
}

bool has_attribute(const launch_seen& s, CUlaunchAttributeID id) {
  for (unsigned i = 0; i < s.config.numAttrs && i < 8; ++i)
    if (s.attrs[i].id == id) return true;
  return false;
}

float* device_pointer(std::uintptr_t n) { return reinterpret_cast<float*>(n); }

TEST(StubLaunch, TheDriverGetsExactlyThePlanLaunchfitReports) {
  const CUfunction f = axpy_kernel("_Z4axpyfPKfPfi");
  const int n = 1000003;
  const CUstream s = stream_of(0x10);
  const lf::launched l =
      lf::launch(lf::kernel(f), lf::max_occupancy().items(n).on(s), 2.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  const launch_seen seen = last_launch(f);
  EXPECT_EQ(seen.config.blockDimX, l.block.x);
  EXPECT_EQ(seen.config.gridDimX, l.grid.x);
  EXPECT_EQ(static_cast<long long>(seen.config.gridDimX) * seen.config.blockDimX >= n, true);
  EXPECT_LT(static_cast<long long>(seen.config.gridDimX - 1) * seen.config.blockDimX, n);
  EXPECT_EQ(seen.config.hStream, s);
  EXPECT_EQ(seen.config.numAttrs, 0u);
  EXPECT_FALSE(l.plan().options.cooperative);
  // The stub's occupancy (16 registers: warps limit): every block size up to 1024 fills the SM; max_occupancy
  // keeps its preferred 256.
  EXPECT_EQ(l.block.x, 256u) << l.plan().to_string();
}

// A spec planned without its work (plan_for(), then block-dependent arguments) and launched with small work
// that gets another block: the launch's plan says so, once. A launch of the same kind never planned without
// work says nothing (the lookup behind the warning is skipped until some plan is made without work).
TEST(StubLaunch, ALaunchWithWorkIsToldOfThePlanMadeWithoutIt) {
  const int n = 132 * 128;  // 256-thread blocks would leave half the 132 SMs idle: smaller blocks fill them
  const CUfunction alone = axpy_kernel("_Z5alonefPKfPfi");
  const lf::launched first = lf::launch(lf::kernel(alone), lf::max_occupancy().items(n).on(stream_of(0x12)), 1.0f,
                                        device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_TRUE(first.plan().warning.empty()) << first.plan().warning;

  const CUfunction f = axpy_kernel("_Z5twicefPKfPfi");
  const lf::plan& without = lf::plan_for(lf::kernel(f), lf::max_occupancy().on(stream_of(0x12)));
  EXPECT_TRUE(without.without_work);
  const lf::launched with = lf::launch(lf::kernel(f), lf::max_occupancy().items(n).on(stream_of(0x12)), 1.0f,
                                       device_pointer(0x1000), device_pointer(0x2000), n);
  ASSERT_NE(with.block, without.block) << with.plan().to_string();
  EXPECT_NE(with.plan().warning.find("without work was planned with block " + without.block.to_string()),
            std::string::npos)
      << with.plan().warning;
}

TEST(StubLaunch, ACooperativeLaunchCarriesItsAttributeAndCoResides) {
  const CUfunction f = axpy_kernel("_Z4coopfPKfPfi");
  const lf::launched l = lf::launch(lf::kernel(f), lf::cooperative().on(stream_of(0x11)), 1.0f, device_pointer(0x1000),
                                    device_pointer(0x2000), 7);
  const launch_seen seen = last_launch(f);
  EXPECT_TRUE(has_attribute(seen, CU_LAUNCH_ATTRIBUTE_COOPERATIVE));
  EXPECT_TRUE(l.plan().options.cooperative);
  EXPECT_EQ(static_cast<long long>(seen.config.gridDimX), l.plan().resident_blocks());
  EXPECT_EQ(seen.config.gridDimX, static_cast<unsigned>(l.plan().blocks_per_sm * 132));
}

TEST(StubLaunch, AProgrammaticLaunchCarriesItsAttribute) {
  const CUfunction f = axpy_kernel("_Z3pdlfPKfPfi");
  const lf::launched l = lf::launch(lf::kernel(f), lf::max_occupancy().items(4096).on(stream_of(0x12)).pdl(), 1.0f,
                                    device_pointer(0x1000), device_pointer(0x2000), 4096);
  EXPECT_TRUE(has_attribute(last_launch(f), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION));
  EXPECT_TRUE(l.plan().options.programmatic);
  EXPECT_FALSE(has_attribute(last_launch(f), CU_LAUNCH_ATTRIBUTE_COOPERATIVE));
}

// A driver that answers an empty name for a function: the kernel is named by its handle, in its resources and in
// a refusal made before planning (query_resources() and the refusal share function_name()).
TEST(StubLaunch, AKernelTheDriverNamesEmptyIsNamedByItsHandle) {
  const CUfunction f = axpy_kernel("");
  const lf::kernel_resources k = lf::query_resources(f);
  EXPECT_EQ(k.name, "kernel@" + std::to_string(reinterpret_cast<std::uintptr_t>(f)));
  const lf::kernel kernel(f);
  const lf::error e = launchfit_test::error_of([&] {
    lf::launch(kernel, lf::fixed(256).items(1000).cluster({0, 1, 1}), 2.0f, device_pointer(0x1000),
               device_pointer(0x2000), 1000);
  });
  EXPECT_NE(std::string(e.what()).find("kernel@"), std::string::npos) << e.what();
}

TEST(StubLaunch, ALaunchWithTheWrongArgumentsReachesNothing) {
  const CUfunction f = axpy_kernel("_Z5wrongfPKfPfi");
  const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
  // Three arguments for four parameters, then a double where the kernel takes a float.
  EXPECT_THROW(lf::launch(lf::kernel(f), lf::max_occupancy().items(64), 1.0f, device_pointer(0x1000), 64),
               lf::error);
  EXPECT_THROW(lf::launch(lf::kernel(f), lf::max_occupancy().items(64), 1.0, device_pointer(0x1000),
                          device_pointer(0x2000), 64),
               lf::error);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before);
}

TEST(StubLaunch, ALaunchTheDriverRefusesThrowsNamingTheKernelAndPlan) {
  const CUfunction f = axpy_kernel("_Z7refusedfPKfPfi");
  const auto spec = lf::max_occupancy().items(64).on(stream_of(0x13));
  launchfit_stub_fail("cuLaunchKernelEx", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 1);
  try {
    lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 64);
    ADD_FAILURE() << "the refused launch did not throw";
  } catch (const lf::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), std::string::npos) << what;
    EXPECT_NE(what.find("refused"), std::string::npos) << what;
    EXPECT_NE(what.find("block=256"), std::string::npos) << what;
  }
  // The plan stays: the next launch of the same spec runs it.
  EXPECT_NO_THROW(lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 64));
}

// A policy of the program's own that records the bytes-in-flight target its query carries.
std::size_t target_seen = 0;
class target_recorder final : public lf::param_policy<target_recorder, lf::no_params> {
 public:
  static constexpr const char* policy_name = "test_target_recorder";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    target_seen = q.bytes_in_flight_per_sm;
    return launchfit_test::full_residency_plan(q, 256, "records the target");
  }
};

// The plan file's measured bytes in flight per SM reaches every policy that may read it (bytes_in_flight and
// a program's own; the other built-ins' misses do not look it up).
TEST(StubLaunch, APlanFilesCalibrationReachesThePoliciesThatReadIt) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("launchfit-stub-calibration-" + std::to_string(::getpid()) + ".json"))
                               .string();
  lf::set_cache_file(file);
  lf::store_bytes_in_flight_calibration(8 * 1024);
  const int n = 1 << 24;
  const CUfunction bif = axpy_kernel("_Z3biffPKfPfi");
  const lf::launched l =
      lf::launch(lf::kernel(bif), lf::bytes_in_flight(16).items(n), 2.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  // 8 KiB in flight per SM of 16-byte loads: 512 threads, 16 warps (the table's 32 KiB would be 64).
  EXPECT_EQ(l.plan().blocks_per_sm * l.plan().block_threads / 32, 16) << l.plan().to_string();
  target_seen = 0;
  const CUfunction own = axpy_kernel("_Z3ownfPKfPfi");
  lf::launch(lf::kernel(own), lf::spec<target_recorder>(target_recorder{}).items(n), 2.0f, device_pointer(0x1000),
             device_pointer(0x2000), n);
  EXPECT_EQ(target_seen, 8u * 1024u);
  lf::flush_cache_file(2000);
  lf::close_cache_file();
  std::filesystem::remove(file);
}

// A launch above 48 KiB of dynamic smem raises the kernel's limit first; the driver refusing that is an error
// naming the call, the kernel and the plan, and nothing is launched.
TEST(StubLaunch, ARefusedSmemLimitThrowsNamingTheKernelAndPlan) {
  const CUfunction f = axpy_kernel("_Z8bigsmemfPKfPfi");
  const auto spec = lf::fixed(128).items(1024).smem(64 * 1024).on(stream_of(0x14));
  const unsigned long long launches = launchfit_stub_calls("cuLaunchKernelEx");
  launchfit_stub_fail("cuFuncSetAttribute", CUDA_ERROR_INVALID_VALUE, 1);
  try {
    lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1024);
    ADD_FAILURE() << "the refused smem limit did not throw";
  } catch (const lf::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"), std::string::npos) << what;
    EXPECT_NE(what.find("bigsmem"), std::string::npos) << what;
    EXPECT_NE(what.find("dynamic_smem_bytes=65536"), std::string::npos) << what;
  }
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), launches) << "a launch reached the driver";
  // Without the failure the limit is raised and the launch runs with the smem it asked for.
  lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1024);
  EXPECT_EQ(last_launch(f).config.sharedMemBytes, 64u * 1024u);
}

// The driver refusing a non-portable cluster size for the kernel: an error naming the call and the kernel, and
// nothing is launched (the smem limit's refusal: ARefusedSmemLimitThrowsNamingTheKernelAndPlan).
TEST(StubLaunch, ARefusedClusterSizeThrowsNamingTheKernel) {
  const unsigned long long launches = launchfit_stub_calls("cuLaunchKernelEx");
  {
    const CUfunction f = axpy_kernel("_Z7clusterfPKfPfi");
    launchfit_stub_fail("cuFuncSetAttribute", CUDA_ERROR_NOT_SUPPORTED, 1);
    try {
      lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).cluster({16, 1, 1}, true).on(stream_of(0x16)), 1.0f,
                 device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
      ADD_FAILURE() << "the refused non-portable cluster size did not throw";
    } catch (const lf::error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("NON_PORTABLE_CLUSTER_SIZE_ALLOWED"), std::string::npos) << what;
      EXPECT_NE(what.find("cluster(float"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), launches) << "a launch reached the driver";
}

// A cluster's size is asked of the driver (cuOccupancyMaxPotentialClusterSize) as its blocks will launch: a
// grid of one cluster, the plan's block (all three dimensions) and dynamic smem, no attribute and no stream.
TEST(StubLaunch, AClustersSizeIsAskedOfTheDriverAsItsBlocksLaunch) {
  const CUfunction f = axpy_kernel("_Z8clusterafPKfPfi");
  launchfit_stub_reset_calls();  // also forgets the last cluster query
  ASSERT_EQ(launchfit_stub_last_cluster_query(nullptr), 0);
  const lf::launched l =
      lf::launch(lf::kernel(f), lf::fixed({32, 4}).items({256, 256}).smem(8 * 1024).cluster({4, 1, 1}).on(stream_of(0x18)),
                 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
  EXPECT_GE(launchfit_stub_calls("cuOccupancyMaxPotentialClusterSize"), 1u);
  CUlaunchConfig asked{};
  ASSERT_EQ(launchfit_stub_last_cluster_query(&asked), 1) << "the cluster's size was not asked";
  EXPECT_EQ(asked.gridDimX, 4u);
  EXPECT_EQ(asked.gridDimY, 1u);
  EXPECT_EQ(asked.gridDimZ, 1u);
  EXPECT_EQ(asked.blockDimX, 32u);
  EXPECT_EQ(asked.blockDimY, 4u);
  EXPECT_EQ(asked.blockDimZ, 1u);
  EXPECT_EQ(l.block.x, 32u);
  EXPECT_EQ(l.block.y, 4u);
  EXPECT_EQ(asked.sharedMemBytes, 8u * 1024u);
  EXPECT_EQ(l.dynamic_smem_bytes, 8u * 1024u);
  EXPECT_EQ(asked.hStream, nullptr);
  EXPECT_EQ(asked.numAttrs, 0u);
  EXPECT_EQ(last_launch(f).config.gridDimX % 4, 0u) << "whole clusters";
}

// A cluster above what the driver says co-schedules is refused naming the kernel, the size and the limit, and
// nothing is launched: above 8 blocks against the device's non-portable maximum (asked for the smallest block),
// up to 8 against the plan's block and smem.
TEST(StubLaunch, AClusterAboveWhatTheDriverCoSchedulesIsRefusedAndNothingLaunches) {
  struct no_limit {  // on every path: no later test may meet this limit
    ~no_limit() { launchfit_stub_set_cluster_limit(0); }
  } restored;
  const auto refusal = [](CUfunction f, lf::dims cluster, bool non_portable) {
    try {
      lf::launch(lf::kernel(f), lf::fixed(128).items(1 << 16).cluster(cluster, non_portable).on(stream_of(0x18)),
                 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
    } catch (const lf::error& e) {
      return std::string(e.what()) + " code=" + lf::to_string(e.code());
    }
    return std::string("no error");
  };
  const auto says = [](const std::string& text, std::initializer_list<std::string> parts) {
    for (const std::string& part : parts) EXPECT_NE(text.find(part), std::string::npos) << part << " not in: " << text;
  };
  const std::string code = "code=" + std::string(lf::to_string(lf::errc::cluster));
  launchfit_stub_reset_calls();
  launchfit_stub_set_cluster_limit(2);
  says(refusal(axpy_kernel("_Z8clusterbfPKfPfi"), {4, 1, 1}, false),
       {"cluster 4 (4 blocks of 128 threads, 0 B dynamic smem): at most 2 co-schedule "
        "(cuOccupancyMaxPotentialClusterSize)",
        "clusterb(float", "CUDA_ERROR_INVALID_CLUSTER_SIZE", code});
  launchfit_stub_set_cluster_limit(8);
  says(refusal(axpy_kernel("_Z8clustercfPKfPfi"), {16, 1, 1}, true),
       {"cluster 16 (16 blocks) is above the most this device co-schedules in one cluster: 8 blocks",
        "clusterc(float", code});
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u) << "a launch reached the driver";
  EXPECT_GE(launchfit_stub_calls("cuOccupancyMaxPotentialClusterSize"), 2u);
  // Within the limit the same launch runs.
  launchfit_stub_set_cluster_limit(0);
  EXPECT_EQ(refusal(axpy_kernel("_Z8clusterdfPKfPfi"), {16, 1, 1}, true), "no error");
}

// A cluster whose blocks ask more dynamic smem than the function allows before launchfit raises its limit
// (48 KB): the driver counts no cluster of such blocks until the limit is raised, so the size is checked after
// it is, and a cluster that does not co-schedule is still refused before anything launches.
TEST(StubLaunch, AClusterOfBlocksAboveTheSmemLimitIsCheckedAtTheRaisedLimit) {
  struct no_limit {
    ~no_limit() { launchfit_stub_set_cluster_limit(0); }
  } restored;
  const CUfunction f = axpy_kernel("_Z8clustersfPKfPfi");
  const auto spec = lf::fixed(128).items(1 << 16).smem(96 * 1024).cluster({4, 1, 1}).on(stream_of(0x18));
  launchfit_stub_reset_calls();
  launchfit_stub_set_cluster_limit(2);
  const lf::error refused = launchfit_test::error_of([&] {
    lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
  });
  EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("cluster 4 (4 blocks of 128 threads, 98304 B dynamic smem): at most 2 "
                                             "co-schedule (cuOccupancyMaxPotentialClusterSize)"),
            std::string::npos)
      << refused.what();
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u) << "a launch reached the driver";
  CUlaunchConfig asked{};
  ASSERT_EQ(launchfit_stub_last_cluster_query(&asked), 1);
  EXPECT_EQ(asked.sharedMemBytes, 96u * 1024u);
  // Within the limit the same launch runs, with the function's limit raised for it.
  launchfit_stub_set_cluster_limit(0);
  const lf::launched l =
      lf::launch(lf::kernel(axpy_kernel("_Z8clustertfPKfPfi")), spec, 1.0f, device_pointer(0x1000),
                 device_pointer(0x2000), 1 << 16);
  EXPECT_EQ(l.dynamic_smem_bytes, 96u * 1024u);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 1u);
}

// A grid the program computed, given to fixed(block, grid), is launched as <<<grid, block>>> launches it: an
// empty one ((n + 255) / 256 for n = 0) launches nothing (a kernel writing partial[blockIdx.x] was launched
// over a full wave of 1,056 blocks, as fixed(block) without work is). fixed(block) alone still sizes its grid
// from the work, or one wave.
TEST(StubLaunch, AnEmptyGridGivenToFixedLaunchesNothing) {
  const CUfunction f = axpy_kernel("_Z9emptygridfPKfPfi");
  const lf::kernel k(f);
  const int n = 0;
  launchfit_stub_reset_calls();
  const lf::launched none = lf::launch(k, lf::fixed(256, (n + 255) / 256).on(stream_of(0x41)), 1.0f,
                                       device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(none.grid.count(), 0u) << none.grid.to_string();
  const lf::launched none_dims = lf::launch(k, lf::fixed({16, 16}, {(n + 15) / 16, 4}).on(stream_of(0x41)), 1.0f,
                                            device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(none_dims.grid.count(), 0u) << none_dims.grid.to_string();
  // Empty along y or z (an image of no rows): nothing launched either, never a refusal of the grid.
  for (const lf::dims empty : {lf::dims{4, (n + 15) / 16, 1}, lf::dims{4, 4, static_cast<unsigned>(n)}}) {
    const lf::launched none_yz = lf::launch(k, lf::fixed({16, 16}, empty).on(stream_of(0x41)), 1.0f,
                                            device_pointer(0x1000), device_pointer(0x2000), n);
    EXPECT_EQ(none_yz.grid.count(), 0u) << none_yz.grid.to_string();
  }
  const lf::launched none_unsigned = lf::launch(k, lf::fixed(256u, std::size_t{0}).on(stream_of(0x41)), 1.0f,
                                                device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(none_unsigned.grid.count(), 0u) << none_unsigned.grid.to_string();
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u) << "an empty grid was launched";
  const lf::launched four = lf::launch(k, lf::fixed(256, (1000 + 255) / 256).on(stream_of(0x41)), 1.0f,
                                       device_pointer(0x1000), device_pointer(0x2000), 1000);
  EXPECT_EQ(four.grid, (lf::dims{4, 1, 1}));
  const lf::launched wave = lf::launch(k, lf::fixed(256).on(stream_of(0x41)), 1.0f, device_pointer(0x1000),
                                       device_pointer(0x2000), 1000);
  EXPECT_EQ(wave.grid.x, static_cast<unsigned>(wave.plan().resident_blocks())) << "fixed(block) without work";
  const lf::launched from_work = lf::launch(k, lf::fixed(256).items(1000).on(stream_of(0x41)), 1.0f,
                                            device_pointer(0x1000), device_pointer(0x2000), 1000);
  EXPECT_EQ(from_work.grid, (lf::dims{4, 1, 1}));
}

// Arguments are taken by value, as a call takes them: a static const member without a definition outside its
// class is an argument (bound to a reference it was odr-used, and a build without optimisation, as this file's,
// did not link), and an aggregate's args() kept in a variable holds its own copy of the fields (it held a
// reference to the temporary it was made from, read after that died: AddressSanitizer, stack-use-after-scope).
struct launch_sizes {
  static const int n = 1 << 16;
};
struct axpy_fields {
  float a;
  const float* x;
  float* y;
  int n;
};
TEST(StubLaunch, ArgumentsAreTakenByValue) {
  const CUfunction f = axpy_kernel("_Z8byvaluefPKfPfi");
  const lf::kernel k(f);
  launchfit_stub_reset_calls();
  lf::launch(k, lf::fixed(256).items(launch_sizes::n).on(stream_of(0x42)), 1.0f, device_pointer(0x1000),
             device_pointer(0x2000), launch_sizes::n);
  const auto kept = lf::args(axpy_fields{2.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16});
  lf::launch(k, lf::fixed(256).items(1 << 16).on(stream_of(0x42)), kept);
  EXPECT_EQ(kept.fields.n, 1 << 16);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 2u);
}

// The hit path: one cuLaunchKernelEx per launch, and of the driver only the current context's identity, in one
// call (cuCtxGetId(NULL): a context destroyed and another made at the same address is another context, whose
// plans are its own; its handle is asked only where a launch plans).
TEST(StubLaunch, TheHitPathAsksTheDriverForTheLaunchAndTheContextAlone) {
  const CUfunction f = axpy_kernel("_Z3hotfPKfPfi");
  const auto spec = lf::max_occupancy().items(1 << 20).on(stream_of(0x14));
  const lf::kernel k(f);
  lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);  // the miss
  launchfit_stub_reset_calls();
  constexpr int launches = 1000;
  for (int i = 0; i < launches; ++i) lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), static_cast<unsigned long long>(launches));
  EXPECT_EQ(launchfit_stub_total_calls(), 2ull * launches) << "a driver call beyond the context and the launch";
  EXPECT_EQ(launchfit_stub_calls("cuCtxGetId"), static_cast<unsigned long long>(launches));
  for (const char* other :
       {"cuFuncGetAttribute", "cuFuncGetName", "cuFuncGetParamInfo", "cuDeviceGetAttribute",
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuOccupancyMaxPotentialBlockSize",
        "cuStreamIsCapturing", "cuStreamGetCaptureInfo", "cuFuncSetAttribute", "cuCtxGetDevice", "cuCtxGetCurrent"}) {
    EXPECT_EQ(launchfit_stub_calls(other), 0u) << other << " on the hit path";
  }
}

// The hit path reads the context's identity alone: a context destroyed and another made behind the same handle
// (cudaDeviceReset) is another context, whose first launch plans again and never launches the old context's
// function; the old context's plans are dropped, and the new one's launches hit.
TEST(StubLaunch, ANewContextBehindTheSameHandlePlansAgainOnTheHitPath) {
  const CUfunction f = axpy_kernel("_Z7recycledfPKfPfi");
  const auto spec = lf::max_occupancy().items(1 << 20).on(stream_of(0x16));
  const lf::kernel k(f);
  auto launch = [&] { lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20); };
  launch();  // planned in the context current now
  launch();  // a hit
  const std::uint64_t builds = ld::stats().builds;
  static unsigned long long next_id = 7001;  // never an identity seen before, however often the test runs
  const unsigned long long id = next_id++;
  launchfit_stub_set_context_id(id);  // the context gone, another at its address
  launch();
  EXPECT_EQ(ld::stats().builds, builds + 1) << "the old context's plan was launched in the new one";
  const std::uint64_t handed_over = ld::handed_over_launches();
  launch();
  EXPECT_EQ(ld::handed_over_launches(), handed_over) << "the new context's plan is not launched by the hit path";
  EXPECT_EQ(ld::stats().builds, builds + 1);
  for (const lf::cached_plan& c : lf::cache().plans()) EXPECT_EQ(c.key.context, id) << c.kernel;
}

// A thread remembers the context it last noted and that context's limits until any thread sees a handle name
// another identity. Identities taking turns behind one handle plan again at every turn, from this thread and from
// another; and where an identity this thread remembers comes back behind the handle after another thread saw it
// name another (A, then B on another thread, then A), the identity between (B) is dropped as any replaced one is:
// a memo not invalidated by the other thread's change would keep B's plans.
TEST(StubLaunch, IdentitiesTakingTurnsBehindOneHandleEachPlanAgain) {
  const CUfunction f = axpy_kernel("_Z7turnsidfPKfPfi");
  const auto spec = lf::max_occupancy().items(1 << 16).on(stream_of(0x17));
  const lf::kernel k(f);
  auto launch = [&] { lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16); };
  auto launch_elsewhere = [&] {
    std::thread other(launch);
    other.join();
  };
  auto contexts_cached = [] {
    std::vector<std::uint64_t> ids;
    for (const lf::cached_plan& c : lf::cache().plans()) ids.push_back(c.key.context);
    return ids;
  };
  static unsigned long long next_id = 9001;  // never an identity seen before, however often the test runs
  for (int turn = 0; turn < 6; ++turn) {
    const unsigned long long id = next_id++;
    launchfit_stub_set_context_id(id);
    const std::uint64_t builds = ld::stats().builds;
    if (turn % 2 == 0) {
      launch();
    } else {
      launch_elsewhere();  // another thread's first look at this identity
    }
    EXPECT_EQ(ld::stats().builds, builds + 1) << "turn " << turn << ": the identity before's plan was launched";
    const std::uint64_t handed_over = ld::handed_over_launches();
    launch();
    EXPECT_EQ(ld::stats().builds, builds + 1) << "turn " << turn;
    EXPECT_EQ(ld::handed_over_launches(), handed_over) << "turn " << turn << ": not launched by the hit path";
    for (const std::uint64_t c : contexts_cached()) EXPECT_EQ(c, id);
  }
  // A on this thread, B on another, A again on this one.
  const unsigned long long a = next_id++, b = next_id++;
  launchfit_stub_set_context_id(a);
  launch();
  launchfit_stub_set_context_id(b);
  launch_elsewhere();
  for (const std::uint64_t c : contexts_cached()) EXPECT_EQ(c, b) << "A's plans outlived its replacement";
  launchfit_stub_set_context_id(a);
  const std::uint64_t builds = ld::stats().builds;
  launch();
  EXPECT_EQ(ld::stats().builds, builds + 1);
  const std::vector<std::uint64_t> left = contexts_cached();
  EXPECT_FALSE(left.empty());
  for (const std::uint64_t c : left) EXPECT_EQ(c, a) << "B's plans outlived its replacement: a stale memo of A";
}

// A launch that hits launches from the entry's ready configuration, and leaves to the full path whatever that
// configuration does not say: each case below is launched once to plan it, then again as a hit, and the hit
// must do what the full path does (every case fails where the hit path skips its check).
TEST(StubLaunch, AHitLaunchesWhatTheFullPathWouldAndLeavesItTheRest) {
  const CUfunction f = axpy_kernel("_Z7hitpathfPKfPfi");
  const lf::kernel k(f);
  const CUstream st = stream_of(0x15);
  float* x = device_pointer(0x1000);
  float* y = device_pointer(0x2000);
  auto grid_of = [&](const auto& spec, std::uint64_t n) {
    lf::launch(k, spec, 1.0f, x, y, static_cast<int>(n));  // planned (or a hit already)
    const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
    const std::uint64_t handed_over = ld::handed_over_launches();
    const lf::launched l = lf::launch(k, spec, 1.0f, x, y, static_cast<int>(n));
    EXPECT_EQ(ld::handed_over_launches(), handed_over) << "not launched by the hit path";
    EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before + 1);
    const launch_seen seen = last_launch(f);
    EXPECT_EQ(seen.config.gridDimX, l.grid.x);
    EXPECT_EQ(seen.config.blockDimX, l.block.x);
    EXPECT_EQ(seen.config.hStream, st);
    return l;
  };
  // items(n), a power-of-two block: n / 256 rounded up, exactly at and either side of a block's edge.
  for (std::uint64_t n : {1ull, 255ull, 256ull, 257ull, 1000003ull})
    EXPECT_EQ(grid_of(lf::max_occupancy().items(n).on(st), n).grid.x, (n + 255) / 256) << n;
  // Not a power of two, k items per thread, grid-stride work: the same grid as the plan's own rule.
  EXPECT_EQ(grid_of(lf::fixed(96).items(1000).on(st), 1000).grid.x, 11u);
  EXPECT_EQ(grid_of(lf::max_occupancy().items(1000003).per_thread(4).on(st), 1000003).grid.x, (1000003u + 1023) / 1024);
  const lf::launched stride = grid_of(lf::max_occupancy().grid_stride(1u << 30).on(st), 1u << 30);
  EXPECT_EQ(static_cast<long long>(stride.grid.x), stride.plan().resident_blocks());
  // The attributes a hit carries are its own plan's (a PDL plan's, not the plain one launched before it).
  lf::launch(k, lf::max_occupancy().items(4096).on(st).pdl(), 1.0f, x, y, 4096);
  const std::uint64_t handed_over = ld::handed_over_launches();
  lf::launch(k, lf::max_occupancy().items(4096).on(st).pdl(), 1.0f, x, y, 4096);
  EXPECT_EQ(ld::handed_over_launches(), handed_over) << "not launched by the hit path";
  EXPECT_TRUE(has_attribute(last_launch(f), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION));
  lf::launch(k, lf::max_occupancy().items(4096).on(st), 1.0f, x, y, 4096);
  EXPECT_EQ(last_launch(f).config.numAttrs, 0u);
  // Every attribute a plan carries, on a hit as on the miss: the kept plan's, in the full path's order.
  const auto cooperative_cluster_pdl = lf::max_occupancy().items(4096).on(st).cooperative().cluster({2, 1, 1}).pdl();
  lf::launch(k, cooperative_cluster_pdl, 1.0f, x, y, 4096);
  const launch_seen planned = last_launch(f);
  ASSERT_EQ(planned.config.numAttrs, 3u);
  const std::uint64_t before_hit = ld::handed_over_launches();
  lf::launch(k, cooperative_cluster_pdl, 1.0f, x, y, 4096);
  EXPECT_EQ(ld::handed_over_launches(), before_hit) << "not launched by the hit path";
  const launch_seen hit = last_launch(f);
  ASSERT_EQ(hit.config.numAttrs, 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(hit.attrs[i].id, planned.attrs[i].id) << i;
    EXPECT_EQ(std::memcmp(&hit.attrs[i].value, &planned.attrs[i].value, sizeof(CUlaunchAttributeValue)), 0) << i;
  }
  EXPECT_TRUE(has_attribute(hit, CU_LAUNCH_ATTRIBUTE_COOPERATIVE));
  EXPECT_TRUE(has_attribute(hit, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION));
  EXPECT_TRUE(has_attribute(hit, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION));

  // items(0) on a hit: nothing launched, as on the full path.
  const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
  const lf::launched none = lf::launch(k, lf::max_occupancy().items(0).on(st), 1.0f, x, y, 0);
  EXPECT_EQ(none.grid.count(), 0u);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before);
  // A grid above the device's limit on a hit: refused naming the kernel, nothing launched.
  const lf::error e = launchfit_test::error_of([&] {
    lf::launch(k, lf::max_occupancy().items(std::uint64_t{1} << 42).on(st), 1.0f, x, y, 0);
  });
  EXPECT_NE(std::string(e.what()).find("hitpath"), std::string::npos) << e.what();
  // Arguments of other sizes on a hit: refused, nothing launched.
  EXPECT_THROW(lf::launch(k, lf::max_occupancy().items(4096).on(st), 1.0, x, y, 4096), lf::error);
  EXPECT_THROW(lf::launch(k, lf::max_occupancy().items(4096).on(st), 1.0f, x, y), lf::error);
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before);

  // Trace lines turned on with the plan already cached: every hit logs its launch.
  {
    launchfit_test::captured_log log(spdlog::level::trace);
    lf::logger()->set_level(spdlog::level::warn);
    lf::launch(k, lf::max_occupancy().items(4096).on(st), 1.0f, x, y, 4096);
    EXPECT_EQ(log.text().find("launch "), std::string::npos) << log.text();
    lf::logger()->set_level(spdlog::level::trace);
    launchfit_stub_reset_calls();
    lf::launch(k, lf::max_occupancy().items(4096).on(st), 1.0f, x, y, 4096);
    EXPECT_NE(log.text().find("[trace] launch "), std::string::npos) << log.text();
    // Handed over to the full path with the context's identity it read: the driver is asked once for it, and
    // for the handle not at all (the plan is cached: nothing is planned).
    EXPECT_EQ(launchfit_stub_calls("cuCtxGetCurrent"), 0u);
    EXPECT_EQ(launchfit_stub_calls("cuCtxGetId"), 1u);
  }
  // After cache().clear() the hit's entry is gone: the next launch plans again.
  const std::uint64_t builds = ld::stats().builds;
  lf::cache().clear();
  lf::launch(k, lf::max_occupancy().items(4096).on(st), 1.0f, x, y, 4096);
  EXPECT_EQ(ld::stats().builds, builds + 1);
}

// A tuning policy's budget is for its trials. The trials' stream gate holds a pinned word, and page-locking
// memory can take tens of milliseconds in a virtual machine (an H100 host's first autotune trial once took 42.7
// ms of a 50 ms budget, which then ended after that one trial). For a plugin's policy the gate is made before
// the policy is asked: here an allocation of 45 ms leaves autotune(max_ms=50) its whole budget for trials.
TEST(StubLaunch, APluginPolicysBudgetIsForItsTrialsNotTheGatesAllocation) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  ASSERT_EQ(lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name, "autotune");
  const CUfunction f = axpy_kernel("_Z9slow_gatefPKfPfi");
  launchfit_stub_set_cost(f, 0.002, 256);
  launchfit_stub_set_host_alloc_ms(45);
  launchfit_stub_reset_calls();
  const auto spec = lf::use("autotune(max_ms=50)").items(1 << 20).on(stream_of(0x15)).rerunnable();
  const lf::launched l =
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
  launchfit_stub_set_host_alloc_ms(0);
  EXPECT_EQ(launchfit_stub_calls("cuMemHostAlloc"), 1u) << "one gate per tuning";
  EXPECT_GE(l.plan().trials, 8) << l.plan().reason;
  EXPECT_LE(l.plan().tuning_ms, 50.0 * 1.5) << l.plan().reason;
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// A trial of a microsecond kernel is samples of ~0.1 ms of back-to-back launches, not ~0.3 ms: such a trial was
// mostly the host queueing launches behind the stream gate (on an H100, kernels of 3-7 us at 2^20 items took
// 48 ms of autotune's 50 to tune; 25 ms with these samples, the same plans within noise). Here a kernel of 4 us:
// a timing is the pilot and five samples of at most 25 launches (ceil(0.1 ms / 4 us)); at ~0.3 ms they were
// 38-64 launches each.
TEST(StubLaunch, AMicrosecondKernelIsTimedInSamplesOfATenthOfAMillisecond) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  ASSERT_EQ(lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name, "autotune");
  const CUfunction f = axpy_kernel("_Z10microsecfPKfPfi");
  launchfit_stub_set_cost(f, 0.004, 256);
  launchfit_stub_reset_calls();
  const auto spec = lf::use("autotune(max_ms=50,max_trials=16)").items(1 << 20).on(stream_of(0x16)).rerunnable();
  const lf::launched l =
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
  ASSERT_GE(l.plan().trials, 8) << l.plan().reason;
  const double per_timing =
      static_cast<double>(launchfit_stub_calls("cuLaunchKernelEx") - 1) / l.plan().trials;  // less the launch
  EXPECT_LE(per_timing, 1 + 5 * 25) << l.plan().reason;
  EXPECT_GE(per_timing, 1 + 5 * 10) << "samples too short to time a microsecond kernel: " << l.plan().reason;
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// Every candidate of one tuning is timed in samples of the same length: each sample pays a fixed start, which
// must weigh alike on every candidate. Here the kernel takes 18 us in blocks of 256 and 22.5-31.5 us in others,
// either side of the 20 us under which samples are ~0.1 ms: chosen per candidate, some were timed in samples of
// ~0.1 ms and others of ~0.3 ms. The launches between two event records are one sample.
namespace sample_lengths {
CUfunction kernel = nullptr;
unsigned long long launches_before = 0;
std::vector<std::pair<unsigned long long, unsigned>> samples;  // (launches, block)
void on_event_record(void*) {
  const unsigned long long now = launchfit_stub_calls("cuLaunchKernelEx");
  const unsigned long long n = now - launches_before;
  launches_before = now;
  CUlaunchConfig cfg{};
  if (n > 1 && launchfit_stub_last_launch(kernel, &cfg, nullptr, 0)) samples.emplace_back(n, cfg.blockDimX);
}
}  // namespace sample_lengths
TEST(StubLaunch, EveryCandidateOfATuningIsTimedInSamplesOfOneLength) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  ASSERT_EQ(lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name, "autotune");
  const CUfunction f = axpy_kernel("_Z11samplelengthfPKfPfi");
  launchfit_stub_set_cost(f, 0.018, 256);
  sample_lengths::kernel = f;
  sample_lengths::samples.clear();
  sample_lengths::launches_before = launchfit_stub_calls("cuLaunchKernelEx");
  launchfit_stub_on_call("cuEventRecord", sample_lengths::on_event_record, nullptr);
  struct restore {
    ~restore() { launchfit_stub_on_call("cuEventRecord", nullptr, nullptr); }
  } restored;
  const auto spec = lf::use("autotune(max_ms=50,max_trials=16)").items(1 << 20).on(stream_of(0x18)).rerunnable();
  const lf::launched l =
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
  ASSERT_GE(l.plan().trials, 8) << l.plan().reason;
  // The stub's time of a launch: 18 us at 256 threads, a quarter more per doubling away.
  const auto cost_ms = [](unsigned block) {
    return 0.018 * (1.0 + 0.25 * std::fabs(std::log2(static_cast<double>(block) / 256.0)));
  };
  double shortest = 1e9, longest = 0;
  std::set<unsigned> blocks;
  for (const auto& [launches, block] : sample_lengths::samples) {
    const double ms = static_cast<double>(launches) * cost_ms(block);
    shortest = std::min(shortest, ms);
    longest = std::max(longest, ms);
    blocks.insert(block);
  }
  ASSERT_GE(blocks.size(), 3u) << "too few candidates timed to compare: " << l.plan().reason;
  ASSERT_TRUE(blocks.count(256) && blocks.size() > 1) << l.plan().reason;
  EXPECT_LT(longest, 1.5 * shortest) << "samples of " << shortest << " to " << longest << " ms in one tuning";
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// launchfit's own work inside a tuning's first trial is not a plugin policy's budget: where plans are stored the
// first trial takes the fleet's tuning lease and reads the GPU's conditions (NVML), which a virtual machine can
// make slow. Here NVML's process query takes 30 ms; autotune(max_ms=50) counted that first trial as one of
// 60 ms and timed nothing after it.
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
// A kernel the stub times at 2 us a launch (fastest in blocks of 256), with the autotune plugin loaded.
CUfunction kernel_to_tune(const char* name) {
  EXPECT_EQ(lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name, "autotune");
  const CUfunction f = axpy_kernel(name);
  launchfit_stub_set_cost(f, 0.002, 256);
  return f;
}
#endif

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A plan file of this process's own in the temporary directory, none there yet, in use from now on.
std::string fresh_plan_file(const std::string& tag) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("launchfit-stub-" + tag + "-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(file);
  lf::set_cache_file(file);
  return file;
}

namespace slow_nvml {
int device_token = 0;
ld::nvml::result init() { return ld::nvml::success; }
ld::nvml::result by_uuid(const char*, ld::nvml::device* d) {
  *d = &device_token;
  return ld::nvml::success;
}
ld::nvml::result processes(ld::nvml::device, unsigned* count, ld::nvml::process_info_v3*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  *count = 0;
  return ld::nvml::success;
}
}  // namespace slow_nvml

TEST(StubLaunch, LaunchfitsSetupInTheFirstTrialIsNotAPluginPolicysBudget) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  const std::string file = fresh_plan_file("setup");  // conditions are read, and the lease taken, where plans are stored
  ld::nvml::function_table table;
  table.init = slow_nvml::init;
  table.handle_by_uuid = slow_nvml::by_uuid;
  table.compute_processes_v3 = slow_nvml::processes;
  ld::nvml::set_table_for_tests(&table);
  struct restore {  // on every path: no later test may meet this stack's table
    ~restore() { ld::nvml::set_library_for_tests(nullptr); }
  } restored;
  const CUfunction f = kernel_to_tune("_Z9slow_nvmlfPKfPfi");
  const auto spec = lf::use("autotune(max_ms=50)").items(1 << 20).on(stream_of(0x17)).rerunnable();
  const lf::launched l =
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
  lf::close_cache_file();
  std::filesystem::remove(file);
  EXPECT_GE(l.plan().trials, 8) << l.plan().reason;
  EXPECT_NE(l.plan().reason.find("launchfit's setup"), std::string::npos) << l.plan().reason;
  EXPECT_LE(l.plan().tuning_ms, 50.0 * 1.5) << l.plan().reason;
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// A plugin's plan that the launch's requirements refuse (a cooperative plan for a launch that is not: the plugin
// cannot see which launches are) takes the plugin's fallback path, as any invalid
// plan of a plugin: its fallback decides where one is given, else the launch is refused naming the plan. It was
// refused even with fallback= given.
TEST(StubLaunch, APluginPlanTheLaunchRefusesTakesThePluginsFallbackPath) {
#ifdef LAUNCHFIT_HOSTILE_PLUGIN
  lf::load_plugin(LAUNCHFIT_HOSTILE_PLUGIN);
  const CUfunction f = axpy_kernel("_Z9coopplugfPKfPfi");
  const lf::kernel k(f);
  const int n = 1 << 20;
  {
    const char* flag = "coop=1";
    const std::string policy = std::string("test_hostile(block=128,") + flag;
    try {
      lf::launch(k, lf::use(policy + ")").items(n).on(stream_of(0x1a)), 1.0f, device_pointer(0x1000),
                 device_pointer(0x2000), n);
      ADD_FAILURE() << flag << ": a plan the launch refuses was launched";
    } catch (const lf::error& e) {
      EXPECT_EQ(e.code(), lf::errc::invalid_plan) << e.what();
      EXPECT_NE(std::string(e.what()).find("returned an invalid plan"), std::string::npos) << e.what();
    }
    const lf::launched l = lf::launch(k, lf::use(policy + ",fallback=max_occupancy)").items(n).on(stream_of(0x1a)),
                                      1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
    EXPECT_EQ(l.plan().match, "fallback") << l.plan().reason;
    EXPECT_FALSE(l.plan().options.cooperative) << l.plan().reason;
    EXPECT_NE(l.plan().reason.find("returned an invalid plan"), std::string::npos) << l.plan().reason;
  }
#else
  GTEST_SKIP() << "the hostile test plugin is not built";
#endif
}

// A launch that may not re-run its kernel gets autotune's fallback (autotune declines without trials); the
// rerunnable spec of the same key did not tune after it, for the life of the process: .rerunnable() is not in
// the key, and the hit path launched the fallback. Now the fallback is the plan of such launches only: the first
// rerunnable launch plans again and tunes, plan_for() of the rerunnable spec says it is not planned yet until
// then, and the later launches of either spec run the tuned plan.
TEST(StubLaunch, AFallbackForALaunchThatMayNotRerunIsNotARerunnableLaunchsPlan) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  const CUfunction f = kernel_to_tune("_Z11untimedfirstfPKfPfi");
  const int n = 1 << 20;
  const auto once = lf::use("autotune(max_ms=20)").items(n).on(stream_of(0x19));
  const auto rerun = once.rerunnable();
  const lf::launched a = lf::launch(lf::kernel(f), once, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(a.plan().trials, 0);
  EXPECT_NE(a.plan().reason.find(".rerunnable()"), std::string::npos) << a.plan().reason;
  // Again: its own plan, from the hit path.
  std::uint64_t handed = ld::handed_over_launches();
  const lf::launched a2 = lf::launch(lf::kernel(f), once, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(&a2.plan(), &a.plan());
  EXPECT_EQ(ld::handed_over_launches(), handed) << "a launch that may not re-run hits its fallback";
  try {
    (void)lf::plan_for(lf::kernel(f), rerun);
    ADD_FAILURE() << "plan_for() answered with the fallback the rerunnable launch will not run";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::not_planned_yet) << e.what();
    EXPECT_NE(std::string(e.what()).find("its policy's fallback, made for a launch that may not re-run"),
              std::string::npos)
        << e.what();
  }
  const lf::launched b = lf::launch(lf::kernel(f), rerun, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_GT(b.plan().trials, 0) << "the rerunnable launch ran the fallback: " << b.plan().reason;
  // Both specs launch the tuned plan from now on, from the hit path, and plan_for() answers with it.
  handed = ld::handed_over_launches();
  const lf::launched b2 = lf::launch(lf::kernel(f), rerun, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  const lf::launched a3 = lf::launch(lf::kernel(f), once, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(&b2.plan(), &b.plan());
  EXPECT_EQ(&a3.plan(), &b.plan());
  EXPECT_EQ(ld::handed_over_launches(), handed);
  EXPECT_EQ(&lf::plan_for(lf::kernel(f), rerun), &b.plan());
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// One kernel launched with items(n) and with grid_stride(n) by a tuning policy: each launch's plan is tuned for
// the grid it launches. The same map kernel, once one element per thread ("scale4") and once grid-stride
// ("map4"), used to share one plan: the grid-stride launch ran the block the items launch had timed at full
// residency, a grid no trial had timed (2-3% slower than its own tuning on an H100), and the plan file held one
// entry for both.
TEST(StubLaunch, ATuningPolicyTunesItemsAndGridStrideWorkOfOneKernelApart) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  const std::string file = fresh_plan_file("kinds");
  const CUfunction f = kernel_to_tune("_Z8map_kindfPKfPfi");
  const int n = 1 << 20;
  const auto items = lf::use("autotune(max_ms=20)").items(n).on(stream_of(0x16)).rerunnable();
  const auto strided = lf::use("autotune(max_ms=20)").grid_stride(n).on(stream_of(0x16)).rerunnable();
  const lf::launched a = lf::launch(lf::kernel(f), items, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  const lf::launched b = lf::launch(lf::kernel(f), strided, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_GT(a.plan().trials, 0) << a.plan().reason;
  EXPECT_GT(b.plan().trials, 0) << "the grid-stride launch ran the items launch's plan: " << b.plan().reason;
  EXPECT_NE(&a.plan(), &b.plan());
  EXPECT_EQ(a.grid.x, (static_cast<unsigned>(n) + a.plan().block.x - 1) / a.plan().block.x)
      << "items: one thread per element";
  // Each launch again finds its own plan.
  const lf::launched a2 = lf::launch(lf::kernel(f), items, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  const lf::launched b2 = lf::launch(lf::kernel(f), strided, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(&a2.plan(), &a.plan());
  EXPECT_EQ(&b2.plan(), &b.plan());
  // The plan file keys them apart too: a later process's grid-stride launch does not find the items plan.
  lf::close_cache_file();
  const std::string text = read_text(file);
  EXPECT_NE(text.find("work=grid_stride"), std::string::npos) << text;
  EXPECT_NE(text.find("work=items"), std::string::npos) << text;
  std::size_t entries = 0;
  for (std::size_t at = text.find("_Z8map_kind"); at != std::string::npos; at = text.find("_Z8map_kind", at + 1))
    ++entries;
  EXPECT_EQ(entries, 2u) << text;
  std::filesystem::remove(file);
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// Every stored key names the work's kind: an entry written before keys named it is ambiguous (an items plan,
// a grid-stride one or one made without work were written alike) and is found by no launch, which plans again.
TEST(StubLaunch, AStoredEntryWithoutTheWorksKindIsFoundByNoLaunch) {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  const std::string file = fresh_plan_file("legacy");
  const CUfunction f = kernel_to_tune("_Z6legacyfPKfPfi");
  const int n = 1 << 20;
  const auto spec = lf::use("autotune(max_ms=20)").items(n).on(stream_of(0x18)).rerunnable();
  const auto run = [&] {
    return lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
  };
  EXPECT_EQ(run().plan().match, "computed");
  lf::close_cache_file();
  const std::string text = read_text(file);
  const std::size_t at = text.find(" work=items");
  ASSERT_NE(at, std::string::npos) << text;
  lf::cache().clear();
  lf::set_cache_file(file);  // the entry as written: found
  EXPECT_EQ(run().plan().match, "cache-file");
  lf::close_cache_file();
  std::ofstream(file, std::ios::trunc) << text.substr(0, at) + text.substr(at + std::string(" work=items").size());
  lf::cache().clear();
  lf::set_cache_file(file);  // the same entry without its kind, as an older launchfit wrote it: tuned again
  const lf::launched again = run();
  EXPECT_EQ(again.plan().match, "computed") << again.plan().reason;
  EXPECT_GT(again.plan().trials, 0);
  lf::close_cache_file();
  std::filesystem::remove(file);
#else
  GTEST_SKIP() << "the autotune plugin is not built (-DLAUNCHFIT_BUILD_PLUGINS=OFF)";
#endif
}

// Any other policy that times makes the gate at its first trial, and one that never times makes none: a
// policy's miss pays for no pinned word and no thread it does not use.
bool time_once = true;
unsigned long long gate_words_before_first_trial = ~0ull;
struct timing_params {
  int x = 0;
  static constexpr std::array<const char*, 1> names{"x"};
};
class timing_policy final : public lf::param_policy<timing_policy, timing_params> {
 public:
  static constexpr const char* policy_name = "test_timing";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    const lf::plan p = launchfit_test::full_residency_plan(q, 256, "timed once or never, by the test");
    gate_words_before_first_trial = launchfit_stub_calls("cuMemHostAlloc");
    if (time_once && q.time_plan) (void)q.time_plan(p);
    return p;
  }
};

TEST(StubLaunch, AnotherPolicysTrialsMakeTheirGateOnlyWhenTheyRun) {
  for (const bool times : {true, false}) {
    time_once = times;
    launchfit_stub_reset_calls();
    gate_words_before_first_trial = ~0ull;
    lf::launch(lf::kernel(axpy_kernel(times ? "_Z5timedfPKfPfi" : "_Z7untimedfPKfPfi")),
               lf::spec<timing_policy>(timing_policy{}).items(1 << 20).on(stream_of(0x15)).rerunnable(), 1.0f,
               device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
    EXPECT_EQ(gate_words_before_first_trial, 0u) << "the policy was not asked, or a gate was made before it";
    EXPECT_EQ(launchfit_stub_calls("cuMemHostAlloc"), times ? 1u : 0u);
    EXPECT_EQ(launchfit_stub_calls("cuStreamWaitValue32") > 0, times);
  }
  time_once = true;
}

// A driver-API kernel's arguments that are not its parameters are refused before a tuning policy's trials run
// the kernel with them: the trials launched it 960-odd times with an int where it takes a size_t (on a GPU, four
// bytes of the stack read as the count), or with the argument array's terminating null as a missing argument.
TEST(StubLaunch, ArgumentsThatAreNotAKernelsParametersAreRefusedBeforeAnyTrial) {
  time_once = true;
  const std::size_t sizes[] = {sizeof(float*), sizeof(std::size_t)};
  const lf::kernel k(launchfit_stub_function("_Z9untrustedPfm", 16, 0, 1024, sizes, 2));
  const auto spec = lf::spec<timing_policy>(timing_policy{}).items(1000).on(stream_of(0x19)).rerunnable();
  float* p = device_pointer(0x1000);
  const int n_as_int = 1000;
  for (int round = 0; round < 2; ++round) {
    launchfit_stub_reset_calls();
    const lf::error wrong_size = launchfit_test::error_of([&] { lf::launch(k, spec, p, n_as_int); });
    EXPECT_NE(std::string(wrong_size.what()).find("argument 1 is 4 bytes, the kernel's parameter is 8 bytes"),
              std::string::npos)
        << wrong_size.what();
    EXPECT_NE(std::string(wrong_size.what()).find("untrusted"), std::string::npos) << wrong_size.what();
    const lf::error missing = launchfit_test::error_of([&] { lf::launch(k, spec, p); });
    EXPECT_NE(std::string(missing.what()).find("kernel takes 2 parameters, 1 arguments given"), std::string::npos)
        << missing.what();
    EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u) << "round " << round << ": a trial ran the kernel";
  }
  // The right arguments then plan (and time) as usual.
  lf::launch(k, spec, p, std::size_t{1000});
  EXPECT_GT(launchfit_stub_calls("cuLaunchKernelEx"), 1u);
}

// A cluster refused before the launch is planned (a dimension of 0, or above 65535) names the kernel, as every
// other refusal does (it named none).
TEST(StubLaunch, AClusterRefusedBeforePlanningNamesTheKernel) {
  const lf::kernel k(axpy_kernel("_Z11badclusterfPKfPfi"));
  for (const lf::dims c : {lf::dims{0, 1, 1}, lf::dims{65536, 1, 1}}) {
    launchfit_stub_reset_calls();
    const lf::error e = launchfit_test::error_of([&] {
      lf::launch(k, lf::max_occupancy().items(1000).cluster(c), 1.0f, device_pointer(0x1000), device_pointer(0x2000),
                 1000);
    });
    EXPECT_NE(e.kernel().find("badcluster"), std::string::npos) << e.what();
    EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u);
  }
}

// An aggregate's fields through args() on a driver-API kernel are checked as separate arguments are: an aggregate
// of no field is no argument (its empty array reached the driver as a null parameter list), a from_plan() field
// does not compile (static_assert; it passed the callable's bytes); and add_kernel_node() takes args() too (the
// aggregate was one argument, and with no parameter sizes from the driver read past the argument array).
TEST(StubLaunch, AnAggregatesFieldsAreADriverKernelsArgumentsForLaunchesAndNodes) {
  const std::size_t sizes[] = {sizeof(float), sizeof(float*), sizeof(float*), sizeof(int)};
  const CUfunction f = launchfit_stub_function("_Z6packedfPKfPfi", 16, 0, 1024, sizes, 4);
  const lf::kernel k(f);
  struct none {};
  launchfit_stub_reset_calls();
  const lf::error e = launchfit_test::error_of([&] { lf::launch(k, lf::fixed(256).items(1000), lf::args(none{})); });
  EXPECT_NE(std::string(e.what()).find("kernel takes 4 parameters, 0 arguments given"), std::string::npos) << e.what();
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), 0u);

  struct axpy {
    float a;
    const float* x;
    float* y;
    int n;
  };
  const CUstream s = stream_of(0x1a);
  launchfit_stub_begin_capture(s);
  const CUgraph graph = launchfit_stub_end_capture(s);
  const lf::kernel_node node = lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(graph), {}, k,
                                                   lf::fixed(256).items(1000).on(s),
                                                   lf::args(axpy{2.0f, device_pointer(0x1000), device_pointer(0x2000), 1000}));
  ASSERT_NE(node.node, nullptr);
  CUDA_KERNEL_NODE_PARAMS params{};
  ASSERT_EQ(launchfit_stub_graph_node(reinterpret_cast<CUgraphNode>(node.node), &params), 1);
  ASSERT_NE(params.kernelParams, nullptr);
  EXPECT_EQ(*static_cast<float*>(params.kernelParams[0]), 2.0f);
  EXPECT_EQ(*static_cast<int*>(params.kernelParams[3]), 1000);
  EXPECT_EQ(params.gridDimX, 4u);
  launchfit_stub_report_params(f, 0);  // a driver that does not say: the fields are still four arguments
  const lf::kernel_node again = lf::add_kernel_node(reinterpret_cast<cudaGraph_t>(graph), {node.node}, k,
                                                    lf::fixed(256).items(1000).on(s),
                                                    lf::args(axpy{3.0f, device_pointer(0x1000), device_pointer(0x2000), 7}));
  launchfit_stub_report_params(f, 1);
  ASSERT_EQ(launchfit_stub_graph_node(reinterpret_cast<CUgraphNode>(again.node), &params), 1);
  EXPECT_EQ(*static_cast<float*>(params.kernelParams[0]), 3.0f);
  EXPECT_EQ(*static_cast<int*>(params.kernelParams[3]), 7);
  launchfit_stub_destroy_graph(graph);
}

// A policy that is not a built-in (param_policy): a plan it makes inside a capture is watched.
struct half_params {
  int block = 128;
  static constexpr std::array<const char*, 1> names{"block"};
};
class test_half_policy final : public lf::param_policy<test_half_policy, half_params> {
 public:
  static constexpr const char* policy_name = "test_half";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    lf::plan p;
    p.block = lf::dims{static_cast<unsigned>(params_.block), 1, 1};
    p.block_threads = params_.block;
    p.blocks_per_sm = 1;
    p.sm_count = q.device.sm_count;
    p.reason = "half of a warp's worth of blocks, by the test";
    return p;
  }
};

TEST(StubCapture, APlanMadeInsideACaptureStopsAskingAboutCapturesAfterItsWatch) {
  const CUfunction f = axpy_kernel("_Z7watchedfPKfPfi");
  const CUstream s = stream_of(0x15);
  const auto spec = lf::spec<test_half_policy>(test_half_policy{}).items(256).on(s);  // not .rerunnable()
  const lf::kernel k(f);
  const auto launch = [&] { lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 256); };
  launchfit_stub_begin_capture(s);
  launch();  // planned inside the capture: watched
  const CUgraph g = launchfit_stub_end_capture(s);
  ASSERT_NE(g, nullptr);
  constexpr unsigned watch = lf::detail::capture_watch::launches;
  launchfit_stub_reset_calls();
  for (unsigned i = 0; i + 1 < watch; ++i) launch();
  EXPECT_EQ(launchfit_stub_calls("cuStreamGetCaptureInfo"), watch - 1);
  // A launch inside a capture starts the count again.
  launchfit_stub_begin_capture(s);
  launch();
  const CUgraph again = launchfit_stub_end_capture(s);
  launchfit_stub_reset_calls();
  for (unsigned i = 0; i < watch + 100; ++i) launch();
  EXPECT_EQ(launchfit_stub_calls("cuStreamGetCaptureInfo"), watch)
      << "a launch kept asking the driver about its stream after " << watch << " launches outside captures";
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), watch + 100);
  launchfit_stub_destroy_graph(g);
  launchfit_stub_destroy_graph(again);
}

// A user's policy whose work_bucket() answers a new value for every size (a plan per size): the plans of one
// kernel and policy stay within max_buckets_per_family buckets plus the one their later sizes share, made
// once with a warning naming the policy; every launch still gets its own work's grid. Before the bound, the
// cache held a plan (an entry, a stored plan) per size for the process's life.
class plan_per_size final : public lf::policy_base {
 public:
  std::string name() const override { return "plan_per_size"; }
  std::string params() const override { return {}; }
  std::uint64_t hash() const override { return 0x5eed5eedULL; }
  std::uint64_t work_bucket(const lf::work& w) const override { return w.n + 1; }

 protected:
  lf::plan choose_impl(const lf::query&) const override {
    lf::plan p;
    p.block = lf::dims{128, 1, 1};
    p.reason = "128 threads for every size";
    return p;
  }
};

TEST(StubLaunch, APolicyWithABucketPerSizeHoldsABoundedNumberOfPlans) {
  const CUfunction f = axpy_kernel("_Z12per_size_keyfPKfPfi");
  const lf::kernel k(f);
  const auto policy = std::make_shared<const plan_per_size>();
  const std::size_t cap = ld::max_buckets_per_family;
  const std::size_t sizes = cap + 200;
  launchfit_test::captured_log log(spdlog::level::info);
  const auto plans_of_kernel = [&] {
    std::size_t n = 0;
    for (const lf::cached_plan& c : lf::cache().plans()) n += c.key.kernel == reinterpret_cast<std::uintptr_t>(f);
    return n;
  };
  for (std::size_t n = 1; n <= sizes; ++n) {
    const lf::launched l = lf::launch(k, lf::use(policy).items(n).on(stream_of(0x19)), 1.0f,
                                      device_pointer(0x1000), device_pointer(0x2000), static_cast<int>(n));
    ASSERT_EQ(l.block.x, 128u) << n;
    ASSERT_EQ(l.grid.x, (n + 127) / 128) << n;
    const launch_seen seen = last_launch(f);
    ASSERT_EQ(seen.config.gridDimX, (n + 127) / 128) << n;
  }
  // Launched again: the first sizes hit their own plans, the later ones the shared plan; nothing new is made.
  const std::uint64_t builds = ld::stats().builds;
  for (std::size_t n = 1; n <= sizes; n += 7)
    lf::launch(k, lf::use(policy).items(n).on(stream_of(0x19)), 1.0f, device_pointer(0x1000),
               device_pointer(0x2000), static_cast<int>(n));
  EXPECT_EQ(ld::stats().builds, builds);
  EXPECT_EQ(plans_of_kernel(), cap + 1);
  const std::string text = log.text();
  const std::string said = "gave this kernel more than " + std::to_string(cap) + " size buckets";
  const std::size_t at = text.find(said);
  ASSERT_NE(at, std::string::npos) << text.substr(text.size() > 4000 ? text.size() - 4000 : 0);
  EXPECT_EQ(text.find(said, at + 1), std::string::npos) << "warned more than once";
  EXPECT_NE(text.find("plan_per_size()"), std::string::npos);
  EXPECT_NE(text.find("items(" + std::to_string(cap + 1) + ")"), std::string::npos) << text.substr(at, 600);
  lf::cache().clear();
  EXPECT_EQ(plans_of_kernel(), 0u);
  // After a clear the family starts again: a size gets its own plan.
  lf::launch(k, lf::use(policy).items(5).on(stream_of(0x19)), 1.0f, device_pointer(0x1000), device_pointer(0x2000), 5);
  EXPECT_EQ(plans_of_kernel(), 1u);
  for (const lf::cached_plan& c : lf::cache().plans())
    if (c.key.kernel == reinterpret_cast<std::uintptr_t>(f)) EXPECT_EQ(c.key.bucket, policy->work_bucket(lf::work{lf::work::shape::items, 5, 1}));
}

// An operator's override with a block with rows (fixed({16, 16}), meant for 2-D kernels) matching a 1-D kernel
// would launch ceil(n / 256) blocks of 16 x 16 for n items, every row but the first undone in a kernel that
// indexes by threadIdx.x: it gives way to the spec's own policy with a warning, and serves 2-D work as named.
// The spec's own such block is the author's (a kernel that indexes the whole block): launched as before.
TEST(StubLaunch, AnOverridesBlockWithRowsGivesWayForOneDimensionalWork) {
  const CUfunction f = axpy_kernel("_Z9rows_on_1fPKfPfi");
  const lf::kernel k(f);
  const int n = 100000;
  const lf::launched own_rows = lf::launch(k, lf::fixed({32, 4}).items(n).on(stream_of(0x1a)), 1.0f,
                                           device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(own_rows.block, (lf::dims{32, 4, 1}));
  EXPECT_EQ(own_rows.grid.x, (n + 127u) / 128u);
  // With the rows said (.block_y), the work runs along x: one block row per x range.
  const lf::launched shaped = lf::launch(k, lf::fixed({32, 3}).items(n).block_y(3).on(stream_of(0x1a)), 1.0f,
                                         device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(shaped.block, (lf::dims{32, 3, 1}));
  EXPECT_EQ(shaped.grid.x, (n + 31u) / 32u);
  // An operator's override for 1-D and 2-D kernels alike.
  lf::set_policy_overrides("rows_on_1*=fixed({16, 16})");
  struct restore {
    ~restore() { lf::set_policy_overrides(""); }
  } restored;
  launchfit_test::captured_log log(spdlog::level::info);
  const lf::launched own = lf::launch(k, lf::max_occupancy().items(n).on(stream_of(0x1a)), 1.0f,
                                      device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(own.block.y, 1u);
  EXPECT_GE(static_cast<long long>(own.grid.x) * own.block.x, n);
  EXPECT_EQ(last_launch(f).config.blockDimY, 1u);
  EXPECT_NE(log.text().find("cannot serve"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("for 1-D work"), std::string::npos) << log.text();
  // The same override serves 2-D work as named.
  const lf::launched two_d = lf::launch(k, lf::max_occupancy().items({512, 512}).on(stream_of(0x1a)), 1.0f,
                                        device_pointer(0x1000), device_pointer(0x2000), n);
  EXPECT_EQ(two_d.block, (lf::dims{16, 16, 1}));
  EXPECT_EQ(two_d.grid, (lf::dims{32, 32, 1}));
}

// A fixed grid was sized for the policy's own block: fixed({128, 1}, {32, 4096}) over 4096 x 4096 items runs
// blocks of 128 x 1 on that grid. (Its block was reshaped into rows of 32, 32 x 4, on the unchanged grid: three
// quarters of the columns never touched.)
TEST(StubLaunch, AFixedGridKeepsTheBlockItWasSizedFor) {
  const CUfunction f = axpy_kernel("_Z10fixed_gridfPKfPfi");
  const lf::launched l = lf::launch(lf::kernel(f),
                                    lf::fixed(lf::dims{128, 1, 1}, lf::dims{32, 4096, 1}).items({4096, 4096}).on(stream_of(0x1b)),
                                    1.0f, device_pointer(0x1000), device_pointer(0x2000), 4096);
  EXPECT_EQ(l.block, (lf::dims{128, 1, 1}));
  EXPECT_EQ(l.grid, (lf::dims{32, 4096, 1}));
  const launch_seen seen = last_launch(f);
  EXPECT_EQ(seen.config.blockDimX, 128u);
  EXPECT_EQ(seen.config.blockDimY, 1u);
  EXPECT_EQ(seen.config.gridDimX * seen.config.blockDimX, 4096u);
  // A block of its own threads only (fixed(128)) is still shaped in rows of 32 for 2-D work, its grid computed.
  const lf::launched shaped = lf::launch(lf::kernel(f), lf::fixed(128).items({4096, 4096}).on(stream_of(0x1b)), 1.0f,
                                         device_pointer(0x1000), device_pointer(0x2000), 4096);
  EXPECT_EQ(shaped.block, (lf::dims{32, 4, 1}));
  EXPECT_EQ(shaped.grid, (lf::dims{128, 1024, 1}));
}

// planned(p) runs p for any work: a full-grid plan (a tuner's, for grid_stride work) launches its full grid,
// as grid_for() sizes it; its SM budget is the plan's own (none here), not the device's SMs, which made every
// planned() launch one within an SM budget and so never the full grid (1,056 blocks for 2^28 items).
TEST(StubLaunch, APlannedFullGridPlanLaunchesItsFullGrid) {
  const CUfunction f = axpy_kernel("_Z9full_gridfPKfPfi");
  const lf::kernel k(f);
  const std::uint64_t n = 1ull << 28;
  lf::plan p = lf::plan_for(k, lf::max_occupancy().grid_stride(n));
  ASSERT_EQ(p.options.sm_budget, 0);
  p.full_grid = true;
  const lf::work w = lf::planned(p).grid_stride(n).work_shape();
  const lf::dims expected = lf::grid_for(p, w);
  ASSERT_GT(expected.x, 100000u);
  const lf::launched l = lf::launch(k, lf::planned(p).grid_stride(n).on(stream_of(0x1c)), 1.0f, device_pointer(0x1000),
                                    device_pointer(0x2000), static_cast<int>(n));
  EXPECT_EQ(l.grid, expected);
  EXPECT_EQ(last_launch(f).config.gridDimX, expected.x);
  // A plan made within an SM budget keeps it.
  const lf::plan budget = lf::plan_for(k, lf::max_occupancy().grid_stride(n).sms(8));
  EXPECT_EQ(budget.options.sm_budget, 8);
  const lf::launched within = lf::launch(k, lf::planned(budget).grid_stride(n).on(stream_of(0x1c)), 1.0f,
                                         device_pointer(0x1000), device_pointer(0x2000), static_cast<int>(n));
  EXPECT_EQ(within.grid.x, static_cast<unsigned>(budget.blocks_per_sm * 8));
}

// A cluster with a dimension of 0 is refused, never launched as "no cluster" (a kernel that uses cluster APIs
// would then run without one); a negative SM budget is refused where the spec is made, never "every SM".
TEST(StubLaunch, AnEmptyClusterAndANegativeSmBudgetAreRefused) {
  const CUfunction f = axpy_kernel("_Z10zero_clusfPKfPfi");
  const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
  for (const lf::dims c : {lf::dims{0, 1, 1}, lf::dims{2, 0, 1}, lf::dims{1, 1, 0}}) {
    const lf::error e = launchfit_test::error_of([&] {
      lf::launch(lf::kernel(f), lf::max_occupancy().items(4096).cluster(c).on(stream_of(0x1d)), 1.0f,
                 device_pointer(0x1000), device_pointer(0x2000), 4096);
    });
    EXPECT_EQ(e.cuda_result(), CUDA_ERROR_INVALID_CLUSTER_SIZE) << e.what();
    EXPECT_NE(e.message().find("has a dimension of 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before);
  const lf::error negative = launchfit_test::error_of([] { (void)lf::max_occupancy().sms(-3); });
  EXPECT_EQ(negative.code(), lf::errc::invalid_argument) << negative.what();
  EXPECT_NE(negative.message().find("sms k = -3 is negative"), std::string::npos) << negative.what();
  EXPECT_EQ(lf::max_occupancy().sms(0).options().sm_budget, 0);
}

// The same past the bound with a policy whose plan has a fixed grid sized from n: the shared plan (made for the
// first size past the bound) is never launched for a larger size whose items its grid would leave undone; such a
// launch gets a plan of its own, uncached.
class fixed_grid_per_size final : public lf::policy_base {
 public:
  std::string name() const override { return "fixed_grid_per_size"; }
  std::string params() const override { return {}; }
  std::uint64_t hash() const override { return 0x5eed5eefULL; }
  std::uint64_t work_bucket(const lf::work& w) const override { return w.n + 1; }

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    lf::plan p;
    p.block = lf::dims{128, 1, 1};
    p.grid = lf::dims{static_cast<unsigned>((q.work_hint.n + 127) / 128), 1, 1};
    p.reason = "128 threads, a grid for n";
    return p;
  }
};

TEST(StubLaunch, ASharedPlansFixedGridIsNeverLaunchedForMoreItemsThanItCovers) {
  const CUfunction f = axpy_kernel("_Z14fixed_per_sizefPKfPfi");
  const lf::kernel k(f);
  const auto policy = std::make_shared<const fixed_grid_per_size>();
  const std::size_t cap = ld::max_buckets_per_family;
  for (std::size_t n = 1; n <= cap + 300; ++n) {
    const std::size_t items = n * 64;  // sizes of 64 items apart: each new size needs another grid
    const lf::launched l = lf::launch(k, lf::use(policy).items(items).on(stream_of(0x1e)), 1.0f,
                                      device_pointer(0x1000), device_pointer(0x2000), static_cast<int>(items));
    ASSERT_GE(static_cast<std::uint64_t>(l.grid.x) * l.block.x, items) << "items left undone at n = " << items;
    ASSERT_EQ(last_launch(f).config.gridDimX, l.grid.x);
  }
  std::size_t cached = 0;
  for (const lf::cached_plan& c : lf::cache().plans()) cached += c.key.kernel == reinterpret_cast<std::uintptr_t>(f);
  EXPECT_EQ(cached, cap + 1);
  lf::cache().clear();
}

}  // namespace

// A cluster launch on a few SMs (sms(k)) whose residency holds no whole cluster: a cooperative one is refused,
// naming the cluster and the budget, and nothing launches (its grid was 0 blocks: nothing ran, and the launch
// returned as done); a policy's low residency is raised to one cluster, so a grid-stride launch runs whole
// clusters (it ran 1 block with a cluster of 8) and a no-work launch runs them too.
TEST(StubLaunch, AClusterOnAnSmBudgetRunsWholeClustersOrIsRefused) {
  const CUfunction coop = axpy_kernel("_Z11coop_budgetfPKfPfi");
  const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
  const lf::error e = launchfit_test::error_of([&] {
    lf::launch(lf::kernel(coop), lf::cooperative(1).sms(2).cluster({4, 1, 1}).on(stream_of(0x1e)), 1.0f,
               device_pointer(0x1000), device_pointer(0x2000), 10);
  });
  EXPECT_EQ(e.code(), lf::errc::invalid_plan) << e.what();
  EXPECT_NE(e.message().find("a cluster of 4 blocks does not fit the plan's residency"), std::string::npos)
      << e.what();
  EXPECT_NE(e.message().find("the launch's SM budget"), std::string::npos) << e.what();
  EXPECT_NE(e.kernel().find("coop_budget"), std::string::npos) << e.what();
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before);

  const CUfunction wide = axpy_kernel("_Z11wide_budgetfPKfPfi");
  for (int pass = 0; pass < 2; ++pass) {  // the miss, then the hit
    const lf::launched l = lf::launch(
        lf::kernel(wide), lf::bytes_in_flight(64).sms(2).cluster({8, 1, 1}).grid_stride(1 << 24).on(stream_of(0x1f)),
        1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 24);
    EXPECT_GE(l.plan().resident_blocks(), 8) << l.plan().to_string();
    EXPECT_GE(l.grid.x, 8u);
    EXPECT_EQ(l.grid.x % 8, 0u) << l.grid.to_string();
    EXPECT_EQ(last_launch(wide).config.gridDimX % 8, 0u);
  }
  const CUfunction none = axpy_kernel("_Z11none_budgetfPKfPfi");
  const lf::launched n = lf::launch(lf::kernel(none), lf::bytes_in_flight(64, 4096).sms(2).cluster({8, 1, 1}).on(stream_of(0x1f)),
                                    1.0f, device_pointer(0x1000), device_pointer(0x2000), 10);
  EXPECT_GE(n.grid.x, 8u) << "nothing was launched";
  EXPECT_EQ(n.grid.x % 8, 0u) << n.grid.to_string();
}

// A launch without work of a cluster taller than one block (y or z above 1) runs a grid of whole clusters:
// its y and z are the cluster's (it ran {resident, 1, 1}, which the driver refuses for such a cluster).
TEST(StubLaunch, ANoWorkLaunchOfATallClusterRunsWholeClusters) {
  const CUfunction f = axpy_kernel("_Z11tall_clusterfPKfPfi");
  for (const lf::dims c : {lf::dims{1, 2, 1}, lf::dims{2, 2, 1}, lf::dims{1, 1, 2}}) {
    const lf::launched l = lf::launch(lf::kernel(f), lf::max_occupancy().cluster(c).on(stream_of(0x20)), 1.0f,
                                      device_pointer(0x1000), device_pointer(0x2000), 10);
    EXPECT_EQ(l.grid.x % c.x, 0u) << c.to_string() << " " << l.grid.to_string();
    EXPECT_EQ(l.grid.y % c.y, 0u) << c.to_string() << " " << l.grid.to_string();
    EXPECT_EQ(l.grid.z % c.z, 0u) << c.to_string() << " " << l.grid.to_string();
    EXPECT_EQ(static_cast<long long>(l.grid.count()), l.plan().resident_blocks());
    const launch_seen s = last_launch(f);
    EXPECT_EQ(s.config.gridDimY % c.y, 0u);
    EXPECT_EQ(s.config.gridDimZ % c.z, 0u);
  }
}

// A policy's fixed grid never exceeds the grid a launch bounds (an SM budget, a waves cap): refused when the
// plan is made, naming the bound, where it ran the whole fixed grid on every SM and the plan's reason said it
// was sized for the budget.
TEST(StubLaunch, AFixedGridBeyondTheLaunchsSmBudgetIsRefused) {
  const CUfunction f = axpy_kernel("_Z12fixed_budgetfPKfPfi");
  const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
  const lf::error e = launchfit_test::error_of([&] {
    lf::launch(lf::kernel(f), lf::fixed(256, 100000).sms(8).grid_stride(1 << 24).on(stream_of(0x21)), 1.0f,
               device_pointer(0x1000), device_pointer(0x2000), 1 << 24);
  });
  EXPECT_NE(e.message().find("the fixed grid 100000 exceeds the 64 blocks"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("an SM budget of 8 SMs"), std::string::npos) << e.what();
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before);
  // Refused when planned, once: plan_for() says so too (it planned, and every launch of the plan threw).
  const lf::error planned = launchfit_test::error_of([&] {
    (void)lf::plan_for(lf::kernel(f), lf::fixed(256, 100000).sms(8).grid_stride(1 << 24).on(stream_of(0x21)));
  });
  EXPECT_EQ(planned.call(), "validate(grid)") << planned.what();
  // Within the budget it launches as fixed.
  const lf::launched l = lf::launch(lf::kernel(f), lf::fixed(256, 16).sms(8).grid_stride(1 << 24).on(stream_of(0x21)),
                                    1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 24);
  EXPECT_EQ(l.grid.x, 16u);
}

// A plugin's trial is held to what its chosen plan is: a fixed grid for items work (here 2^31 - 1 blocks for
// 1,000 items) is refused before anything runs (time_plan answers -1). The trial launched those 2^31 - 1
// blocks on the caller's arguments: a kernel without an `i < n` guard writes far out of bounds.
TEST(StubLaunch, APluginsTrialIsRefusedWhatItsPlanWouldBe) {
#ifdef LAUNCHFIT_HOSTILE_PLUGIN
  lf::load_plugin(LAUNCHFIT_HOSTILE_PLUGIN);
  const CUfunction f = axpy_kernel("_Z10trialgridsfPKfPfi");
  const unsigned long long before = launchfit_stub_calls("cuLaunchKernelEx");
  const lf::launched l =
      lf::launch(lf::kernel(f), lf::use("test_hostile(block=128,trial_grid=2147483647)").items(1000).rerunnable()
                                    .on(stream_of(0x22)),
                 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1000);
  EXPECT_NE(l.plan().reason.find("trial_grid: -1"), std::string::npos) << l.plan().reason;
  EXPECT_EQ(launchfit_stub_calls("cuLaunchKernelEx"), before + 1) << "a trial ran";
  EXPECT_EQ(last_launch(f).config.gridDimX, 8u);
#else
  GTEST_SKIP() << "the hostile test plugin is not built";
#endif
}

// What no reader takes back is never written: a plugin's tuning time beyond the file's bound is cleaned (it was
// written as 1e13 ms, and every later run skipped the entry and planned again), and a plan whose key text is past
// the key's bound (a 65,530-byte policy string, plus the launch's words) is not stored, with one warning.
TEST(StubLaunch, APlanNoReaderWouldTakeBackIsNeverWritten) {
#ifdef LAUNCHFIT_HOSTILE_PLUGIN
  lf::load_plugin(LAUNCHFIT_HOSTILE_PLUGIN);
  const std::string file = fresh_plan_file("unreadable");
  launchfit_test::captured_log log(spdlog::level::info);
  const CUfunction f = axpy_kernel("_Z10hugetuningfPKfPfi");
  const lf::launched l = lf::launch(lf::kernel(f), lf::use("test_hostile(block=128,ms=huge)").grid_stride(1 << 20)
                                                        .on(stream_of(0x23)),
                                    1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 20);
  EXPECT_EQ(l.plan().tuning_ms, 0.0);
  const CUfunction g = axpy_kernel("_Z10longpolicyfPKfPfi");
  const std::string padded = "test_hostile(block=128,pad=" + std::string(65502, 'A') + ")";
  lf::launch(lf::kernel(g), lf::use(padded).grid_stride(1 << 20).on(stream_of(0x23)), 1.0f, device_pointer(0x1000),
             device_pointer(0x2000), 1 << 20);
  lf::launch(lf::kernel(g), lf::use(padded).grid_stride(1 << 21).on(stream_of(0x23)), 1.0f, device_pointer(0x1000),
             device_pointer(0x2000), 1 << 21);
  ASSERT_TRUE(lf::flush_cache_file(2000));
  const std::string text = read_text(file);
  EXPECT_NE(text.find("hugetuning"), std::string::npos) << "the cleaned plan was not stored";
  EXPECT_EQ(text.find("e+13"), std::string::npos) << text.substr(0, 2000);
  EXPECT_EQ(text.find("10000000000000"), std::string::npos) << text.substr(0, 2000);
  EXPECT_EQ(text.find("longpolicy"), std::string::npos) << "an unreadable entry was written";
  const std::string t = log.text();
  const std::string said = "a plan is not stored: no reader would take it back";
  ASSERT_NE(t.find(said), std::string::npos) << t.substr(0, 2000);
  EXPECT_EQ(t.find(said, t.find(said) + 1), std::string::npos) << "said twice";
  EXPECT_NE(t.find("'policy' is too long"), std::string::npos) << t.substr(0, 2000);
  lf::set_cache_file("");
  std::filesystem::remove(file);
#else
  GTEST_SKIP() << "the hostile test plugin is not built";
#endif
}

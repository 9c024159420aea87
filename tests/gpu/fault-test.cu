// SPDX-License-Identifier: MIT
// After a kernel faults, the context is unusable: the next launch must say so and name the kernel and plan
// that ran last. Its own binary, since the fault poisons the whole process's context.

#include <gtest/gtest.h>

#include "gpu_test.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {

__global__ void write_through(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i;
}

__global__ void faulting_kernel(int* p) { p[threadIdx.x + (1 << 28)] = 1; }

}  // namespace

TEST(Fault, NextLaunchReportsTheLastLaunchedKernelAndPlan) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  int* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1024 * sizeof(int)), cudaSuccess);
  lf::launch(write_through, lf::max_occupancy().items(1024), buf, 1024);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  lf::launch(faulting_kernel, lf::fixed(32, 1), static_cast<int*>(nullptr));
  EXPECT_NE(cudaDeviceSynchronize(), cudaSuccess);
  try {
    for (int i = 0; i < 3; ++i) lf::launch(write_through, lf::max_occupancy().items(1024), buf, 1024);
    FAIL() << "launch after a fault did not report it";
  } catch (const lf::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("earlier kernel faulted"), std::string::npos) << what;
    EXPECT_NE(what.find("last launched: (anonymous namespace)::faulting_kernel(int*)"), std::string::npos) << what;
    EXPECT_NE(what.find("block=32"), std::string::npos) << what;
    std::printf("reported: %s\n", what.c_str());
  }
}

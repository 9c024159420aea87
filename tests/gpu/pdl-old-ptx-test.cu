// SPDX-License-Identifier: MIT
// .pdl() on a kernel that cannot or does not wait for its predecessor. This file is compiled to PTX for
// compute_80 only (tests/gpu/CMakeLists.txt), as libraries ship kernels, and the driver JIT-compiles it for
// the GPU: its cudaGridDependencySynchronize() is guarded by __CUDA_ARCH__ >= 900, so the binary has no wait.
// Launched early, such a consumer reads stale data; launchfit refuses the launch, naming the kernel and why,
// and launches nothing. Without .pdl() the same kernel runs and its result is checked on the host. And a
// driver-API kernel whose module's PTX never executes griddepcontrol.wait: launched with .pdl(), its plan
// carries a warning (logged once), while one that waits carries none; a cubin module says nothing.

#include <gtest/gtest.h>

#include <cuda.h>

#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {

__global__ void old_ptx_consumer(const unsigned* in, unsigned* out, unsigned n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();  // compiled out: this file's PTX is for compute_80
#endif
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3u + 1u;
}

class PdlOldPtx : public ::testing::Test {
 protected:
  void SetUp() override { LAUNCHFIT_REQUIRE_GPU_OR_SKIP(); }
};

TEST_F(PdlOldPtx, TheKernelRunsFromPtxBelowCompute90) {
  cudaFuncAttributes a{};
  LF_CUDA_CHECK(cudaFuncGetAttributes(&a, old_ptx_consumer));
  EXPECT_EQ(a.ptxVersion, 80);
  int major = 0;
  LF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  EXPECT_EQ(a.binaryVersion / 10, major) << "JIT-compiled for the device";
  std::printf("old_ptx_consumer: ptxVersion %d, binaryVersion %d\n", a.ptxVersion, a.binaryVersion);
}

TEST_F(PdlOldPtx, APdlLaunchIsRefusedAndNothingRuns) {
  constexpr unsigned n = 1 << 16;
  unsigned *in = nullptr, *out = nullptr;
  LF_CUDA_CHECK(cudaMalloc(&in, n * sizeof(unsigned)));
  LF_CUDA_CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
  std::vector<unsigned> host(n);
  for (unsigned i = 0; i < n; ++i) host[i] = i;
  LF_CUDA_CHECK(cudaMemcpy(in, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  LF_CUDA_CHECK(cudaMemset(out, 0xff, n * sizeof(unsigned)));
  try {
    lf::launch(old_ptx_consumer, lf::max_occupancy().items(n).pdl(), in, out, n);
    ADD_FAILURE() << "a .pdl() launch of a compute_80 PTX kernel was not refused";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::pdl_unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("compute_80"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("old_ptx_consumer"), std::string::npos) << e.what();
  }
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> got(n);
  LF_CUDA_CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got[0], 0xffffffffu) << "the refused launch ran";
  EXPECT_EQ(got[n - 1], 0xffffffffu) << "the refused launch ran";
  // Without .pdl() the kernel needs no wait: it runs, and every element is right.
  lf::launch(old_ptx_consumer, lf::max_occupancy().items(n), in, out, n);
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  LF_CUDA_CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  unsigned wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += got[i] != i * 3u + 1u;
  EXPECT_EQ(wrong, 0u);
  cudaFree(in);
  cudaFree(out);
}

TEST_F(PdlOldPtx, AKernelWhosePtxNeverWaitsIsSaidSoWhenLaunchedWithPdl) {
  const lf::module ptx = lf::module::from_file(LAUNCHFIT_TEST_PTX);
  const lf::kernel never = ptx.get("pdl_never_waits");
  const lf::kernel waits = ptx.get("pdl_waits");
  EXPECT_EQ(never.waits_for_predecessor(), false);
  EXPECT_EQ(waits.waits_for_predecessor(), true);
  const lf::module cubin = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  EXPECT_FALSE(cubin.get("pdl_never_waits").waits_for_predecessor().has_value()) << "a cubin is not read";
  constexpr unsigned n = 4096;
  unsigned *in = nullptr, *out = nullptr;
  LF_CUDA_CHECK(cudaMalloc(&in, n * sizeof(unsigned)));
  LF_CUDA_CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
  LF_CUDA_CHECK(cudaMemset(in, 0, n * sizeof(unsigned)));
  const lf::launched a = lf::launch(never, lf::max_occupancy().items(n).pdl(), in, out, n);
  EXPECT_NE(a.plan().warning.find("never executes griddepcontrol.wait"), std::string::npos) << a.plan().warning;
  const lf::launched b = lf::launch(waits, lf::max_occupancy().items(n).pdl(), in, out, n);
  EXPECT_EQ(b.plan().warning.find("griddepcontrol"), std::string::npos) << b.plan().warning;
  const lf::launched c = lf::launch(never, lf::max_occupancy().items(n), in, out, n);
  EXPECT_EQ(c.plan().warning.find("griddepcontrol"), std::string::npos) << "without .pdl() there is nothing to say";
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> got(n);
  LF_CUDA_CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(got[i], 1u) << i;
  cudaFree(in);
  cudaFree(out);
}

}  // namespace

// SPDX-License-Identifier: MIT
// The default stream is the file's, as for <<<>>>. This file is compiled as usual (the legacy default
// stream); tests/gpu/default-stream-per-thread.cu, linked into the same program, with --default-stream
// per-thread. Both launch the same kernel through the same launchfit templates with no .on(s): each must go
// where <<<>>> goes in its own file. Inside a global-mode capture of cudaStreamPerThread a per-thread launch is
// captured, a legacy-stream launch is refused by the driver (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), for <<<>>>
// and launchfit alike.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "default-stream.cuh"
#include "gpu_test.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {
__global__ void fill_index(unsigned* out, unsigned n, unsigned add) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + add;
}
}  // namespace

namespace {

class DefaultStream : public ::testing::Test {
 protected:
  void SetUp() override { LAUNCHFIT_REQUIRE_GPU_OR_SKIP(); }
};

// In a capture of the per-thread stream, a launch on the legacy stream: the driver refuses it.
cudaError_t legacy_launch_in_capture(bool through_launchfit, unsigned* out, unsigned n, std::string& what) {
  cudaGraph_t g = nullptr;
  const cudaError_t st = capture_per_thread_stream(
      [&]() -> cudaError_t {
        if (!through_launchfit) {
          fill_index<<<(n + 255) / 256, 256>>>(out, n, 7u);
          return cudaGetLastError();
        }
        try {
          lf::launch(fill_index, lf::fixed(256).items(n), out, n, 7u);
          return cudaSuccess;
        } catch (const lf::error& e) {
          what = e.what();
          return e.cuda_error() == "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT" ? cudaErrorStreamCaptureImplicit
                                                                        : cudaErrorUnknown;
        }
      },
      g);
  if (g) cudaGraphDestroy(g);
  (void)cudaGetLastError();
  return st;
}

TEST_F(DefaultStream, ALegacyFileLaunchesOnTheLegacyStreamAsTripleChevronsDo) {
  constexpr unsigned n = 4096;
  unsigned* out = nullptr;
  LF_CUDA_CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
  std::string what;
  EXPECT_EQ(legacy_launch_in_capture(false, out, n, what), cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(legacy_launch_in_capture(true, out, n, what), cudaErrorStreamCaptureImplicit);
  EXPECT_NE(what.find("CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"), std::string::npos) << what;
  // Outside a capture it runs, on the legacy stream.
  lf::launch(fill_index, lf::fixed(256).items(n), out, n, 5u);
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> got(n);
  LF_CUDA_CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(got[i], i + 5u) << i;
  cudaFree(out);
}

TEST_F(DefaultStream, APerThreadFileLaunchesOnThePerThreadStreamAsTripleChevronsDo) {
  constexpr unsigned n = 4096;
  unsigned* out = nullptr;
  LF_CUDA_CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
  for (const bool through_launchfit : {false, true}) {
    SCOPED_TRACE(through_launchfit ? "launchfit" : "<<<>>>");
    std::string what;
    std::size_t nodes = 0;
    const cudaError_t st = per_thread_capture_and_replay(through_launchfit, out, n, nodes, what);
    ASSERT_EQ(st, cudaSuccess) << cudaGetErrorName(st) << " " << what;
    EXPECT_EQ(nodes, 1u) << "the launch was captured into the per-thread stream's graph";
    std::vector<unsigned> got(n);
    LF_CUDA_CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(got[i], i + 11u) << i;
    LF_CUDA_CHECK(cudaMemset(out, 0, n * sizeof(unsigned)));
  }
  cudaFree(out);
}

}  // namespace

// SPDX-License-Identifier: MIT
// Compiled with --default-stream per-thread (tests/gpu/CMakeLists.txt) and linked into gpu-default-stream-test
// beside a file compiled without it.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "this file is compiled with --default-stream per-thread"
#endif

#include "default-stream.cuh"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {
__global__ void fill_index(unsigned* out, unsigned n, unsigned add) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + add;
}
}  // namespace

cudaError_t per_thread_capture_and_replay(bool through_launchfit, unsigned* out, unsigned n, std::size_t& nodes,
                                          std::string& what) {
  cudaGraph_t g = nullptr;
  cudaError_t st = capture_per_thread_stream(
      [&]() -> cudaError_t {
        if (!through_launchfit) {
          fill_index<<<(n + 255) / 256, 256>>>(out, n, 11u);
          return cudaGetLastError();
        }
        try {
          lf::launch(fill_index, lf::fixed(256).items(n), out, n, 11u);
          return cudaSuccess;
        } catch (const lf::error& e) {
          what = e.what();
          return cudaErrorUnknown;
        }
      },
      g);
  if (st == cudaSuccess) st = cudaGraphGetNodes(g, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  if (st == cudaSuccess) st = cudaGraphInstantiate(&exec, g, 0);
  if (st == cudaSuccess) st = cudaGraphLaunch(exec, cudaStreamPerThread);
  if (st == cudaSuccess) st = cudaStreamSynchronize(cudaStreamPerThread);
  if (exec) cudaGraphExecDestroy(exec);
  if (g) cudaGraphDestroy(g);
  return st;
}

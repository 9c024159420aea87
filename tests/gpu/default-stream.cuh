// SPDX-License-Identifier: MIT
#pragma once
// What the per-thread file (default-stream-per-thread.cu) gives the other (default-stream-test.cu). Each file
// has its own fill_index kernel (internal linkage: no relocatable device code needed) with one signature
// (out[i] = i + add), so both instantiate the very same launch templates. The launching lambdas are written
// in each file on purpose: an inline function shared through this header would be one symbol for both files,
// and the linker would keep one file's default stream for both (the very mistake the test looks for).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

// A global-mode capture of cudaStreamPerThread around `launch()` (which returns the launch's cudaError_t):
// the launch's error, else the capture's. `g` holds the captured graph (or nullptr); the caller destroys it.
template <class Launch>
cudaError_t capture_per_thread_stream(Launch&& launch, cudaGraph_t& g) {
  g = nullptr;
  cudaError_t st = cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal);
  if (st != cudaSuccess) return st;
  st = launch();
  const cudaError_t ended = cudaStreamEndCapture(cudaStreamPerThread, &g);
  return st != cudaSuccess ? st : ended;
}

// In the per-thread file: captures one launch with no stream given (<<<>>> or launchfit) in a global-mode
// capture of cudaStreamPerThread, counts the graph's nodes, replays it (writing out[i] = i + 11) and waits.
cudaError_t per_thread_capture_and_replay(bool through_launchfit, unsigned* out, unsigned n, std::size_t& nodes,
                                          std::string& what);

#pragma once
// What the per-thread file (default-stream-per-thread.cu) gives the other (default-stream-test.cu). Each file
// has its own fill_index kernel (internal linkage: no relocatable device code needed) with one signature
// (out[i] = i + add), so both instantiate the very same launch templates.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

// In the per-thread file: captures one launch with no stream given (<<<>>> or launchfit) in a global-mode
// capture of cudaStreamPerThread, counts the graph's nodes, replays it (writing out[i] = i + 11) and waits.
cudaError_t per_thread_capture_and_replay(bool through_launchfit, unsigned* out, unsigned n, std::size_t& nodes,
                                          std::string& what);

// SPDX-License-Identifier: MIT
// Compiled as nvcc --default-stream per-thread compiles a file (CUDA_API_PER_THREAD_DEFAULT_STREAM), and
// linked into launch-test beside files compiled without it: the same launch templates, instantiated for the
// same specs in both, must keep each file's own default stream (tests/launch-test.cpp, DefaultStream.*).
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "this file is compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM defined"
#endif
#include <launchfit/launch.hpp>

namespace lf = launchfit;

CUstream per_thread_file_stream(int which, CUstream given) {
  switch (which) {
    case 0:
      return lf::detail::make_request(lf::fixed(256).items(1000)).stream;
    case 1:
      return lf::detail::make_request(lf::fixed(256).items(1000).on(given)).stream;
    case 2: {
      // A launch's probe, and the whole request it makes where it does not hit.
      const auto s = lf::fixed(256).items(1000);
      const lf::detail::launch_probe p = lf::detail::make_probe(s);
      return p.stream == p.make(p.spec, p.policy_hash, p.bucket).stream ? p.stream : nullptr;
    }
    default:
      return lf::detail::make_request(lf::max_occupancy().items(1000).on(nullptr)).stream;
  }
}

// SPDX-License-Identifier: MIT
// The README's nvcc line: a CUDA file compiled and linked by nvcc with nothing but what
// `pkg-config --cflags --libs launchfit` says. It links a real launch (never run here: the test machine may
// have no GPU) and checks, on any machine, that the library is the headers' release.
#include <cstdio>
#include <cstring>
#include <launchfit/base.hpp>
#include <launchfit/version.hpp>

__global__ void scale(float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main(int argc, char**) {
  if (argc > 1000) {  // never true: the launch is linked, not run
    const launchfit::launched l =
        launchfit::launch(scale, launchfit::max_occupancy().items(1 << 20), nullptr, 2.0f, 1 << 20);
    return static_cast<int>(l.block.x);
  }
  char header_version[32];
  std::snprintf(header_version, sizeof header_version, "%d.%d.%d", LAUNCHFIT_VERSION_MAJOR,
                LAUNCHFIT_VERSION_MINOR, LAUNCHFIT_VERSION_PATCH);
  return std::strcmp(launchfit::version(), header_version) == 0 ? 0 : 6;
}

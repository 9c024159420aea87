// SPDX-License-Identifier: MIT
// Kernels whose largest block is set by their registers, not by the device's 1024 threads: launchfit-calc
// --cubin must show the maximum the driver gives them (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 640 threads
// for 96 registers per thread on sm_90, not 1024. And a kernel that waits for its predecessor (PDL) beside
// one that does not, for --pdl.

#include <cuda_runtime.h>

constexpr int stride = 4099;  // spreads the loads so the compiler keeps every value in its own register

// N values live at once: the register count grows with N up to the kernel's register cap.
template <int N>
__device__ void many_live_values(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v[N];
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = in[i + k * stride];
#pragma unroll
  for (int round = 0; round < 3; ++round) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = fmaf(v[k], v[(k + 1) % N], v[(k + 7) % N]);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) out[i + k * stride] = v[k];
}

__global__ void __maxnreg__(96) regs_96(const float* in, float* out) { many_live_values<84>(in, out); }
__global__ void __maxnreg__(168) regs_168(const float* in, float* out) { many_live_values<160>(in, out); }
__global__ void regs_uncapped(const float* in, float* out) { many_live_values<224>(in, out); }
// Launch bounds below what the registers allow: the bounds decide.
__global__ void __launch_bounds__(256) bounded_256(const float* in, float* out) {
  many_live_values<84>(in, out);
}

__global__ void pdl_waits(const float* in, float* out) {
  cudaGridDependencySynchronize();
  out[threadIdx.x] = in[threadIdx.x];
}
__global__ void pdl_never_waits(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }

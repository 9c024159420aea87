// SPDX-License-Identifier: MIT
// Kernels whose largest block is set by their registers, not by the device's 1024 threads: launchfit-calc
// --cubin must show the maximum the driver gives them (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 640 threads
// for 96 registers per thread on sm_90, not 1024. And a kernel that waits for its predecessor (PDL) beside
// one that does not, for --pdl.

#include <cuda_runtime.h>

#include "many_live_values.cuh"

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

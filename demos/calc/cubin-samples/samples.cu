// SPDX-License-Identifier: MIT
// Kernels whose resources launchfit-calc --cubin must report exactly as ptxas does (tests/calc-cubin-test.cpp
// compares the two for every kernel, architecture and container built from this file).

// A local array indexed with a run-time value lives in local memory: a 1 KiB stack frame per thread.
__global__ void stack_frame_kernel(float* out, const int* index, int n) {
  float local[256];
  for (int i = 0; i < 256; ++i) local[i] = out[i * n];
  out[threadIdx.x] = local[index[threadIdx.x] & 255];
}

// Register spills: more live values than the 32-register cap holds.
__global__ void __maxnreg__(32) spill_kernel(float* out, int n) {
  float v[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) v[i] = out[i * n + threadIdx.x];
  float s = 0;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int i = 0; i < 48; ++i) s += v[i] * v[(i * 7 + r) % 48];
  out[threadIdx.x] = s;
}

__global__ void __launch_bounds__(128, 4) bounded_kernel(float* out) { out[threadIdx.x] *= 2.f; }

__global__ void static_smem_kernel(float* out) {
  __shared__ float tile[1000];
  __shared__ double extra[3];
  tile[threadIdx.x % 1000] = out[threadIdx.x];
  extra[threadIdx.x % 3] = 1;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 1000] + extra[1];
}

__device__ __noinline__ float callee(const float* in, int k) {
  float buf[64];
  for (int i = 0; i < 64; ++i) buf[i] = in[i];
  return buf[k & 63];
}
__global__ void call_stack_kernel(float* out, int k) { out[threadIdx.x] = callee(out, k + threadIdx.x); }

namespace samples {
template <typename T, int N>
__global__ void templated_kernel(T* p) { p[threadIdx.x] = T(N); }
template __global__ void templated_kernel<double, 3>(double*);
}  // namespace samples

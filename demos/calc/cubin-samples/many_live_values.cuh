// SPDX-License-Identifier: MIT
#pragma once
// The body of kernels whose register count comes from the compiler, not from us: the launch-limit cubin
// sample (launch_limits.cu) and tests/gpu/occupancy-agreement-test.cu build their kernels on it.

// N values live at once: the register count grows with N up to the kernel's register cap, or until a bound
// forces spilling.
template <int N>
__device__ void many_live_values(const float* in, float* out) {
  constexpr int stride = 4099;  // spreads the loads so the compiler keeps every value in its own register
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

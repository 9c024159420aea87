// SPDX-License-Identifier: MIT
// Kernels for the driver_api demo. Compiled at build time to PTX and to a cubin, never linked into the
// program: the demo loads them at run time. extern "C" keeps the names unmangled, so module.get("saxpy")
// finds them.

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// 64-bit count: passing an int (4 bytes) here is refused by launchfit, which compares argument sizes with
// the parameter sizes the driver reports.
extern "C" __global__ void fill(float* out, unsigned long long n, float value) {
  const unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

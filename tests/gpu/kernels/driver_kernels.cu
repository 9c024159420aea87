// SPDX-License-Identifier: MIT
// Kernels for the driver-API tests, compiled to PTX and cubin at build time and loaded at run time.

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// size_t parameter: the caller passes an int and launchfit must refuse a 4-byte argument.
extern "C" __global__ void fill_sized(float* out, unsigned long long n, float v) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = v;
}

// Counts the blocks that actually ran (per-context SM counts show up in gridDim).
extern "C" __global__ void count_blocks(unsigned* blocks, unsigned* grid_seen) {
  if (threadIdx.x == 0) atomicAdd(blocks, 1u);
  if (blockIdx.x == 0 && threadIdx.x == 0) *grid_seen = gridDim.x;
}

// Programmatic dependent launch: one consumer waits for its predecessor, one never does (launchfit reads
// that from the module's PTX and says so when the second is launched with .pdl()).
extern "C" __global__ void pdl_waits(const unsigned* in, unsigned* out, unsigned n) {
  cudaGridDependencySynchronize();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1;
}
extern "C" __global__ void pdl_never_waits(const unsigned* in, unsigned* out, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1;
}

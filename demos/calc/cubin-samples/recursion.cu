// SPDX-License-Identifier: MIT
// A kernel whose stack ptxas cannot size ("Stack size for entry function ... cannot be statically
// determined"): the cubin says 0xffffffff, which launchfit-calc --cubin must say in words, never as a size.
// Built with -G: an optimized build may size a recursion it can bound (nvcc 13 writes 0 here without -G).

__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__global__ void recursive_kernel(int* out) { out[threadIdx.x] = fib(out[threadIdx.x]); }

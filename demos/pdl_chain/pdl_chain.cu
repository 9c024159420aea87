// SPDX-License-Identifier: MIT
// pdl_chain — a chain of small dependent kernels, with and without programmatic dependent launch (.pdl()).
//
// Step s reads buffer s (written by step s - 1) and writes buffer s + 1. Normally a kernel cannot start until
// its predecessor in the stream has finished, so every step pays the launch latency on the GPU. With
// .pdl() (sm_90+), launchfit sets CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the next kernel
// may be launched as soon as every block of the running one has called
// cudaTriggerProgrammaticLaunchCompletion() (here: first thing), does its independent prologue, and waits in
// cudaGridDependencySynchronize() until its predecessor has completed and its writes are visible. Every read
// of the predecessor's output comes after that wait, so the chain is correct with or without PDL.
//
// The demo verifies every buffer of the chain against the CPU both ways (outputs poisoned first), then times
// the chain's wall time (launches + synchronize) both ways, interleaved over repetitions, and reports the
// median saving per kernel.
//
//   pdl_chain [--steps N] [--reps R]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <string>
#include <vector>

#include "demo.hpp"

using launchfit_demo::device_buffer;

// A 32-bit mixer (same on host and device): the step's independent work, done before the wait.
__host__ __device__ inline unsigned mix(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// One step: out[i] = 3 in[i] + in[(i + 1) % n] + mix(step, i), modulo 2^32 (exact on both sides). Reads an
// element another block of the predecessor wrote, so a read before the predecessor finished would show.
__global__ void chain_step(const unsigned* in, unsigned* out, unsigned n, unsigned step) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();  // the next step may be launched now; it still waits for us to
                                              // end
#endif
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned salt = mix(step * 0x9e3779b9u + mix(i));  // independent of the predecessor
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();  // the predecessor has completed and its writes are visible
#endif
  if (i < n) out[i] = 3u * in[i] + in[i + 1 < n ? i + 1 : 0] + salt;
}

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<std::vector<unsigned>> cpu_chain(const std::vector<unsigned>& first, int steps) {
  const unsigned n = static_cast<unsigned>(first.size());
  std::vector<std::vector<unsigned>> bufs(static_cast<std::size_t>(steps) + 1);
  bufs[0] = first;
  for (int s = 0; s < steps; ++s) {
    const std::vector<unsigned>& in = bufs[static_cast<std::size_t>(s)];
    std::vector<unsigned>& out = bufs[static_cast<std::size_t>(s) + 1];
    out.resize(n);
    for (unsigned i = 0; i < n; ++i) {
      out[i] = 3u * in[i] + in[i + 1 < n ? i + 1 : 0] + mix(static_cast<unsigned>(s) * 0x9e3779b9u + mix(i));
    }
  }
  return bufs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int run_chain(int steps, int reps) {
  const unsigned n = 8192;  // 8192 threads per step: a few blocks, microseconds of work
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  std::printf("pdl_chain: %s (%s, %d SMs)\n\n", dev.name.c_str(), dev.arch().c_str(), dev.sm_count);
  if (dev.cc_major < 9) {
    std::printf(
        "pdl_chain: programmatic dependent launch needs compute capability 9.0 or newer; this GPU is %d.%d. "
        "Nothing was launched (exit 0).\n",
        dev.cc_major, dev.cc_minor);
    return 0;
  }
  cudaFuncAttributes fa{};
  LAUNCHFIT_DEMO_CHECK(cudaFuncGetAttributes(&fa, chain_step));
  if (fa.ptxVersion < 90) {  // without sm_90 code the kernel has no wait: a PDL launch would race
    std::printf(
        "pdl_chain: FAILED: chain_step was compiled for compute_%d; build with CMAKE_CUDA_ARCHITECTURES=90\n",
        fa.ptxVersion);
    return 1;
  }

  cudaStream_t stream = nullptr;
  LAUNCHFIT_DEMO_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<unsigned> first(n);
  for (unsigned i = 0; i < n; ++i) first[i] = mix(i + 12345u);
  const std::vector<std::vector<unsigned>> want = cpu_chain(first, steps);
  // Buffer s is step s's input: steps + 1 buffers in one allocation.
  device_buffer<unsigned> bufs(static_cast<std::size_t>(steps + 1) * n);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(bufs.get(), first.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  auto buf = [&](int s) { return bufs.get() + static_cast<std::size_t>(s) * n; };

  const auto plain = launchfit::max_occupancy().items(n).on(stream);
  const auto pdl = launchfit::max_occupancy().items(n).on(stream).pdl();
  auto chain = [&](bool with_pdl) {
    for (int s = 0; s < steps; ++s) {
      if (with_pdl) {
        launchfit::launch(chain_step, pdl, buf(s), buf(s + 1), n, static_cast<unsigned>(s));
      } else {
        launchfit::launch(chain_step, plain, buf(s), buf(s + 1), n, static_cast<unsigned>(s));
      }
    }
  };
  // Every buffer the chain writes against the CPU; false on the first difference.
  auto verify = [&](const char* what) {
    std::vector<unsigned> got(static_cast<std::size_t>(steps + 1) * n);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpy(got.data(), bufs.get(), bufs.bytes(), cudaMemcpyDeviceToHost));
    for (int s = 1; s <= steps; ++s) {
      for (unsigned i = 0; i < n; ++i) {
        const unsigned g = got[static_cast<std::size_t>(s) * n + i];
        if (g != want[static_cast<std::size_t>(s)][i]) {
          std::printf("    verified:  %s: step %d element %u is %u, expected %u  MISMATCH\n", what, s - 1, i,
                      g, want[static_cast<std::size_t>(s)][i]);
          return false;
        }
      }
    }
    std::printf("    verified:  %s: all %d buffers of %u elements equal the CPU's  OK\n", what, steps, n);
    return true;
  };
  bool ok = true;

  std::printf("a chain of %d dependent kernels, %u elements each\n", steps, n);
  for (int mode = 0; mode < 2; ++mode) {
    const bool with_pdl = mode == 1;
    std::printf(
        "%s\n    call:      launchfit::launch(chain_step, launchfit::max_occupancy().items(n).on(stream)%s, "
        "in, out, n, step);\n",
        with_pdl ? "with .pdl()" : "without PDL", with_pdl ? ".pdl()" : "");
    // Poison every output, run once, check.
    LAUNCHFIT_DEMO_CHECK(
        cudaMemsetAsync(buf(1), 0xff, static_cast<std::size_t>(steps) * n * sizeof(unsigned), stream));
    const launchfit::launched ran = with_pdl ? launchfit::launch(chain_step, pdl, buf(0), buf(1), n, 0u)
                                             : launchfit::launch(chain_step, plain, buf(0), buf(1), n, 0u);
    for (int s = 1; s < steps; ++s) {
      if (with_pdl) {
        launchfit::launch(chain_step, pdl, buf(s), buf(s + 1), n, static_cast<unsigned>(s));
      } else {
        launchfit::launch(chain_step, plain, buf(s), buf(s + 1), n, static_cast<unsigned>(s));
      }
    }
    LAUNCHFIT_DEMO_CHECK(cudaStreamSynchronize(stream));
    LAUNCHFIT_DEMO_CHECK(cudaGetLastError());
    launchfit_demo::print_plan(ran.plan(), (with_pdl ? pdl : plain).work_shape());
    std::printf("    launched:  grid %s x block %s per step, %.3f waves, programmatic=%s\n",
                ran.grid.to_string().c_str(), ran.block.to_string().c_str(), ran.waves(),
                ran.plan().options.programmatic ? "yes" : "no");
    const bool flag_ok = ran.plan().options.programmatic == with_pdl;
    if (!flag_ok) std::printf("    check:     the plan's programmatic flag is wrong  MISMATCH\n");
    ok &= flag_ok;
    ok &= verify(with_pdl ? "with PDL" : "without PDL");
  }

  // ---- wall time of the chain, both ways, interleaved
  // -------------------------------------------------------
  for (int w = 0; w < 5; ++w) {  // warm-up
    chain(false);
    chain(true);
  }
  LAUNCHFIT_DEMO_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> plain_us, pdl_us, saved_us;
  for (int r = 0; r < reps; ++r) {
    double t[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const bool with_pdl = ((r + k) % 2) == 1;  // alternate which goes first
      const auto t0 = clock_type::now();
      chain(with_pdl);
      LAUNCHFIT_DEMO_CHECK(cudaStreamSynchronize(stream));
      t[with_pdl ? 1 : 0] = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
    }
    plain_us.push_back(t[0]);
    pdl_us.push_back(t[1]);
    saved_us.push_back((t[0] - t[1]) / steps);
  }
  LAUNCHFIT_DEMO_CHECK(cudaGetLastError());
  ok &= verify("after the timed chains");
  const double mp = median(plain_us), mq = median(pdl_us), ms = median(saved_us);
  std::printf(
      "\nwall time of the chain of %d (launches + synchronize), median of %d interleaved repetitions:\n",
      steps, reps);
  std::printf("    without PDL: %9.1f us  (%.2f us per kernel)\n", mp, mp / steps);
  std::printf("    with .pdl(): %9.1f us  (%.2f us per kernel)\n", mq, mq / steps);
  std::printf(
      "    saving:      %.2f us per kernel (median of the per-repetition differences; %.1f%% of the chain)\n",
      ms, mp > 0 ? 100.0 * (mp - mq) / mp : 0.0);
  if (ms <= 0) std::printf("    note:        PDL saved nothing here (reported, not a failure)\n");
  LAUNCHFIT_DEMO_CHECK(cudaStreamDestroy(stream));
  std::printf("\npdl_chain: %s\n", ok ? "both chains match the CPU" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a chain of small dependent kernels with and without programmatic dependent launch, timed",
               "pdl_chain"};
  int steps = 64, reps = 301;
  app.add_option("--steps", steps, "kernels in the chain")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions of the chain, each way")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  return launchfit_demo::run("pdl_chain", [&] { return run_chain(steps, reps); });
}

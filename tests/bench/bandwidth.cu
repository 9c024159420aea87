// SPDX-License-Identifier: MIT
// bandwidth: device-to-device copy bandwidth (cudaMemcpy, read + write bytes) and the best streaming read
// through launchfit::launch (a read-reduce with 2 and 4 float4 loads in flight per thread, sized by
// bytes_in_flight and by max_occupancy), compared with the best configuration of an exhaustive sweep
// (block {32, ..., 1024} x resident blocks per SM {1 .. as many as fit}). Buffers are 2 GiB; every timed run
// is verified (copy: element-wise; reads: exact sum of random integers).
//
//   bandwidth [--quick] [--json PATH] [--repeats N] [--mib M] [--device N]

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {

__host__ __device__ inline float hashed_value(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ULL + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(1 + (z & 3));  // 1..4, see bench::reduce_input
}

__global__ void fill_hashed(float* __restrict__ out, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = hashed_value(i, seed);
  }
}

unsigned long long hashed_sum(std::size_t n, std::uint64_t seed) {
  const std::size_t parts = 1024;
  std::vector<unsigned long long> part(parts, 0);
  const std::size_t chunk = (n + parts - 1) / parts;
  bench::parallel_for(parts, [&](std::size_t b, std::size_t e) {
    for (std::size_t p = b; p < e; ++p) {
      unsigned long long s = 0;
      for (std::size_t i = p * chunk; i < std::min(n, (p + 1) * chunk); ++i) {
        s += static_cast<unsigned long long>(hashed_value(i, seed));
      }
      part[p] = s;
    }
  });
  unsigned long long total = 0;
  for (auto v : part) total += v;
  return total;
}

struct result_row {
  std::string what;
  int block = 0;
  long long grid = 0;
  int blocks_per_sm = 0;
  double ms = 0;
  double tbps = 0;
  bool ok = true;
};

int run(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  const bench::args a(argc, argv);
  const bool quick = a.flag("--quick");
  const int repeats = std::max(1, a.int_value("--repeats", quick ? 2 : 10));
  const std::string json_path = a.value("--json");
  const bench::device_info dev = bench::open_device(a.int_value("--device", 0));

  std::size_t bytes = static_cast<std::size_t>(a.int_value("--mib", quick ? 64 : 2048)) << 20;
  if (!quick) bytes = std::max(bytes, 4 * dev.l2_bytes);
  const std::size_t n = bytes / sizeof(float) / 64 * 64;  // floats; a whole number of float4 tiles
  bytes = n * sizeof(float);
  const std::size_t count4 = n / 4;
  if (n / (32 * static_cast<std::size_t>(dev.sm_count)) > bench::max_exact_items_per_thread) {
    throw std::invalid_argument("buffer too large for an exact float sum per thread");
  }

  std::printf("# launchfit bandwidth\n\ndevice: %s\nbuffers: %.2f GiB each, %d repeats (median), launches per "
              "sample 1\n\n",
              dev.describe().c_str(), static_cast<double>(bytes) / (1 << 30), repeats);
  std::fflush(stdout);

  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bench::stream_timer timer(stream);
  bench::float_checker checker;
  int failures = 0;
  auto fail = [&](const std::string& what) {
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
    std::fflush(stdout);
  };

  bench::device_buffer<float> src(n), dst(n);
  bench::device_buffer<unsigned long long> slots(bench::reduce_slots);
  const std::uint64_t seed = 0x5eed0001ULL;
  fill_hashed<<<4 * dev.sm_count, 256, 0, stream>>>(src.get(), n, seed);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(stream));
  const unsigned long long expected = hashed_sum(n, seed);

  // ---- copy ----
  result_row copy;
  copy.what = "cudaMemcpyAsync device-to-device";
  {
    BENCH_CUDA(cudaMemsetAsync(dst.get(), 0xFF, bytes, stream));  // poison: every float a NaN
    const auto t = timer.time(
        [&] { BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream)); },
        [] {}, 1, repeats);
    copy.ms = t.ms;
    copy.tbps = 2.0 * static_cast<double>(bytes) / (t.ms * 1e9);
    const std::string bad = checker.compare(dst.get(), src.get(), n, 0.f, 0.f, stream);
    if (!bad.empty()) {
      fail("copy: " + bad);
      copy.ok = false;
    }
  }
  dst = {};  // the reads need only src
  std::printf("copy: %.4f ms, %.3f TB/s (read + write)\n", copy.ms, copy.tbps);
  std::fflush(stdout);

  // ---- streaming reads ----
  const auto reset = [&] { BENCH_CUDA(cudaMemsetAsync(slots.get(), 0, slots.bytes(), stream)); };
  auto verify = [&](const std::string& what) {
    BENCH_CUDA(cudaStreamSynchronize(stream));
    unsigned long long total = 0;
    for (auto v : slots.download()) total += v;
    if (total != expected) {
      fail(what + ": sum " + std::to_string(total) + ", expected " + std::to_string(expected));
      return false;
    }
    return true;
  };
  auto tbps_of = [&](double ms) { return static_cast<double>(bytes) / (ms * 1e9); };

  std::vector<result_row> launchfit_rows, best_rows;
  std::vector<result_row> all_swept;
  auto sweep_and_policies = [&](auto kernel, int loads, const char* tag) {
    const int per_thread_items = 4 * loads;
    const float4* in = reinterpret_cast<const float4*>(src.get());
    // launchfit: bytes_in_flight with the kernel's real bytes in flight, and max_occupancy.
    auto measure_spec = [&](const auto& spec, const std::string& what) {
      const auto t = timer.time([&] { lf::launch(kernel, spec, in, count4, slots.get()); }, reset, 1, repeats);
      result_row r;
      r.what = what;
      const lf::plan p = lf::plan_for(kernel, spec);
      r.block = p.block_threads;
      r.grid = lf::grid_for(p, spec.work_shape()).x;
      r.blocks_per_sm = p.blocks_per_sm;
      r.ms = t.ms;
      r.tbps = tbps_of(t.ms);
      r.ok = verify(what);
      launchfit_rows.push_back(r);
      std::printf("  %-44s block %4d grid %6lld (%2d/SM): %.4f ms, %.3f TB/s\n", what.c_str(), r.block, r.grid,
                  r.blocks_per_sm, r.ms, r.tbps);
      std::fflush(stdout);
    };
    const int bif = loads * static_cast<int>(sizeof(float4));
    measure_spec(lf::bytes_in_flight(bif).grid_stride(n).per_thread(per_thread_items).on(stream),
                 std::string("launchfit bytes_in_flight(") + std::to_string(bif) + ") " + tag);
    measure_spec(lf::max_occupancy().grid_stride(n).per_thread(per_thread_items).on(stream),
                 std::string("launchfit max_occupancy ") + tag);

    // Sweep.
    cudaFuncAttributes attr{};
    BENCH_CUDA(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)));
    result_row best;
    best.what = std::string("best swept ") + tag;
    int configs = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int block = 32; block <= std::min(1024, attr.maxThreadsPerBlock); block += 32) {
      int fit = 0;
      BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, reinterpret_cast<const void*>(kernel), block, 0));
      const long long needed = static_cast<long long>((n + static_cast<std::size_t>(block) * per_thread_items - 1) /
                                                      (static_cast<std::size_t>(block) * per_thread_items));
      for (int bps = fit; bps >= 1; --bps) {
        const unsigned grid =
            static_cast<unsigned>(std::min<long long>(needed, static_cast<long long>(bps) * dev.sm_count));
        const double prune = best.ms > 0 ? 1.2 * best.ms : 0;
        const auto t = timer.time(
            [&] {
              kernel<<<grid, block, 0, stream>>>(in, count4, slots.get());
              BENCH_CUDA(cudaGetLastError());
            },
            reset, 1, repeats, prune);
        ++configs;
        const std::string what = std::string(tag) + " <<<" + std::to_string(grid) + ", " + std::to_string(block) + ">>>";
        const bool ok = verify("sweep " + what);
        result_row r;
        r.what = what;
        r.block = block;
        r.grid = grid;
        r.blocks_per_sm = bps;
        r.ms = t.ms;
        r.tbps = tbps_of(t.ms);
        r.ok = ok;
        all_swept.push_back(r);
        if (ok && t.samples == repeats && (best.ms == 0 || t.ms < best.ms)) {
          best.block = block;
          best.grid = grid;
          best.blocks_per_sm = bps;
          best.ms = t.ms;
          best.tbps = r.tbps;
        }
      }
    }
    if (best.ms == 0) {
      fail(std::string("sweep ") + tag + ": no configuration ran correctly");
      best.ok = false;
    }
    std::printf("  %-44s block %4d grid %6lld (%2d/SM): %.4f ms, %.3f TB/s  [%d configurations, %.1f s]\n",
                best.what.c_str(), best.block, best.grid, best.blocks_per_sm, best.ms, best.tbps, configs,
                bench::seconds_since(t0));
    std::fflush(stdout);
    best_rows.push_back(best);
  };

  std::printf("\nstreaming read (read-reduce, grid-stride):\n");
  sweep_and_policies(&bench::read_reduce<float4, 2>, 2, "2 x float4/thread");
  sweep_and_policies(&bench::read_reduce<float4, 4>, 4, "4 x float4/thread");

  const result_row* best_swept = nullptr;
  for (const auto& r : best_rows) {
    if (r.ok && (!best_swept || r.tbps > best_swept->tbps)) best_swept = &r;
  }
  const result_row* best_launchfit = nullptr;
  for (const auto& r : launchfit_rows) {
    if (r.ok && (!best_launchfit || r.tbps > best_launchfit->tbps)) best_launchfit = &r;
  }
  const double best_tbps = best_swept ? best_swept->tbps : 0;
  auto pct = [](double x, double of) { return of > 0 ? 100.0 * x / of : 0.0; };
  const double total_s = bench::seconds_since(start);

  if (!json_path.empty()) {
    std::ostringstream js;
    auto row_json = [&](const result_row& r) {
      std::ostringstream o;
      o << "{\"what\":" << bench::json_string(r.what) << ",\"block\":" << r.block << ",\"grid\":" << r.grid
        << ",\"blocks_per_sm\":" << r.blocks_per_sm << ",\"ms\":" << bench::json_number(r.ms)
        << ",\"tbps\":" << bench::json_number(r.tbps) << ",\"ok\":" << (r.ok ? "true" : "false") << "}";
      return o.str();
    };
    js << "{\n\"benchmark\":\"bandwidth\",\n\"device\":" << dev.json() << ",\n\"buffer_bytes\":" << bytes
       << ",\n\"repeats\":" << repeats << ",\n\"copy\":" << row_json(copy) << ",\n\"launchfit\":[";
    for (std::size_t i = 0; i < launchfit_rows.size(); ++i) js << (i ? ",\n" : "\n") << row_json(launchfit_rows[i]);
    js << "],\n\"best_swept\":[";
    for (std::size_t i = 0; i < best_rows.size(); ++i) js << (i ? ",\n" : "\n") << row_json(best_rows[i]);
    js << "],\n\"swept\":[";
    for (std::size_t i = 0; i < all_swept.size(); ++i) js << (i ? ",\n" : "\n") << row_json(all_swept[i]);
    js << "],\n\"best_launchfit_pct_of_best_swept\":"
       << bench::json_number(best_launchfit ? pct(best_launchfit->tbps, best_tbps) : 0)
       << ",\n\"verification_failures\":" << failures << ",\n\"total_s\":" << bench::json_number(total_s) << "\n}\n";
    bench::write_file(json_path, js.str());
    std::printf("\nwrote %s\n", json_path.c_str());
  }

  std::printf("\n## Summary (TB/s = 10^12 bytes/s; copy counts read + write, reads count bytes read)\n\n"
              "| measurement | block | grid | blocks/SM | ms | TB/s | %% of best swept read | %% of copy |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %s | - | - | - | %.4f | %.3f | - | 100.0 |\n", copy.what.c_str(), copy.ms, copy.tbps);
  auto print_row = [&](const result_row& r) {
    std::printf("| %s%s | %d | %lld | %d | %.4f | %.3f | %.1f | %.1f |\n", r.what.c_str(), r.ok ? "" : " (FAILED)",
                r.block, r.grid, r.blocks_per_sm, r.ms, r.tbps, pct(r.tbps, best_tbps), pct(r.tbps, copy.tbps));
  };
  for (const auto& r : best_rows) print_row(r);
  for (const auto& r : launchfit_rows) print_row(r);
  if (best_launchfit) {
    std::printf("\nbest launchfit read: %s, %.1f%% of the best swept configuration (target >= 97%%), %.1f%% of "
                "the copy\n",
                best_launchfit->what.c_str(), pct(best_launchfit->tbps, best_tbps),
                pct(best_launchfit->tbps, copy.tbps));
  }
  std::printf("verification: %s; total time %.1f s\n",
              bench::verification_summary(failures, "every timed run correct").c_str(), total_s);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("bandwidth", run, argc, argv); }

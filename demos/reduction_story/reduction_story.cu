// SPDX-License-Identifier: MIT
// reduction_story — why does 50% occupancy beat 100%?
//
// A sum over >= 1 GiB of floats is limited by DRAM, and DRAM bandwidth follows Little's law: to keep the
// memory system busy, each SM needs enough bytes *in flight* (requested, not yet returned) to cover the
// latency. Bytes in flight per SM = resident warps x 32 threads x bytes each thread has outstanding.
//
//   A  reduce_1xfloat     1 float  in flight per thread (4 B),  run at max_occupancy (100% if it fits)
//   B  reduce_float4<2>   2 float4 in flight per thread (32 B), sized by bytes_in_flight(32)
//   C  reduce_float4<4>   4 float4 in flight per thread (64 B), sized by bytes_in_flight(64)
//
// A at full occupancy has 64 warps x 32 x 4 B = 8 KB in flight per SM; B reaches 32 KB with half the warps.
// The demo measures the three policy-chosen launches, then sweeps resident warps per SM for each version
// (launchfit::fixed(block, blocks_per_sm x SMs)) and draws bandwidth vs resident warps as an SVG.
//
//   build/demos/reduction_story [--svg reduction_story.svg] [--csv reduction_story.csv] [--gib 1] [--seed S]
//
// Every run's sum is checked against the CPU exactly (see make_data). Runtime: a few seconds on an H200.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <launchfit/log.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "demo.hpp"
#include "svg.hpp"

using launchfit_demo::device_buffer;

// ---- kernels --------------------------------------------------------------------------------------------

// Block-wide sum of one double per thread, one atomic per block. Blocks are whole warps.
__device__ void block_sum_to(double acc, double* total) {
  __shared__ double warp_sums[32];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < static_cast<int>(blockDim.x >> 5) ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) atomicAdd(total, acc);
  }
}

// A: the textbook grid-stride loop. Each iteration's load must return before the next is issued
// (unroll 1 keeps it that way), so a thread has 4 bytes in flight.
__global__ void reduce_1xfloat(const float* __restrict__ x, long long n, double* total) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  double acc = 0;
#pragma unroll 1
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc += x[i];
  block_sum_to(acc, total);
}

// B and C: K independent 16-byte loads issued before any is used, so a thread has K x 16 bytes in flight.
template <int K>
__global__ void reduce_float4(const float4* __restrict__ x, long long n4, double* total) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  double acc = 0;
#pragma unroll 1
  for (; i + (K - 1) * stride < n4; i += K * stride) {
    float4 v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = x[i + k * stride];
#pragma unroll
    for (int k = 0; k < K; ++k) acc += static_cast<double>((v[k].x + v[k].y) + (v[k].z + v[k].w));
  }
  for (; i < n4; i += stride) {  // the last partial round
    const float4 v = x[i];
    acc += static_cast<double>((v.x + v.y) + (v.z + v.w));
  }
  block_sum_to(acc, total);
}

namespace {

struct options {
  std::string svg = "reduction_story.svg";
  std::string csv = "reduction_story.csv";
  double gib = 1.0;
  std::uint64_t seed = 0;
  bool seed_given = false;
};

// The command line (CLI11); returns -1 to go on, else the exit code.
int parse(int argc, char** argv, options& o) {
  CLI::App app{"why 50% occupancy beats 100%: bytes in flight vs occupancy, with an SVG of the sweep",
               "reduction_story"};
  app.add_option("--svg", o.svg, "where to write the SVG of the sweep")->capture_default_str();
  app.add_option("--csv", o.csv, "where to write the sweep as CSV")->capture_default_str();
  app.add_option("--gib", o.gib, "GiB of floats to sum")
      ->check(CLI::Range(0.25, 16.0))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the random input (default: from the clock)")
      ->each([&o](const std::string&) { o.seed_given = true; });
  return launchfit_demo::parse_command_line(app, argc, argv);
}

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Fresh random values in [0, 1) that are multiples of 2^-16: every float4 partial sum (< 4, 18 bits) and
// every double total (< 2^34, 50 bits) is exact, so the GPU's sum must equal the CPU's bit for bit in any
// order, and one missed or doubled element fails the check. Returns the exact sum.
double make_data(std::vector<float>& x, std::uint64_t seed) {
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<double> partial(threads, 0.0);
  std::vector<std::thread> pool;
  const std::size_t chunk = (x.size() + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::uint64_t s = seed ^ (0x5851f42d4c957f2dULL * (t + 1));
      const std::size_t begin = t * chunk, end = std::min(x.size(), begin + chunk);
      double sum = 0;
      for (std::size_t i = begin; i < end; i += 4) {
        const std::uint64_t r = splitmix64(s);
        for (std::size_t k = 0; k < 4 && i + k < end; ++k) {
          x[i + k] = static_cast<float>((r >> (16 * k)) & 0xffff) * (1.0f / 65536.0f);
          sum += x[i + k];
        }
      }
      partial[t] = sum;
    });
  }
  for (std::thread& th : pool) th.join();
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

struct measurement {
  std::string series;   // "A 1xfloat", ...
  std::string source;   // "policy" or "sweep"
  int bytes_per_thread = 0;
  int block = 0;
  int blocks_per_sm = 0;
  int warps_per_sm = 0;
  double occupancy = 0;  // resident warps / max warps per SM
  long long bytes_in_flight_per_sm = 0;
  int registers = 0;
  double ms = 0;
  double gb_per_s = 0;
};

class timer {
 public:
  timer() {
    LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&start_));
    LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&stop_));
  }
  ~timer() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  timer(const timer&) = delete;
  timer& operator=(const timer&) = delete;
  // Median milliseconds of `reps` timed runs after one warm-up; `check` runs after every run.
  template <class Launch, class Check>
  double median_ms(int reps, double* total, Launch launch, Check check) {
    std::vector<float> times;
    for (int rep = 0; rep <= reps; ++rep) {
      LAUNCHFIT_DEMO_CHECK(cudaMemset(total, 0, sizeof(double)));
      LAUNCHFIT_DEMO_CHECK(cudaEventRecord(start_));
      launch();
      LAUNCHFIT_DEMO_CHECK(cudaEventRecord(stop_));
      LAUNCHFIT_DEMO_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      LAUNCHFIT_DEMO_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      if (rep > 0) times.push_back(ms);
      check();
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Bandwidth vs resident warps per SM: one polyline per series, the policy's choice as a ringed dot.
std::string make_svg(const std::vector<measurement>& m, const std::vector<std::string>& series,
                     const std::vector<std::string>& policy_names, const std::string& title, int max_warps) {
  const double W = 860, H = 540, left = 80, right = 250, top = 60, bottom = 70;
  const double pw = W - left - right, ph = H - top - bottom;
  double ymax_data = 0;
  for (const measurement& r : m) ymax_data = std::max(ymax_data, r.gb_per_s);
  const double ystep = ymax_data > 2500 ? 500 : ymax_data > 1000 ? 250 : 100;
  const double ymax = std::max(ystep, std::ceil(ymax_data * 1.08 / ystep) * ystep);
  auto X = [&](double warps) { return left + pw * warps / max_warps; };
  auto Y = [&](double gbs) { return top + ph * (1.0 - gbs / ymax); };
  const char* colors[] = {"#d62728", "#1f77b4", "#2ca02c"};

  launchfit_svg::document s(W, H, {{"font-family", "Helvetica, Arial, sans-serif"}, {"font-size", 13}});
  s.text(W / 2, 28, title, {{"text-anchor", "middle"}, {"font-size", 16}, {"font-weight", "bold"}});
  // Grid lines and ticks.
  for (double y = 0; y <= ymax + 1e-9; y += ystep) {
    s.line(left, Y(y), left + pw, Y(y), {{"stroke", "#e0e0e0"}});
    s.text(left - 8, Y(y) + 4, std::to_string(static_cast<int>(y)), {{"text-anchor", "end"}});
  }
  for (int w = 0; w <= max_warps; w += 8) {
    s.line(X(w), top, X(w), top + ph, {{"stroke", "#f0f0f0"}});
    s.text(X(w), top + ph + 18, std::to_string(w), {{"text-anchor", "middle"}});
  }
  for (int q = 1; q <= 4; ++q)  // occupancy on the top edge
    s.text(X(max_warps * q / 4.0), top - 6, std::to_string(25 * q) + "% occupancy",
           {{"text-anchor", "middle"}, {"fill", "#777"}, {"font-size", 11}});
  s.rect(left, top, pw, ph, {{"fill", "none"}, {"stroke", "#333"}});
  s.text(left + pw / 2, H - 22, "resident warps per SM (blocks per SM x block size / 32)",
         {{"text-anchor", "middle"}});
  s.text(0, 0, "achieved read bandwidth (GB/s)",
         {{"transform", "translate(22," + launchfit_svg::num(top + ph / 2) + ") rotate(-90)"},
          {"text-anchor", "middle"}});

  for (std::size_t k = 0; k < series.size(); ++k) {
    const char* c = colors[k % 3];
    std::vector<std::pair<double, double>> pts;
    for (const measurement& r : m) {
      if (r.series != series[k] || r.source != "sweep") continue;
      pts.emplace_back(X(r.warps_per_sm), Y(r.gb_per_s));
      s.circle(X(r.warps_per_sm), Y(r.gb_per_s), 2.8, {{"fill", c}});
    }
    s.polyline(pts, {{"stroke", c}, {"stroke-width", 2}});
    for (const measurement& r : m) {
      if (r.series != series[k] || r.source != "policy") continue;
      s.circle(X(r.warps_per_sm), Y(r.gb_per_s), 8, {{"fill", "none"}, {"stroke", c}, {"stroke-width", 2.5}});
      s.circle(X(r.warps_per_sm), Y(r.gb_per_s), 3.5, {{"fill", c}});
    }
    // Legend.
    const double ly = top + 14 + 54.0 * k;
    s.line(left + pw + 16, ly, left + pw + 40, ly, {{"stroke", c}, {"stroke-width", 2}});
    s.text(left + pw + 46, ly + 4, series[k]);
    s.circle(left + pw + 28, ly + 20, 6, {{"fill", "none"}, {"stroke", c}, {"stroke-width", 2}});
    s.text(left + pw + 46, ly + 24, policy_names[k], {{"font-size", 11}, {"fill", "#555"}});
  }
  s.text(left + pw + 16, top + 14 + 54.0 * series.size() + 10, "ringed: the launch the policy chose",
         {{"font-size", 11}, {"fill", "#555"}});
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

int run_story(const options& opt) {
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  LAUNCHFIT_DEMO_CHECK(cudaFree(nullptr));
  const int sms = dev.sm_count, max_warps = dev.max_warps_per_sm;

  // ---- data: fresh random floats, summed exactly on the CPU --------------------------------------------
  const long long n = static_cast<long long>(opt.gib * (1LL << 30) / sizeof(float)) / 4 * 4;
  const long long n4 = n / 4;
  const double bytes = static_cast<double>(n) * sizeof(float);
  std::uint64_t seed = opt.seed_given ? opt.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::printf("reduction_story: %s (%s, %d SMs, %d warps/SM max), summing %lld floats (%.2f GiB), seed %llu\n",
              dev.name.c_str(), dev.arch().c_str(), sms, max_warps, n, bytes / (1 << 30),
              static_cast<unsigned long long>(seed));
  std::vector<float> host(static_cast<std::size_t>(n));
  const double want = make_data(host, seed);
  device_buffer<float> x(static_cast<std::size_t>(n));
  device_buffer<double> total(1);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(x.get(), host.data(), x.bytes(), cudaMemcpyHostToDevice));
  const float4* x4 = reinterpret_cast<const float4*>(x.get());
  std::printf("CPU sum (exact): %.6f\n\n", want);

  int failures = 0;
  auto check_sum = [&](const std::string& what) {
    return [&, what] {
      double got = 0;
      LAUNCHFIT_DEMO_CHECK(cudaMemcpy(&got, total.get(), sizeof got, cudaMemcpyDeviceToHost));
      if (got != want) {
        ++failures;
        std::printf("    MISMATCH %s: GPU sum %.6f, CPU sum %.6f\n", what.c_str(), got, want);
      }
    };
  };
  auto regs_of = [](const void* k) {
    cudaFuncAttributes a{};
    LAUNCHFIT_DEMO_CHECK(cudaFuncGetAttributes(&a, k));
    return a.numRegs;
  };

  const std::vector<std::string> series = {"A 1 x float (4 B/thread)", "B 2 x float4 (32 B/thread)",
                                           "C 4 x float4 (64 B/thread)"};
  const std::vector<std::string> policy_names = {"max_occupancy()", "bytes_in_flight(32)", "bytes_in_flight(64)"};
  const int bytes_per_thread[] = {4, 32, 64};
  const void* kernels[] = {reinterpret_cast<const void*>(reduce_1xfloat),
                           reinterpret_cast<const void*>(reduce_float4<2>),
                           reinterpret_cast<const void*>(reduce_float4<4>)};
  std::vector<measurement> results;
  timer t;

  auto record = [&](int k, const char* source, int block, int bps, double ms) {
    measurement r;
    r.series = series[k];
    r.source = source;
    r.bytes_per_thread = bytes_per_thread[k];
    r.block = block;
    r.blocks_per_sm = bps;
    r.warps_per_sm = bps * block / 32;
    r.occupancy = static_cast<double>(r.warps_per_sm) / max_warps;
    r.bytes_in_flight_per_sm = static_cast<long long>(r.warps_per_sm) * 32 * bytes_per_thread[k];
    r.registers = regs_of(kernels[k]);
    r.ms = ms;
    r.gb_per_s = bytes / (ms * 1e-3) / 1e9;
    results.push_back(r);
    return r;
  };
  // Times series k under a spec (made for n floats for A, n4 float4s for B and C); returns its plan.
  auto measure = [&](int k, const auto& spec, int reps, double* ms) -> const launchfit::plan& {
    auto launch_once = [&] {
      if (k == 0) {
        launchfit::launch(reduce_1xfloat, spec, x.get(), n, total.get());
      } else if (k == 1) {
        launchfit::launch(reduce_float4<2>, spec, x4, n4, total.get());
      } else {
        launchfit::launch(reduce_float4<4>, spec, x4, n4, total.get());
      }
    };
    *ms = t.median_ms(reps, total.get(), launch_once, check_sum(series[k]));
    return k == 0 ? launchfit::plan_for(reduce_1xfloat, spec)
                  : k == 1 ? launchfit::plan_for(reduce_float4<2>, spec) : launchfit::plan_for(reduce_float4<4>, spec);
  };

  // ---- 1. the launches the policies choose --------------------------------------------------------------
  std::printf("1. What each policy chooses, and what it achieves (median of 10 runs; every sum checked)\n");
  for (int k = 0; k < 3; ++k) {
    double ms = 0;
    const launchfit::plan* p = nullptr;
    if (k == 0) {
      // launchfit::launch(reduce_1xfloat, launchfit::max_occupancy().grid_stride(n), x, n, total);
      p = &measure(k, launchfit::max_occupancy().grid_stride(n), 10, &ms);
    } else if (k == 1) {
      // launchfit::launch(reduce_float4<2>, launchfit::bytes_in_flight(32).grid_stride(n4), x4, n4, total);
      p = &measure(k, launchfit::bytes_in_flight(32).grid_stride(n4), 10, &ms);
    } else {
      // launchfit::launch(reduce_float4<4>, launchfit::bytes_in_flight(64).grid_stride(n4), x4, n4, total);
      p = &measure(k, launchfit::bytes_in_flight(64).grid_stride(n4), 10, &ms);
    }
    const measurement r = record(k, "policy", p->block_threads, p->blocks_per_sm, ms);
    std::printf("  %s, %s\n", series[k].c_str(), policy_names[k].c_str());
    std::printf("    plan:   %s\n", p->to_string().c_str());
    std::printf("    why:    %s\n", p->reason.c_str());
    std::printf("    runs:   %d warps/SM = %.0f%% occupancy, %d registers/thread, %lld KB in flight per SM\n",
                r.warps_per_sm, 100 * r.occupancy, r.registers, r.bytes_in_flight_per_sm / 1024);
    std::printf("    result: %.3f ms, %.0f GB/s\n", r.ms, r.gb_per_s);
  }
  {
    // The policy also says when a kernel cannot keep enough bytes in flight, and what to change.
    const launchfit::plan& p = launchfit::plan_for(reduce_1xfloat, launchfit::bytes_in_flight(4).grid_stride(n));
    std::printf("  A under bytes_in_flight(4) instead: %s\n    warning: %s\n", p.reason.c_str(),
                p.warning.empty() ? "(none)" : p.warning.c_str());
  }

  // ---- 2. the sweep: resident warps per SM, with today's fixed numbers ------------------------------------
  const int block = 128;
  std::printf("\n2. Sweep: block %d, grid = blocks/SM x %d SMs via launchfit::fixed(%d, grid) (median of 5 runs)\n",
              block, sms, block);
  std::printf("  %-28s %6s %7s %10s %9s %9s\n", "series", "warps", "occup.", "in flight", "ms", "GB/s");
  const auto level = launchfit::logger()->level();
  launchfit::logger()->set_level(spdlog::level::warn);  // one new plan per point: keep the log to warnings
  for (int k = 0; k < 3; ++k) {
    int fit = 0;
    LAUNCHFIT_DEMO_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernels[k], block, 0));
    for (int bps = 1; bps * block / 32 <= max_warps; ++bps) {
      if (bps > fit) {
        std::printf("  %-28s %6d  (not resident: %d blocks of %d fit per SM at %d registers)\n", series[k].c_str(),
                    bps * block / 32, fit, block, regs_of(kernels[k]));
        break;
      }
      const long long items = k == 0 ? n : n4;
      double ms = 0;
      measure(k, launchfit::fixed(block, bps * sms).grid_stride(items), 5, &ms);
      const measurement r = record(k, "sweep", block, bps, ms);
      std::printf("  %-28s %6d %6.0f%% %7.1f KB %9.3f %9.0f\n", series[k].c_str(), r.warps_per_sm,
                  100 * r.occupancy, r.bytes_in_flight_per_sm / 1024.0, r.ms, r.gb_per_s);
    }
  }
  launchfit::logger()->set_level(level);

  // ---- 3. the picture and the numbers ---------------------------------------------------------------------
  std::ostringstream csv;
  csv << "series,source,bytes_per_thread,block,blocks_per_sm,warps_per_sm,occupancy,bytes_in_flight_per_sm,"
         "registers,ms,gb_per_s\n";
  for (const measurement& r : results) {
    char line[256];
    std::snprintf(line, sizeof line, "\"%s\",%s,%d,%d,%d,%d,%.4f,%lld,%d,%.4f,%.1f\n", r.series.c_str(),
                  r.source.c_str(), r.bytes_per_thread, r.block, r.blocks_per_sm, r.warps_per_sm, r.occupancy,
                  r.bytes_in_flight_per_sm, r.registers, r.ms, r.gb_per_s);
    csv << line;
  }
  char title[200];
  std::snprintf(title, sizeof title, "Sum of %.2f GiB of floats on %s: bandwidth vs resident warps per SM",
                bytes / (1 << 30), dev.name.c_str());
  write_file(opt.csv, csv.str());
  write_file(opt.svg, make_svg(results, series, policy_names, title, max_warps));
  std::printf("\nwrote %s and %s\n", opt.svg.c_str(), opt.csv.c_str());

  double best[3] = {0, 0, 0};
  for (const measurement& r : results)
    for (int k = 0; k < 3; ++k)
      if (r.series == series[k]) best[k] = std::max(best[k], r.gb_per_s);
  const measurement& a = results[0];
  const measurement& b = results[1];
  std::printf("\nA at %.0f%% occupancy: %.0f GB/s with %lld KB in flight per SM; B at %.0f%%: %.0f GB/s with %lld KB.\n",
              100 * a.occupancy, a.gb_per_s, a.bytes_in_flight_per_sm / 1024, 100 * b.occupancy, b.gb_per_s,
              b.bytes_in_flight_per_sm / 1024);
  std::printf("Best seen: A %.0f, B %.0f, C %.0f GB/s. Bandwidth follows bytes in flight, not occupancy.\n", best[0],
              best[1], best[2]);
  if (failures) {
    std::printf("\nreduction_story: FAILED: %d sums differ from the CPU\n", failures);
    return 1;
  }
  std::printf("\nreduction_story: all %zu configurations summed exactly as on the CPU\n", results.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (const int rc = parse(argc, argv, opt); rc >= 0) return rc;
  return launchfit_demo::run("reduction_story", [&] { return run_story(opt); });
}

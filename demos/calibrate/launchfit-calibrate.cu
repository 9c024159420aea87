// SPDX-License-Identifier: MIT
// launchfit-calibrate: measures this GPU's read bandwidth against the bytes each SM keeps in flight, and
// finds the smallest bytes-in-flight target per SM that reaches 97% of the best bandwidth: the number
// launchfit::bytes_in_flight() sizes blocks against (Little's law), measured instead of taken from a table.
//
// The kernel streams through an array far larger than L2 and sums it: every thread keeps L independent loads
// of W bytes in flight (an unrolled grid-stride loop), and the launch is exactly the resident grid, blocks of
// 128 threads x (warps / 4) blocks per SM on every SM (checked per launch with %smid). Bytes in flight per SM
// = warps x 32 x W x L. Each point: one warm-up launch, then the median of >= 5 launches timed with CUDA
// events; every launch's sum is checked against the sum computed when the array was written.
//
//   launchfit-calibrate [--quick] [--json] [--out FILE.json] [--svg FILE.svg] [--cache PLANS.json] [--apply]
//                       [--device N]
//                       [--gib G] [--repeats N] [--warps 4,8,...] [--loads 1,2,4,8] [--widths 4,8,16]
//                       [--fraction 0.97]
//
// Exit codes (demos/common/tool.hpp, as every launchfit tool): 0 done; 1 the measurement failed (a point
// summed the array wrong, a CUDA call failed); 2 a bad command line; 3 no CUDA driver or no GPU here, or a
// file that cannot be written.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <launchfit/cache.hpp>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <launchfit/policy.hpp>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "calibration.hpp"
#include "demo.hpp"
#include "svg.hpp"
#include "tool.hpp"

namespace lf = launchfit;
namespace cal = launchfit_calibrate;

namespace {

// ---- kernels ---------------------------------------------------------------------------------------------

constexpr int block_threads = 128;  // 4 warps: every warp count in the sweep is a whole number of blocks
constexpr int sum_slots = 256;      // per-warp sums are spread over this many counters (cheap atomics)
constexpr int max_smid = 1024;      // %smid values counted (any real GPU has fewer SMs)

__device__ __forceinline__ unsigned long long words_sum(unsigned v) { return v; }
__device__ __forceinline__ unsigned long long words_sum(uint2 v) {
  return static_cast<unsigned long long>(v.x) + v.y;
}
__device__ __forceinline__ unsigned long long words_sum(uint4 v) {
  return (static_cast<unsigned long long>(v.x) + v.y) + (static_cast<unsigned long long>(v.z) + v.w);
}

__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Sums `count` elements of T (4, 8 or 16 bytes) as 32-bit words, each thread keeping L independent loads in
// flight per iteration of a grid-stride loop; the sum goes to slots[], and each block counts itself on the SM
// it ran on. __maxnreg__: without an explicit register limit, nvcc 13's ptxas keeps these kernels at 32
// registers by issuing only 4 of 8 uint4 loads before consuming them (checked in the SASS); with it, all L
// loads are issued before the first is used, so L is what is in flight.
template <class T, int L>
__global__ void __maxnreg__(255)
    stream_read(const T* __restrict__ in, std::size_t count, unsigned long long* __restrict__ slots,
                unsigned* __restrict__ blocks_on_sm) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long acc = 0;
  const std::size_t span = static_cast<std::size_t>(L - 1) * stride;
  if (count > span) {
    const std::size_t end = count - span;  // i < end: all L loads of the iteration are in the array
#pragma unroll 1
    for (; i < end; i += static_cast<std::size_t>(L) * stride) {
      T v[L];
#pragma unroll
      for (int u = 0; u < L; ++u) v[u] = in[i + static_cast<std::size_t>(u) * stride];
#pragma unroll
      for (int u = 0; u < L; ++u) acc += words_sum(v[u]);
    }
  }
#pragma unroll 1
  for (; i < count; i += stride) acc += words_sum(in[i]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  const unsigned warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) atomicAdd(&slots[warp % sum_slots], acc);
  if (threadIdx.x == 0) {
    const unsigned sm = sm_id();
    if (sm < max_smid) atomicAdd(&blocks_on_sm[sm], 1u);
  }
}

// Writes pseudo-random 8-bit values into 32-bit words (no pattern a memory system could compress) and sums
// them, the reference every read is checked against.
__global__ void fill_words(unsigned* __restrict__ words, std::size_t count,
                           unsigned long long* __restrict__ sum) {
  unsigned long long acc = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const unsigned v = static_cast<unsigned>(((i + 1) * 0x9E3779B97F4A7C15ULL) >> 56);
    words[i] = v;
    acc += v;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}

// The instantiation for (width, loads), as an untyped function for the runtime launch API.
template <class T, int L>
const void* kernel_of() {
  return reinterpret_cast<const void*>(&stream_read<T, L>);
}
const void* kernel_for(int width, int loads) {
  switch (width * 100 + loads) {
    case 401:
      return kernel_of<unsigned, 1>();
    case 402:
      return kernel_of<unsigned, 2>();
    case 404:
      return kernel_of<unsigned, 4>();
    case 408:
      return kernel_of<unsigned, 8>();
    case 801:
      return kernel_of<uint2, 1>();
    case 802:
      return kernel_of<uint2, 2>();
    case 804:
      return kernel_of<uint2, 4>();
    case 808:
      return kernel_of<uint2, 8>();
    case 1601:
      return kernel_of<uint4, 1>();
    case 1602:
      return kernel_of<uint4, 2>();
    case 1604:
      return kernel_of<uint4, 4>();
    case 1608:
      return kernel_of<uint4, 8>();
    default:
      return nullptr;
  }
}

// ---- measurement -----------------------------------------------------------------------------------------

struct options {
  int device = 0;
  double gib = 0;  // 0: max(4 GiB, 8 x L2), at most half the free memory
  int repeats = 7;
  std::vector<int> warps{4, 8, 12, 16, 24, 32, 40, 48, 64};
  std::vector<int> loads{1, 2, 4, 8};
  std::vector<int> widths{4, 8, 16};
  double fraction = 0.97;
  bool quick = false;
  bool json = false;
  bool apply = false;
  std::string cache;  // store the target in this plan-cache file for the device's model
  std::string out;
  std::string svg = "launchfit-calibrate.svg";
};

struct measured {
  cal::point p;
  int blocks_per_sm = 0;
  double ms = 0;
  bool even = true;  // every SM ran exactly blocks_per_sm blocks in every launch
  bool correct = true;
  std::string skipped;  // why the point was not measured (it does not fit)
};

class sweep_runner {
 public:
  sweep_runner(const options& o, int sm_count, std::size_t array_bytes) : opt_(o), sm_count_(sm_count) {
    words_ = array_bytes / sizeof(unsigned);
    words_ -= words_ % 4;  // whole uint4 elements
    LAUNCHFIT_DEMO_CHECK(cudaMalloc(&data_, words_ * sizeof(unsigned)));
    LAUNCHFIT_DEMO_CHECK(cudaMalloc(&slots_, sum_slots * sizeof(unsigned long long)));
    LAUNCHFIT_DEMO_CHECK(cudaMalloc(&on_sm_, max_smid * sizeof(unsigned)));
    LAUNCHFIT_DEMO_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Fill once; the reference sum comes from the same pass.
    LAUNCHFIT_DEMO_CHECK(cudaMemsetAsync(slots_, 0, sizeof(unsigned long long), stream_));
    fill_words<<<sm_count * 8, 256, 0, stream_>>>(data_, words_, slots_);
    LAUNCHFIT_DEMO_CHECK(cudaGetLastError());
    LAUNCHFIT_DEMO_CHECK(
        cudaMemcpyAsync(&expected_, slots_, sizeof expected_, cudaMemcpyDeviceToHost, stream_));
    LAUNCHFIT_DEMO_CHECK(cudaStreamSynchronize(stream_));
  }
  sweep_runner(const sweep_runner&) = delete;
  sweep_runner& operator=(const sweep_runner&) = delete;
  ~sweep_runner() {
    (void)cudaStreamDestroy(stream_);
    (void)cudaFree(on_sm_);
    (void)cudaFree(slots_);
    (void)cudaFree(data_);
  }

  std::size_t array_bytes() const { return words_ * sizeof(unsigned); }

  measured run(int warps, int loads, int width) {
    measured m;
    m.p.warps_per_sm = warps;
    m.p.loads_in_flight = loads;
    m.p.width_bytes = width;
    m.p.bytes_in_flight_per_sm = cal::bytes_in_flight_of(warps, loads, width);
    m.blocks_per_sm = warps / (block_threads / 32);
    const void* k = kernel_for(width, loads);
    if (!k) {
      m.skipped = "no kernel for this width and load count";
      return m;
    }
    int fit = 0;
    LAUNCHFIT_DEMO_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, block_threads, 0));
    if (fit < m.blocks_per_sm) {
      cudaFuncAttributes attr{};
      LAUNCHFIT_DEMO_CHECK(cudaFuncGetAttributes(&attr, k));
      m.skipped = "does not fit: " + std::to_string(fit) + " blocks of " + std::to_string(block_threads) +
                  " threads per SM (" + std::to_string(attr.numRegs) + " registers/thread)";
      return m;
    }
    const unsigned grid = static_cast<unsigned>(m.blocks_per_sm) * static_cast<unsigned>(sm_count_);
    const std::size_t count = words_ / static_cast<std::size_t>(width / 4);
    const void* in = data_;
    std::size_t n = count;
    unsigned long long* slots = slots_;
    unsigned* on = on_sm_;
    void* args[] = {&in, &n, &slots, &on};
    auto launch = [&] {
      LAUNCHFIT_DEMO_CHECK(cudaLaunchKernel(k, dim3(grid), dim3(block_threads), args, 0, stream_));
    };
    LAUNCHFIT_DEMO_CHECK(cudaMemsetAsync(slots_, 0, sum_slots * sizeof(unsigned long long), stream_));
    LAUNCHFIT_DEMO_CHECK(cudaMemsetAsync(on_sm_, 0, max_smid * sizeof(unsigned), stream_));
    launch();  // warm-up
    LAUNCHFIT_DEMO_CHECK(cudaStreamSynchronize(stream_));
    // Timed launches queued back to back, an event between each two: after the first, no launch waits for
    // the host, so each interval is one kernel's GPU time.
    std::vector<cudaEvent_t> marks(static_cast<std::size_t>(opt_.repeats) + 1, nullptr);
    for (cudaEvent_t& e : marks) LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&e));
    std::vector<double> ms;
    try {
      LAUNCHFIT_DEMO_CHECK(cudaEventRecord(marks[0], stream_));
      for (int r = 0; r < opt_.repeats; ++r) {
        launch();
        LAUNCHFIT_DEMO_CHECK(cudaEventRecord(marks[static_cast<std::size_t>(r) + 1], stream_));
      }
      LAUNCHFIT_DEMO_CHECK(cudaEventSynchronize(marks.back()));
      for (int r = 0; r < opt_.repeats; ++r) {
        float t = 0;
        LAUNCHFIT_DEMO_CHECK(cudaEventElapsedTime(&t, marks[static_cast<std::size_t>(r)],
                                                  marks[static_cast<std::size_t>(r) + 1]));
        ms.push_back(t);
      }
    } catch (...) {
      for (cudaEvent_t e : marks) (void)cudaEventDestroy(e);
      throw;
    }
    for (cudaEvent_t e : marks) (void)cudaEventDestroy(e);
    const int launches = opt_.repeats + 1;
    std::vector<unsigned long long> sums(sum_slots);
    std::vector<unsigned> on_sm(max_smid);
    LAUNCHFIT_DEMO_CHECK(cudaMemcpyAsync(sums.data(), slots_, sums.size() * sizeof(unsigned long long),
                                         cudaMemcpyDeviceToHost, stream_));
    LAUNCHFIT_DEMO_CHECK(cudaMemcpyAsync(on_sm.data(), on_sm_, on_sm.size() * sizeof(unsigned),
                                         cudaMemcpyDeviceToHost, stream_));
    LAUNCHFIT_DEMO_CHECK(cudaStreamSynchronize(stream_));
    unsigned long long total = 0;
    for (unsigned long long s : sums) total += s;
    m.correct = total == expected_ * static_cast<unsigned long long>(launches);
    int used = 0;
    for (unsigned c : on_sm) {
      if (c == 0) continue;
      ++used;
      m.even &= c == static_cast<unsigned>(m.blocks_per_sm * launches);
    }
    m.even &= used == sm_count_;
    std::sort(ms.begin(), ms.end());
    m.ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    m.p.gbps = m.ms > 0 ? static_cast<double>(array_bytes()) / (m.ms * 1e6) : 0;
    return m;
  }

 private:
  const options& opt_;
  int sm_count_;
  std::size_t words_ = 0;
  unsigned* data_ = nullptr;
  unsigned long long* slots_ = nullptr;
  unsigned* on_sm_ = nullptr;
  unsigned long long expected_ = 0;
  cudaStream_t stream_ = nullptr;
};

// ---- output ----------------------------------------------------------------------------------------------

std::string kb_text(std::size_t bytes) {
  char buf[32];
  if (bytes % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%zu KB", bytes / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(bytes) / 1024.0);
  }
  return buf;
}

// Bandwidth against bytes in flight per SM (log2 axis): every measured point coloured by load width, the best
// per level joined by a line, the threshold (fraction x robust best) dashed, the chosen target marked.
std::string make_svg(const std::vector<measured>& pts, const cal::calibration& c) {
  const double W = 900, H = 520, left = 80, right = 30, top = 50, bottom = 70;
  const double pw = W - left - right, ph = H - top - bottom;
  double min_b = 1e300, max_b = 0, max_bw = 0;
  for (const measured& m : pts) {
    if (!m.skipped.empty()) continue;
    min_b = std::min(min_b, static_cast<double>(m.p.bytes_in_flight_per_sm));
    max_b = std::max(max_b, static_cast<double>(m.p.bytes_in_flight_per_sm));
    max_bw = std::max(max_bw, m.p.gbps);
  }
  const double lx0 = std::floor(std::log2(min_b)), lx1 = std::max(lx0 + 1, std::ceil(std::log2(max_b)));
  double step = 500;
  while (max_bw / step > 10) step *= 2;
  const double ymax = std::max(step, std::ceil(max_bw * 1.05 / step) * step);
  auto x = [&](double bytes) { return left + (std::log2(bytes) - lx0) / (lx1 - lx0) * pw; };
  auto y = [&](double gbps) { return top + ph - gbps / ymax * ph; };
  launchfit_svg::document s(W, H);
  s.text(W / 2, 24,
         "Read bandwidth vs bytes in flight per SM: " + c.device_name + " (cc " + std::to_string(c.cc) +
             ", " + std::to_string(c.sm_count) + " SMs)",
         {{"text-anchor", "middle"}, {"font-size", 15}});
  for (double v = 0; v <= ymax + 1e-9; v += step) {  // y grid
    s.line(left, y(v), left + pw, y(v), {{"stroke", "#e5e5e5"}});
    s.text(left - 8, y(v) + 4, std::to_string(static_cast<long long>(v)), {{"text-anchor", "end"}});
  }
  for (double e = lx0; e <= lx1 + 1e-9; e += 1) {  // x grid: powers of two
    const double b = std::exp2(e);
    s.line(x(b), top, x(b), top + ph, {{"stroke", "#e5e5e5"}});
    s.text(x(b), top + ph + 18, kb_text(static_cast<std::size_t>(b)), {{"text-anchor", "middle"}});
  }
  s.rect(left, top, pw, ph, {{"fill", "none"}, {"stroke", "#444"}});
  s.text(left + pw / 2, H - 20, "bytes in flight per SM (warps x 32 x width x loads; log scale)",
         {{"text-anchor", "middle"}});
  s.text(0, 0, "read bandwidth (GB/s)",
         {{"transform", "translate(20," + launchfit_svg::num(top + ph / 2) + ") rotate(-90)"},
          {"text-anchor", "middle"}});
  // Best per level.
  std::map<std::size_t, double> best;
  for (const measured& m : pts) {
    if (m.skipped.empty() && m.even && m.correct) {
      double& b = best[m.p.bytes_in_flight_per_sm];
      b = std::max(b, m.p.gbps);
    }
  }
  std::vector<std::pair<double, double>> line;
  for (const auto& [b, g] : best) line.emplace_back(x(static_cast<double>(b)), y(g));
  s.polyline(line, {{"stroke", "#888"}, {"stroke-width", 1.5}});
  const std::map<int, const char*> colour{{4, "#1f77b4"}, {8, "#2ca02c"}, {16, "#d62728"}};
  for (const measured& m : pts) {
    if (!m.skipped.empty()) continue;
    const auto it = colour.find(m.p.width_bytes);
    s.circle(x(static_cast<double>(m.p.bytes_in_flight_per_sm)), y(m.p.gbps), m.even && m.correct ? 3.5 : 2,
             {{"fill", it != colour.end() ? it->second : "#555"}, {"fill-opacity", "0.75"}},
             std::to_string(m.p.warps_per_sm) + " warps/SM x " + std::to_string(m.p.width_bytes) + " B x " +
                 std::to_string(m.p.loads_in_flight) + " loads: " + kb_text(m.p.bytes_in_flight_per_sm) +
                 ", " + std::to_string(static_cast<long long>(m.p.gbps)) + " GB/s");
  }
  const double thr = c.fraction * c.best_gbps;
  s.line(left, y(thr), left + pw, y(thr), {{"stroke", "#555"}, {"stroke-dasharray", "6,4"}});
  s.text(left + 6, y(thr) - 6,
         std::to_string(static_cast<int>(std::lround(c.fraction * 100))) +
             "% of the best (median of the top 3): " + std::to_string(static_cast<long long>(thr)) + " GB/s");
  const double tx = x(static_cast<double>(c.target_bytes_per_sm));
  s.line(tx, top, tx, top + ph, {{"stroke", "black"}, {"stroke-width", 2}});
  s.text(tx + 6, top + ph - 10, "target " + kb_text(c.target_bytes_per_sm) + "/SM",
         {{"font-weight", "bold"}});
  double ly = top + 14;
  for (const auto& [w, col] : colour) {
    s.circle(left + pw - 90, ly + 10, 4, {{"fill", col}});
    s.text(left + pw - 80, ly + 14, std::to_string(w) + " B loads");
    ly += 18;
  }
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("cannot open " + path + " for writing");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot write " + path);
}

void show_plan(const char* label, const lf::plan& p, const lf::work& w) {
  std::printf("  %s\n", label);
  launchfit_demo::print_plan(p, w);
}

int calibrate(const options& opt) {
  int count = 0;
  LAUNCHFIT_DEMO_CHECK(cudaGetDeviceCount(&count));
  if (opt.device < 0 || opt.device >= count) {
    throw std::runtime_error("no CUDA device " + std::to_string(opt.device) + " (" + std::to_string(count) +
                             " present)");
  }
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(opt.device));
  LAUNCHFIT_DEMO_CHECK(cudaFree(nullptr));
  const lf::device_limits dev = lf::device_limits::query(opt.device);
  int driver = 0;
  LAUNCHFIT_DEMO_CHECK(cudaDriverGetVersion(&driver));
  std::size_t free_bytes = 0, total_bytes = 0;
  LAUNCHFIT_DEMO_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));

  // The array: 4 GiB or 8x L2, whichever is larger, at most half the free memory.
  const std::size_t gib = std::size_t{1} << 30;
  std::size_t array_bytes = opt.gib > 0 ? static_cast<std::size_t>(opt.gib * static_cast<double>(gib))
                                        : std::max<std::size_t>(opt.quick ? gib : 4 * gib, 8 * dev.l2_bytes);
  array_bytes = std::min(array_bytes, free_bytes / 2);
  array_bytes -= array_bytes % (std::size_t{1} << 20);
  if (array_bytes < (std::size_t{16} << 20))
    throw std::runtime_error("not enough free device memory for the array");
  FILE* progress = opt.json ? stderr : stdout;
  std::fprintf(progress,
               "# launchfit-calibrate\n\ndevice: %s (cc %d.%d, %d SMs, L2 %zu MiB, driver %d), %s\n",
               dev.name.c_str(), dev.cc_major, dev.cc_minor, dev.sm_count, dev.l2_bytes >> 20, driver,
               dev.uuid.c_str());
  if (array_bytes < 8 * dev.l2_bytes) {
    std::fprintf(stderr,
                 "warning: the array (%zu MiB) is smaller than 8x L2 (%zu MiB): L2 hits may inflate the "
                 "bandwidth\n",
                 array_bytes >> 20, (8 * dev.l2_bytes) >> 20);
  }

  sweep_runner runner(opt, dev.sm_count, array_bytes);
  std::fprintf(progress,
               "array %.2f GiB, %d timed launches per point (median) after one warm-up, blocks of %d "
               "threads, grid = blocks/SM x %d SMs\n\n",
               static_cast<double>(runner.array_bytes()) / static_cast<double>(gib), opt.repeats,
               block_threads, dev.sm_count);
  std::fflush(progress);

  std::vector<measured> pts;
  int failures = 0;
  for (int width : opt.widths) {
    for (int loads : opt.loads) {
      for (int warps : opt.warps) {
        measured m = runner.run(warps, loads, width);
        if (m.skipped.empty()) {
          std::fprintf(stderr, "  %2d warps/SM x %2d B x %d loads = %9s/SM: %8.1f GB/s%s%s\n", warps, width,
                       loads, kb_text(m.p.bytes_in_flight_per_sm).c_str(), m.p.gbps,
                       m.even ? "" : "  (uneven placement)", m.correct ? "" : "  WRONG SUM");
        } else {
          std::fprintf(stderr, "  %2d warps/SM x %2d B x %d loads: skipped, %s\n", warps, width, loads,
                       m.skipped.c_str());
        }
        if (!m.correct) ++failures;
        pts.push_back(m);
      }
    }
  }

  // The curve: measured, correct and evenly placed points only.
  cal::calibration c;
  c.device_name = dev.name;
  c.uuid = dev.uuid;
  c.cc = dev.cc();
  c.sm_count = dev.sm_count;
  c.driver_version = driver;
  c.array_bytes = runner.array_bytes();
  c.repeats = opt.repeats;
  c.fraction = opt.fraction;
  for (const measured& m : pts) {
    if (m.skipped.empty() && m.even && m.correct && m.p.gbps > 0) c.curve.push_back(m.p);
  }
  if (c.curve.empty()) throw std::runtime_error("no point was measured correctly: nothing to calibrate");
  c.best_gbps = cal::robust_best_gbps(c.curve);
  c.target_bytes_per_sm = cal::smallest_target(c.curve, c.fraction);
  double highest = 0, at_target = 0;
  for (const cal::point& p : c.curve) {
    highest = std::max(highest, p.gbps);
    if (p.bytes_in_flight_per_sm == c.target_bytes_per_sm) at_target = std::max(at_target, p.gbps);
  }
  const std::size_t table = lf::default_bytes_in_flight_per_sm(dev);

  if (opt.json) {
    std::fputs(cal::to_json(c).c_str(), stdout);
  } else {
    std::sort(pts.begin(), pts.end(), [](const measured& a, const measured& b) {
      return a.p.bytes_in_flight_per_sm != b.p.bytes_in_flight_per_sm
                 ? a.p.bytes_in_flight_per_sm < b.p.bytes_in_flight_per_sm
                 : a.p.gbps > b.p.gbps;
    });
    std::printf(
        "| bytes in flight/SM | warps/SM | block x blocks/SM | width | loads | ms | GB/s | of best | note |\n"
        "|---:|---:|---|---:|---:|---:|---:|---:|---|\n");
    for (const measured& m : pts) {
      if (!m.skipped.empty()) {
        std::printf("| %s | %d | %d x %d | %d B | %d | - | - | - | %s |\n",
                    kb_text(m.p.bytes_in_flight_per_sm).c_str(), m.p.warps_per_sm, block_threads,
                    m.blocks_per_sm, m.p.width_bytes, m.p.loads_in_flight, m.skipped.c_str());
        continue;
      }
      std::string note = m.p.bytes_in_flight_per_sm == c.target_bytes_per_sm ? "target" : "";
      if (!m.even) note += std::string(note.empty() ? "" : "; ") + "uneven placement, not used";
      if (!m.correct) note += std::string(note.empty() ? "" : "; ") + "WRONG SUM, not used";
      std::printf("| %s | %d | %d x %d | %d B | %d | %.3f | %.1f | %.1f%% | %s |\n",
                  kb_text(m.p.bytes_in_flight_per_sm).c_str(), m.p.warps_per_sm, block_threads,
                  m.blocks_per_sm, m.p.width_bytes, m.p.loads_in_flight, m.ms, m.p.gbps,
                  100.0 * m.p.gbps / c.best_gbps, note.c_str());
    }
    std::printf("\nbest: %.1f GB/s (median of the 3 highest; highest %.1f GB/s)\n", c.best_gbps, highest);
    std::printf(
        "target: %zu bytes in flight per SM (%s), %.1f GB/s = %.1f%% of the best; the smallest level "
        "reaching %.0f%%, confirmed by a larger one\n",
        c.target_bytes_per_sm, kb_text(c.target_bytes_per_sm).c_str(), at_target,
        100.0 * at_target / c.best_gbps, 100.0 * c.fraction);
    std::printf("launchfit's table for cc %d: %zu bytes (%s)\n", c.cc, table, kb_text(table).c_str());
  }

  if (!opt.svg.empty()) {
    write_text(opt.svg, make_svg(pts, c));
    std::fprintf(progress, "wrote %s\n", opt.svg.c_str());
  }
  if (!opt.out.empty()) {
    cal::write_calibration(opt.out, c);
    std::fprintf(progress, "wrote %s\n", opt.out.c_str());
  }

  if (!opt.cache.empty()) {
    // Every GPU of this model then gets the target by default (bytes_in_flight without a target_per_sm).
    lf::set_cache_file(opt.cache);
    lf::store_bytes_in_flight_calibration(c.target_bytes_per_sm);
    if (!lf::flush_cache_file()) {
      std::fprintf(stderr, "launchfit-calibrate: the target could not be written to %s\n", opt.cache.c_str());
      return 1;
    }
    std::fprintf(progress, "stored %zu B in flight per SM for this device's model in %s\n", c.target_bytes_per_sm,
                 opt.cache.c_str());
  }

  if (opt.apply) {
    // A sample kernel with 16 B in flight per thread (one uint4 load), over the calibration array.
    const auto spec = lf::bytes_in_flight(16).grid_stride(runner.array_bytes() / 16);
    const lf::plan before = lf::plan_for(&stream_read<uint4, 1>, spec);
    lf::set_bytes_in_flight_per_sm(c.cc, c.target_bytes_per_sm);
    lf::cache().clear();  // plans made with the old target are not keyed by it
    const lf::plan after = lf::plan_for(&stream_read<uint4, 1>, spec);
    std::fprintf(progress,
                 "\n--apply: set_bytes_in_flight_per_sm(%d, %zu) for this process; bytes_in_flight(16) "
                 "for stream_read<uint4, 1>:\n",
                 c.cc, c.target_bytes_per_sm);
    std::fflush(progress);
    if (!opt.json) {
      show_plan(("before (table target " + kb_text(table) + "):").c_str(), before, spec.work_shape());
      show_plan(("after (calibrated target " + kb_text(c.target_bytes_per_sm) + "):").c_str(), after,
                spec.work_shape());
    } else {
      std::fprintf(stderr, "  before: %s\n    why: %s\n  after:  %s\n    why: %s\n",
                   before.to_string().c_str(), before.reason.c_str(), after.to_string().c_str(),
                   after.reason.c_str());
    }
  }
  if (failures) {
    std::fprintf(stderr, "launchfit-calibrate: %d point(s) summed the array wrong\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  CLI::App app{
      "launchfit-calibrate: measures read bandwidth against bytes in flight per SM on this GPU and finds "
      "the smallest bytes-in-flight target per SM reaching 97% of the best (launchfit::bytes_in_flight's "
      "target).\n" +
          std::string(launchfit_tool::exit_codes_text),
      "launchfit-calibrate"};
  launchfit_tool::add_version(app);
  app.add_option("--device", opt.device, "CUDA device ordinal")->capture_default_str();
  app.add_option("--gib", opt.gib,
                 "array size in GiB (default: 4 GiB or 8x L2, whichever is larger, at most half "
                 "the free memory; --quick: 1 GiB)")
      ->check(CLI::Range(0.0, 1024.0));
  app.add_option("--repeats", opt.repeats, "timed launches per point (median), after one warm-up")
      ->check(CLI::Range(5, 1000))
      ->capture_default_str();
  app.add_option("--warps", opt.warps, "resident warps per SM to sweep (multiples of 4)")
      ->delimiter(',')
      ->check(CLI::Range(4, 64) & CLI::Validator(
                                      [](std::string& s) {
                                        char* end = nullptr;
                                        const long v = std::strtol(s.c_str(), &end, 10);
                                        return end && *end == '\0' && v % 4 == 0
                                                   ? std::string()
                                                   : std::string("must be a multiple of 4");
                                      },
                                      "MULTIPLE OF 4"))
      ->capture_default_str();
  app.add_option("--loads", opt.loads, "independent loads in flight per thread to sweep")
      ->delimiter(',')
      ->check(CLI::IsMember({1, 2, 4, 8}))
      ->capture_default_str();
  app.add_option("--widths", opt.widths, "bytes per load to sweep")
      ->delimiter(',')
      ->check(CLI::IsMember({4, 8, 16}))
      ->capture_default_str();
  app.add_option("--fraction", opt.fraction, "fraction of the best bandwidth the target must reach")
      ->check(CLI::Range(0.5, 1.0))
      ->capture_default_str();
  app.add_flag("--quick", opt.quick,
               "1 GiB array, 5 repeats, warps 4,8,16,32,64, loads 1,4, widths 4,16 (about 2 s; the full "
               "sweep takes about 10 s)");
  app.add_flag("--json", opt.json,
               "print the calibration as JSON on stdout (progress and the rest on stderr)");
  app.add_option("--out", opt.out, "store the calibration (device, curve, target) in this JSON file");
  app.add_option("--svg", opt.svg, "write the curve as an SVG picture here (\"\": none)")
      ->capture_default_str();
  app.add_option("--cache", opt.cache,
                 "store the target in this plan-cache file for this device's model: bytes_in_flight uses it by "
                 "default on every GPU of the model (LAUNCHFIT_CACHE=FILE)");
  app.add_flag(
      "--apply", opt.apply,
      "set the target for this GPU's compute capability in this process "
      "(launchfit::set_bytes_in_flight_per_sm) and show bytes_in_flight(16)'s plan before and after");
  if (const std::optional<int> code = launchfit_tool::parse(app, argc, argv)) return *code;
  if (opt.quick) {
    if (app.count("--repeats") == 0) opt.repeats = 5;
    if (app.count("--warps") == 0) opt.warps = {4, 8, 16, 32, 64};
    if (app.count("--loads") == 0) opt.loads = {1, 4};
    if (app.count("--widths") == 0) opt.widths = {4, 16};
  }
  // A tool, not a demo: no driver or no GPU is this machine's failure (exit 3), said as what it is.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return calibrate(opt);
  } catch (const lf::error& e) {
    std::fflush(stdout);
    const std::string& c = e.cuda_error();
    if (c == "cudaErrorInsufficientDriver" || c == "cudaErrorStubLibrary" || c == "CUDA_ERROR_STUB_LIBRARY" ||
        e.code() == lf::errc::no_driver) {
      std::fprintf(stderr, "launchfit-calibrate: error: no usable CUDA driver on this machine (%s)\n", e.what());
      return launchfit_tool::exit_environment;
    }
    if (launchfit_demo::is_no_gpu(e)) {
      std::fprintf(stderr, "launchfit-calibrate: error: no CUDA device on this machine (%s)\n", e.what());
      return launchfit_tool::exit_environment;
    }
    std::fprintf(stderr, "launchfit-calibrate: error: %s\n", e.what());
    return launchfit_tool::exit_failed;
  } catch (const cal::calibration_error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "launchfit-calibrate: error: %s\n", e.what());
    return launchfit_tool::exit_environment;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "launchfit-calibrate: error: %s\n", e.what());
    return launchfit_tool::exit_failed;
  }
}

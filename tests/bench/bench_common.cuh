// SPDX-License-Identifier: MIT
#pragma once
// Shared by the GPU benchmarks: CUDA status checks, device buffers, event timing with a blocked stream,
// medians, random inputs, on-device comparison against a reference, argument parsing and JSON output.
// Each benchmark is one translation unit, so the kernels defined here exist once per binary.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace bench {

// ---- errors -------------------------------------------------------------------------------------------

struct cuda_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(cudaError_t st, const char* expr, const char* file, int line) {
  if (st == cudaSuccess) return;
  std::ostringstream os;
  os << file << ":" << line << ": " << expr << " failed: " << cudaGetErrorName(st) << " ("
     << cudaGetErrorString(st) << ")";
  throw cuda_failure(os.str());
}

#define BENCH_CUDA(expr) ::bench::check((expr), #expr, __FILE__, __LINE__)

// ---- device memory ------------------------------------------------------------------------------------

template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t count) : count_(count) {
    if (count) BENCH_CUDA(cudaMalloc(&ptr_, count * sizeof(T)));
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  ~device_buffer() { release(); }

  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw std::logic_error("device_buffer::upload: size mismatch");
    BENCH_CUDA(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) BENCH_CUDA(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void release() noexcept {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// ---- statistics ---------------------------------------------------------------------------------------

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

inline double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- random inputs --------------------------------------------------------------------------------------

inline std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Runs f(begin, end) over [0, n) on every hardware thread (inputs and CPU references for 2^26+ elements).
template <class F>
void parallel_for(std::size_t n, F f) {
  const std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t chunk = (n + workers - 1) / workers;
  std::vector<std::thread> pool;
  for (std::size_t w = 0; w < workers; ++w) {
    const std::size_t b = w * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    pool.emplace_back([=] { f(b, e); });
  }
  for (auto& t : pool) t.join();
}

// gen(rng_state) -> T, seeded per element block so the result does not depend on the thread count.
template <class T, class Gen>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, Gen gen) {
  std::vector<T> v(n);
  constexpr std::size_t block = 1 << 16;
  parallel_for((n + block - 1) / block, [&](std::size_t b, std::size_t e) {
    for (std::size_t blk = b; blk < e; ++blk) {
      std::uint64_t s = seed * 0x2545F4914F6CDD1DULL + blk;
      const std::size_t lo = blk * block, hi = std::min(n, lo + block);
      for (std::size_t i = lo; i < hi; ++i) v[i] = gen(s);
    }
  });
  return v;
}

inline float uniform_pm1(std::uint64_t& s) {  // uniform in [-1, 1)
  return static_cast<float>(static_cast<double>(splitmix64(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

// ---- command line -------------------------------------------------------------------------------------

struct args {
  std::vector<std::string> v;
  args(int argc, char** argv) : v(argv + 1, argv + argc) {}
  bool flag(const std::string& name) const { return std::find(v.begin(), v.end(), name) != v.end(); }
  // "--name VALUE" or "--name=VALUE"; empty when absent.
  std::string value(const std::string& name) const {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] == name) {
        if (i + 1 >= v.size()) throw std::invalid_argument(name + " needs a value");
        return v[i + 1];
      }
      if (v[i].rfind(name + "=", 0) == 0) return v[i].substr(name.size() + 1);
    }
    return {};
  }
  int int_value(const std::string& name, int otherwise) const {
    const std::string s = value(name);
    return s.empty() ? otherwise : std::stoi(s);
  }
};

// ---- entry point ----------------------------------------------------------------------------------------

// The closing line's verdict: how many checks failed, or `all_correct` when none did.
inline std::string verification_summary(int failures, const char* all_correct) {
  return failures ? std::to_string(failures) + " FAILED" : all_correct;
}

// Runs a benchmark's body. Exit status: 0 every check passed, 1 a check failed (the body's answer), 2 the
// benchmark could not run; the message then goes to stderr, after whatever stdout already holds.
inline int run_main(const char* name, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  }
}

// ---- JSON output ---------------------------------------------------------------------------------------

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

inline std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

inline void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("cannot open " + path + " for writing: " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot write " + path);
}

// ---- device description -------------------------------------------------------------------------------

struct device_info {
  int ordinal = 0;
  cudaDeviceProp prop{};
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;

  static device_info current() {
    device_info d;
    BENCH_CUDA(cudaGetDevice(&d.ordinal));
    BENCH_CUDA(cudaGetDeviceProperties(&d.prop, d.ordinal));
    d.sm_count = d.prop.multiProcessorCount;
    d.l2_bytes = static_cast<std::size_t>(d.prop.l2CacheSize);
    BENCH_CUDA(cudaDriverGetVersion(&d.driver_version));
    BENCH_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
    return d;
  }
  std::string describe() const {
    std::ostringstream os;
    os << prop.name << " (cc " << prop.major << "." << prop.minor << ", " << sm_count << " SMs, L2 "
       << l2_bytes / (1024 * 1024) << " MiB, " << prop.totalGlobalMem / (1024 * 1024 * 1024) << " GiB, driver "
       << driver_version << ", runtime " << runtime_version << ")";
    return os.str();
  }
  std::string json() const {
    std::ostringstream os;
    os << "{\"name\":" << json_string(prop.name) << ",\"cc\":" << prop.major * 10 + prop.minor
       << ",\"sm_count\":" << sm_count << ",\"l2_bytes\":" << l2_bytes
       << ",\"memory_bytes\":" << prop.totalGlobalMem << ",\"driver_version\":" << driver_version
       << ",\"runtime_version\":" << runtime_version << "}";
    return os.str();
  }
};

// Selects the device and creates its primary context; throws a clear message when there is none.
inline device_info open_device(int ordinal) {
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess || count == 0) {
    throw cuda_failure(std::string("no CUDA device: ") +
                       (st != cudaSuccess ? cudaGetErrorName(st) : "cudaGetDeviceCount returned 0"));
  }
  if (ordinal < 0 || ordinal >= count) throw cuda_failure("no CUDA device " + std::to_string(ordinal));
  BENCH_CUDA(cudaSetDevice(ordinal));
  BENCH_CUDA(cudaFree(nullptr));
  return device_info::current();
}

// ---- timing ----------------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Holds the stream until the host sets *release (or a timeout passes), so the launches of a sample are
// all queued before the first one runs: the events then time back-to-back GPU execution, not the host's
// launch rate (the method nvbench uses).
__global__ void hold_stream(const volatile int* release, unsigned long long timeout_ns, int* timed_out) {
  const unsigned long long t0 = global_ns();
  while (*release == 0) {
    if (global_ns() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

// Times `launch` (which enqueues one kernel on `stream`): median over `repeats` samples of `per_sample`
// back-to-back launches, after one warm-up launch. `reset` is enqueued before the warm-up and before each
// sample (outside the timed region). When prune_ms > 0, stops after 3 samples whose median exceeds it.
class stream_timer {
 public:
  explicit stream_timer(cudaStream_t s) : stream_(s) {
    BENCH_CUDA(cudaEventCreate(&start_));
    BENCH_CUDA(cudaEventCreate(&stop_));
    BENCH_CUDA(cudaHostAlloc(&release_, sizeof(int), cudaHostAllocMapped));
    BENCH_CUDA(cudaHostAlloc(&timed_out_, sizeof(int), cudaHostAllocMapped));
    BENCH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&release_dev_), const_cast<int*>(release_), 0));
    BENCH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&timed_out_dev_), timed_out_, 0));
    *release_ = 0;
    *timed_out_ = 0;
  }
  stream_timer(const stream_timer&) = delete;
  stream_timer& operator=(const stream_timer&) = delete;
  ~stream_timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaFreeHost(const_cast<int*>(release_));
    cudaFreeHost(timed_out_);
  }

  struct result {
    double ms = 0;    // median per launch
    int samples = 0;  // samples taken (fewer than asked when pruned)
  };

  result time(const std::function<void()>& launch, const std::function<void()>& reset, int per_sample,
              int repeats, double prune_ms = 0) {
    reset();
    launch();
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    std::vector<double> ms;
    for (int r = 0; r < repeats; ++r) {
      reset();
      *release_ = 0;
      hold_stream<<<1, 1, 0, stream_>>>(release_dev_, 2000000000ULL, timed_out_dev_);
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaEventRecord(start_, stream_));
      for (int k = 0; k < per_sample; ++k) launch();
      BENCH_CUDA(cudaEventRecord(stop_, stream_));
      *release_ = 1;
      BENCH_CUDA(cudaEventSynchronize(stop_));
      float t = 0;
      BENCH_CUDA(cudaEventElapsedTime(&t, start_, stop_));
      ms.push_back(static_cast<double>(t) / per_sample);
      if (prune_ms > 0 && ms.size() == 3 && median(ms) > prune_ms) break;
    }
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    return {median(ms), static_cast<int>(ms.size())};
  }

  // Samples whose launches could not all be queued while the stream was held (the driver's queue was
  // full): those measured the host's launch rate too. Reported, never expected.
  bool any_timed_out() const { return *timed_out_ != 0; }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  volatile int* release_ = nullptr;
  int* release_dev_ = nullptr;
  int* timed_out_ = nullptr;
  int* timed_out_dev_ = nullptr;
};

// ---- verification on the device -------------------------------------------------------------------------

// Counts elements with |out - ref| > abs_tol + rel_tol * |ref| (NaN counts), and the first such index.
__global__ void count_mismatches(const float* __restrict__ out, const float* __restrict__ ref, std::size_t n,
                                 float abs_tol, float rel_tol, unsigned long long* bad,
                                 unsigned long long* first) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float o = out[i], r = ref[i];
    if (!(fabsf(o - r) <= abs_tol + rel_tol * fabsf(r))) {
      atomicAdd(bad, 1ULL);
      atomicMin(first, static_cast<unsigned long long>(i));
    }
  }
}

// Compares a float output with a reference already on the device (computed on the CPU and uploaded once).
class float_checker {
 public:
  float_checker() : counters_(2) {}
  // Empty string when every element matches; otherwise how many differ and the first difference.
  std::string compare(const float* out, const float* ref, std::size_t n, float abs_tol, float rel_tol,
                      cudaStream_t s) {
    const unsigned long long init[2] = {0, ~0ULL};
    BENCH_CUDA(cudaMemcpyAsync(counters_.get(), init, sizeof init, cudaMemcpyHostToDevice, s));
    count_mismatches<<<1024, 256, 0, s>>>(out, ref, n, abs_tol, rel_tol, counters_.get(), counters_.get() + 1);
    BENCH_CUDA(cudaGetLastError());
    unsigned long long got[2];
    BENCH_CUDA(cudaMemcpyAsync(got, counters_.get(), sizeof got, cudaMemcpyDeviceToHost, s));
    BENCH_CUDA(cudaStreamSynchronize(s));
    if (got[0] == 0) return {};
    float o = 0, r = 0;
    BENCH_CUDA(cudaMemcpy(&o, out + got[1], sizeof o, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(&r, ref + got[1], sizeof r, cudaMemcpyDeviceToHost));
    std::ostringstream os;
    os << got[0] << " of " << n << " elements differ; first at " << got[1] << ": got " << o << ", expected "
       << r;
    return os.str();
  }

 private:
  device_buffer<unsigned long long> counters_;
};

// ---- kernels shared by the benchmarks --------------------------------------------------------------------

constexpr int reduce_slots = 256;  // partial sums are spread over this many addresses to keep atomics cheap

__device__ __forceinline__ float lane_sum(float v) { return v; }
__device__ __forceinline__ float lane_sum(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// Adds every thread's v into *dst with one global atomic per block. Works for any block size (partial
// warps included). Per-thread and per-warp values must fit in 32 bits.
__device__ __forceinline__ void block_add(unsigned v, unsigned long long* dst) {
  __shared__ unsigned long long block_sum;
  if (threadIdx.x == 0) block_sum = 0;
  __syncthreads();
  const unsigned warp_first = threadIdx.x & ~31u;
  const unsigned lanes = min(32u, blockDim.x - warp_first);
  const unsigned mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  const unsigned warp_total = __reduce_add_sync(mask, v);
  if ((threadIdx.x & 31u) == 0) atomicAdd(&block_sum, static_cast<unsigned long long>(warp_total));
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(dst, block_sum);
}

// Streaming read-reduce: each thread keeps U loads of T in flight per iteration of a grid-stride loop over
// tiles of blockDim x U elements of T. Inputs are small integers stored as floats, so every partial sum is
// exact (verified against an integer sum on the CPU).
template <class T, int U>
__global__ void read_reduce(const T* __restrict__ in, std::size_t count, unsigned long long* __restrict__ slots) {
  float acc[U];
#pragma unroll
  for (int u = 0; u < U; ++u) acc[u] = 0.f;
  const std::size_t tile = static_cast<std::size_t>(blockDim.x) * U;
  const std::size_t full = count / tile;
#pragma unroll 1
  for (std::size_t t = blockIdx.x; t < full; t += gridDim.x) {
    const T* p = in + t * tile + threadIdx.x;
    T v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = p[static_cast<std::size_t>(u) * blockDim.x];
#pragma unroll
    for (int u = 0; u < U; ++u) acc[u] += lane_sum(v[u]);
  }
#pragma unroll 1
  for (std::size_t i = full * tile + blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    acc[0] += lane_sum(in[i]);
  }
  unsigned mine = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) mine += static_cast<unsigned>(acc[u]);
  block_add(mine, slots + blockIdx.x % reduce_slots);
}

// Values 1..4 as floats: every sum below 2^24 per accumulator is exact, and a skipped or repeated element
// always changes the total.
inline std::vector<float> reduce_input(std::size_t n, std::uint64_t seed) {
  return random_vector<float>(n, seed, [](std::uint64_t& s) { return static_cast<float>(1 + (splitmix64(s) & 3)); });
}

inline unsigned long long exact_sum(const std::vector<float>& v) {
  std::vector<unsigned long long> part(std::max(1u, std::thread::hardware_concurrency()) * 4, 0);
  const std::size_t chunk = (v.size() + part.size() - 1) / part.size();
  parallel_for(part.size(), [&](std::size_t b, std::size_t e) {
    for (std::size_t c = b; c < e; ++c) {
      unsigned long long s = 0;
      for (std::size_t i = c * chunk; i < std::min(v.size(), (c + 1) * chunk); ++i) {
        s += static_cast<unsigned long long>(v[i]);
      }
      part[c] = s;
    }
  });
  unsigned long long total = 0;
  for (auto p : part) total += p;
  return total;
}

// Largest element count one thread may sum with the inputs above and stay exact (values <= 4, 2^24 limit).
constexpr std::size_t max_exact_items_per_thread = (std::size_t{1} << 24) / 4;

}  // namespace bench

// SPDX-License-Identifier: MIT
// Many host threads launching at once on a cold plan cache: exactly one plan per key, every result right,
// no deadlock; and per-thread streams whose chained launches prove that stream order is kept.
// A watchdog ends the process with a message if the threads do not finish in time (a deadlock).

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"

namespace lf = launchfit;

namespace {

// out[i] = in[i] * K + add, read through `smem_words` words of dynamic shared memory when there are any.
template <int K, class T>
__global__ void stress_kernel(T* out, const T* in, int n, T add, int smem_words) {
  extern __shared__ int scratch[];
  for (int j = threadIdx.x; j < smem_words; j += blockDim.x) scratch[j] = 3 * j;
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int extra = 0;
  if (smem_words > 0) {
    const int j = i % smem_words;
    extra = scratch[j] - 3 * j;  // 0 when the shared memory holds what was written
  }
  out[i] = in[i] * T(K) + add + T(extra);
}

// Stream-order chain: each step is an affine map (the maps do not commute), grid-stride so any grid works.
__global__ void affine_step(unsigned* data, int n, unsigned mul, unsigned add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) data[i] = data[i] * mul + add;
}

__global__ void rotate_step(unsigned* data, int n, int r) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned v = data[i];
    data[i] = ((v << r) | (v >> (32 - r))) ^ static_cast<unsigned>(i);
  }
}

// Waits ~cycles before its step, so a launch that did not wait for it would overtake it.
__global__ void slow_xor(unsigned* data, int n, unsigned x, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) data[i] ^= x;
}

// Counts the new-plan lines per kernel (a plan built twice would be logged twice).
class plan_line_counter final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  int count(const std::string& part) {
    std::lock_guard<std::mutex> lock(mutex_);
    int c = 0;
    for (const auto& l : lines_) c += l.find(part) != std::string::npos;
    return c;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string text(msg.payload.data(), msg.payload.size());
    if (msg.level == spdlog::level::info && text.rfind("new plan: ", 0) == 0) lines_.push_back(text);
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

// Ends the process if `done` is not reached in time: a hung launch must fail the run, not stall it.
class watchdog {
 public:
  watchdog(const char* what, std::atomic<int>& finished, int expected, int seconds)
      : thread_([this, what, &finished, expected, seconds] {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
          std::unique_lock<std::mutex> lock(m_);
          while (!stop_) {
            if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !stop_) {
              std::fprintf(stderr, "%s: only %d of %d threads finished within %d s: deadlock or hang\n", what,
                           finished.load(), expected, seconds);
              std::fflush(stderr);
              std::_Exit(3);
            }
          }
        }) {}
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

int deadline_seconds() {
  const char* v = std::getenv("LAUNCHFIT_STRESS_DEADLINE_S");  // longer under compute-sanitizer
  return v && std::atoi(v) > 0 ? std::atoi(v) : 300;
}

// Runs body(t) on `threads` threads under a watchdog of deadline_seconds(), and joins them.
void run_threads(const char* what, int threads, const std::function<void(int)>& body) {
  std::atomic<int> finished{0};
  watchdog guard(what, finished, threads, deadline_seconds());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      struct done_marker {
        std::atomic<int>& f;
        ~done_marker() { ++f; }
      } mark{finished};
      body(t);
    });
  }
  for (auto& th : pool) th.join();
}

// Failures from worker threads, reported by the main thread.
class failures {
 public:
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(m_);
    if (list_.size() < 20) list_.push_back(what);
    ++count_;
  }
  void report() const {
    for (const auto& f : list_) ADD_FAILURE() << f;
    EXPECT_EQ(count_, 0) << "failures in worker threads";
  }

 private:
  std::mutex m_;
  std::vector<std::string> list_;
  int count_ = 0;
};

#define STRESS_CUDA(expr, fails)                                                                  \
  do {                                                                                           \
    const cudaError_t st_ = (expr);                                                              \
    if (st_ != cudaSuccess) {                                                                    \
      (fails).add(std::string(#expr) + ": " + cudaGetErrorName(st_));                            \
      return;                                                                                    \
    }                                                                                            \
  } while (0)

// One distinct (kernel, policy, smem) combination: its cache key parts and how to launch it.
struct combo {
  std::uintptr_t kernel_id = 0;
  std::uint64_t policy_hash = 0;
  std::size_t smem = 0;
  std::string name;  // for messages
  bool is_float = false;
  int k = 1;
  std::function<void(cudaStream_t, void* out, const void* in, int n, int add)> launch;
};

constexpr int policy_count = 5;
constexpr std::size_t smem_sizes[] = {0, 1024, 4096};

template <int K, class T>
void add_combos(std::vector<combo>& out) {
  for (int p = 0; p < policy_count; ++p) {
    for (std::size_t smem : smem_sizes) {
      combo c;
      c.kernel_id = reinterpret_cast<std::uintptr_t>(&stress_kernel<K, T>);
      c.smem = smem;
      c.is_float = std::is_same_v<T, float>;
      c.k = K;
      auto run = [p, smem](auto&& with) {
        switch (p) {
          case 0: return with(lf::max_occupancy().smem(smem));
          case 1: return with(lf::bytes_in_flight(8).smem(smem));
          case 2: return with(lf::bytes_in_flight(16).smem(smem));
          case 3: return with(lf::fixed(128).smem(smem));
          default: return with(lf::fixed(256).smem(smem));
        }
      };
      run([&](auto spec) {
        c.policy_hash = spec.get_policy().hash();
        c.name = "stress_kernel<" + std::to_string(K) + (c.is_float ? ", float>" : ", int>") + " " +
                 spec.get_policy().to_string() + " smem=" + std::to_string(smem);
      });
      c.launch = [run, smem](cudaStream_t s, void* o, const void* in, int n, int add) {
        run([&](auto spec) {
          lf::launch(stress_kernel<K, T>, spec.items(n).on(s), static_cast<T*>(o), static_cast<const T*>(in), n,
                     static_cast<T>(add), static_cast<int>(smem / sizeof(int)));
        });
      };
      out.push_back(std::move(c));
    }
  }
}

std::vector<combo> all_combos() {
  std::vector<combo> v;
  add_combos<1, int>(v);
  add_combos<2, int>(v);
  add_combos<3, int>(v);
  add_combos<5, int>(v);
  add_combos<7, int>(v);
  add_combos<1, float>(v);
  add_combos<2, float>(v);
  add_combos<3, float>(v);
  add_combos<5, float>(v);
  add_combos<7, float>(v);
  return v;
}

class Stress : public testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    LF_CUDA_CHECK(cudaFree(nullptr));
    LF_CUDA_CHECK(cudaGetDevice(&device_));
  }
  int device_ = 0;
};

}  // namespace

TEST_F(Stress, ColdCacheManyThreadsBuildExactlyOnePlanPerKey) {
  constexpr int threads = 16, rounds = 3, n = 3001;  // n: not a multiple of any block size
  const std::vector<combo> combos = all_combos();
  ASSERT_GE(combos.size(), 50u);
  std::set<std::tuple<std::uintptr_t, std::uint64_t, std::size_t>> expected_keys;
  for (const combo& c : combos) expected_keys.emplace(c.kernel_id, c.policy_hash, c.smem);
  ASSERT_EQ(expected_keys.size(), combos.size()) << "combinations are not distinct";

  auto counter = std::make_shared<plan_line_counter>();
  lf::set_log_format(lf::log_format::text);
  lf::set_logger(std::make_shared<spdlog::logger>("launchfit", counter));
  lf::cache().clear();  // cold

  failures fails;
  std::atomic<int> arrived{0};
  std::atomic<long long> launches{0};
  const auto started = std::chrono::steady_clock::now();
  {
    run_threads("stress", threads, [&](int t) {
      const std::size_t count = combos.size();
      std::vector<int> in_i(n);
      std::vector<float> in_f(n);
      std::mt19937 rng(1000 + t);
      std::uniform_int_distribution<int> value(-1000, 1000);
      for (int i = 0; i < n; ++i) {
        in_i[i] = value(rng);
        in_f[i] = static_cast<float>(value(rng));  // integers: every result exact in float
      }
      cudaStream_t s = nullptr;
      int *d_in_i = nullptr, *d_out = nullptr;
      float* d_in_f = nullptr;
      arrived.fetch_add(1);
      STRESS_CUDA(cudaSetDevice(device_), fails);
      STRESS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), fails);
      STRESS_CUDA(cudaMalloc(&d_in_i, n * sizeof(int)), fails);
      STRESS_CUDA(cudaMalloc(&d_in_f, n * sizeof(float)), fails);
      STRESS_CUDA(cudaMalloc(&d_out, count * n * sizeof(int)), fails);  // one slice per combination
      STRESS_CUDA(cudaMemcpy(d_in_i, in_i.data(), n * sizeof(int), cudaMemcpyHostToDevice), fails);
      STRESS_CUDA(cudaMemcpy(d_in_f, in_f.data(), n * sizeof(float), cudaMemcpyHostToDevice), fails);
      std::vector<int> h(count * n);
      std::vector<std::size_t> order(count);
      for (std::size_t c = 0; c < count; ++c) order[c] = c;
      while (arrived.load() < threads) std::this_thread::yield();  // every thread misses at once
      for (int r = 0; r < rounds; ++r) {
        std::shuffle(order.begin(), order.end(), rng);
        STRESS_CUDA(cudaMemsetAsync(d_out, 0xff, count * n * sizeof(int), s), fails);  // poison
        for (std::size_t c : order) {
          const combo& cb = combos[c];
          const int add = (t * 31 + r * 7 + static_cast<int>(c)) % 101 - 50;
          try {
            cb.launch(s, d_out + c * n, cb.is_float ? static_cast<const void*>(d_in_f) : d_in_i, n, add);
            ++launches;
          } catch (const std::exception& e) {
            fails.add(cb.name + ": " + e.what());
          }
        }
        STRESS_CUDA(cudaMemcpyAsync(h.data(), d_out, count * n * sizeof(int), cudaMemcpyDeviceToHost, s), fails);
        STRESS_CUDA(cudaStreamSynchronize(s), fails);
        for (std::size_t c = 0; c < count; ++c) {
          const combo& cb = combos[c];
          const int add = (t * 31 + r * 7 + static_cast<int>(c)) % 101 - 50;
          int wrong = 0, first = -1;
          for (int i = 0; i < n; ++i) {
            bool ok;
            if (cb.is_float) {
              float got;
              std::memcpy(&got, &h[c * n + i], sizeof got);
              ok = got == in_f[i] * static_cast<float>(cb.k) + static_cast<float>(add);
            } else {
              ok = h[c * n + i] == in_i[i] * cb.k + add;
            }
            if (!ok && wrong++ == 0) first = i;
          }
          if (wrong) {
            fails.add("thread " + std::to_string(t) + " round " + std::to_string(r) + " " + cb.name + ": " +
                      std::to_string(wrong) + " wrong elements, first at " + std::to_string(first));
          }
        }
      }
      cudaFree(d_in_i);
      cudaFree(d_in_f);
      cudaFree(d_out);
      cudaStreamDestroy(s);
    });
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  lf::set_logger(nullptr);
  fails.report();
  EXPECT_EQ(launches.load(), static_cast<long long>(threads) * rounds * combos.size());

  // Exactly one plan per key, no duplicates, and every key is one of ours.
  const auto plans = lf::cache().plans();
  EXPECT_EQ(lf::cache().size(), combos.size());
  EXPECT_EQ(plans.size(), combos.size());
  std::set<std::tuple<std::uintptr_t, std::uint64_t, std::size_t>> seen;
  std::set<std::tuple<std::uintptr_t, std::uintptr_t, std::uint64_t, std::uint64_t, std::uint64_t>> full_keys;
  for (const auto& p : plans) {
    EXPECT_TRUE(full_keys.emplace(p.key.context, p.key.kernel, p.key.policy, p.key.smem_rule, p.key.bucket).second)
        << "duplicate key for " << p.kernel;
    seen.emplace(p.key.kernel, p.key.policy, static_cast<std::size_t>(p.key.smem_rule));
    EXPECT_EQ(p.plan.dynamic_smem_bytes, static_cast<std::size_t>(p.key.smem_rule)) << p.kernel;
  }
  EXPECT_EQ(seen, expected_keys);
  // Each plan was built (and logged) once, however many threads missed on it together.
  EXPECT_EQ(counter->count("stress_kernel"), static_cast<int>(combos.size()));
  std::printf("stress: %d threads x %d rounds x %zu combinations = %lld launches in %.2f s; %zu plans\n", threads,
              rounds, combos.size(), launches.load(), seconds, plans.size());
}

TEST_F(Stress, ChainedLaunchesOnPerThreadStreamsKeepStreamOrder) {
  constexpr int threads = 8, rounds = 3, steps = 24, n = 50'000;
  failures fails;
  {
    run_threads("stream order", threads, [&](int t) {
      STRESS_CUDA(cudaSetDevice(device_), fails);
      cudaStream_t s = nullptr;
      unsigned *d = nullptr, *snapshot = nullptr;
      STRESS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), fails);
      STRESS_CUDA(cudaMalloc(&d, n * sizeof(unsigned)), fails);
      STRESS_CUDA(cudaMalloc(&snapshot, n * sizeof(unsigned)), fails);
      std::mt19937 rng(77 + t);
      for (int r = 0; r < rounds; ++r) {
        std::vector<unsigned> host(n), want(n), want_mid(n);
        for (auto& v : host) v = rng();
        want = host;
        STRESS_CUDA(cudaMemcpyAsync(d, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice, s), fails);
        STRESS_CUDA(cudaMemsetAsync(snapshot, 0, n * sizeof(unsigned), s), fails);
        const unsigned x = rng();
        try {
          // A slow first step: if a later launch did not wait for it, its xor would land in the wrong place.
          lf::launch(slow_xor, lf::fixed(256).grid_stride(n).on(s), d, n, x, 2'000'000LL);
          for (unsigned& v : want) v ^= x;
          for (int step = 0; step < steps; ++step) {
            if (step == steps / 2) {
              if (cudaMemcpyAsync(snapshot, d, n * sizeof(unsigned), cudaMemcpyDeviceToDevice, s) != cudaSuccess)
                fails.add("snapshot copy");
              want_mid = want;
            }
            if (step % 3 == 2) {
              const int rot = 1 + static_cast<int>(rng() % 31);
              lf::launch(rotate_step, lf::bytes_in_flight(4).grid_stride(n).on(s), d, n, rot);
              for (int i = 0; i < n; ++i) want[i] = ((want[i] << rot) | (want[i] >> (32 - rot))) ^ unsigned(i);
            } else {
              const unsigned mul = rng() | 1u, add = rng();
              if (step % 3 == 0) {
                lf::launch(affine_step, lf::max_occupancy().items(n).on(s), d, n, mul, add);
              } else {
                lf::launch(affine_step, lf::fixed(96).items(n).on(s), d, n, mul, add);
              }
              for (auto& v : want) v = v * mul + add;
            }
          }
        } catch (const std::exception& e) {
          fails.add("thread " + std::to_string(t) + ": " + e.what());
        }
        std::vector<unsigned> got(n), got_mid(n);
        STRESS_CUDA(cudaMemcpyAsync(got.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s), fails);
        STRESS_CUDA(cudaMemcpyAsync(got_mid.data(), snapshot, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s),
                    fails);
        STRESS_CUDA(cudaStreamSynchronize(s), fails);
        int wrong = 0, wrong_mid = 0;
        for (int i = 0; i < n; ++i) {
          wrong += got[i] != want[i];
          wrong_mid += got_mid[i] != want_mid[i];
        }
        if (wrong || wrong_mid) {
          fails.add("thread " + std::to_string(t) + " round " + std::to_string(r) + ": " + std::to_string(wrong) +
                    " wrong at the end, " + std::to_string(wrong_mid) + " wrong at the mid-chain snapshot");
        }
      }
      cudaFree(d);
      cudaFree(snapshot);
      cudaStreamDestroy(s);
    });
  }
  fails.report();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// SPDX-License-Identifier: MIT
#pragma once
// Internal: timing candidate plans on the real arguments (for tuning policies such as autotune).

#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "launchfit/detail/launch_request.hpp"
#include "launchfit/plan.hpp"

namespace launchfit::detail {

// Holds a stream while a sample's launches are queued (nvbench's method): a cuStreamWaitValue32 on a mapped
// host word, released by the host once the stop event is queued. The events then time back-to-back GPU
// execution, not the host's launch rate (an empty launch costs the host ~3.5 us on an H200 machine, longer
// than a small kernel runs). Without stream memory operations the gate is simply off.
class stream_gate {
 public:
  stream_gate();
  ~stream_gate();
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;

  // Queues the wait; false (nothing queued) when the gate is off or the driver refuses.
  bool hold(CUstream s);
  // Opens the gate (the host thread once the sample is queued, or the watchdog).
  void release() {
    if (word_) store(1);
  }
  // The host has queued the sample: open the gate and disarm the watchdog.
  void open();
  // The stream has passed the wait (its stop event completed).
  void settled() noexcept { pending_ = false; }

 private:
  void drain();
  // The host thread and the watchdog may both open the gate: the word is written atomically (a plain
  // sequentially consistent store, which the GPU sees in host memory).
  void store(std::uint32_t v) { __atomic_store_n(const_cast<std::uint32_t*>(word_), v, __ATOMIC_SEQ_CST); }

  volatile std::uint32_t* word_ = nullptr;
  CUdeviceptr device_word_ = 0;
  bool pending_ = false;
  CUstream pending_stream_ = nullptr;
  std::thread watchdog_;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool armed_ = false, stopping_ = false;
  std::chrono::steady_clock::time_point deadline_{};
};

// What the gated samples of one candidate took: their GPU time (the events) and the host's time from opening
// the gate to the stop event (the same work, plus any time the GPU spent on another context first); and
// whether they ran as CUDA graph replays (graph_trials).
struct sample_wait {
  double gpu_ms = 0;
  double host_ms = 0;
  bool as_graph = false;
};

// While one lives on a thread, the trials that thread times run each sample as one CUDA graph of its
// back-to-back launches (captured once per candidate, replayed per sample), as a graph's kernel nodes run:
// tune_graph() tunes with it. Kernels a few microseconds long rank differently when launched from a stream,
// whose per-launch gaps hide what a graph's do not. Where the stream cannot be captured (the legacy default
// stream) or the driver refuses the graph, the samples are stream launches as without it.
class graph_trials {
 public:
  graph_trials() noexcept;
  ~graph_trials();
  graph_trials(const graph_trials&) = delete;
  graph_trials& operator=(const graph_trials&) = delete;
  static bool active() noexcept;

 private:
  bool was_;
};

// Times one candidate plan on the real arguments: a warm-up launch (also the pilot), then the median of 5
// samples, each queued behind the gate. Launches with exactly the attributes a real launch of p has. `wait`
// (when given) adds the gated samples' GPU and host times.
double time_candidate(CUfunction f, const launch_request& r, const plan& p, long long max_grid_x,
                      stream_gate& gate, sample_wait* wait = nullptr);

}  // namespace launchfit::detail

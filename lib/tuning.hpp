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

// What the gated samples of one candidate took: their GPU time (the events), and the host's time from
// opening the gate to the stop event beyond it (the gate's release and the event's wake-up, and any time the
// GPU gave another context first); and whether they ran as CUDA graph replays (trial_mode).
struct sample_wait {
  double gpu_ms = 0;
  double excess_ms = 0;  // summed over the samples
  int samples = 0;
  bool as_graph = false;
};

// While one lives on a thread, a tuning offered there times its candidates as CUDA graph replays
// (trial_mode): tune_graph() tunes with it. Kernels a few microseconds long rank differently when launched
// from a stream, whose per-launch gaps hide what a graph's do not.
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

// How one tuning times its candidates, decided by its first candidate and kept for all of them (a ranking
// never mixes the two): as graph replays where graph_trials was active when the tuning was offered, each
// sample one CUDA graph of the sample's back-to-back launches, captured on a private stream of the tuning's
// (never on the launch's, which other threads may use) and replayed on the launch's stream; else, or where
// the first candidate cannot be captured, as stream launches. A later candidate that cannot be captured where
// the first was is not timed (its trial fails).
class trial_mode {
 public:
  explicit trial_mode(bool want_graph) noexcept : want_graph_(want_graph) {}
  ~trial_mode();
  trial_mode(const trial_mode&) = delete;
  trial_mode& operator=(const trial_mode&) = delete;
  bool want_graph() const noexcept { return want_graph_ && chosen_ != chosen::stream; }
  // The private stream captures are made on (made on first use); null where it cannot be made.
  CUstream capture_stream();
  // The first candidate's capture decides; true where this candidate's samples are graph replays.
  bool decide(bool captured);
  // How long a sample of back-to-back launches runs, the same for every candidate of the tuning (each sample
  // pays a fixed start, which must weigh alike on every candidate): decided by the first candidate's pilot
  // (~0.1 ms for a kernel under 20 us, else ~0.3 ms).
  double sample_target_ms(double pilot_ms) noexcept;

 private:
  enum class chosen { undecided, graph, stream };
  bool want_graph_;
  double sample_target_ms_ = 0;  // 0: not decided yet
  chosen chosen_ = chosen::undecided;
  CUstream stream_ = nullptr;
  bool stream_tried_ = false;
};

// Times one candidate plan on the real arguments: a warm-up launch (also the pilot), then the median of 5
// samples, each queued behind the gate. Launches with exactly the attributes a real launch of p has. `wait`
// (when given) adds the gated samples' GPU and host times; `mode` (when given) may make the samples graph
// replays.
double time_candidate(CUfunction f, const launch_request& r, const plan& p, long long max_grid_x,
                      stream_gate& gate, sample_wait* wait = nullptr, trial_mode* mode = nullptr);

}  // namespace launchfit::detail

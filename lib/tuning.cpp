// SPDX-License-Identifier: MIT
// Timing candidate plans: a stream gate so samples time the GPU, not the host's launch rate, and the
// sampling itself.

#include "tuning.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "driver.hpp"
#include "launch_config.hpp"
#include "launchfit/error.hpp"
#include "settings.hpp"

namespace launchfit::detail {

// stream_gate holds a stream while a sample's launches are queued (nvbench's method): a cuStreamWaitValue32 on a mapped
// host word, released by the host once the stop event is queued. The events then time back-to-back GPU
// execution, not the host's launch rate (an empty launch costs the host ~3.5 us on an H200 machine, longer
// than a small kernel runs). Without stream memory operations the gate is simply off.
stream_gate::stream_gate() {
  // With blocking launches (CUDA_LAUNCH_BLOCKING, or a profiler that serialises them) the first launch
  // behind a held stream would wait for ever: no gate.
  if (current_settings().cuda_launch_blocking) return;
  const driver_api& d = driver();
  if (!d.cuMemHostAlloc || !d.cuMemHostGetDevicePointer || !d.cuMemFreeHost || !d.cuStreamWaitValue32) return;
  void* p = nullptr;
  if (d.cuMemHostAlloc(&p, sizeof(std::uint32_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) !=
      CUDA_SUCCESS)
    return;
  word_ = static_cast<volatile std::uint32_t*>(p);
  if (d.cuMemHostGetDevicePointer(&device_word_, p, 0) != CUDA_SUCCESS) {
    d.cuMemFreeHost(p);
    word_ = nullptr;
    return;
  }
  // Watchdog: a gate still closed 100 ms after hold() (a launch that blocked, a full queue) is opened, so
  // the worst case is a slow sample, never a hang.
  watchdog_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stopping_) {
      if (armed_) {
        if (watch_cv_.wait_until(lock, deadline_, [this] { return stopping_ || !armed_; })) continue;
        release();  // deadline passed with the gate still closed
        armed_ = false;
      } else {
        watch_cv_.wait(lock, [this] { return stopping_ || armed_; });
      }
    }
  });
}

stream_gate::~stream_gate() {
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stopping_ = true;
    }
    watch_cv_.notify_all();
    watchdog_.join();
  }
  if (!word_) return;
  drain();  // a wait still queued must see the word before it is freed
  driver().cuMemFreeHost(const_cast<std::uint32_t*>(word_));
}

bool stream_gate::hold(CUstream s) {
  if (!word_) return false;
  drain();  // before re-arming
  store(0);
  if (driver().cuStreamWaitValue32(s, device_word_, 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS) {
    pending_ = true;
    pending_stream_ = s;
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      armed_ = true;
      deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
    watch_cv_.notify_all();
    return true;
  }
  store(1);
  driver().cuMemFreeHost(const_cast<std::uint32_t*>(word_));
  word_ = nullptr;  // refused once: off for the rest of this tuning
  return false;
}

void stream_gate::open() {
  release();
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    armed_ = false;
  }
  watch_cv_.notify_all();
}

void stream_gate::drain() {
  if (!pending_) return;
  release();
  driver().cuStreamSynchronize(pending_stream_);
  pending_ = false;
}

namespace {
thread_local bool graph_trials_on = false;

// One candidate's launches captured into an executable graph (trial_mode), destroyed on every path.
struct trial_graph {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~trial_graph() {
    const driver_api& d = driver();
    if (exec) d.cuGraphExecDestroy(exec);
    if (graph) d.cuGraphDestroy(graph);
  }
  // Captures `launches` launches of cfg on `on` (this thread's own capture mode: no other thread's capture is
  // disturbed). False where the driver does not allow it; `on` is then no longer capturing.
  bool capture(CUlaunchConfig cfg, CUstream on, CUfunction f, void** args, int launches) {
    const driver_api& d = driver();
    if (!on || !d.cuStreamBeginCapture || !d.cuStreamEndCapture || !d.cuGraphInstantiateWithFlags ||
        !d.cuGraphLaunch || !d.cuGraphExecDestroy || !d.cuGraphDestroy)
      return false;
    cfg.hStream = on;
    if (d.cuStreamBeginCapture(on, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return false;
    bool queued = true;
    for (int i = 0; i < launches && queued; ++i)
      queued = d.cuLaunchKernelEx(&cfg, f, args, nullptr) == CUDA_SUCCESS;
    const CUresult ended = d.cuStreamEndCapture(on, &graph);  // ends it whatever the launches did
    if (!queued || ended != CUDA_SUCCESS || !graph) return false;
    if (d.cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS) {
      exec = nullptr;
      return false;
    }
    return true;
  }
};
}  // namespace

graph_trials::graph_trials() noexcept : was_(graph_trials_on) { graph_trials_on = true; }
graph_trials::~graph_trials() { graph_trials_on = was_; }
bool graph_trials::active() noexcept { return graph_trials_on; }

trial_mode::~trial_mode() {
  if (stream_) driver().cuStreamDestroy(stream_);
}

CUstream trial_mode::capture_stream() {
  if (!stream_tried_) {
    stream_tried_ = true;
    const driver_api& d = driver();
    if (d.cuStreamCreate && d.cuStreamDestroy &&
        d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
      stream_ = nullptr;
  }
  return stream_;
}

namespace {

// A kernel whose first launch took under short_kernel_ms is timed in samples of short_sample_ms: its trial is
// otherwise mostly the host queueing launches behind the gate (on an H100, tuning 3-7 us kernels took 48 ms of
// a 50 ms budget with ~0.3 ms samples, 25 ms with ~0.1 ms, the same plans within noise).
constexpr double short_kernel_ms = 0.02;
constexpr double short_sample_ms = 0.1;
constexpr double long_sample_ms = 0.3;

double sample_target_for(double pilot_ms) noexcept {
  return pilot_ms > 0 && pilot_ms < short_kernel_ms ? short_sample_ms : long_sample_ms;
}

}  // namespace

double trial_mode::sample_target_ms(double pilot_ms) noexcept {
  if (sample_target_ms_ == 0 && pilot_ms > 0) sample_target_ms_ = sample_target_for(pilot_ms);
  return sample_target_ms_ > 0 ? sample_target_ms_ : long_sample_ms;
}

bool trial_mode::decide(bool captured) {
  if (chosen_ == chosen::undecided) chosen_ = captured ? chosen::graph : chosen::stream;
  return chosen_ == chosen::graph && captured;
}

// Times one candidate plan on the real arguments: a warm-up launch (also the pilot), then the median of 5
// samples (fewer for slow kernels, see below), each queued behind a stream gate. A kernel without a reset
// callback (or with one and rerunnable()) runs back to back, up to 64 launches per sample, enough to fill
// ~0.3 ms, ~0.1 ms for a kernel under 20 us (a microsecond kernel timed alone is mostly event and launch
// jitter); with only a reset, one launch per sample, after the reset.
double time_candidate(CUfunction f, const launch_request& r, const plan& p, long long max_grid_x,
                      stream_gate& gate, sample_wait* wait, trial_mode* mode) {
  const driver_api& d = driver();
  const dims grid = grid_for(p, r.shape, max_grid_x);
  if (grid.count() == 0) return 0;
  CUlaunchConfig cfg;
  launch_attributes attrs;
  fill_launch_config(cfg, attrs, p, grid, r.stream);
  struct event {
    CUevent e = nullptr;
    ~event() {
      if (e) driver().cuEventDestroy(e);
    }
  } start, stop;  // released on every path, trials that throw included
  check(d.cuEventCreate(&start.e, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&stop.e, CU_EVENT_DEFAULT), "cuEventCreate");
  trial_graph graph;  // captured once the sample size is known, where the tuning's mode asks for it
  bool replay = false;
  auto sample = [&](int launches, bool gated) {
    if (r.reset) {
      (*r.reset)();
      // What the reset queued on the stream is done before the gate: the host's time then counts the sample.
      if (gated) check(d.cuStreamSynchronize(r.stream), "cuStreamSynchronize");
    }
    struct opened {
      stream_gate* g = nullptr;
      ~opened() {
        if (g) g->open();  // on every path: a throwing launch must not leave the stream held
      }
    } open;
    if (gated && gate.hold(r.stream)) open.g = &gate;
    check(d.cuEventRecord(start.e, r.stream), "cuEventRecord");
    if (replay && gated) {
      check(d.cuGraphLaunch(graph.exec, r.stream), "cuGraphLaunch(tuning trial)");
    } else {
      for (int i = 0; i < launches; ++i)
        check(d.cuLaunchKernelEx(&cfg, f, r.args, nullptr), "cuLaunchKernelEx(tuning trial)");
    }
    check(d.cuEventRecord(stop.e, r.stream), "cuEventRecord");
    // From the gate's opening the GPU has this sample's work and nothing before it on the stream (the pilot,
    // synchronised, drained it): host time beyond the events' is time the GPU gave another context.
    const bool was_gated = open.g != nullptr;
    const auto opened_at = std::chrono::steady_clock::now();
    if (open.g) {
      open.g->open();
      open.g = nullptr;
    }
    check(d.cuEventSynchronize(stop.e), "cuEventSynchronize");
    const double host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - opened_at).count();
    gate.settled();
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, start.e, stop.e), "cuEventElapsedTime");
    if (wait && was_gated && ms > 0) {
      const double excess = std::max(0.0, host_ms - ms);
      wait->gpu_ms += ms;
      wait->excess_ms += excess;
      ++wait->samples;
    }
    return static_cast<double>(ms) / launches;
  };
  // Back-to-back launches until a sample fills ~0.3 ms (a kernel under 0.3 ms runs at least twice: the steady
  // state of a kernel launched in a loop); ~0.1 ms for a kernel of microseconds (sample_target_for), as the
  // tuning's first candidate decided.
  constexpr int max_launches_per_sample = 64;  // well below the driver's queue depth while the stream is held
  const double pilot = sample(1, false);
  const double sample_target_ms = mode ? mode->sample_target_ms(pilot) : sample_target_for(pilot);
  int per_sample = 1;
  const bool back_to_back = !r.reset || r.back_to_back;  // with a reset only if rerunnable() said so too
  if (back_to_back && pilot > 0) {
    per_sample = static_cast<int>(std::clamp(std::ceil(sample_target_ms / pilot), 1.0, double{max_launches_per_sample}));
    // The pilot is one cold, ungated launch (it overstates): anything near ~0.3 ms still runs twice, also where
    // the tuning's first candidate chose shorter samples.
    if (pilot < 1.5 * long_sample_ms) per_sample = std::max(per_sample, 2);
  }
  // The median of 5 samples; of 3 for a kernel of half a millisecond or more, and 1 from 2 ms, where launch
  // and event jitter are a small part of a sample: the trials a tuning budget (autotune's max_ms) affords
  // would otherwise be too few to find the block (an n-body step of 65,536 bodies, 3.3 ms a launch on the
  // H200, got 3 trials in 50 ms with 5 samples each).
  // Judged by the first gated sample, not the pilot (one cold launch, which overstates).
  if (mode && mode->want_graph()) {
    const bool captured = graph.capture(cfg, mode->capture_stream(), f, r.args, per_sample);
    replay = mode->decide(captured);
    if (!captured && mode->want_graph()) {
      // The tuning's first candidate was captured and this one cannot be: timed otherwise, it would be ranked
      // on another scale.
      throw error(CUDA_ERROR_NOT_SUPPORTED, "time_candidate",
                  "this candidate cannot be captured into a CUDA graph, as the tuning's first was", {},
                  p.to_string());
    }
    if (replay) {
      // Its first replay uploads the graph: once, outside the samples.
      check(d.cuGraphLaunch(graph.exec, r.stream), "cuGraphLaunch(tuning trial)");
      check(d.cuStreamSynchronize(r.stream), "cuStreamSynchronize");
      if (wait) wait->as_graph = true;
    }
  }
  std::array<double, 5> times{};
  // Gated with a reset too: the reset runs before the gate is queued (a synchronous reset cannot wait on it),
  // and the one launch then starts as soon as the gate opens instead of when the host gets to it.
  times[0] = sample(per_sample, true);
  const int samples = times[0] * per_sample >= 2.0 ? 1 : times[0] * per_sample >= 0.5 ? 3 : 5;
  for (int i = 1; i < samples; ++i) times[static_cast<std::size_t>(i)] = sample(per_sample, true);
  std::sort(times.begin(), times.begin() + samples);
  if (r.reset) (*r.reset)();  // leave the user's data as the real launch expects it
  return times[static_cast<std::size_t>(samples / 2)];
}

}  // namespace launchfit::detail

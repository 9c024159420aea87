// SPDX-License-Identifier: MIT
#pragma once
// Internal: what one tuning measured, kept beside its trials (planner_tuning.cpp records every timing, the
// plan store step turns the record into the stored plan's measurement): the timings of each candidate, the
// GPU's conditions before the first trial and after the choice (nvml.hpp), and the rule that decides whether
// the measurement is clean enough to share with other processes (plan_measurement::clean). Pure logic: the
// conditions are read through a function the caller gives, so tests give theirs.

#include <cstdint>
#include <functional>
#include <map>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "launchfit/device.hpp"
#include "launchfit/plan.hpp"
#include "nvml.hpp"
#include "plan_file_format.hpp"

namespace launchfit::detail {

// A measurement whose re-timings spread by more than this (max - min) / min is kept local and provisional:
// another process's tuning could rank the plans differently.
inline constexpr double max_shared_spread = 0.05;
// Trials that waited for the GPU beyond their own GPU time by more than this share of it (and by at least
// min_shared_wait_ms) ran beside another context that kept the GPU: the measurement is kept local. A gated
// sample's host time exceeds its GPU time by the gate's release and the event's wake-up, which every sample
// pays on an idle GPU: sample_overhead_ms of it per sample is not waiting (tunings of 8 and 16 processes at
// once on an idle H100 exceeded by 0.02-0.1 ms a sample). Beside a process whose kernels hold the GPU the
// trials wait for its time slices, about a millisecond a sample (on that H100: 9.7-33 ms beside 1.5-4.5 ms of
// their own).
inline constexpr double sample_overhead_ms = 0.1;
inline constexpr double max_shared_wait = 1.0;
inline constexpr double min_shared_wait_ms = 2.0;
// Other processes NVML saw busy are a reason only beside trials that waited at least this share of their GPU
// time (and min_contended_wait_ms), where no gated sample measured the waits, or under MPS (other processes'
// kernels run beside the trials there, which wait for none of them). NVML keeps one sample per
// process per period of 1/6 to 1 s, stamped when it is recorded: the samples read around a tuning of 50 ms
// mostly describe the time before it, and in a fleet that is the tuner of the previous kernel, whose trials
// ended as this tuning began (8 processes tuning 4 kernels at once on an H100 tuned one kernel up to 13
// times, each tuning kept local for the one before it). Trials that ran beside another context wait for its
// time slices, which the gated samples measure directly.
inline constexpr double contended_wait_share = 0.1;
inline constexpr double min_contended_wait_ms = 0.5;

class tuning_record {
 public:
  // Reads the GPU's conditions, busy processes by their samples since a time stamp (nvml::now_us()).
  using conditions_reader = std::function<nvml::gpu_conditions(std::uint64_t since_us)>;
  explicit tuning_record(conditions_reader read) : read_(std::move(read)) {}

  // A gate asked once, before the first trial, where trials may be refused (another process of the fleet
  // tunes this key: tuning_lease.hpp): the gate takes the lease when the policy first asks for a trial, so
  // a policy that never times anything never takes one. Without a gate every trial is allowed.
  void set_trial_gate(std::function<bool()> gate);
  // Whether trials may run: the gate's answer, asked at the first call (under the record's lock).
  // `asked`, when given, is set when this call asked the gate (the one-off work a tuning's setup time counts).
  bool allow_trial(bool* asked = nullptr);
  // Whether the gate refused the trials.
  bool trials_refused() const;
  // A trial asked for while the launch's stream is being captured into a CUDA graph (the capture records
  // kernels, it runs none): the plan is not stored, and is made again with trials outside the capture.
  void refuse_captured();
  bool trials_captured() const;

  // One timing of a candidate as it launches (after the launch's requirements were applied); ms < 0: the
  // candidate could not run. The first call reads the GPU's conditions before it is timed.
  // True when this call read the conditions (the first, where a reader is set).
  bool before_trial();
  // The GPU's conditions are not read for this tuning (nothing it measures is stored or shared).
  void skip_conditions();
  // What the first trial would otherwise do inside the policy's time budget (the trials' stream gate: a
  // pinned word and a watchdog thread), given by whoever offers real trials; prepare_trials() runs it once,
  // before a plugin's policy is asked; without a setup it does nothing; it never throws (what failed is left
  // to the first trial). The GPU's conditions are read at the first trial, once this process holds the
  // fleet's lease: read before it, another process's tuning of the previous kernel counts as busy.
  void set_trial_setup(std::function<void()> setup);
  void prepare_trials() noexcept;
  void add(const plan& p, double ms);
  // The gated samples of one candidate (sample_wait): their GPU time, the host's time beyond it summed over
  // `samples` samples, and whether they ran as CUDA graph replays. The tuning's wait is that excess beyond
  // sample_overhead_ms a sample.
  void add_wait(double gpu_ms, double excess_ms, int samples, bool as_graph = false);
  // Whether any trial was timed.
  bool tuned() const;

  // The chosen plan's measurement: its time (the lower median of its timings, as the tuner ranked it), the
  // spread of the re-timings (the largest (max - min) / min of a candidate timed more than once), every
  // timing counted, and whether it is clean: no other process on the GPU and no self-slowdown, before the
  // first trial or after the choice (the conditions are read again now), trials that did not wait for the GPU
  // beyond their own time (max_shared_wait), and a spread within max_shared_spread. nullopt when the chosen
  // plan was never timed (the tuner declined, a stored plan).
  std::optional<plan_measurement> measure(const plan& chosen);
  // The sentence the plan's line carries for a measurement that is not clean: why it stays local.
  static std::string provisional_note(const plan_measurement& m);
  // What the plan's line says of every measurement: its spread, the wait for the GPU and the conditions read
  // after the choice ("spread 0.8%; waited 0.4 ms beside 30 ms of GPU time; 7 other processes (0 busy); SM
  // 1980/1980 MHz; throttle 0x0"). "" before measure().
  std::string conditions_text() const;
  // Whether the candidates were timed as CUDA graph replays (tune_graph()).
  bool graph_timed() const;

 private:
  using key = std::tuple<unsigned, unsigned, unsigned, int, bool>;  // block x, y, z, blocks/SM, full grid
  static key key_of(const plan& p);
  // Whether the GPU's conditions are read around the trials (a reader given, skip_conditions() not called).
  bool reads_conditions() const noexcept { return read_ && !skip_read_.load(std::memory_order_acquire); }

  conditions_reader read_;  // set once, by the constructor
  // Read on every miss, tuned or not: flags without the lock (a miss that times nothing takes none of it).
  std::atomic<bool> skip_read_{false};  // skip_conditions(): read_ is not called
  std::atomic<bool> captured_{false};
  std::atomic<int> graph_timed_{0};  // candidates whose samples were graph replays
  mutable std::mutex m_;
  std::function<bool()> gate_;
  std::function<void()> setup_;
  int gate_answer_ = -1;  // -1: not asked yet; 0: refused; 1: allowed
  bool read_before_ = false;
  nvml::gpu_conditions before_;
  std::uint64_t started_us_ = 0;  // when the first trial began
  std::string conditions_text_;
  std::map<key, std::vector<double>> timings_;
  std::uint32_t trials_ = 0;
  double gpu_ms_ = 0, excess_ms_ = 0;  // every gated sample's, summed
  int samples_ = 0;
};

// The reader of the launch's GPU's conditions (NVML, by the device's UUID). `dev` must live as long as the
// process, as limits_for()'s do: the reader keeps a pointer to it.
tuning_record::conditions_reader gpu_conditions_reader(const device_limits& dev);

}  // namespace launchfit::detail

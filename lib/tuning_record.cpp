// SPDX-License-Identifier: MIT
// What one tuning measured and whether it may be shared (tuning_record.hpp).

#include "tuning_record.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "driver.hpp"

namespace launchfit::detail {

tuning_record::key tuning_record::key_of(const plan& p) {
  return {p.block.x, p.block.y, p.block.z, p.blocks_per_sm, p.full_grid};
}

void tuning_record::set_trial_gate(std::function<bool()> gate) {
  std::lock_guard<std::mutex> lock(m_);
  gate_ = std::move(gate);
  gate_answer_ = -1;
}

bool tuning_record::allow_trial(bool* asked) {
  std::lock_guard<std::mutex> lock(m_);
  if (gate_answer_ < 0) {
    gate_answer_ = !gate_ || gate_() ? 1 : 0;
    if (asked) *asked = static_cast<bool>(gate_);
  }
  return gate_answer_ == 1;
}

bool tuning_record::trials_refused() const {
  std::lock_guard<std::mutex> lock(m_);
  return gate_answer_ == 0;
}

void tuning_record::refuse_captured() { captured_.store(true, std::memory_order_release); }

bool tuning_record::trials_captured() const { return captured_.load(std::memory_order_acquire); }

void tuning_record::skip_conditions() { skip_read_.store(true, std::memory_order_release); }

void tuning_record::set_trial_setup(std::function<void()> setup) {
  std::lock_guard<std::mutex> lock(m_);
  setup_ = std::move(setup);
}

void tuning_record::prepare_trials() noexcept {
  std::function<void()> setup;
  {
    std::lock_guard<std::mutex> lock(m_);
    setup.swap(setup_);
  }
  if (!setup) return;  // no trials offered (plan_for(), a stream capture): nothing to prepare
  try {
    setup();
  } catch (...) {
    // No thread or pinned word now (a thread limit, memory): the first trial makes the gate again, where a
    // trial that cannot run is a failed trial, never a failed launch.
  }
}

bool tuning_record::before_trial() {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (read_before_) return false;
    read_before_ = true;
  }
  // Busy before: in the last second's samples.
  const std::uint64_t now = nvml::now_us();
  const bool reads = reads_conditions();
  nvml::gpu_conditions c = reads ? read_(now - 1000000) : nvml::gpu_conditions{};
  if (!reads) c.unknown = "not read";
  std::lock_guard<std::mutex> lock(m_);
  before_ = std::move(c);
  started_us_ = now;
  return reads;
}

void tuning_record::add(const plan& p, double ms) {
  std::lock_guard<std::mutex> lock(m_);
  ++trials_;
  if (ms >= 0 && std::isfinite(ms)) timings_[key_of(p)].push_back(ms);
}

void tuning_record::add_wait(double gpu_ms, double excess_ms, int samples, bool as_graph) {
  if (!(gpu_ms > 0) || !(excess_ms >= 0) || samples <= 0 || !std::isfinite(gpu_ms) ||
      !std::isfinite(excess_ms))
    return;
  std::lock_guard<std::mutex> lock(m_);
  gpu_ms_ += gpu_ms;
  excess_ms_ += excess_ms;
  samples_ += samples;
  if (as_graph) graph_timed_.fetch_add(1, std::memory_order_release);
}

bool tuning_record::tuned() const {
  std::lock_guard<std::mutex> lock(m_);
  return trials_ > 0;
}

std::optional<plan_measurement> tuning_record::measure(const plan& chosen) {
  nvml::gpu_conditions before;
  std::uint64_t since = 0;
  std::vector<double> mine;
  double spread = 0;
  double gpu_ms = 0, waited_ms = 0;
  plan_measurement m;
  {
    std::lock_guard<std::mutex> lock(m_);
    const auto it = timings_.find(key_of(chosen));
    if (it == timings_.end() || it->second.empty()) return std::nullopt;
    mine = it->second;
    for (const auto& [k, ms] : timings_) {
      if (ms.size() < 2) continue;
      const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
      if (*lo > 0) spread = std::max(spread, (*hi - *lo) / *lo);
    }
    m.trials = trials_;
    before = before_;
    since = started_us_;
    gpu_ms = gpu_ms_;
    waited_ms = std::max(0.0, excess_ms_ - samples_ * sample_overhead_ms);
  }
  std::sort(mine.begin(), mine.end());
  m.best_ms = mine[(mine.size() - 1) / 2];
  m.spread = spread;
  // Busy during the trials: the samples since the first began.
  const nvml::gpu_conditions after =
      reads_conditions() ? read_(since) : nvml::gpu_conditions{};
  const auto when = [&](std::string (*part)(const nvml::gpu_conditions&)) {
    std::string text = part(before);
    if (!text.empty()) return text + " before tuning";
    text = part(after);
    return text.empty() ? text : text + " while tuning";
  };
  const std::string busy = when(nvml::busy);
  // Busy processes count beside trials that waited for the GPU, whose waits were not measured, or under MPS
  // (whose other processes' kernels run beside the trials, which then wait for none of them), see
  // contended_wait_share; waits past max_shared_wait count alone.
  const bool waits_measured = gpu_ms > 0;
  const bool waited_some = waited_ms > std::max(min_contended_wait_ms, contended_wait_share * gpu_ms);
  const bool waited_long = waited_ms > std::max(min_shared_wait_ms, max_shared_wait * gpu_ms);
  // Under MPS the samples before tuning count no more than elsewhere (they show the fleet's previous tuner
  // there too); those while tuning count alone.
  const bool mps_busy = (before.mps || after.mps) && !nvml::busy(after).empty();
  const bool busy_counts = !busy.empty() && (!waits_measured || waited_some || mps_busy);
  std::string why = busy_counts ? busy : std::string();
  if (const std::string slow = when(nvml::slowdown); !slow.empty()) why += (why.empty() ? "" : ", ") + slow;
  if (waits_measured && (waited_long || (busy_counts && waited_some))) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "the trials waited %.3g ms for the GPU beyond their own %.3g ms (another context held it)",
                  waited_ms, gpu_ms);
    why += (why.empty() ? "" : "; ") + std::string(buf);
  }
  if (spread > max_shared_spread) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "re-timings spread by %.3g%%, above the %.3g%% bound", spread * 100,
                  max_shared_spread * 100);
    why += (why.empty() ? "" : "; ") + std::string(buf);
  }
  m.clean = why.empty();
  {
    char buf[96];
    if (gpu_ms > 0) {
      std::snprintf(buf, sizeof buf, "spread %.3g%%; waited %.3g ms beside %.3g ms of GPU time; ",
                    spread * 100, waited_ms, gpu_ms);
    } else {
      std::snprintf(buf, sizeof buf, "spread %.3g%%; ", spread * 100);
    }
    std::lock_guard<std::mutex> lock(m_);
    conditions_text_ = buf + nvml::describe(after);
    if (!busy.empty() && !busy_counts) conditions_text_ += "; " + busy + ", beside trials that did not wait";
  }
  if (!m.clean) {
    m.conditions = why;
  } else if (!before.known) {
    m.conditions = "GPU conditions unknown: " + before.unknown;
  }
  return m;
}

bool tuning_record::graph_timed() const { return graph_timed_.load(std::memory_order_acquire) > 0; }

std::string tuning_record::conditions_text() const {
  std::lock_guard<std::mutex> lock(m_);
  return conditions_text_;
}

tuning_record::conditions_reader gpu_conditions_reader(const device_limits& dev) {
  // The limits live as long as the process: the reader holds a pointer (no copy of the UUID, and a callable
  // small enough for std::function to keep without an allocation on every miss).
  return [d = &dev](std::uint64_t since_us) {
    nvml::gpu_conditions c = nvml::read(d->uuid, since_us);
    if (d->ordinal < 0) return c;  // a table's device: no driver to ask
    try {
      const driver_api& api = driver();
      int mps = 0;
      if (api.cuDeviceGetAttribute &&
          api.cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d->ordinal) == CUDA_SUCCESS)
        c.mps = mps != 0;
    } catch (...) {
      // No driver: not shared through MPS as far as anything here can tell.
    }
    return c;
  };
}

std::string tuning_record::provisional_note(const plan_measurement& m) {
  return "provisional (" + m.conditions + "): kept in the local plan file, not published to the remote store";
}

}  // namespace launchfit::detail

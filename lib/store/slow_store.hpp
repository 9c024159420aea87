// SPDX-License-Identifier: MIT
#pragma once
// Internal: when a store that answers is too slow to keep. A slow store is as bad as a dead one: every
// lookup of a launching thread waits for it. The rule, for the exchanges lookups make (the writer's delay no
// launch, and each is bounded by the operation bound):
//
// - `in_a_row` (3) exchanges in a row that each took more than half the operation bound (100 ms of 200), or
// - more than `budget` (1 s) spent in exchanges within `window` (10 s), counted in one-second steps (the
//   window is the current second and the nine before it).
//
// Such a store is dropped for the process with one warning, as a dead one is.

#include <array>
#include <chrono>
#include <mutex>
#include <string>

namespace launchfit::detail {

class slow_store_rule {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr int in_a_row = 3;
  static constexpr std::chrono::seconds window{10};
  static constexpr std::chrono::milliseconds budget{1000};

  explicit slow_store_rule(std::chrono::milliseconds op_bound) : op_bound_(op_bound) {}

  // Records an exchange that took `took` and ended at `end`; "" or why the store is too slow to keep.
  // `budgeted` false: an exchange no launching thread waits for (a lease poll of the background queue),
  // held to the in-a-row rule only. Thread-safe.
  std::string record(clock::duration took, clock::time_point end, bool budgeted = true);

 private:
  struct second {
    long long index = -1;  // seconds of the steady clock
    clock::duration spent{};
  };
  std::chrono::milliseconds op_bound_;
  std::mutex m_;
  int slow_ = 0;
  std::array<second, static_cast<std::size_t>(window.count())> seconds_{};
};

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: one tuner per plan across a fleet (the plan store's leases, store/layer.hpp and store/lease.hpp).
//
// Before a process tunes a key it takes the key's lease in the first layer that holds leases (the remote
// store), for lease_ms(). Holding it, it tunes, stores the plan, waits (bounded) for the remote store to
// write it, and releases the lease (compare-and-delete: only its own). Finding it held, it does not tune: the
// launch runs the policy's static plan (its match is plan_match::waiting, which plan_for() refuses as
// not_planned_yet), and the key is watched. The watcher is a task of the background queue: at most every
// poll_interval it reads, for every watched key in one pipeline, the plan published under it and whether
// the lease is still held. A published plan is adopted (adopted_plan() answers it) and the plan inputs
// change (plan_inputs.hpp), so the next launch of the key plans again and runs it; a lease gone with no
// plan (the tuner died, or kept a noisy measurement local) also changes the inputs, and the next launch
// takes the lease and tunes. Nothing of this is on a launch's hit path, and no launch waits for it: a tuner
// that dies costs the others at most its lease time of static plans.
//
// Without a layer that holds leases (no remote store, a dead one) every process decides alone, as before.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "plan_match.hpp"
#include "store/layer.hpp"

namespace launchfit::detail {

// How often the watcher reads a watched key at most.
inline constexpr std::chrono::milliseconds poll_interval{50};
// Keys watched at once at most (more: the launch still runs its static plan, and the key is not adopted
// until a later miss).
inline constexpr std::size_t max_watched_keys = 4096;
// The lease's time: autotune's budget (max_ms, 50 ms by default; a kernel's trials seldom take a second)
// with a wide margin for publishing. A tuning that outlives it may be repeated by another process, never
// lost.
inline constexpr std::uint64_t default_lease_ms = 10000;

// This process's owner token: "<host>:<pid>:<16 hex>" (a forked child has its own pid, hence its own token).
std::string lease_owner();

// What this process does about tuning a key.
class tuning_lease {
 public:
  enum class turn { alone, tune, wait };
  // Takes the key's lease where a layer holds leases. `alone`: no layer holds leases (or the lease could not
  // be asked: fail open); `tune`: this process holds it; `wait`: another does (`holder()` says who).
  static tuning_lease take(const stored_key& key);
  tuning_lease(tuning_lease&& other) noexcept;
  tuning_lease& operator=(tuning_lease&&) = delete;
  // Releases a lease still held (without waiting for the store's writes: a tuning that failed).
  ~tuning_lease();

  turn what() const noexcept { return turn_; }
  const std::string& holder() const noexcept { return holder_; }
  long long remaining_ms() const noexcept { return remaining_ms_; }
  // Holding the lease: whether the key's plan was published before this process took it (a lookup may have
  // answered from what the layer remembered of an earlier read). Reads the store once; when it was, adopts
  // the plan (adopted_plan() answers it, the file keeps it), releases the lease, and answers true: no tuning.
  bool adopt_if_published();
  // After the plan was stored: waits at most `max_wait_ms` for the layer to write it, then releases.
  void publish_and_release(unsigned max_wait_ms = 200);
  // Watches the key (wait): the background queue adopts its plan once published.
  void watch();

 private:
  tuning_lease() = default;
  turn turn_ = turn::alone;
  plan_store_layer* layer_ = nullptr;
  stored_key key_;
  std::string lease_key_, holder_;
  long long remaining_ms_ = -1;
};

// A plan another process tuned and published under `key`, found by the watcher (exact key only).
std::optional<plan> adopted_plan(const stored_key& key);

// Tests: the lease time (0: default_lease_ms), and the watcher's state.
void set_lease_ms_for_tests(std::uint64_t ms);
std::uint64_t lease_ms();
struct lease_watch_stats {
  std::uint64_t polls = 0;    // watcher runs that read the store
  std::uint64_t adopted = 0;  // plans adopted
  std::uint64_t expired = 0;  // leases gone with no plan published
  std::size_t watched = 0;    // keys watched now
  std::uint64_t failed = 0;   // leases the store could not give (this process tuned without one)
};
lease_watch_stats lease_watch_statistics();

}  // namespace launchfit::detail

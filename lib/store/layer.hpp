// SPDX-License-Identifier: MIT
#pragma once
// Internal: one layer of the plan store (store/chain.hpp): the local file (store/file_layer.cpp) or a
// remote key-value store (store/remote_layer.hpp). A layer answers lookups for a key's device model,
// kernel, policy and smem rule, queues writes, flushes and counts. Whatever it returns is untrusted: the
// chain validates every entry once (validate_stored_entry, the function `launchfit-plans check` uses) and
// ranks what passed.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../cache_file.hpp"
#include "layer_failure.hpp"

namespace launchfit::detail {

// What a layer has done, for tests, tools and the log.
struct layer_stats {
  std::uint64_t lookups = 0;        // find() calls that reached the layer
  std::uint64_t hits = 0;           // entries it returned that passed validation
  std::uint64_t refused = 0;        // entries it returned that failed validation (forged, torn, too large)
  std::uint64_t writes = 0;         // entries written
  std::uint64_t write_drops = 0;    // entries dropped (queue full, store dead, first writer won elsewhere)
  std::uint64_t failures = 0;       // operations that failed (timeout, connection refused, wrong type)
  std::uint64_t future_stamps = 0;  // stored_at stamps read as of unknown age (future_stamps.hpp)
  bool dead = false;                // marked dead for the process after a failure (fail open)
};

// What one lookup of a layer found.
struct layer_answer {
  std::vector<stored_entry> entries;  // untrusted: the chain validates them
  layer_failure failure = layer_failure::none;
};

// A lease on one plan's tuning (store/lease.hpp: the key scheme and the Redis commands): one process of a
// fleet tunes a key while the others launch the policy's static plan and adopt the tuned one once published.
enum class lease_status : std::uint8_t {
  unsupported,  // the layer holds no leases (the file layer): every process decides alone
  taken,        // this owner holds it now, for the time asked
  held,         // another owner holds it (`holder`, for `remaining_ms` more)
  released,     // this owner's lease was deleted
  not_owner,    // nothing deleted: the lease is another owner's, or expired
  failed,       // the operation failed (`failure`): fail open, as a lookup does
};
struct lease_answer {
  lease_status status = lease_status::unsupported;
  layer_failure failure = layer_failure::none;
  std::string holder;           // held: the holder's token (untrusted text: escape before printing)
  long long remaining_ms = -1;  // held: the lease's remaining time, -1 unknown
};
// What a watcher of a held lease finds: the plan published under the key, if any, and whether the lease is
// still held (when neither, the tuner died or kept its plan local: a process may take the lease).
struct lease_poll {
  std::optional<stored_entry> published;  // validated by the layer as a lookup's entry
  bool held = false;
  layer_failure failure = layer_failure::none;
};

class plan_store_layer {
 public:
  virtual ~plan_store_layer() = default;
  // "file" or "redis".
  virtual const char* name() const noexcept = 0;
  // Entries stored for this key's device model, kernel, policy and smem rule (any bucket): bounded in time
  // (a remote layer: its operation timeout) and in size. Never throws; an unreachable layer returns none.
  virtual std::vector<stored_entry> find(const stored_key& key) = 0;
  // The same, with why nothing could be read (the chain counts it): a layer that knows the kind of its
  // failure says it; by default a layer dead for the process answers `refused`.
  virtual layer_answer get(const stored_key& key) {
    layer_answer a{find(key), layer_failure::none};
    if (a.entries.empty() && stats().dead) a.failure = layer_failure::refused;
    return a;
  }
  // Queues an entry for writing: never waits for I/O. First writer wins where the layer is shared.
  virtual void put(const stored_entry& e) = 0;
  // Waits at most max_wait_ms for queued writes; false when some were not written.
  virtual bool flush(unsigned max_wait_ms) = 0;
  virtual layer_stats stats() const = 0;

  // Leases on one plan's tuning: a layer that holds none (the file layer) answers unsupported, and a poll of
  // it finds nothing.
  virtual lease_answer take_lease(const std::string& lease_key, const std::string& owner,
                                  std::uint64_t ttl_ms) {
    (void)lease_key, (void)owner, (void)ttl_ms;
    return {};
  }
  virtual lease_answer release_lease(const std::string& lease_key, const std::string& owner) {
    (void)lease_key, (void)owner;
    return {};
  }
  virtual std::vector<lease_poll> poll_leases(const std::vector<std::pair<std::string, stored_key>>& items) {
    (void)items;
    return {};
  }
};

}  // namespace launchfit::detail

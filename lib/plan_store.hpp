// SPDX-License-Identifier: MIT
#pragma once
// Internal: the layered plan store. A plan that is not in memory is looked up in the local file (the
// embedded default, LAUNCHFIT_CACHE) and then in an optional remote store (LAUNCHFIT_REMOTE, Redis); a plan
// made or tuned here is written through to every writable layer, asynchronously.
//
// The planner sees only find_stored_plan() / store_plan() (cache_file.hpp). Below them each layer is a
// plan_store_layer. Whatever a layer returns is untrusted input: the store validates every entry
// (validate_stored_entry) before it is used, exactly as it validates an entry of the file.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "launchfit/plan.hpp"

namespace launchfit::detail {

// What a layer has done, for tests, tools and the log.
struct layer_stats {
  std::uint64_t lookups = 0;      // find() calls that reached the layer
  std::uint64_t hits = 0;         // entries it returned that passed validation
  std::uint64_t refused = 0;      // entries it returned that failed validation (forged, torn, too large)
  std::uint64_t writes = 0;       // entries written
  std::uint64_t write_drops = 0;  // entries dropped (queue full, store dead, first writer won elsewhere)
  std::uint64_t failures = 0;     // operations that failed (timeout, connection refused, wrong type)
  bool dead = false;              // marked dead for the process after a failure (fail open)
};

class plan_store_layer {
 public:
  virtual ~plan_store_layer() = default;
  // "file" or "redis".
  virtual const char* name() const noexcept = 0;
  // Entries stored for this key's device model, kernel, policy and smem rule (any bucket): bounded in time
  // (a remote layer: its operation timeout) and in size. Never throws; an unreachable layer returns none.
  virtual std::vector<stored_entry> find(const stored_key& key) = 0;
  // Queues an entry for writing: never waits for I/O. First writer wins where the layer is shared.
  virtual void put(const stored_entry& e) = 0;
  // Waits at most max_wait_ms for queued writes; false when some were not written.
  virtual bool flush(unsigned max_wait_ms) = 0;
  virtual layer_stats stats() const = 0;
};

// The process's file layer (LAUNCHFIT_CACHE, set_cache_file): the file's entries as loaded and refreshed,
// and this process's own stores, queued for its background writer. Its find() also records what was looked
// up, so that a change another process makes to it is an input change (plan_inputs.hpp); its stats()
// count as `refused` the entries validate_stored_entry() refused each time the file was read.
plan_store_layer& file_layer();

// The best of `candidates` for `key`, in find_stored_plan()'s order (cache_file.hpp), its match level
// `source` followed by "", "-same-model", "-other-bucket" or "-same-model-other-bucket"; entries of another
// GPU of the model only when `model`, of another bucket only when not `exact_bucket`. nullopt when none
// qualifies.
std::optional<plan> best_stored_plan(const std::vector<stored_entry>& candidates, const stored_key& key,
                                     bool exact_bucket, bool model, const std::string& source);

}  // namespace launchfit::detail

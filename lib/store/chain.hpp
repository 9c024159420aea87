// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan store as a chain of layers: the local file (LAUNCHFIT_CACHE), then the remote store
// (LAUNCHFIT_REMOTE), asked in that order on a miss; memory is above them (the plan cache). One loop
// (chain.cpp) asks each layer, validates every entry it answers once (validate_stored_entry, the function
// `launchfit-plans check` uses), ranks what passed once (best_stored_plan), counts, and fails open: a layer
// that fails or answers nothing usable is passed over, and the plan is made locally. A plan made here is
// put to every layer (each queues it for the background queue); one measured under contention (not clean)
// stays in the file, provisional: a lookup that finds it there asks the layers below, and a plan measured
// clean there serves instead (and replaces it in the file). A plan a layer below the file served is
// written to the file (backfill), its origin recorded, so that a node keeps its plans without trials through
// an outage or an empty restart of the shared store. The layer interface is store/layer.hpp.
//
// What the store serves is an input of every plan beyond its key: whenever it may have changed (a file
// opened or closed, a calibration stored, the file changed by another process in an entry this process
// looked up or in a calibration) the store calls plan_input_changed() (plan_inputs.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/plan.hpp"
#include "layer.hpp"

namespace launchfit::detail {

// The layers in the order a miss asks them: the file's (always; it answers nothing while no file is
// open), then the remote store's when one is configured.
struct chain_layers {
  plan_store_layer* layers[2] = {nullptr, nullptr};
  int count = 0;
};
chain_layers store_chain();

// The process's file layer (LAUNCHFIT_CACHE, set_cache_file): the file's entries as loaded and refreshed,
// and this process's own stores, queued for the background queue. Its find() also records what was looked
// up, so that a change another process makes to it is an input change (plan_inputs.hpp); its stats()
// count as `refused` the entries validate_stored_entry() refused each time the file was read.
plan_store_layer& file_layer();

// The match level in force: set_cache_match(), else LAUNCHFIT_CACHE_MATCH (settings.hpp).
cache_match current_match();

// What the chain counted, per layer in chain order (for tests and tools).
struct chain_stats {
  std::uint64_t lookups[2] = {0, 0};  // lookups that reached the layer
  std::uint64_t served[2] = {0, 0};   // lookups the layer's entry answered
  std::uint64_t refused[2] = {0, 0};  // entries that failed validation
  std::uint64_t failures[2][5] = {};  // by layer_failure
  std::uint64_t backfilled = 0;       // entries served by a layer below the file, put to the file
};
chain_stats store_chain_statistics();

// Ranking. Two stored keys for the same launch (kernel, policy, smem rule); the same and for the same GPU,
// driver and SM count, in any size bucket.
bool same_launch_key(const stored_key& a, const stored_key& b);
bool same_but_bucket(const stored_key& a, const stored_key& b);

// The best entry `accept` allows: the nearest bucket, then the nearest driver (an older one on a tie),
// then the newest entry, then the smallest UUID, so every process picks the same plan from the same file.
template <class Entries, class Accept>
const stored_entry* best_entry(const Entries& entries, const stored_key& key, Accept accept) {
  using rank = std::tuple<std::uint64_t, long long, bool, std::uint64_t, std::string_view>;
  auto rank_of = [&](const stored_entry& e) {
    const std::uint64_t b = e.key.bucket > key.bucket ? e.key.bucket - key.bucket : key.bucket - e.key.bucket;
    const long long d = static_cast<long long>(e.key.driver_version) - key.driver_version;
    return rank{b, d < 0 ? -d : d, d > 0, ~e.stored_at_ms, e.key.device_uuid};
  };
  const stored_entry* best = nullptr;
  rank best_rank{};
  entries([&](const stored_entry& e) {
    if (!accept(e.key)) return;
    const rank r = rank_of(e);
    if (!best || r < best_rank) {
      best = &e;
      best_rank = r;
    }
  });
  return best;
}

// The best of `candidates` for `key`, in find_stored_plan()'s order (cache_file.hpp), its match level
// `source` followed by "", "-same-model", "-other-bucket" or "-same-model-other-bucket"; entries of another
// GPU of the model only when `model`, of another bucket only when not `exact_bucket`. nullopt when none
// qualifies. The candidates must have passed validate_stored_entry().
// `chosen`, when given, is set to the entry the plan came from (nullptr when none).
std::optional<plan> best_stored_plan(const std::vector<stored_entry>& candidates, const stored_key& key,
                                     bool exact_bucket, bool model, const std::string& source,
                                     const stored_entry** chosen = nullptr);

// The plan an entry a fleet's tuning lease found published (tuning_lease.cpp) serves for `key`, by the rule
// every lookup applies: validate_stored_entry(), the match level in force (under `exact`, only this GPU's), the
// exact bucket. nullopt where a lookup would not serve it.
std::optional<plan> published_plan_for(const stored_entry& e, const stored_key& key);

}  // namespace launchfit::detail

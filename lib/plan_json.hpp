// SPDX-License-Identifier: MIT
#pragma once
// Internal: plan and occupancy_result as JSON: the plan's description (plan_description.hpp) written, and
// read back as untrusted input under the same names.
//
//   plan_to_json(p) == {"block": [x, y, z], "block_threads": 256, "blocks_per_sm": 8, "sm_count": 132,
//                       "dynamic_smem_bytes": 0, "grid": [0, 1, 1], "cluster": [1, 1, 1],
//                       "cooperative": false, "occupancy": {occupancy_to_json(p.occupancy)},
//                       "policy": "...", "reason": "...", "warning": "", "match": "computed",
//                       "trials": 0, "tuning_ms": 0.0}

#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"
#include "text.hpp"

namespace launchfit::detail {

// A JSON plan of the wrong shape; what() names the field ("'block' is not an array of 3").
struct bad_plan_json : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Longest policy, reason or warning text read back (longer text is cut at a character boundary).
inline constexpr std::size_t max_plan_text_bytes = 4096;
// The most a plan's tuning_ms may say (ms): a reader refuses more, a plugin's larger figure is cleaned to 0.
inline constexpr double max_tuning_ms = 1e12;

// Every field, "match" included. Never throws (invalid UTF-8 is replaced when the JSON is dumped with
// error_handler_t::replace).
nlohmann::json plan_to_json(const plan& p);
nlohmann::json occupancy_to_json(const occupancy_result& o);

// Reads what plan_to_json writes, as untrusted input: "block" is required, other fields keep their
// defaults when absent, unknown fields are ignored. Throws bad_plan_json for a wrong type, a number out of
// its range (block 1..1024 threads, grid and cluster dims, counts >= 0, occupancy in 0..1, finite times),
// a "block_threads" other than the block's product, or a non-object. Text fields go through
// sanitize_text(). "match" is never read: where a plan came from is for the reader to say (the result has
// the default "computed"). block_threads is block.count().
plan plan_from_json(const nlohmann::json& j);
occupancy_result occupancy_from_json(const nlohmann::json& j);

}  // namespace launchfit::detail

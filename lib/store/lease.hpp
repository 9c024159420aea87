// SPDX-License-Identifier: MIT
#pragma once
// Internal: leases on a plan's tuning in a key-value store (layer.hpp: take_lease, release_lease,
// poll_leases), so that one process of a fleet tunes each plan. The key scheme and the Redis commands:
//
//   lease key   "launchfit:lease:" + the plan's key without its "launchfit:" ("launchfit:lease:v1:f1:<16
//   hex>:
//               <16 hex>"): one lease per (device model, driver, toolkit, kernel fingerprint, policy with its
//               options, smem rule, size bucket), never matched by a scan of plan keys ("launchfit:v1:...").
//   value       the owner's token, "<host>:<pid>:<16 hex>" (printable ASCII, at most 128 bytes).
//   take        SET <lease> <token> NX PX <ttl_ms>; then GET and PTTL say who holds it and for how long.
//   release     EVAL of a compare-and-delete script: DEL only while GET answers the owner's token.
//   poll        GETRANGE <plan key> (bounded, as a lookup) and EXISTS <lease>, in one pipeline.
//
// Redis and Valkey serve all of them. The remote layer (remote_layer.hpp) runs them on its lookup connection,
// as a lookup: within the store's operation bound, waiting for another thread's lookup no longer, under the
// slow-store rule; an exchange that fails drops the store for the process as a lookup's does (an error reply
// to a lease command, such as an ACL's NOPERM, fails that lease only). Leases are taken on the miss path of
// a tuning and polled by the background queue, never on a launch's hit path.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kv_scheme.hpp"
#include "layer.hpp"
#include "redis_ops.hpp"

namespace launchfit::detail {

inline constexpr const char* lease_key_prefix = "launchfit:lease:";
inline constexpr std::size_t max_lease_owner_bytes = 128;

// The lease key of a plan key ("" for a key without a device model: never shared, never leased).
std::string lease_key(const stored_key& k);

// A lease not given, and why.
lease_answer lease_failed(layer_failure f);

// The commands, through the caller's exchange (its deadlines and bounds).
lease_answer redis_take_lease(const redis_exchange& exchange, const std::string& lease_key,
                              const std::string& owner, std::uint64_t ttl_ms);
lease_answer redis_release_lease(const redis_exchange& exchange, const std::string& lease_key,
                                 const std::string& owner);
std::vector<lease_poll> redis_poll_leases(const redis_exchange& exchange,
                                          const std::vector<std::pair<std::string, stored_key>>& items);

}  // namespace launchfit::detail

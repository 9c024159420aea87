// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan store's conversations with Redis, shared by the layer (remote_layer.hpp) and the
// tools (plan_tools.hpp): connecting to a URL, reading the values under a key prefix, and writing entries so
// that an invalid value under a key never blocks a valid writer. Each runs its exchanges through the
// caller's `exchange` function, which holds the deadlines, bounds and accounting of its caller.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv_scheme.hpp"
#include "layer_failure.hpp"
#include "redis_backend.hpp"

namespace launchfit::detail {

// Why a store operation failed, typed for the caller's failure rule.
enum class store_fault {
  none,
  timeout,   // a deadline passed
  io,        // cannot connect, or the connection broke
  protocol,  // not Redis, or an answer over a bound of the transport
  refused,   // the server answered an error (NOAUTH, OOM, READONLY, WRONGTYPE, ...)
  bound,     // a bound of the caller's (keys, bytes, time in all) was reached
};

struct store_failure {
  store_fault kind = store_fault::none;
  std::string text;  // from the peer in part: escape it before printing
  explicit operator bool() const noexcept { return kind != store_fault::none; }
};

store_fault fault_of(redis::fault f) noexcept;
// What a layer backed by Redis (the plan layer, its leases) tells the chain of a failed operation.
layer_failure layer_failure_of(store_fault f) noexcept;

namespace redis {
// A reply as a short phrase for messages: "nil", "an array of 3", "error: WRONGTYPE ..." (the server's text
// cut at 512 bytes, not escaped: escape it before logging).
std::string describe(const reply& r);
}  // namespace redis

// One pipeline out, one reply per command back, or a failure. The caller's deadlines and bounds apply.
using redis_exchange =
    std::function<store_failure(const std::vector<redis::command>&, std::vector<redis::reply>&)>;

// A connection to the URL's server and database: the host resolved and connected by `connect_deadline`,
// then AUTH (with the URL's user, if any, and password, when there is one) and SELECT (for a database other
// than 0) answered by `op_deadline`. nullptr with `failure` otherwise (an AUTH refused: `refused`, its text
// never holding the password).
std::unique_ptr<redis::connection> connect_store(const remote_url& url,
                                                 redis::clock::time_point connect_deadline,
                                                 redis::clock::time_point op_deadline,
                                                 store_failure& failure);

// GETRANGE reads at most one byte more than a value may hold: a larger value is never transferred.
redis::command read_value_command(const std::string& key);
// Values are read in pipelines of this many, so that one exchange holds at most 64 values of 64 KiB.
inline constexpr std::size_t read_pipeline = 64;

// Reads the values of the keys starting with `prefix` (SCAN MATCH <prefix>*): for each page of keys,
// `wanted(key)` says which to read (a key is offered as often as SCAN returns it), and `take(key, reply)`
// gets each value read (a string, nil, or an error reply); false from either stops the scan. `more()` is
// asked before every exchange: false stops it too (a bound of the caller). Returns true when the scan
// reached its end, false when it stopped or failed (`failure` set then).
bool scan_values(const redis_exchange& exchange, const std::string& prefix, std::size_t page_hint,
                 const std::function<bool(std::string_view)>& wanted,
                 const std::function<bool(const std::string&, const redis::reply&)>& take,
                 const std::function<bool()>& more, store_failure& failure);

// What write_entries() did.
struct write_counts {
  std::size_t written = 0;     // new keys
  std::size_t present = 0;     // keys that held a valid entry as good or better (better_measured)
  std::size_t replaced = 0;    // keys whose invalid value (garbage, torn, forged, another type) was replaced
  std::size_t superseded = 0;  // keys whose valid entry this writer's measured better beyond noise replaced
  std::size_t lost = 0;        // not written: the key kept changing under the writer, or a failure
};

// An entry to write under its key (remote_key(entry.key)).
struct key_value {
  std::string key;
  stored_entry entry;
};

// The value written for an entry at an epoch: remote_value() of the entry without its origin (a value in a
// store is the store's own) and with that epoch.
std::string store_value(const stored_entry& e, std::uint64_t epoch);

// A key is read, compared and replaced at most this many times: each round that finds it changed means
// another writer replaced it (with a strictly better or a valid entry), which can happen only so often.
inline constexpr int write_rounds = 16;

// Writes each entry with SET NX EX ttl_s (epoch 0). A key that holds something already is read back and
// checked with parse_remote_value(), the lookups' own check (validate_stored_entry):
// - a valid entry is replaced only by one measured better beyond noise (better_measured(), the one rule),
//   the new value's epoch the old one's + 1; otherwise it stays (`present`): no arrival order wins, and an
//   unmeasured plan never replaces a measured one;
// - an invalid one (garbage, torn, forged, another format, another type) is replaced (epoch 0).
// Both replace compare-and-set by a Lua script (EVAL, served by Redis and Valkey alike) that replaces only
// what this writer read, so two writers never undo each other: the one that finds the key changed reads it
// again and compares again (at most write_rounds times), so concurrent writers converge to the best
// entry. An entry whose value would exceed remote_max_value_bytes is lost. Stops at the first failure (the
// rest counted as lost).
store_failure write_entries(const redis_exchange& exchange, const std::vector<key_value>& entries,
                            std::uint64_t ttl_s, write_counts& counts);

// Sets the time to live of each key to ttl_s (EXPIRE, one pipeline); `refreshed` counts the keys that
// existed. A failure or an error reply stops it.
store_failure refresh_ttls(const redis_exchange& exchange, const std::vector<std::string>& keys,
                           std::uint64_t ttl_s, std::size_t& refreshed);

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// Leases on a plan's tuning in Redis (lease.hpp): the commands, through the exchange of the caller (the
// remote layer's lookup connection, remote_layer.cpp).

#include "lease.hpp"

#include <algorithm>

namespace launchfit::detail {
namespace {

using redis::reply;

// Deletes the lease only while it holds the owner's token: a lease that expired and was taken by another
// owner is never deleted by the first. 1: deleted; 0: not the owner's.
constexpr std::string_view release_script =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

// An owner token is printable ASCII within its bound: what a store answers beyond that is not one.
bool plausible_owner(const std::string& s) {
  if (s.empty() || s.size() > max_lease_owner_bytes) return false;
  for (const unsigned char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

}  // namespace

lease_answer lease_failed(layer_failure f) {
  lease_answer a;
  a.status = lease_status::failed;
  a.failure = f;
  return a;
}

std::string lease_key(const stored_key& k) {
  const std::string key = remote_key(k);
  constexpr std::string_view launchfit = "launchfit:";
  if (key.compare(0, launchfit.size(), launchfit) != 0) return {};
  return lease_key_prefix + key.substr(launchfit.size());
}

lease_answer redis_take_lease(const redis_exchange& exchange, const std::string& lease_key,
                              const std::string& owner, std::uint64_t ttl_ms) {
  if (lease_key.empty() || !plausible_owner(owner) || ttl_ms == 0) return lease_failed(layer_failure::refused);
  std::vector<reply> r;
  const store_failure f = exchange({{"SET", lease_key, owner, "NX", "PX", std::to_string(ttl_ms)},
                                    {"GET", lease_key},
                                    {"PTTL", lease_key}},
                                   r);
  if (f) return lease_failed(layer_failure_of(f.kind));
  if (r.size() != 3) return lease_failed(layer_failure::protocol);
  lease_answer a;
  if (r[0].type == reply::kind::status) {
    a.status = lease_status::taken;
    return a;
  }
  if (r[0].type != reply::kind::nil) return lease_failed(layer_failure_of(store_fault::refused));  // an error reply
  a.status = lease_status::held;
  if (r[1].type == reply::kind::string && plausible_owner(r[1].text)) a.holder = r[1].text;
  if (r[2].type == reply::kind::integer && r[2].integer >= 0) a.remaining_ms = r[2].integer;
  return a;
}

lease_answer redis_release_lease(const redis_exchange& exchange, const std::string& lease_key,
                                 const std::string& owner) {
  if (lease_key.empty() || !plausible_owner(owner)) return lease_failed(layer_failure::refused);
  std::vector<reply> r;
  const store_failure f = exchange({{"EVAL", std::string(release_script), "1", lease_key, owner}}, r);
  if (f) return lease_failed(layer_failure_of(f.kind));
  if (r.size() != 1 || r[0].type != reply::kind::integer) return lease_failed(layer_failure::protocol);
  lease_answer a;
  a.status = r[0].integer == 1 ? lease_status::released : lease_status::not_owner;
  return a;
}

std::vector<lease_poll> redis_poll_leases(const redis_exchange& exchange,
                                          const std::vector<std::pair<std::string, stored_key>>& items) {
  std::vector<lease_poll> out(items.size());
  // A few keys per exchange: each value may be up to 64 KiB, and one exchange is held to the store's bounds
  // (8 MiB and the operation's time), which thousands of watched keys in one pipeline would break.
  constexpr std::size_t keys_per_exchange = 32;
  for (std::size_t from = 0; from < items.size(); from += keys_per_exchange) {
    const std::size_t to = std::min(items.size(), from + keys_per_exchange);
    std::vector<redis::command> cmds;
    std::vector<std::string> keys;
    for (std::size_t i = from; i < to; ++i) {
      keys.push_back(remote_key(items[i].second));
      cmds.push_back(read_value_command(keys.back()));
      cmds.push_back({"EXISTS", items[i].first});
    }
    std::vector<reply> r;
    const store_failure f = exchange(cmds, r);
    if (f || r.size() != cmds.size()) {
      for (std::size_t i = from; i < items.size(); ++i)
        out[i].failure = f ? layer_failure_of(f.kind) : layer_failure::protocol;
      return out;
    }
    for (std::size_t i = from; i < to; ++i) {
      const reply& value = r[2 * (i - from)];
      const reply& exists = r[2 * (i - from) + 1];
      if (value.type == reply::kind::string) {
        std::string why;
        // Untrusted like any lookup's value: the one check every reader and writer applies.
        out[i].published = parse_remote_value(value.text, keys[i - from], why);
      }
      out[i].held = exists.type == reply::kind::integer && exists.integer > 0;
      if (exists.type == reply::kind::error) out[i].failure = layer_failure::protocol;
    }
  }
  return out;
}

}  // namespace launchfit::detail

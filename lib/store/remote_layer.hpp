// SPDX-License-Identifier: MIT
#pragma once
// Internal: the remote plan store on Redis as a layer of the plan store (plan_store_layer), below the
// local file. The key scheme and values are kv_scheme.hpp's; the transport is redis_backend.hpp's.
//
// The store fails open, and no peer can stretch its bounds:
// - connecting (the host name resolved included) waits at most 100 ms;
// - a lookup ends within the operation bound (200 ms), whatever the peer does: waiting for the lookup
//   connection another thread uses, connecting, and every exchange with its reply parsing included. An
//   exchange is started only with at least half the bound left; a lookup that cannot start one in time
//   (another thread's lookup held the connection) returns what memory has and counts it (`busy`);
// - an exchange reads at most 64 Ki reply elements and 8 MiB, and no string above 64 KiB + 1 byte: an
//   answer over a bound is refused when announced, before anything is allocated for it;
// - a slow store is dropped like a dead one: three lookup exchanges in a row that each take more than half
//   the operation bound (100 ms), or more than 1 s spent in lookup exchanges within 10 s (counted in
//   one-second steps);
// - a store that is down, hangs, answers an error or a wrong type, breaks a bound or is slow is dropped
//   for the process after one warning, and every later call returns at once. An entry that fails
//   validation (forged, torn, another format version) is refused and counted, with one warning per store,
//   and the store stays in use.
// Writes are queued (1024 entries; more are dropped and counted) and written by the background queue
// (background.hpp: its one thread, or a flushing caller's; a normal exit waits at most 1 s for them) with
// SET NX EX; a key holding a valid entry is replaced only by a plan measured better beyond noise
// (better_measured(), counted as `superseded`), one holding an invalid value (one a lookup refuses) always
// (`replaced`), both compare-and-set (redis_ops.hpp), so that neither arrival order nor one bad value decides
// for the TTL. An entry a lookup read lives on: the writer sets its key's time to live to the TTL again, at
// most once per key per hour in this process (EXPIRE; counted as `ttl_refreshes`); the lookup only queues. A
// forked child never uses its parent's connections: it opens its own on first use and writes only what it
// stores itself.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv_scheme.hpp"
#include "launchfit/cache.hpp"
#include "layer.hpp"

namespace launchfit::detail {

struct remote_options {
  remote_url url;
  std::uint64_t ttl_s = remote_default_ttl_s;
  unsigned connect_timeout_ms = 100;
  unsigned op_timeout_ms = 200;  // a lookup, and each exchange
  std::size_t queue_max = 1024;  // entries waiting to be written
  // The first lookup of a device model reads that model's entries in one go (SCAN MATCH <prefix>*), within
  // the lookup's bound and these; later lookups of the model are answered from memory (a model read only in
  // part also asks for the exact key).
  std::size_t bulk_max_keys = 4096;
  std::size_t bulk_max_bytes = std::size_t(16) << 20;
  // A key a lookup read has its time to live set to ttl_s again by the writer, at most once per key per
  // this interval in this process (of at most refresh_keys_max keys remembered at once).
  std::chrono::seconds refresh_every{3600};
  std::size_t refresh_keys_max = 65536;
};

class redis_store final : public plan_store_layer {
 public:
  explicit redis_store(remote_options options);
  // Closes the store (close()).
  ~redis_store() override;
  redis_store(const redis_store&) = delete;
  redis_store& operator=(const redis_store&) = delete;

  const char* name() const noexcept override { return "redis"; }
  // Every entry of this key's model, driver and toolkit for its kernel, policy and smem rule (any bucket):
  // the key's own bucket first, then the nearest, then the newest. The first lookup of a model connects
  // and reads the model's entries (bounded, see above); later ones are answered from memory unless the
  // model was read only in part. Never throws; returns none at once when the store is dead.
  std::vector<stored_entry> find(const stored_key& key) override;
  // find(), and when it found nothing, why: the kind of the failure that dropped the store during this
  // lookup (timeout, io, protocol: an error reply or an answer over a bound), `timeout` when this lookup gave
  // up waiting for another thread's (busy), `refused` once the store is dead or closed.
  layer_answer get(const stored_key& key) override;
  // Queues the entry; never waits. Dropped (and counted) when the queue is full, the store is dead or
  // closed, or the key has no device model. Lookups of this process see it at once.
  void put(const stored_entry& e) override;
  // Waits at most max_wait_ms for the queue; true when everything put since the previous flush was
  // written, found stored already by another writer, or replaced an invalid value.
  bool flush(unsigned max_wait_ms) override;
  layer_stats stats() const override;
  remote_store_stats statistics() const;
  // Flushes (at most 1 s), takes the writer off the background queue and drops the connections; the store
  // then answers nothing. Idempotent; the destructor calls it.
  void close();
  const remote_url& url() const noexcept;
  // Leases on a plan's tuning (store/lease.hpp's commands): on the lookup connection, as a lookup, within the
  // store's bounds and under its slow-store rule (a failed exchange drops the store); a store dead for the
  // process or closed answers `failed` (refused) at once.
  lease_answer take_lease(const std::string& lease_key, const std::string& owner, std::uint64_t ttl_ms) override;
  lease_answer release_lease(const std::string& lease_key, const std::string& owner) override;
  std::vector<lease_poll> poll_leases(const std::vector<std::pair<std::string, stored_key>>& items) override;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace launchfit::detail

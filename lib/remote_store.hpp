// SPDX-License-Identifier: MIT
#pragma once
// Internal: the remote plan store on Redis, the layer below the local file (plan_store.hpp). Off by default;
// LAUNCHFIT_REMOTE=redis://host:port[/db] or set_remote_store() turns it on.
//
// Plans are shared by every GPU of one device model: a key names the model (name, compute capability, SM
// count, L2 size, MIG or not), the driver and toolkit versions, the kernel's fingerprint, the policy text
// (with its launch-option words), the smem rule and the size bucket, never a GPU's UUID:
//
//   launchfit:v1:f1:<16 hex: model, driver, toolkit>:<16 hex: kernel, policy, smem rule, bucket>
//
// A value is a one-entry plan-cache document (serialize_cache_file), at most 64 KiB, read back through the
// file's own parser and checked like a file entry; its stored key must hash to the key it was found under
// and equal the key looked up, so a hash collision never serves another kernel's plan.
//
// The store fails open. Connecting waits at most 100 ms and each operation 200 ms; a store that is down,
// hangs, answers an error or a wrong type, or holds a value above 64 KiB is dropped for the process after
// one warning, and every later call returns at once. An entry that fails validation (forged, torn, another
// format version) is refused and counted, with one warning per store, and the store stays in use.
// Writes are queued (1024 entries; more are dropped and counted) and written by a background thread with
// SET NX EX (the first writer wins; entries expire after LAUNCHFIT_REMOTE_TTL seconds, default 30 days);
// a normal exit waits at most 1 s for them. A forked child never uses its parent's connections: it opens
// its own on first use and writes only what it stores itself.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/cache.hpp"
#include "plan_file_format.hpp"
#include "plan_store.hpp"

namespace launchfit::detail {

// ---- what the plan store calls ---------------------------------------------------------------------------

// The process's remote layer, or nullptr while none is configured (the default, a refused URL, or after
// close_remote_store()). The first call reads LAUNCHFIT_REMOTE (and LAUNCHFIT_REMOTE_TTL) unless
// set_remote_store() or close_remote_store() came first; later calls are one atomic load. A pointer it
// returned stays valid for the life of the process: a store replaced or closed since answers nothing and
// drops what it is given. Its entries come back validated, with plan.match == "remote".
//
// How the plan store uses it: find_stored_plan() asks remote_layer()->find(key) only when memory and the
// file have no plan for the key (never on the hit path: find() may do I/O, bounded as above), picks the
// best entry as for the file (best_stored_plan(..., "remote")) and validates it for the launch;
// store_plan() hands every plan it records to put() as well (it queues; a plan that came from a store
// need not be put back). flush_remote_store() and the exit handler flush the queue.
plan_store_layer* remote_layer() noexcept;

// ---- URL, keys and values ---------------------------------------------------------------------------------

struct remote_url {
  std::string host;  // a host name, an IPv4 address, or an IPv6 address without its brackets
  int port = 6379;
  int db = 0;
  std::string text;  // as given
};

// redis://host[:port][/db]: port 1..65535 (default 6379), db 0..65535 (default 0), at most 256 bytes of
// printable ASCII. nullopt for anything else, `why` saying what is wrong (the text itself not included).
// A host name is resolved by the system's resolver when the store first connects, within the connect bound
// (100 ms): a resolver that takes longer leaves the store dead for the process, with one warning.
std::optional<remote_url> parse_remote_url(std::string_view text, std::string& why);

// Largest value read or written: a longer one is never served.
inline constexpr std::size_t remote_max_value_bytes = 64 * 1024;
// Entries expire this long after they are written unless LAUNCHFIT_REMOTE_TTL says otherwise.
inline constexpr std::uint64_t remote_default_ttl_s = 30ull * 24 * 3600;
// Every key of this format version starts with this.
inline constexpr const char* remote_key_base = "launchfit:v1:f1:";

// "launchfit:v1:f1:<16 hex>:", the prefix of every key of this key's device model, driver and toolkit;
// "" for a key without a device model (an older writer's entry: used for its own GPU only, never shared).
std::string remote_model_prefix(const stored_key& k);
// The prefix and 16 hex of the kernel fingerprint, policy text, smem rule and bucket; "" as above.
std::string remote_key(const stored_key& k);
// Whether text has the shape remote_key() gives (base, 16 hex, ':', 16 hex).
bool is_remote_key(std::string_view text) noexcept;
// The value stored for an entry: serialize_cache_file({e}).
std::string remote_value(const stored_entry& e);
// A value read under `key_name`, parsed and validated as an entry of the file (parse_cache_file, then
// validate_stored_entry): a launchfit plan-cache document of this format version with exactly one good
// entry, naming a device model, whose stored key hashes to `key_name`. nullopt with `why` otherwise. The
// plan's match is "remote". Never throws.
std::optional<stored_entry> parse_remote_value(std::string_view value, std::string_view key_name,
                                               std::string& why);

// ---- the layer --------------------------------------------------------------------------------------------

struct remote_options {
  remote_url url;
  std::uint64_t ttl_s = remote_default_ttl_s;
  unsigned connect_timeout_ms = 100;
  unsigned op_timeout_ms = 200;  // per read or write on the socket
  std::size_t queue_max = 1024;  // entries waiting to be written
  // The first lookup of a device model reads that model's entries in one go (SCAN MATCH <prefix>*), within
  // these bounds; later lookups of the model are answered from memory (a model read only in part also asks
  // for the exact key).
  unsigned bulk_ms = 300;
  std::size_t bulk_max_keys = 4096;
  std::size_t bulk_max_bytes = std::size_t(16) << 20;
  // Whether a normal exit waits (at most 1 s) for the queue: set for the store remote_layer() hands out.
  bool flush_at_exit = false;
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
  // and reads the model's entries (bounded, see remote_options); later ones are answered from memory
  // unless the model was read only in part. Never throws; returns none at once when the store is dead.
  std::vector<stored_entry> find(const stored_key& key) override;
  // Queues the entry; never waits. Dropped (and counted) when the queue is full, the store is dead or
  // closed, or the key has no device model. Lookups of this process see it at once.
  void put(const stored_entry& e) override;
  // Waits at most max_wait_ms for the queue; true when everything put since the previous flush was
  // written or found already stored (another writer was first).
  bool flush(unsigned max_wait_ms) override;
  layer_stats stats() const override;
  remote_store_stats statistics() const;
  // Flushes (at most 1 s), stops the writer thread and drops the connections; the store then answers
  // nothing. Idempotent.
  void close();
  const remote_url& url() const noexcept;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// ---- what tools call (launchfit-plans) --------------------------------------------------------------------

struct remote_listing {
  std::vector<stored_entry> entries;  // the valid ones
  struct problem {
    std::string key;  // the Redis key (as read; escape it before printing)
    std::string why;
  };
  std::vector<problem> problems;  // keys whose values were refused (at most 1000 kept)
  std::size_t refused = 0;        // all of them
  std::size_t keys = 0;           // keys read
  bool truncated = false;         // a bound was reached before the end of the scan
  std::string failure;  // not empty: unreachable, timed out or a protocol error (the rest is partial)
};

struct remote_tool_limits {
  std::size_t max_keys = 100000;
  std::size_t max_bytes = std::size_t(256) << 20;
  unsigned max_ms = 30000;
  unsigned connect_timeout_ms = 2000;
  unsigned op_timeout_ms = 5000;
};

// Every launchfit key of this format version at the URL (or only those starting with `prefix`), each value
// read and validated like a lookup's. A key of another type or a value above 64 KiB is a problem, not a
// failure. Never throws.
remote_listing list_remote_entries(const remote_url& url, const remote_tool_limits& limits = {},
                                   const std::string& prefix = remote_key_base);

struct remote_push_result {
  std::size_t written = 0;            // new keys
  std::size_t present = 0;            // keys that existed already (the first writer wins)
  std::size_t refused = 0;            // entries without a device model, or whose value would exceed 64 KiB
  std::vector<std::string> problems;  // why each refused entry or failed write (at most 1000 kept)
  std::string failure;                // not empty: unreachable, timed out or a protocol error
};

// Writes every entry now, SET NX EX ttl_s, pipelined. Never throws.
remote_push_result push_remote_entries(const remote_url& url, const std::vector<stored_entry>& entries,
                                       std::uint64_t ttl_s, const remote_tool_limits& limits = {});

// LAUNCHFIT_REMOTE_TTL, or the default with `warning` set for a value that is not a positive number of
// seconds (at most 10 years).
std::uint64_t remote_ttl_from_env(std::string& warning);

}  // namespace launchfit::detail

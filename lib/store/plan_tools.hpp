// SPDX-License-Identifier: MIT
#pragma once
// Internal: what launchfit-plans asks of a remote plan store (list, pull, check and push a redis:// URL),
// with the same keys, values and validation as the library's lookups and writes. Every command is bounded
// in time and memory, whatever the store holds or answers:
//
//   at most 30 s in all; each exchange at most 5 s, 64 Ki reply elements and 8 MiB; at most 64 MiB of
//   answers in all; at most 100,000 keys scanned (launchfit's or not).
//
// A command that stops at a bound says which in its failure (kind `bound`), and keeps what it had read.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../plan_file_format.hpp"

namespace launchfit::detail::plan_tools {

struct store_bounds {
  std::size_t max_keys = 100000;
  std::size_t max_bytes = std::size_t(64) << 20;
  unsigned max_ms = 30000;
  unsigned connect_timeout_ms = 2000;
  unsigned op_timeout_ms = 5000;
};

struct failure {
  enum class kind {
    none,
    url,          // not redis://host[:port][/db]
    unreachable,  // cannot connect, the connection broke, or no answer in time
    refused,      // the store answered an error (NOAUTH, OOM, READONLY, ...)
    protocol,     // not Redis, or an answer over a bound of one exchange
    bound,        // one of the command's bounds (keys, bytes, time) was reached
  };
  kind what = kind::none;
  std::string text;  // from the store in part: escape it before printing
  explicit operator bool() const noexcept { return what != kind::none; }
};

// Why `text` is not a store URL, or "".
std::string url_problem(const std::string& text);

struct listing {
  std::vector<stored_entry> entries;  // the valid ones (plan.match "remote")
  struct problem {
    std::string key;  // as read: escape it before printing
    std::string why;
  };
  std::vector<problem> problems;  // keys whose values were refused (at most 1000 kept)
  std::size_t refused = 0;        // all of them
  std::size_t keys = 0;           // launchfit keys read
  failure failed;                 // set: the listing is partial
};

// Every launchfit key of this format version at the URL (or only those starting with `prefix`), each value
// read and validated exactly as a lookup validates it, its origin the store's (remote_origin()). A key of
// another type or a value above 64 KiB is a problem, not a failure. Never throws.
listing list_entries(const std::string& url, const store_bounds& bounds = {}, const std::string& prefix = "");

// A tuning lease held in the store (lease.hpp): the plan key it guards, its owner's token and what is left.
struct lease_view {
  std::string plan_key;   // as read: escape it before printing
  std::string owner;      // as read (at most 129 bytes kept): escape it before printing
  long long ttl_ms = -1;  // PTTL's answer: -2 gone since the scan, -1 no expiry (not launchfit's)
};

// A store's plans and tuning leases, read within one command's bounds (the keys bound counts both).
struct store_view {
  listing plans;
  std::vector<lease_view> leases;  // at most 1000 kept
  std::size_t lease_count = 0;     // all of them
};
store_view view_store(const std::string& url, const store_bounds& bounds = {});

struct push_result {
  std::size_t written = 0;     // new keys
  std::size_t present = 0;     // keys holding a valid entry as good or better (better_measured)
  std::size_t replaced = 0;    // keys whose invalid value was replaced
  std::size_t superseded = 0;  // keys whose entry this push's, measured better beyond noise, replaced
  std::size_t refused = 0;     // entries without a device model, whose value would exceed 64 KiB, or not
                               // written because their key kept changing under this writer
  std::vector<std::string> problems;  // why each refused entry (at most 1000 kept)
  failure failed;                     // set: the rest was not written
};

// Writes every entry as the library's writer does (write_entries(): SET NX EX ttl_s; a valid entry
// replaced only by one measured better beyond noise, an invalid value replaced, both compare-and-set), in
// pipelines of 64. Never throws.
push_result push_entries(const std::string& url, const std::vector<stored_entry>& entries,
                         std::uint64_t ttl_s, const store_bounds& bounds = {});

// The key an entry is stored under ("" for one without a device model), for messages.
std::string store_key(const stored_key& k);

// LAUNCHFIT_REMOTE_TTL as the library reads it; `warning` set when it is not a valid number of seconds.
std::uint64_t ttl_from_env(std::string& warning);

}  // namespace launchfit::detail::plan_tools

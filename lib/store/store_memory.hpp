// SPDX-License-Identifier: MIT
#pragma once
// Internal: what a process knows of a remote store's entries, per device model (a key prefix of
// kv_scheme.hpp): the entries a bulk read or a single read found (valid ones only), and this process's own
// writes, so that later lookups of the model are answered without a round trip. Thread-safe.

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../plan_file_format.hpp"

namespace launchfit::detail {

class store_memory {
 public:
  using clock = std::chrono::steady_clock;
  // How long a bulk read answers "absent" for a key it did not see: a plan another process writes later is
  // then read with one round trip on the next miss for it.
  static constexpr std::chrono::seconds absent_fresh_for{5};

  // Whether the model was read in bulk (in full or in part) yet.
  bool read(const std::string& prefix) const;
  // Whether the key's slot holds an entry (it stays for the process: a better plan another writer stores
  // later is read by the next process).
  bool holds(const std::string& prefix, const std::string& key) const;
  // Whether this key is answered without a round trip: an entry is known, or the model was read in full
  // less than absent_fresh_for ago.
  bool answers(const std::string& prefix, const std::string& key, clock::time_point now) const;
  // A value read under `key` (nullopt: absent or refused); an entry known already stays.
  void found(const std::string& prefix, const std::string& key, std::optional<stored_entry> entry);
  // This process's own entry for `key`: replaces what was known.
  void wrote(const std::string& prefix, const std::string& key, stored_entry entry);
  // The end of a bulk read of the model, `complete` when the scan reached its end.
  void read_ended(const std::string& prefix, bool complete, clock::time_point now);
  // Every known entry of the model that may serve `key` (its model and exact driver, kernel, policy text and
  // smem rule; any bucket): the key's own bucket first, then the nearest, then the newest.
  std::vector<stored_entry> entries_for(const stored_key& key, const std::string& prefix) const;

  // Fork: held across fork() (no other thread is then mid-update), given back in the parent and the child.
  void lock_for_fork() const { m_.lock(); }
  void unlock_after_fork() const { m_.unlock(); }

 private:
  struct model {
    enum class state { unread, partial, complete };
    state st = state::unread;
    std::map<std::string, std::optional<stored_entry>> slots;  // key -> entry (none: absent or refused)
    clock::time_point read_at{};                               // when the bulk read ended
  };
  mutable std::mutex m_;
  std::map<std::string, model> models_;
};

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan file's loaded table (store/file_layer.cpp): what lookups see of the file, its entries
// as loaded and refreshed, and this process's stores. Not locked: its owner's mutex guards it.

#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "../plan_file_format.hpp"
#include "../plan_json.hpp"

namespace launchfit::detail::plan_file {

// Whether two entries of one key would serve the same plan (when they were stored aside).
inline bool same_content(const stored_entry& a, const stored_entry& b) {
  if (a.bytes_in_flight_per_sm != b.bytes_in_flight_per_sm || a.key.device_name != b.key.device_name ||
      a.key.l2_bytes != b.key.l2_bytes) {
    return false;
  }
  nlohmann::json pa = plan_to_json(a.plan), pb = plan_to_json(b.plan);
  pa.erase("match");
  pb.erase("match");
  return pa == pb;
}

// Entries by launch first (kernel, policy, smem rule), so that what one lookup considers is adjacent.
using table_key =
    std::tuple<std::string, std::string, std::string, std::string, int, int, int, std::uint64_t>;

inline table_key table_key_of(const stored_key& k) {
  return {k.kernel, k.policy, k.smem_rule, k.device_uuid, k.cc, k.sm_count, k.driver_version, k.bucket};
}

// What lookups see: the file's entries as loaded and refreshed, and this process's stores. Not locked:
// its owner's mutex guards it.
class plan_table {
 public:
  const stored_entry* exact(const stored_key& k) const {
    const auto it = entries_.find(table_key_of(k));
    return it == entries_.end() ? nullptr : &it->second;
  }
  // Calls f for every entry of this kernel and policy, and smem rule unless it is null.
  template <class F>
  void each_of(const std::string& kernel, const std::string& policy, const std::string* smem_rule,
               F f) const {
    // Probed by views (the map's comparison is transparent): a lookup copies none of the key's text.
    using probe = std::tuple<std::string_view, std::string_view, std::string_view, std::string_view, int, int, int,
                             std::uint64_t>;
    for (auto it = entries_.lower_bound(probe{kernel, policy, smem_rule ? std::string_view(*smem_rule) : std::string_view(),
                                              std::string_view(), INT_MIN, INT_MIN, INT_MIN, 0});
         it != entries_.end(); ++it) {
      if (std::get<0>(it->first) != kernel || std::get<1>(it->first) != policy ||
          (smem_rule && std::get<2>(it->first) != *smem_rule)) {
        break;
      }
      f(it->second);
    }
  }
  template <class F>
  void each(F f) const {
    for (const auto& [k, e] : entries_) f(e);
  }
  void put(stored_entry e) { entries_.insert_or_assign(table_key_of(e.key), std::move(e)); }
  // A lookup's launch, found or not: an entry another process changes for it is an input of its plan.
  void note_lookup(const stored_key& k) { looked_up_.insert(launch_hash(k)); }
  // Takes what another process wrote (the disk wins) except for the keys `ours` says this process stored
  // and has not written yet. True when an entry that a plan may depend on now differs: one of a launch
  // looked up here, or a calibration (the bytes-in-flight default of every launch).
  template <class Ours>
  bool take_from_disk(std::vector<stored_entry>& changed, Ours ours) {
    bool relied_on = false;
    for (auto& e : changed) {
      if (ours(e.key)) continue;
      table_key k = table_key_of(e.key);
      const auto it = entries_.find(k);
      if (it == entries_.end() || !same_content(it->second, e)) {
        relied_on =
            relied_on || e.key.kernel == calibration_kernel || looked_up_.count(launch_hash(e.key)) != 0;
      }
      entries_.insert_or_assign(std::move(k), std::move(e));
    }
    return relied_on;
  }
  std::size_t size() const noexcept { return entries_.size(); }
  void clear() {
    entries_.clear();
    looked_up_.clear();
  }

 private:
  static std::uint64_t launch_hash(const stored_key& k) noexcept {
    const std::hash<std::string_view> h;
    std::uint64_t x = h(k.kernel);
    x = (x ^ (x >> 29)) * 0x9e3779b97f4a7c15ULL ^ h(k.policy);
    return (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL ^ h(k.smem_rule);
  }

  std::map<table_key, stored_entry, std::less<>> entries_;
  std::unordered_set<std::uint64_t>
      looked_up_;  // launch_hash of every lookup (a collision only costs a replan)
};

}  // namespace launchfit::detail::plan_file

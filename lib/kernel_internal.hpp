// SPDX-License-Identifier: MIT
#pragma once
// Internal: the kernels a module has handed out, so unloading it forgets their cached plans.

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace launchfit::detail {

// Thread-safe; holds each id once, so it is bounded by the kernels in the module however often get() runs.
class kernel_id_set {
 public:
  void insert(std::uintptr_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    ids_.insert(id);
  }
  std::vector<std::uintptr_t> ids() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {ids_.begin(), ids_.end()};
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ids_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::uintptr_t> ids_;

 public:
  // A module loaded from PTX: its entries that never execute griddepcontrol.wait (ptx_scan.hpp). Empty
  // optional for a cubin or fatbin (launchfit does not read their machine code).
  std::optional<std::set<std::string>> entries_without_wait;
};

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// What a process knows of a remote store's entries (store_memory.hpp).

#include "store_memory.hpp"

#include <algorithm>
#include <string_view>
#include <tuple>
#include <utility>

#include "device_match.hpp"

namespace launchfit::detail {

bool store_memory::read(const std::string& prefix) const {
  std::lock_guard lk(m_);
  const auto it = models_.find(prefix);
  return it != models_.end() && it->second.st != model::state::unread;
}

bool store_memory::holds(const std::string& prefix, const std::string& key) const {
  std::lock_guard lk(m_);
  const auto it = models_.find(prefix);
  if (it == models_.end()) return false;
  const auto slot = it->second.slots.find(key);
  return slot != it->second.slots.end() && slot->second.has_value();
}

bool store_memory::answers(const std::string& prefix, const std::string& key, clock::time_point now) const {
  std::lock_guard lk(m_);
  const auto it = models_.find(prefix);
  if (it == models_.end() || it->second.st == model::state::unread) return false;
  const auto slot = it->second.slots.find(key);
  if (slot != it->second.slots.end() && slot->second) return true;
  // Absent (or refused): trusted only while the read is fresh.
  return it->second.st == model::state::complete && now - it->second.read_at < absent_fresh_for;
}

void store_memory::found(const std::string& prefix, const std::string& key,
                         std::optional<stored_entry> entry) {
  std::lock_guard lk(m_);
  auto& slot = models_[prefix].slots[key];
  if (!slot) slot = std::move(entry);  // this process's own write stays
}

void store_memory::wrote(const std::string& prefix, const std::string& key, stored_entry entry) {
  std::lock_guard lk(m_);
  models_[prefix].slots[key] = std::move(entry);
}

void store_memory::read_ended(const std::string& prefix, bool complete, clock::time_point now) {
  std::lock_guard lk(m_);
  model& md = models_[prefix];
  md.st = complete ? model::state::complete : model::state::partial;
  md.read_at = now;
}

std::vector<stored_entry> store_memory::entries_for(const stored_key& key, const std::string& prefix) const {
  std::vector<stored_entry> out;
  {
    std::lock_guard lk(m_);
    const auto it = models_.find(prefix);
    if (it == models_.end()) return out;
    for (const auto& [k, slot] : it->second.slots)
      if (slot && same_model_and_driver(slot->key, key) && slot->key.kernel == key.kernel &&
          slot->key.policy == key.policy && slot->key.smem_rule == key.smem_rule)
        out.push_back(*slot);
  }
  const auto rank = [&](const stored_entry& e) {
    const std::uint64_t d = e.key.bucket > key.bucket ? e.key.bucket - key.bucket : key.bucket - e.key.bucket;
    return std::make_tuple(d, ~e.stored_at_ms, std::string_view(e.key.device_uuid));
  };
  std::sort(out.begin(), out.end(),
            [&](const stored_entry& a, const stored_entry& b) { return rank(a) < rank(b); });
  return out;
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// When a store that answers is too slow to keep (slow_store.hpp).

#include "slow_store.hpp"

namespace launchfit::detail {

std::string slow_store_rule::record(clock::duration took, clock::time_point end, bool budgeted) {
  std::lock_guard lk(m_);
  slow_ = took > op_bound_ / 2 ? slow_ + 1 : 0;
  if (slow_ >= in_a_row)
    return std::to_string(in_a_row) + " answers in a row took more than " +
           std::to_string((op_bound_ / 2).count()) + " ms each";
  if (!budgeted) return "";
  const long long now = std::chrono::duration_cast<std::chrono::seconds>(end.time_since_epoch()).count();
  second& s = seconds_[static_cast<std::size_t>(now % window.count())];
  if (s.index != now) s = {now, {}};
  s.spent += took;
  clock::duration spent{};
  for (const second& x : seconds_)
    if (x.index > now - window.count()) spent += x.spent;
  if (spent > budget)
    return "lookups waited for it more than " + std::to_string(budget.count()) + " ms within " +
           std::to_string(window.count()) + " s";
  return "";
}

}  // namespace launchfit::detail

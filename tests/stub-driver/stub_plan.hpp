// SPDX-License-Identifier: MIT
#pragma once
// The plan a test's own policy makes through the stub driver: `block` threads, as many resident blocks per SM
// as fit (the query's answer), with the test's reason.

#include <string>
#include <utility>

#include "launchfit/policy.hpp"

namespace launchfit_test {

inline launchfit::plan full_residency_plan(const launchfit::query& q, unsigned block, std::string reason) {
  launchfit::plan p;
  p.block = launchfit::dims{block, 1, 1};
  p.block_threads = static_cast<int>(block);
  p.blocks_per_sm = q.active_blocks_for(static_cast<int>(block));
  p.reason = std::move(reason);
  return p;
}

}  // namespace launchfit_test

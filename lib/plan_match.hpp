// SPDX-License-Identifier: MIT
#pragma once
// plan::match, where a plan came from: the values launchfit sets and tests, named once. The plan file's
// levels add a suffix to "cache-file" (store/chain.cpp: "-same-model", "-other-bucket"); the public default,
// "computed", is plan.hpp's.

#include <string>
#include <string_view>

namespace launchfit::detail::plan_match {

// The policy decided in this process.
inline constexpr const char* computed = "computed";
// A plugin policy declined or failed, and its fallback decided: not the policy's decision, so never stored
// (stored, it would stop the policy from being asked again), and a graph node planned so is left as it is.
inline constexpr const char* fallback = "fallback";
// The remote plan store served it (another GPU of this model).
inline constexpr std::string_view remote = "remote";
// The plan file served it; store/chain.cpp adds the level's suffix ("-same-model", "-other-bucket").
inline constexpr const char* cache_file = "cache-file";
// A static plan launched while another process tunes the key (tuning_lease.hpp); plan_for() refuses it.
inline constexpr const char* waiting = "static-while-tuned-elsewhere";

// Whether the remote plan store served the plan (any level of it).
inline bool from_remote_store(const std::string& match) { return match.compare(0, remote.size(), remote) == 0; }

}  // namespace launchfit::detail::plan_match

// SPDX-License-Identifier: MIT
#pragma once
// Internal: a host name resolved within a deadline. getaddrinfo() has no timeout of its own (a dead
// resolver holds it for the resolv.conf timeouts, seconds), so a store's connect bound would not hold.

#include <chrono>
#include <optional>
#include <string>

namespace launchfit::detail {

// The host as a numeric address (IPv4 preferred: "localhost" often lists ::1 first while servers listen on
// 127.0.0.1), the host itself when it is one already. The resolver runs on a thread of its own, left
// behind when it takes longer than `deadline`: the caller waits no longer. nullopt with `why` otherwise.
std::optional<std::string> resolve_within(const std::string& host,
                                          std::chrono::steady_clock::time_point deadline, std::string& why);

}  // namespace launchfit::detail

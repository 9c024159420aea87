// SPDX-License-Identifier: MIT
#pragma once
// Internal: why a plan store layer's operation failed (store/layer.hpp), in a header of its own so that
// lib/error.cpp, which names every code launchfit reports, names these too without the store's headers.

#include <cstdint>

namespace launchfit::detail {

// Why a layer's operation failed. The chain treats every failure alike (fail open: the lookup goes on
// below, the plan is made locally), and counts each kind.
enum class layer_failure : std::uint8_t {
  none,
  timeout,   // the operation's time bound ran out (a slow or silent peer)
  io,        // the connection or the file could not be used
  protocol,  // the peer answered something no store would (a wrong type, an answer over a bound)
  refused,   // the layer is off for the process: dead after a failure, closed, or never configured
};
// "timeout", "io", ...: the failure's name in counts and log lines (lib/error.cpp, beside errc's names).
const char* failure_name(layer_failure f) noexcept;

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// Internal: what the bounded demangler (demangle.cpp) did on this thread.

#include <cstdint>

namespace launchfit::detail {

// The bytes of readable name the demangler produced on this thread so far, counting the piece that went past
// the budget: the tests bound a demangling's work by it, not by a clock.
std::uint64_t demangled_bytes() noexcept;

}  // namespace launchfit::detail

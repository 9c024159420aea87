// SPDX-License-Identifier: MIT
#pragma once
// Internal: the one reading of a LAUNCHFIT_* on/off switch. Every switch accepts the same words, so that a
// value that means "on" to one variable never silently means "off" to another. The variables themselves
// are read once, with every other one, into the settings (settings.hpp).

#include <optional>
#include <string_view>

namespace launchfit::detail {

// The words every switch accepts, as a warning lists them.
inline constexpr const char* switch_words = "1, 0, true, false, yes, no, on, off";

// 1/true/yes/on -> true, 0/false/no/off -> false (any case, spaces and tabs around ignored); anything
// else -> nullopt.
std::optional<bool> parse_switch(std::string_view text);

}  // namespace launchfit::detail

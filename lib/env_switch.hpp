// SPDX-License-Identifier: MIT
#pragma once
// Internal: the one reading of a LAUNCHFIT_* on/off switch. Every switch accepts the same words, so that a
// value that means "on" to one variable never silently means "off" to another.

#include <optional>
#include <string>
#include <string_view>

namespace launchfit::detail {

// The words every switch accepts, as a warning lists them.
inline constexpr const char* switch_words = "1, 0, true, false, yes, no, on, off";

// 1/true/yes/on -> true, 0/false/no/off -> false (any case, spaces and tabs around ignored); anything
// else -> nullopt.
std::optional<bool> parse_switch(std::string_view text);

struct switch_reading {
  bool on = false;
  std::string warning;  // set when the variable held something else: names it and its value, escaped
};

// The switch `variable` from the environment: unset or empty -> `fallback`; a word parse_switch() refuses
// -> `fallback` and a warning for the caller to log once.
switch_reading read_switch(const char* variable, bool fallback);

}  // namespace launchfit::detail

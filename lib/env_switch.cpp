// SPDX-License-Identifier: MIT
// The one reading of a LAUNCHFIT_* switch: an enumeration of settings.hpp.

#include "env_switch.hpp"

#include "settings.hpp"

namespace launchfit::detail {

std::optional<bool> parse_switch(std::string_view v) {
  const auto i = parse_word(v, {"0", "false", "no", "off", "1", "true", "yes", "on"});
  if (!i) return std::nullopt;
  return *i >= 4;
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// The one reading of a LAUNCHFIT_* switch.

#include "env_switch.hpp"

#include <cstdlib>

#include "text.hpp"

namespace launchfit::detail {

std::optional<bool> parse_switch(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v.size() > 5) return std::nullopt;
  std::string s(v);
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}

switch_reading read_switch(const char* variable, bool fallback) {
  switch_reading r{fallback, {}};
  const char* v = std::getenv(variable);
  if (!v || !*v) return r;  // empty means unset (VAR= command)
  if (const std::optional<bool> on = parse_switch(v)) {
    r.on = *on;
    return r;
  }
  r.warning = std::string(variable) + "=" + quote_text(v, 64) + " is not a switch (valid: " + switch_words +
              "); ignored, " + variable + " stays " + (fallback ? "on" : "off");
  return r;
}

}  // namespace launchfit::detail

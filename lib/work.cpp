// SPDX-License-Identifier: MIT
// The work and its shapes (launchfit/work.hpp): dims, block rules and block shapes as text and as hashes (a
// plan key holds them), and the checks of a work's counts.

#include "launchfit/work.hpp"

#include <algorithm>
#include <string>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/error.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

void detail::throw_negative(const char* what, long long value) {
  throw error(errc::invalid_argument, what,
              std::string(what) + " = " + std::to_string(value) + " is negative");
}

void detail::throw_too_large(const char* what, unsigned long long value, unsigned long long most) {
  throw error(errc::invalid_argument, what,
              std::string(what) + " = " + std::to_string(value) + " is above " + std::to_string(most));
}

std::string dims::to_string() const {
  if (y == 1 && z == 1) return std::to_string(x);
  if (z == 1) return std::to_string(x) + "x" + std::to_string(y);
  return std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z);
}

double launched::waves() const noexcept { return plan_ptr ? plan_ptr->waves(grid) : 0.0; }

std::uint64_t block_rule::hash() const noexcept {
  if (is_any()) return 0;
  std::uint64_t h = detail::hash_combine(0x6c66626c6f636bULL, static_cast<std::uint64_t>(k));
  h = detail::hash_combine(h, multiple + (invalid ? 0x10000u : 0u));
  for (int i = 0; i < count; ++i) h = detail::hash_combine(h, values[i]);
  return h | 1;
}

std::uint64_t block_shape::hash() const noexcept {
  if (!is_set()) return 0;
  std::uint64_t h = detail::hash_combine(0x6c66736861706500ULL, y);
  h = detail::hash_combine(h, z);
  h = detail::hash_combine(h, x_step());
  h = detail::hash_combine(h, std::max<std::uint32_t>(per_thread_y, 1));
  h = detail::hash_combine(h, free_x ? 1 : 0);
  return detail::hash_combine(h, invalid ? 1 : 0) | 1;
}

std::string block_shape::to_string() const {
  std::string s = "x=" + std::to_string(x_step()) + "n";
  if (y) s += ",y=" + std::to_string(y);
  if (z != 1) s += ",z=" + std::to_string(z);
  if (per_thread_y > 1) s += ",per_thread_y=" + std::to_string(per_thread_y);
  if (free_x) s += ",free_x";
  return invalid ? "invalid(" + s + ")" : s;
}

std::string block_rule::to_string() const {
  switch (k) {
    case kind::any:
      return "any";
    case kind::multiple_of:
      if (invalid) return "multiple of (a number outside 1..1024)";
      return multiple <= 1 ? "any" : "multiple of " + std::to_string(multiple);
    case kind::power_of_two:
      return "power of two";
    case kind::one_of: {
      if (invalid) return "one of (a size outside 1..1024, or more than 16 sizes)";
      std::string s = "one of ";
      for (int i = 0; i < count; ++i) s += (i ? "," : "") + std::to_string(values[i]);
      return s;
    }
  }
  return "any";
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
// Internal: a driver-API kernel's arguments against its parameters' sizes (query_param_sizes(), where the driver
// reports them). One check for the planner, before anything runs the kernel (a tuning policy's trials launch it
// with the caller's arguments), and for every launch of a cached plan.

#include <cstddef>
#include <string>
#include <vector>

namespace launchfit::detail {

// Whether `count` arguments of `sizes` are the parameters `expected` (a null `sizes` with no argument is).
inline bool arguments_match(const std::size_t* sizes, std::size_t count,
                            const std::vector<std::size_t>& expected) noexcept {
  if (expected.size() != count) return false;
  for (std::size_t i = 0; i < count; ++i)
    if (expected[i] != sizes[i]) return false;
  return true;
}

// Throws the launchfit::error that says which argument differs and how, naming the kernel and the plan (empty:
// refused before one was made).
[[noreturn]] void refuse_arguments(const std::size_t* sizes, std::size_t count,
                                   const std::vector<std::size_t>& expected, const std::string& kernel,
                                   const std::string& plan);

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#include "plan_inputs.hpp"

#include <spdlog/logger.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "log_internal.hpp"

namespace launchfit::detail {
namespace {

// Constant-initialised and trivially destructible: usable from any static initialiser or destructor, and
// from a thread still running at exit.
struct input_entry {
  std::atomic<std::uint64_t> changes{0};
  char name[plan_input_name_bytes + 1] = {};  // written once, before `named` counts it
};
input_entry inputs[max_plan_inputs];
std::atomic<std::size_t> named{0};  // entries [0, named) hold their name
std::atomic_flag registering = ATOMIC_FLAG_INIT;

constexpr std::string_view overflow_name = "other plan inputs";

std::string_view name_of(const input_entry& e) noexcept { return std::string_view(e.name); }

void write_name(input_entry& e, std::string_view name) noexcept {
  const std::size_t n = std::min(name.size(), plan_input_name_bytes);
  std::copy_n(name.data(), n, e.name);
  e.name[n] = '\0';
}

}  // namespace


plan_input register_plan_input(std::string_view name) noexcept {
  name = name.substr(0, std::min(name.size(), plan_input_name_bytes));
  name = name.substr(0, name.find('\0'));
  while (registering.test_and_set(std::memory_order_acquire)) {
  }  // a few names at first use: a spin is enough
  std::size_t n = named.load(std::memory_order_relaxed);
  std::size_t found = n;
  for (std::size_t i = 0; i < n; ++i)
    if (name_of(inputs[i]) == name) found = i;
  if (found == n) {
    if (n + 1 < max_plan_inputs) {
      write_name(inputs[n], name);
      named.store(n + 1, std::memory_order_release);
    } else {
      found = max_plan_inputs - 1;  // the table is full: the rest share its last entry
      if (n < max_plan_inputs) {
        write_name(inputs[found], overflow_name);
        named.store(max_plan_inputs, std::memory_order_release);
      }
    }
  }
  registering.clear(std::memory_order_release);
  return plan_input{static_cast<std::uint8_t>(found)};
}

void plan_input_changed(plan_input input) noexcept {
  const std::size_t i = std::min<std::size_t>(input.index, max_plan_inputs - 1);
  inputs[i].changes.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t now = hot.inputs_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
  try {
    if (!logger_fast().should_log(spdlog::level::trace)) return;
    log_event(spdlog::level::trace, "plan_inputs_changed", "plan inputs changed",
              {{"input", plan_input_name(input)}, {"generation", std::to_string(now)}});
  } catch (...) {  // out of memory: the line is lost, the change is not
  }
}


std::uint64_t plan_input_changes(plan_input input) noexcept {
  return inputs[std::min<std::size_t>(input.index, max_plan_inputs - 1)].changes.load(
      std::memory_order_relaxed);
}

std::string_view plan_input_name(plan_input input) noexcept {
  const std::size_t i = input.index;
  if (i >= named.load(std::memory_order_acquire)) return {};
  return name_of(inputs[i]);
}

}  // namespace launchfit::detail

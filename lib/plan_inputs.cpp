// SPDX-License-Identifier: MIT
#include "plan_inputs.hpp"

#include <atomic>

namespace launchfit::detail {
namespace {
std::atomic<std::uint64_t> generation{1};
}  // namespace

std::uint64_t plan_inputs_generation() noexcept { return generation.load(std::memory_order_acquire); }

void plan_inputs_changed(const char*) noexcept { generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace launchfit::detail

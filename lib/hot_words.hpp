// SPDX-License-Identifier: MIT
#pragma once
// Internal: the process-wide words a launch that hits reads, on one cache line. A hit sits between driver calls
// that evict the caller's data, and each of these words on a line of its own was a miss there. This header only
// places them: each word is owned, written and documented by the module named beside it, which reads it through
// its own accessor.

#include <atomic>
#include <cstdint>

namespace spdlog {
class logger;
}

namespace launchfit::detail {

struct driver_api;

struct alignas(64) hot_words {
  std::atomic<const driver_api*> driver{nullptr};   // driver.hpp: loaded_driver()
  std::atomic<spdlog::logger*> logger{nullptr};      // log_internal.hpp: logger_fast()
  std::atomic<std::uint64_t> inputs_generation{1};   // plan_inputs.hpp: plan_inputs_generation()
  std::atomic<std::uint64_t> front_generation{1};    // cache.cpp: the thread fronts' generation
  std::atomic<std::uint64_t> reader_epoch{1};        // cache.cpp: the plan readers' epoch
  std::atomic<bool> environment_loaded{false};       // launch.cpp: the environment's inputs are loaded
  std::atomic<bool> readers_fenced{false};           // cache.cpp: readers announce with a plain store
};
static_assert(sizeof(hot_words) == 64, "one cache line");

// Defined in launch.cpp, with the hit path.
extern hot_words hot;

}  // namespace launchfit::detail

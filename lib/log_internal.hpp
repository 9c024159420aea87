#pragma once
#include <spdlog/logger.h>

#include <memory>

namespace launchfit::detail {
// The launchfit logger, for library internals.
std::shared_ptr<spdlog::logger> logger();
// The current launchfit logger without locking (for the per-launch trace check); stays valid for the
// process lifetime even after set_logger() replaces it.
spdlog::logger& logger_fast();
}  // namespace launchfit::detail

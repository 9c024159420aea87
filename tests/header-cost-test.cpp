// SPDX-License-Identifier: MIT
// The umbrella header is cheap and leaves names to the user: it brings neither spdlog nor fmt, so a
// program may define its own global `fmt` (or use another fmt version) next to launchfit.hpp.

int fmt = 7;  // an error if any launchfit header declares namespace fmt

#include <launchfit/launchfit.hpp>

#if defined(SPDLOG_VERSION) || defined(FMT_VERSION)
#error "launchfit.hpp includes spdlog or fmt"
#endif

#include <gtest/gtest.h>

TEST(HeaderCost, LaunchfitHppNeedsNoSpdlogOrFmt) {
  EXPECT_EQ(fmt, 7);
  // The logging API stays usable through the forward-declared spdlog::logger.
  const std::shared_ptr<spdlog::logger> l = launchfit::logger();
  EXPECT_NE(l, nullptr);
  launchfit::set_logger(l);  // launchfit's own logger: harmless
  EXPECT_EQ(launchfit::current_log_format(), launchfit::log_format::text);
}

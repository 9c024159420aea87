// SPDX-License-Identifier: MIT
// The umbrella header leaves third-party names to the user: a program may declare its own boost::pfr or a
// global `fmt` type next to launchfit.hpp, because no launchfit header it includes brings Boost.PFR, spdlog
// or fmt (lf::args and param_policy, which use Boost.PFR, are in headers of their own).

namespace boost {
int pfr = 3;  // an error if launchfit.hpp brought namespace boost::pfr
}  // namespace boost
struct fmt {  // an error if launchfit.hpp brought namespace fmt
  int width = 5;
};

#include <launchfit/launchfit.hpp>

#if defined(BOOST_PFR_HPP) || defined(SPDLOG_VERSION) || defined(FMT_VERSION)
#error "launchfit.hpp includes Boost.PFR, spdlog or fmt"
#endif

#include <gtest/gtest.h>

#include <string>

namespace lf = launchfit;

TEST(Umbrella, LeavesBoostAndFmtNamesToTheUser) {
  EXPECT_EQ(boost::pfr, 3);
  EXPECT_EQ(fmt{}.width, 5);
  // Launching, policies and errors are all there without Boost.PFR.
  const auto s = lf::bytes_in_flight(16).items(100);
  EXPECT_EQ(s.get_policy().to_string(), "bytes_in_flight(per_thread=16,target_per_sm=0,prefer_block=256)");
  EXPECT_EQ(lf::policy_from_string("fixed(block=128)")->params(), "block=128,grid=0");
  EXPECT_EQ(lf::error(lf::errc::invalid_plan, "validate", "m").code(), lf::errc::invalid_plan);
}

TEST(Version, TheLibraryAndTheHeaderSayTheSameRelease) {
  const std::string expected = std::to_string(LAUNCHFIT_VERSION_MAJOR) + "." + std::to_string(LAUNCHFIT_VERSION_MINOR) +
                               "." + std::to_string(LAUNCHFIT_VERSION_PATCH);
  EXPECT_EQ(lf::version(), expected);
  EXPECT_EQ(LAUNCHFIT_VERSION, LAUNCHFIT_VERSION_MAJOR * 10000 + LAUNCHFIT_VERSION_MINOR * 100 + LAUNCHFIT_VERSION_PATCH);
}

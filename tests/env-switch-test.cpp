// SPDX-License-Identifier: MIT
// The one reading of a LAUNCHFIT_* switch (lib/env_switch.hpp): the same words for every variable. How a
// variable holding another word is reported: settings-test.cpp.

#include <gtest/gtest.h>

#include "env_switch.hpp"

namespace {

namespace ld = launchfit::detail;

TEST(EnvSwitch, AcceptsTheCommonWordsInAnyCase) {
  for (const char* on : {"1", "true", "TRUE", "yes", "Yes", "on", "ON", " on\t"})
    EXPECT_EQ(ld::parse_switch(on), true) << on;
  for (const char* off : {"0", "false", "False", "no", "NO", "off", "Off", "\t0 "}) {
    EXPECT_EQ(ld::parse_switch(off), false) << off;
  }
}

TEST(EnvSwitch, RefusesAnythingElse) {
  for (const char* bad : {"", "2", "y", "n", "enable", "yes please", "onn", "0x1", "-1", "truee", "o n"}) {
    EXPECT_FALSE(ld::parse_switch(bad).has_value()) << bad;
  }
}

}  // namespace

// SPDX-License-Identifier: MIT
// The one reading of a LAUNCHFIT_* switch (lib/env_switch.hpp): the same words for every variable, and a
// word that is none of them refused with a warning that names the variable and shows its value escaped.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "env_switch.hpp"

namespace {

namespace ld = launchfit::detail;

TEST(EnvSwitch, AcceptsTheCommonWordsInAnyCase) {
  for (const char* on : {"1", "true", "TRUE", "yes", "Yes", "on", "ON", " on\t"}) EXPECT_EQ(ld::parse_switch(on), true) << on;
  for (const char* off : {"0", "false", "False", "no", "NO", "off", "Off", "\t0 "}) {
    EXPECT_EQ(ld::parse_switch(off), false) << off;
  }
}

TEST(EnvSwitch, RefusesAnythingElse) {
  for (const char* bad : {"", "2", "y", "n", "enable", "yes please", "onn", "0x1", "-1", "truee", "o n"}) {
    EXPECT_FALSE(ld::parse_switch(bad).has_value()) << bad;
  }
}

TEST(EnvSwitch, ReadNamesTheVariableAndEscapesTheValue) {
  ::setenv("LAUNCHFIT_TEST_SWITCH", "maybe\x1b[31m", 1);
  ld::switch_reading r = ld::read_switch("LAUNCHFIT_TEST_SWITCH", true);
  EXPECT_TRUE(r.on);  // the default
  EXPECT_NE(r.warning.find("LAUNCHFIT_TEST_SWITCH="), std::string::npos) << r.warning;
  EXPECT_NE(r.warning.find("is not a switch"), std::string::npos) << r.warning;
  EXPECT_EQ(r.warning.find('\x1b'), std::string::npos) << r.warning;
  EXPECT_NE(r.warning.find("maybe"), std::string::npos) << r.warning;

  ::setenv("LAUNCHFIT_TEST_SWITCH", "yes", 1);
  r = ld::read_switch("LAUNCHFIT_TEST_SWITCH", false);
  EXPECT_TRUE(r.on);
  EXPECT_TRUE(r.warning.empty());

  ::setenv("LAUNCHFIT_TEST_SWITCH", "", 1);  // empty is unset
  r = ld::read_switch("LAUNCHFIT_TEST_SWITCH", true);
  EXPECT_TRUE(r.on);
  EXPECT_TRUE(r.warning.empty());
  ::unsetenv("LAUNCHFIT_TEST_SWITCH");
  EXPECT_FALSE(ld::read_switch("LAUNCHFIT_TEST_SWITCH", false).on);
}

}  // namespace

// SPDX-License-Identifier: MIT
#pragma once
// Shared by the tests: the launchfit::error a callable throws, or a failed expectation.

#include <gtest/gtest.h>

#include <utility>

#include "launchfit/error.hpp"

namespace launchfit_test {

template <class F>
launchfit::error error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const launchfit::error& e) {
    return e;
  }
  ADD_FAILURE() << "no launchfit::error thrown";
  return launchfit::error("(none)", "(none)", "(none)");
}

}  // namespace launchfit_test

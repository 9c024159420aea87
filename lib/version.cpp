// SPDX-License-Identifier: MIT
#include "launchfit/version.hpp"

#define LAUNCHFIT_STRINGIFY_(x) #x
#define LAUNCHFIT_STRINGIFY(x) LAUNCHFIT_STRINGIFY_(x)

namespace launchfit {

const char* version() noexcept {
  return LAUNCHFIT_STRINGIFY(LAUNCHFIT_VERSION_MAJOR) "." LAUNCHFIT_STRINGIFY(LAUNCHFIT_VERSION_MINOR) "." LAUNCHFIT_STRINGIFY(
      LAUNCHFIT_VERSION_PATCH);
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup version
/// \brief launchfit's version, written once: LAUNCHFIT_VERSION_MAJOR, _MINOR, _PATCH, LAUNCHFIT_VERSION and
/// launchfit::version().
///
// launchfit's version: the one place it is written. CMake reads the project version, the shared library's
// soname and the package version from these lines; every tool's --version prints launchfit::version().

#include "launchfit/export.hpp"

// Major version: before 1.0, the minor version may change the ABI.
#define LAUNCHFIT_VERSION_MAJOR 0
// Minor version.
#define LAUNCHFIT_VERSION_MINOR 5
// Patch version.
#define LAUNCHFIT_VERSION_PATCH 0

// major * 10000 + minor * 100 + patch, for preprocessor tests (as FMT_VERSION).
#define LAUNCHFIT_VERSION (LAUNCHFIT_VERSION_MAJOR * 10000 + LAUNCHFIT_VERSION_MINOR * 100 + LAUNCHFIT_VERSION_PATCH)

namespace launchfit {

// The version of the launchfit library linked in ("0.2.0"), which may differ from the header's
// LAUNCHFIT_VERSION when a program is built against one release and runs with another shared library.
LAUNCHFIT_API const char* version() noexcept;

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup version
/// \brief LAUNCHFIT_API: what the shared library exports.
///
// LAUNCHFIT_API marks what liblaunchfit exports. The library is compiled with hidden visibility, so only
// declarations carrying it are part of the shared library's ABI. CMake defines LAUNCHFIT_SHARED for users
// of the shared library (and LAUNCHFIT_LIB_EXPORT while building it); a static library needs nothing.

#if defined(LAUNCHFIT_SHARED) || defined(LAUNCHFIT_LIB_EXPORT)
#if defined(_WIN32)
#if defined(LAUNCHFIT_LIB_EXPORT)
#define LAUNCHFIT_API __declspec(dllexport)
#else
#define LAUNCHFIT_API __declspec(dllimport)
#endif
#else
#define LAUNCHFIT_API __attribute__((visibility("default")))
#endif
#else
#define LAUNCHFIT_API
#endif

# SPDX-License-Identifier: MIT
# Every dependency comes from a distribution package; nothing is vendored.
find_package(CUDAToolkit REQUIRED)   # headers only for the library: cuda.h, cuda_occupancy.h
find_package(spdlog CONFIG REQUIRED) # brings fmt (Debian's spdlog uses the system fmt)
# nlohmann-json (header-only): the library's sources read and write JSON with it, so building launchfit
# (from this tree, add_subdirectory or FetchContent) needs its headers; launchfit's users never do: it is
# not in launchfit's usage requirements, its package config or launchfit.pc (lib/CMakeLists.txt).
find_package(nlohmann_json CONFIG REQUIRED)
# Boost.PFR (header-only) first shipped in Boost 1.75: Debian 12's libboost1.81-dev, Ubuntu 24.04's
# libboost-dev (1.83).
set(LAUNCHFIT_BOOST_MIN_VERSION 1.75)
find_package(Boost ${LAUNCHFIT_BOOST_MIN_VERSION} REQUIRED)
find_package(Threads REQUIRED)
# libiberty (Debian libiberty-dev, a static library): the demangler that writes through a callback, so that a
# kernel's readable name is made within a budget (lib/demangle.cpp). Linked into launchfit; a static launchfit
# asks its users to link it too (its package config and launchfit.pc name the archive).
find_path(LAUNCHFIT_IBERTY_INCLUDE_DIR libiberty/demangle.h)
find_library(LAUNCHFIT_IBERTY_LIBRARY NAMES libiberty.a iberty)
if(NOT LAUNCHFIT_IBERTY_INCLUDE_DIR OR NOT LAUNCHFIT_IBERTY_LIBRARY)
  message(FATAL_ERROR "launchfit needs libiberty's demangler: apt install libiberty-dev (cmake/setup.sh installs it)")
endif()
# launchfit-calc's command line (Debian libcli11-dev, header-only, with a CMake config): the demos only.
if(LAUNCHFIT_BUILD_DEMOS)
  find_package(CLI11 CONFIG REQUIRED)
endif()

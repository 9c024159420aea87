# SPDX-License-Identifier: MIT
# launchfit reads its environment in one place, lib/settings.cpp (lib/settings.hpp: read once, one parser
# for numbers, one for words, one warning format). Any other lib/ or plugins/ source that calls getenv or
# secure_getenv, or reads `environ`, fails this check.
#   cmake -DSOURCE_DIR=<launchfit> -P getenv.cmake
set(found "")
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/lib/* ${SOURCE_DIR}/plugins/*)
foreach(f IN LISTS files)
  if(NOT f MATCHES "\\.(c|cc|cpp|cxx|h|hpp|cu|cuh)$" OR f STREQUAL "lib/settings.cpp")
    continue()
  endif()
  file(READ ${SOURCE_DIR}/${f} text)
  string(REPLACE ";" "," text "${text}")  # a CMake list separator: the lines are only shown
  string(REGEX MATCHALL "[^\n]*(getenv|(^|[^A-Za-z_0-9])environ([^A-Za-z_0-9]|$))[^\n]*" hits "${text}")
  foreach(hit IN LISTS hits)
    string(STRIP "${hit}" hit)
    list(APPEND found "${f}: ${hit}")
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "the environment read outside lib/settings.cpp (add a field to lib/settings.hpp):\n  ${text}")
endif()

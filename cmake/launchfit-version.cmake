# SPDX-License-Identifier: MIT
# launchfit's version, read from the one place it is written (include/launchfit/version.hpp), and the
# soname it gives: before 1.0 a minor release may change the ABI (soname MAJOR.MINOR), from 1.0 the major
# (as spdlog's soname says). Used by the project itself and by the package tests.
function(launchfit_read_version source_dir version_var soversion_var)
  # A build configured before the version changed configures again: its package, pkg-config file and soname
  # follow the header.
  if(NOT CMAKE_SCRIPT_MODE_FILE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source_dir}/include/launchfit/version.hpp)
  endif()
  file(STRINGS ${source_dir}/include/launchfit/version.hpp lines
       REGEX "^#define LAUNCHFIT_VERSION_(MAJOR|MINOR|PATCH) [0-9]+$")
  foreach(part MAJOR MINOR PATCH)
    if(NOT lines MATCHES "LAUNCHFIT_VERSION_${part} ([0-9]+)")
      message(FATAL_ERROR "${source_dir}/include/launchfit/version.hpp has no LAUNCHFIT_VERSION_${part}")
    endif()
    set(${part} ${CMAKE_MATCH_1})
  endforeach()
  set(${version_var} ${MAJOR}.${MINOR}.${PATCH} PARENT_SCOPE)
  if(MAJOR GREATER 0)
    set(${soversion_var} ${MAJOR} PARENT_SCOPE)
  else()
    set(${soversion_var} ${MAJOR}.${MINOR} PARENT_SCOPE)
  endif()
endfunction()

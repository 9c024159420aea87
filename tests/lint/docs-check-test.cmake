# SPDX-License-Identifier: MIT
# The API reference's structure check (cmake/launchfit-docs-check.cmake) on Doxygen's real output: a copy of
# the public headers and cmake/docs/ passes, and the same copy with one header's `\file` block removed, another's
# `\ingroup` removed and a group no one names fails, naming each (Doxygen itself warns about none of them).
#   cmake -DSOURCE_DIR=<launchfit> -DWORK_DIR=<scratch> [-DDOXYGEN=<doxygen>] -P docs-check-test.cmake
cmake_minimum_required(VERSION 3.24)
if(NOT DOXYGEN)
  find_program(DOXYGEN doxygen)
endif()
if(NOT DOXYGEN)
  message("docs-check-test: skipped: doxygen not found (cmake/setup.sh installs it)")
  return()
endif()

# A copy of what the reference is made from, configured as the docs target configures it (XML only).
function(make_copy dir)
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir}/include ${dir}/lib ${dir}/cmake)
  file(COPY ${SOURCE_DIR}/include/launchfit DESTINATION ${dir}/include)
  file(COPY ${SOURCE_DIR}/cmake/docs DESTINATION ${dir}/cmake)
  file(COPY ${SOURCE_DIR}/lib/README.md DESTINATION ${dir}/lib)
  file(COPY ${SOURCE_DIR}/cmake/doxygen-filter.sh DESTINATION ${dir}/cmake)
  set(PROJECT_SOURCE_DIR ${dir})
  set(PROJECT_VERSION 0)
  set(LAUNCHFIT_DOCS_DIR ${dir}/out)
  configure_file(${SOURCE_DIR}/cmake/Doxyfile.in ${dir}/Doxyfile @ONLY)
  file(APPEND ${dir}/Doxyfile "GENERATE_HTML = NO\n")
endfunction()

# Runs Doxygen on a copy, then the check; sets <prefix>_rc and <prefix>_out.
function(doxygen_and_check dir prefix)
  execute_process(COMMAND ${DOXYGEN} ${dir}/Doxyfile WORKING_DIRECTORY ${dir} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "docs-check-test: doxygen failed on ${dir} (${rc}):\n${out}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -DXML_DIR=${dir}/out/xml -DHEADER_DIR=${dir}/include/launchfit
                          -P ${SOURCE_DIR}/cmake/launchfit-docs-check.cmake
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(${prefix}_rc ${rc} PARENT_SCOPE)
  set(${prefix}_out "${out}" PARENT_SCOPE)
endfunction()

# Removes the lines of `file` that match `regex` (and fails when none does: the test would test nothing).
function(drop_lines file regex)
  file(READ ${file} text)
  string(REGEX MATCHALL "[^\n]*\n" all "${text}")
  set(kept "")
  set(dropped 0)
  foreach(line IN LISTS all)
    if(line MATCHES "${regex}")
      math(EXPR dropped "${dropped} + 1")
    else()
      string(APPEND kept "${line}")
    endif()
  endforeach()
  if(dropped EQUAL 0)
    message(FATAL_ERROR "docs-check-test: no line of ${file} matches '${regex}'")
  endif()
  file(WRITE ${file} "${kept}")
endfunction()

set(good ${WORK_DIR}/good)
make_copy(${good})
doxygen_and_check(${good} good)
if(good_rc)
  message(FATAL_ERROR "docs-check-test: the check fails on the reference as it is:\n${good_out}")
endif()

set(bad ${WORK_DIR}/bad)
make_copy(${bad})
drop_lines(${bad}/include/launchfit/args.hpp "^/// ")  # its \file block: no page
drop_lines(${bad}/include/launchfit/error.hpp "^/// \\\\ingroup")  # a page in no group
file(APPEND ${bad}/cmake/docs/groups.dox "\n/**\n\\defgroup unused_group Nothing\n\\brief A group no one names.\n*/\n")
doxygen_and_check(${bad} bad)
if(NOT bad_rc)
  message(FATAL_ERROR "docs-check-test: the check passed a reference with a header without a page, a header in "
                      "no group and an empty group:\n${bad_out}")
endif()
foreach(expected IN ITEMS "include/launchfit/args.hpp has no page of its own" "include/launchfit/error.hpp is in no group"
                          "group 'unused_group' is empty")
  string(FIND "${bad_out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "docs-check-test: the check does not say '${expected}':\n${bad_out}")
  endif()
endforeach()
file(REMOVE_RECURSE ${good} ${bad})
message(STATUS "docs-check-test: a header without a page, a header in no group and an empty group each fail the check")

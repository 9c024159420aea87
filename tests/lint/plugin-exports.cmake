# SPDX-License-Identifier: MIT
# The installed autotune plugin exports launchfit_plugin_entry and nothing else (its version script): the test
# build's clock, or any inline symbol a change leaks, would be a symbol a program could bind to.
#   cmake -DNM=nm -DPLUGIN=liblaunchfit-autotune.so -P plugin-exports.cmake
execute_process(COMMAND "${NM}" -D --defined-only "${PLUGIN}" OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${PLUGIN} failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${out}")
set(names "")
foreach(line IN LISTS lines)
  if(line MATCHES " A [^ ]+$")  # a version node's own symbol (a named node in the version script)
    continue()
  endif()
  string(REGEX REPLACE "^.* " "" name "${line}")
  string(REGEX REPLACE "@.*$" "" name "${name}")  # launchfit_plugin_entry@@NODE
  list(APPEND names "${name}")
endforeach()
if(NOT names STREQUAL "launchfit_plugin_entry")
  message(FATAL_ERROR "${PLUGIN} exports '${names}': launchfit_plugin_entry alone was expected")
endif()
message(STATUS "${PLUGIN}: launchfit_plugin_entry alone")

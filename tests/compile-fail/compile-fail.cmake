# SPDX-License-Identifier: MIT
# Compiles SOURCE once as it is (it must compile), then once per "MISUSE <n>" marker with -DLAUNCHFIT_MISUSE=<n>:
# each must fail, and the compiler must name the marked line, so a case that fails for another reason (a
# missing include, a typo) does not pass; a case ending in "[says: TEXT]" must also have the compiler say TEXT.
# -fsyntax-only: nothing is linked or written.
# -DCXX=<compiler> -DSOURCE=<file> -DINCLUDES=<dir;dir>
foreach(var CXX SOURCE INCLUDES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compile-fail.cmake: -D${var}=... is required")
  endif()
endforeach()
set(flags -std=c++17 -fsyntax-only -Werror=unused-result)  # a [[nodiscard]] result dropped is a misuse too
foreach(dir IN LISTS INCLUDES)
  if(dir)
    list(APPEND flags -I${dir})
  endif()
endforeach()

execute_process(COMMAND ${CXX} ${flags} ${SOURCE} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} does not compile without a misuse case:\n${err}")
endif()

file(STRINGS ${SOURCE} lines)
get_filename_component(name ${SOURCE} NAME)
set(line_number 0)
set(cases 0)
foreach(line IN LISTS lines)
  math(EXPR line_number "${line_number} + 1")
  if(line MATCHES "// MISUSE ([0-9]+): (.*)$")
    set(n ${CMAKE_MATCH_1})
    set(what ${CMAKE_MATCH_2})
    math(EXPR cases "${cases} + 1")
    execute_process(COMMAND ${CXX} ${flags} -DLAUNCHFIT_MISUSE=${n} ${SOURCE}
                    RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
    if(rc EQUAL 0)
      message(FATAL_ERROR "misuse ${n} (${what}) compiled: it must not")
    endif()
    if(NOT err MATCHES "${name}:${line_number}:")
      message(FATAL_ERROR "misuse ${n} (${what}) failed to compile, but not at ${name}:${line_number}:\n${err}")
    endif()
    # "... [says: TEXT]": the compiler's message must say TEXT too (a static_assert's own words), so that a case
    # refused by a later error of the same line does not pass for it.
    if(what MATCHES "\\[says: ([^]]*)\\]")
      string(FIND "${err}" "${CMAKE_MATCH_1}" said)
      if(said EQUAL -1)
        message(FATAL_ERROR "misuse ${n} (${what}) failed to compile, but the compiler did not say '${CMAKE_MATCH_1}':\n${err}")
      endif()
    endif()
    message(STATUS "misuse ${n} refused at ${name}:${line_number}: ${what}")
  endif()
endforeach()
if(cases EQUAL 0)
  message(FATAL_ERROR "no MISUSE cases in ${SOURCE}")
endif()

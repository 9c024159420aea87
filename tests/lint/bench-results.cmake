# SPDX-License-Identifier: MIT
# tests/bench/results holds one summary per GPU and date (<gpu>-<date>.md) and the raw files it quotes:
# every other file there is named, in full, by the summary of its date, and every file a summary names is
# there; at most MAX_FILES files in all (40 by default): the raw data a summary names, the rest in git
# history (the summaries say how to find it).
#   cmake -DRESULTS_DIR=<launchfit>/tests/bench/results [-DMAX_FILES=40] -P bench-results.cmake
cmake_minimum_required(VERSION 3.24)
if(NOT DEFINED MAX_FILES)
  set(MAX_FILES 40)
endif()
set(errors "")
file(GLOB entries LIST_DIRECTORIES true RELATIVE ${RESULTS_DIR} ${RESULTS_DIR}/*)
set(summary_re "^([a-z0-9]+-[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9])\\.md$")

# What each summary names: every <gpu>-<date>-<name>.<json|csv|svg>, in text, code or links.
set(summaries "")
foreach(f IN LISTS entries)
  if(f MATCHES "${summary_re}")
    list(APPEND summaries ${f})
    set(day ${CMAKE_MATCH_1})
    file(READ ${RESULTS_DIR}/${f} text)
    string(REGEX MATCHALL "${day}-[A-Za-z0-9._-]*\\.(json|csv|svg)" named "${text}")
    list(REMOVE_DUPLICATES named)
    set(named_by_${day} "${named}")
    foreach(n IN LISTS named)
      if(NOT EXISTS ${RESULTS_DIR}/${n})
        list(APPEND errors "${f} names ${n}, which is not in tests/bench/results")
      endif()
    endforeach()
  endif()
endforeach()
if(NOT summaries)
  list(APPEND errors "no summary (<gpu>-<date>.md) in ${RESULTS_DIR}")
endif()

foreach(f IN LISTS entries)
  if(f IN_LIST summaries)
    continue()
  endif()
  if(IS_DIRECTORY ${RESULTS_DIR}/${f})
    list(APPEND errors "${f}/ is a directory (results are kept flat)")
  elseif(NOT f MATCHES "^([a-z0-9]+-[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9])-")
    list(APPEND errors "${f} is not named <gpu>-<date>-...")
  elseif(NOT "${CMAKE_MATCH_1}.md" IN_LIST summaries)
    list(APPEND errors "${f} has no summary ${CMAKE_MATCH_1}.md")
  elseif(NOT f IN_LIST named_by_${CMAKE_MATCH_1})
    list(APPEND errors "${f} is not named by ${CMAKE_MATCH_1}.md (name it there, or leave it to git history)")
  endif()
endforeach()

list(LENGTH entries count)
if(count GREATER MAX_FILES)
  list(APPEND errors "${count} files, more than ${MAX_FILES}: keep the raw data a summary names, and leave the "
                     "rest to git history (name it there as run N's JSON, not by its file name)")
endif()

if(errors)
  list(JOIN errors "\n  " text)
  message(FATAL_ERROR "tests/bench/results:\n  ${text}")
endif()
message(STATUS "tests/bench/results: ${count} files (at most ${MAX_FILES}), each summary's raw files present and named")

# SPDX-License-Identifier: MIT
# Every source, header, CMake and shell file of launchfit names its licence in its first lines:
# cmake -DSOURCE_DIR=<launchfit> -P spdx.cmake
set(missing "")
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/lib/* ${SOURCE_DIR}/include/* ${SOURCE_DIR}/plugins/* ${SOURCE_DIR}/demos/* ${SOURCE_DIR}/tests/*
     ${SOURCE_DIR}/cmake/* ${SOURCE_DIR}/.ci/*)
list(APPEND files CMakeLists.txt)
foreach(f IN LISTS files)
  if(NOT f MATCHES "(\\.(cpp|hpp|h|cu|cuh|cmake|sh)|CMakeLists\\.txt|\\.cmake\\.in|^\\.ci/run)$"
     OR f MATCHES "^tests/bench/results/")
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${f} head LIMIT_COUNT 3)
  if(NOT head MATCHES "SPDX-License-Identifier: MIT")
    list(APPEND missing ${f})
  endif()
endforeach()
if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "no 'SPDX-License-Identifier: MIT' in the first lines of:\n  ${text}")
endif()

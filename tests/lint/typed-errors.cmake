# SPDX-License-Identifier: MIT
# launchfit builds its errors from a code (launchfit::errc) or a CUresult, never from a name string: a
# throw site that spells "LAUNCHFIT_..." or "CUDA_ERROR_..." as error(call, "NAME", ...) fails this check.
# cmake -DSOURCE_DIR=<launchfit> -P typed-errors.cmake
set(found "")
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/lib/* ${SOURCE_DIR}/include/* ${SOURCE_DIR}/plugins/*)
foreach(f IN LISTS files)
  if(NOT f MATCHES "\\.(cpp|hpp|h|cu|cuh)$")
    continue()
  endif()
  file(READ ${SOURCE_DIR}/${f} text)
  # error( or grid_error( etc., one argument without ';' or ',' (the call), then the name as a literal.
  string(REGEX MATCHALL "error\\([^;,]*,[ \t\r\n]*\"(LAUNCHFIT|CUDA_ERROR|CUDA_OCC_ERROR)_[A-Z_]*\"" hits "${text}")
  string(REGEX MATCHALL "error\\([ \t\r\n]*\"(LAUNCHFIT|CUDA_ERROR|CUDA_OCC_ERROR)_[A-Z_]*\"" first_hits "${text}")
  foreach(hit IN LISTS hits first_hits)
    string(REGEX REPLACE "[ \t\r\n]+" " " hit "${hit}")
    list(APPEND found "${f}: ${hit}")
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "errors named by a string (use launchfit::errc or the CUresult):\n  ${text}")
endif()

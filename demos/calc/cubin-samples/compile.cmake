# SPDX-License-Identifier: MIT
# Runs nvcc with -Xptxas -v and keeps what ptxas says next to the output, so tests can compare
# launchfit-calc --cubin's figures with ptxas's own.
#   cmake -DNVCC=... -DARGS="a|b|c" -DLOG=file -P compile.cmake     (ARGS separated by |)
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${NVCC} ${args} -Xptxas -v
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(WRITE ${LOG} "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nvcc failed (${rc}):\n${out}${err}")
endif()

# SPDX-License-Identifier: MIT
# Builds and runs tests/consumer against launchfit the way a user would, then checks what the program
# needs at run time. cmake -DMODE=<mode> -DBUILD_DIR=<launchfit build> -DSOURCE_DIR=<launchfit sources>
#   [-DCXX=<compiler>] [-DLAUNCHER=<ccache>] [-DGENERATOR=<generator>] -P consumer-test.cmake
# MODE:
#   find-package      install BUILD_DIR into a scratch prefix, find_package(launchfit) (the default)
#   pkg-config        install BUILD_DIR, compile with `pkg-config --cflags --libs launchfit` alone
#   add-subdirectory  add_subdirectory(launchfit sources); the subproject installs nothing
#   fetchcontent      FetchContent from the local sources; the subproject installs nothing
#   shared            launchfit built as a shared library, installed: find_package and pkg-config
#   self-contained    launchfit built with LAUNCHFIT_SELF_CONTAINED, installed: find_package (spdlog not
#                     findable) and pkg-config; neither program needs libspdlog or libfmt
if(NOT MODE)
  set(MODE find-package)
endif()
if(NOT GENERATOR)
  set(GENERATOR Ninja)
endif()
# The version the package, pkg-config file and soname must carry: the one in version.hpp.
include(${SOURCE_DIR}/cmake/launchfit-version.cmake)
launchfit_read_version(${SOURCE_DIR} launchfit_version launchfit_soversion)
set(work ${BUILD_DIR}/consumer-test/${MODE})
set(prefix ${work}/prefix)
set(cbuild ${work}/build)
file(REMOVE_RECURSE ${work})
# Scratch builds compile without optimisation or debug info, through the parent's compiler launcher.
set(tool_args -G ${GENERATOR} -DCMAKE_BUILD_TYPE=)
if(CXX)
  list(APPEND tool_args -DCMAKE_CXX_COMPILER=${CXX})
endif()
if(LAUNCHER)
  list(APPEND tool_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "${MODE}: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${MODE}: ${what}: ok")
endfunction()

function(needed binary out_var)  # the DT_NEEDED entries of a binary
  find_program(READELF readelf REQUIRED)
  execute_process(COMMAND ${READELF} -d ${binary} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${MODE}: readelf -d ${binary} failed")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]]*\\]" entries "${dyn}")
  set(${out_var} "${entries}" PARENT_SCOPE)
endfunction()

function(expect_no_spdlog_fmt binary)
  needed(${binary} entries)
  if(entries MATCHES "spdlog|fmt")
    message(FATAL_ERROR "${MODE}: ${binary} needs spdlog or fmt at run time: ${entries}")
  endif()
  find_program(LDD ldd)
  if(LDD)  # every library loaded, transitively
    execute_process(COMMAND ${LDD} ${binary} OUTPUT_VARIABLE libs RESULT_VARIABLE rc)
    if(rc OR libs MATCHES "spdlog|libfmt|not found")
      message(FATAL_ERROR "${MODE}: ldd ${binary}:\n${libs}")
    endif()
  endif()
  message(STATUS "${MODE}: ${binary} needs neither libspdlog nor libfmt")
endfunction()

function(install_launchfit build)
  run("install" ${CMAKE_COMMAND} --install ${build} --prefix ${prefix})
  foreach(f include/launchfit/export.hpp include/launchfit/launchfit.hpp include/launchfit/version.hpp
            share/doc/launchfit/LICENSE)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "${MODE}: ${f} not installed")
    endif()
  endforeach()
endfunction()

# A launchfit of its own, configured as a user would for packaging or deploying.
function(build_launchfit)
  set(lfbuild ${work}/launchfit)
  run("configure launchfit ${ARGN}" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${lfbuild} ${tool_args}
      -DCMAKE_INSTALL_LIBDIR=lib -DLAUNCHFIT_BUILD_TESTS=OFF -DLAUNCHFIT_BUILD_DEMOS=OFF
      -DLAUNCHFIT_BUILD_BENCH=OFF -DLAUNCHFIT_BUILD_PLUGINS=OFF -DLAUNCHFIT_BUILD_CUDA=OFF ${ARGN})
  run("build launchfit" ${CMAKE_COMMAND} --build ${lfbuild})
  install_launchfit(${lfbuild})
endfunction()

function(consume how)
  run("configure the consumer (${how})" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${cbuild}
      ${tool_args} -DLAUNCHFIT_CONSUME=${how} -DLAUNCHFIT_SOURCE_DIR=${SOURCE_DIR}
      -DCMAKE_PREFIX_PATH=${prefix} ${ARGN})
  run("build the consumer" ${CMAKE_COMMAND} --build ${cbuild})
  run("run the consumer" ${cbuild}/consumer)
endfunction()

# The consumer compiled and linked with nothing but what launchfit.pc says.
function(consume_pkg_config)
  find_program(PKG_CONFIG NAMES pkgconf pkg-config REQUIRED)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} --modversion launchfit OUTPUT_VARIABLE version
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc OR NOT version STREQUAL "${launchfit_version}")
    message(FATAL_ERROR "${MODE}: pkg-config --modversion launchfit: '${version}' (${rc})")
  endif()
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs launchfit OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${MODE}: pkg-config --cflags --libs launchfit failed")
  endif()
  message(STATUS "${MODE}: pkg-config: ${flags}")
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(compiler ${CXX})
  if(NOT compiler)
    set(compiler c++)
  endif()
  file(MAKE_DIRECTORY ${work}/pc)
  run("compile and link with pkg-config" ${compiler} -std=c++17 ${ARGN} ${SOURCE_DIR}/tests/consumer/main.cpp
      ${flags} -Wl,-rpath,${prefix}/lib -o ${work}/pc/consumer)
  run("run the pkg-config consumer" ${work}/pc/consumer)
endfunction()

if(MODE STREQUAL "find-package")
  install_launchfit(${BUILD_DIR})
  consume(find_package)
elseif(MODE STREQUAL "pkg-config")
  install_launchfit(${BUILD_DIR})
  consume_pkg_config(-DLAUNCHFIT_CONSUMER_LOGGER)
elseif(MODE STREQUAL "add-subdirectory" OR MODE STREQUAL "fetchcontent")
  if(MODE STREQUAL "fetchcontent")
    consume(FetchContent)
  else()
    consume(add_subdirectory)
  endif()
  # LAUNCHFIT_INSTALL is off in a subproject: installing the consumer installs the program alone.
  run("install the consumer" ${CMAKE_COMMAND} --install ${cbuild} --prefix ${prefix})
  file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
  if(NOT installed STREQUAL "bin/consumer")
    message(FATAL_ERROR "${MODE}: a subproject launchfit installed files: ${installed}")
  endif()
elseif(MODE STREQUAL "shared")
  build_launchfit(-DLAUNCHFIT_SHARED=ON)
  set(lib ${prefix}/lib/liblaunchfit.so.${launchfit_version})
  if(NOT EXISTS ${lib} OR NOT EXISTS ${prefix}/lib/liblaunchfit.so.${launchfit_soversion}
     OR NOT EXISTS ${prefix}/lib/liblaunchfit.so)
    message(FATAL_ERROR "${MODE}: liblaunchfit.so, .so.${launchfit_soversion} and .so.${launchfit_version} not installed")
  endif()
  find_program(READELF readelf REQUIRED)
  execute_process(COMMAND ${READELF} -d ${lib} OUTPUT_VARIABLE dyn)
  string(REPLACE "." "\\." soname_re "liblaunchfit.so.${launchfit_soversion}")
  if(NOT dyn MATCHES "\\(SONAME\\)[^\n]*\\[${soname_re}\\]")
    message(FATAL_ERROR "${MODE}: soname of ${lib} is not liblaunchfit.so.${launchfit_soversion}:\n${dyn}")
  endif()
  # What the library defines for others is launchfit's API alone, not the inline code of the libraries it
  # uses (hidden visibility and lib/launchfit.map).
  run("exported symbols" ${SOURCE_DIR}/tests/consumer/check-exports.sh ${lib})
  consume(find_package)
  needed(${cbuild}/consumer entries)
  string(REPLACE "." "\\." soname_re "liblaunchfit.so.${launchfit_soversion}")
  if(NOT entries MATCHES "${soname_re}")
    message(FATAL_ERROR "${MODE}: the consumer does not need liblaunchfit.so.${launchfit_soversion}: ${entries}")
  endif()
  consume_pkg_config(-DLAUNCHFIT_CONSUMER_LOGGER)
elseif(MODE STREQUAL "self-contained")
  build_launchfit(-DLAUNCHFIT_SELF_CONTAINED=ON)
  file(STRINGS ${prefix}/lib/pkgconfig/launchfit.pc requires REGEX "^Requires:")
  if(requires MATCHES "spdlog|fmt")
    message(FATAL_ERROR "${MODE}: launchfit.pc requires spdlog or fmt: ${requires}")
  endif()
  # The installed package must not look for spdlog at all.
  consume(find_package -DLAUNCHFIT_CONSUMER_LOGGER=OFF -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON)
  expect_no_spdlog_fmt(${cbuild}/consumer)
  consume_pkg_config()
  expect_no_spdlog_fmt(${work}/pc/consumer)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

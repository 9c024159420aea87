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
# Every mode also checks that launchfit asks its users for no flag they do not need (a warning flag, a
# sanitizer, an internal definition) and no dependency of its own build (nlohmann-json, the tools' and
# tests' packages).
cmake_minimum_required(VERSION 3.24)
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

# What launchfit may put on its users' compile lines: include directories (its own, the CUDA toolkit's,
# Boost's, spdlog's and fmt's), C++17, the definitions spdlog and fmt ask their own users for, and
# LAUNCHFIT_SHARED for the shared library. A warning, optimisation or debug flag, a sanitizer, a
# launchfit-internal definition (LAUNCHFIT_NO_NVTX, LAUNCHFIT_LIB_EXPORT, ...) is launchfit's own business.
# `flags` is a list of arguments; the compiler's own flags from CXXFLAGS are not launchfit's and pass.
function(expect_needed_flags what flags)
  separate_arguments(env_flags UNIX_COMMAND "$ENV{CXXFLAGS}")
  set(foreign "")
  set(skip_next FALSE)
  foreach(f IN LISTS flags)
    if(skip_next)  # the argument of -isystem, -o, -c, -MF, -MT
      set(skip_next FALSE)
    elseif(f MATCHES "^-(isystem|o|c|MF|MT|MQ)$")
      set(skip_next TRUE)
    elseif(NOT (f MATCHES "^-I.|^-isystem.|^-std=(c|gnu)\\+\\+17$|^-D(SPDLOG|FMT)_[A-Z0-9_]+(=.*)?$|^-MD$"
                OR f IN_LIST env_flags OR f IN_LIST ARGN))
      list(APPEND foreign "${f}")
    endif()
  endforeach()
  if(foreign)
    message(FATAL_ERROR "${MODE}: ${what} carries flags a launchfit user does not need: ${foreign}")
  endif()
  message(STATUS "${MODE}: ${what}: only the flags a user needs")
endfunction()

# The consumer's compile line for main.cpp (compile_commands.json), less the compiler itself.
function(expect_needed_compile_line)
  file(READ ${cbuild}/compile_commands.json db)
  string(JSON count LENGTH "${db}")
  math(EXPR last "${count} - 1")
  set(command "")
  foreach(i RANGE ${last})
    string(JSON file GET "${db}" ${i} file)
    if(file MATCHES "/tests/consumer/main\\.cpp$")
      string(JSON command GET "${db}" ${i} command)
    endif()
  endforeach()
  if(NOT command)
    message(FATAL_ERROR "${MODE}: no compile command for main.cpp in ${cbuild}/compile_commands.json")
  endif()
  separate_arguments(args UNIX_COMMAND "${command}")
  list(POP_FRONT args first)
  if(LAUNCHER AND first STREQUAL LAUNCHER)  # then the compiler
    list(POP_FRONT args)
  endif()
  expect_needed_flags("the consumer's compile line" "${args}" ${ARGN})
endfunction()

function(consume how)
  run("configure the consumer (${how})" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${cbuild}
      ${tool_args} -DLAUNCHFIT_CONSUME=${how} -DLAUNCHFIT_SOURCE_DIR=${SOURCE_DIR}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_EXPORT_COMPILE_COMMANDS=ON ${ARGN})
  run("build the consumer" ${CMAKE_COMMAND} --build ${cbuild})
  run("run the consumer" ${cbuild}/consumer)
endfunction()

# The dependencies of launchfit's tests and tools (and nlohmann-json, which only launchfit's own sources
# read), made unfindable: a project that uses launchfit needs none of them.
set(not_for_users -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
set(not_for_installed_users ${not_for_users} -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON)

# The installed package and launchfit.pc name none of launchfit's build-only dependencies.
function(expect_no_build_dependencies)
  file(GLOB files ${prefix}/lib/cmake/launchfit/*.cmake ${prefix}/lib/pkgconfig/launchfit.pc)
  foreach(f IN LISTS files)
    file(READ ${f} text)
    if(text MATCHES "nlohmann|CLI11|GTest|gtest|benchmark::")
      message(FATAL_ERROR "${MODE}: ${f} names a dependency of launchfit's build (${CMAKE_MATCH_0})")
    endif()
  endforeach()
  message(STATUS "${MODE}: the installed package names no build-only dependency")
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
  execute_process(COMMAND ${PKG_CONFIG} --cflags launchfit OUTPUT_VARIABLE cflags
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  expect_needed_flags("pkg-config --cflags launchfit" "${cflags}" ${pc_allowed_flags})
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

set(pc_allowed_flags "")
if(MODE STREQUAL "find-package")
  install_launchfit(${BUILD_DIR})
  expect_no_build_dependencies()
  consume(find_package ${not_for_installed_users})
  expect_needed_compile_line(-DLAUNCHFIT_CONSUMER_LOGGER)
elseif(MODE STREQUAL "pkg-config")
  install_launchfit(${BUILD_DIR})
  consume_pkg_config(-DLAUNCHFIT_CONSUMER_LOGGER)
elseif(MODE STREQUAL "add-subdirectory" OR MODE STREQUAL "fetchcontent")
  # launchfit built from source with its tests, demos, benchmarks and plugins off (the default for a
  # subproject): their dependencies are not looked for. The consumer's CMakeLists.txt checks that
  # nlohmann-json, which launchfit's own sources read, reaches neither its scope nor its compile line.
  if(MODE STREQUAL "fetchcontent")
    consume(FetchContent ${not_for_users})
  else()
    consume(add_subdirectory ${not_for_users})
  endif()
  expect_needed_compile_line(-DLAUNCHFIT_CONSUMER_LOGGER)
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
  expect_no_build_dependencies()
  consume(find_package ${not_for_installed_users})
  expect_needed_compile_line(-DLAUNCHFIT_CONSUMER_LOGGER -DLAUNCHFIT_SHARED)
  set(pc_allowed_flags -DLAUNCHFIT_SHARED)
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
  expect_no_build_dependencies()
  consume(find_package -DLAUNCHFIT_CONSUMER_LOGGER=OFF -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON ${not_for_installed_users})
  expect_needed_compile_line()
  expect_no_spdlog_fmt(${cbuild}/consumer)
  consume_pkg_config()
  expect_no_spdlog_fmt(${work}/pc/consumer)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

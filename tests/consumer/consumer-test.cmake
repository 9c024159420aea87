# SPDX-License-Identifier: MIT
# Builds and runs a program against launchfit the way a user would, with the README's own lines: each way
# in is a block of README.md marked `<!-- consumer-test: NAME -->`, and the test runs that block verbatim
# (a consumer CMakeLists.txt made of it and tests/consumer/checks.cmake, or its shell lines), so the README
# says nothing a test does not run. Then it checks what the program needs at run time.
#   cmake -DMODE=<mode> -DBUILD_DIR=<launchfit build> -DSOURCE_DIR=<launchfit sources> [-DCXX=<compiler>]
#         [-DNVCC=<nvcc>] [-DLAUNCHER=<ccache>] [-DGENERATOR=<generator>] -P consumer-test.cmake
# MODE:
#   staging           installs BUILD_DIR once into BUILD_DIR/consumer-test/staging (the fixture of the next two)
#   find-package      the README's find_package lines against that install
#   pkg-config        the README's pkg-config lines (the C++ compiler, and nvcc where there is one) against it
#   add-subdirectory  the README's add_subdirectory lines: launchfit built from source as a subproject, which
#                     installs nothing
#   fetchcontent      the README's FetchContent lines: the consumer configured and its program compiled
#                     (add-subdirectory builds and runs the same subproject; this builds no launchfit)
#   shared            launchfit built once more, as a shared library with spdlog and fmt compiled in,
#                     installed: find_package and pkg-config; its soname and exports, and neither program
#                     needs libspdlog or libfmt
# Every mode also checks that launchfit asks its users for no flag they do not need (a warning flag, a
# sanitizer, an internal definition) and no dependency of its own build (nlohmann-json, the tools' and
# tests' packages). Only `shared` and `add-subdirectory` compile launchfit (once each, without optimisation).
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
set(staging ${BUILD_DIR}/consumer-test/staging)
set(work ${BUILD_DIR}/consumer-test/${MODE})
set(prefix ${work}/prefix)
set(src ${work}/src)
set(cbuild ${work}/build)
if(MODE STREQUAL "find-package" OR MODE STREQUAL "pkg-config")
  set(prefix ${staging})
  if(NOT EXISTS ${staging}/lib/cmake/launchfit/launchfit-config.cmake)
    message(FATAL_ERROR "${MODE}: no install in ${staging}: the consumer-staging test makes it (ctest runs it "
                        "first, as this test's fixture)")
  endif()
endif()
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

# The block of README.md after `<!-- consumer-test: NAME -->` (a ```cmake or ```sh block), as text.
function(readme_block name out_var)
  file(STRINGS ${SOURCE_DIR}/README.md lines)
  set(state find)
  set(block "")
  foreach(line IN LISTS lines)
    if(state STREQUAL "find" AND line STREQUAL "<!-- consumer-test: ${name} -->")
      set(state fence)
    elseif(state STREQUAL "fence")
      if(NOT line MATCHES "^```(cmake|sh)$")
        message(FATAL_ERROR "${MODE}: README.md: '<!-- consumer-test: ${name} -->' is not right before a ```cmake "
                            "or ```sh block")
      endif()
      set(state body)
    elseif(state STREQUAL "body")
      if(line STREQUAL "```")
        set(state done)
        break()
      endif()
      string(APPEND block "${line}\n")
    endif()
  endforeach()
  if(NOT state STREQUAL "done")
    message(FATAL_ERROR "${MODE}: README.md has no block marked '<!-- consumer-test: ${name} -->' (the lines "
                        "this test runs)")
  endif()
  set(${out_var} "${block}" PARENT_SCOPE)
endfunction()

# The consumer project: the README's CMake lines between a project() and tests/consumer/checks.cmake, next
# to app.cpp, app.cu and launchfit's sources as ./launchfit (where the add_subdirectory and FetchContent
# lines look for them).
function(write_consumer_source snippet)
  file(MAKE_DIRECTORY ${src})
  file(COPY ${SOURCE_DIR}/tests/consumer/app.cpp ${SOURCE_DIR}/tests/consumer/app.cu DESTINATION ${src})
  if(NOT IS_SYMLINK ${src}/launchfit)
    file(CREATE_LINK ${SOURCE_DIR} ${src}/launchfit SYMBOLIC)
  endif()
  file(WRITE ${src}/CMakeLists.txt
       "# Written by tests/consumer/consumer-test.cmake: the README's lines, then the test's checks.\n"
       "cmake_minimum_required(VERSION 3.24)\n"
       "project(app LANGUAGES CXX)\n"
       "# ---- README.md, '${MODE}' ----\n"
       "${snippet}"
       "# ---- end of the README's lines ----\n"
       "include(${SOURCE_DIR}/tests/consumer/checks.cmake)\n")
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
    execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib ${LDD} ${binary}
                    OUTPUT_VARIABLE libs RESULT_VARIABLE rc)
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

# The consumer's compile line for app.cpp (compile_commands.json), less the compiler itself.
function(expect_needed_compile_line)
  file(READ ${cbuild}/compile_commands.json db)
  string(JSON count LENGTH "${db}")
  math(EXPR last "${count} - 1")
  set(command "")
  foreach(i RANGE ${last})
    string(JSON file GET "${db}" ${i} file)
    if(file MATCHES "/app\\.cpp$")
      string(JSON command GET "${db}" ${i} command)
    endif()
  endforeach()
  if(NOT command)
    message(FATAL_ERROR "${MODE}: no compile command for app.cpp in ${cbuild}/compile_commands.json")
  endif()
  separate_arguments(args UNIX_COMMAND "${command}")
  list(POP_FRONT args first)
  if(LAUNCHER AND first STREQUAL LAUNCHER)  # then the compiler
    list(POP_FRONT args)
  endif()
  expect_needed_flags("the consumer's compile line" "${args}" ${ARGN})
endfunction()

# Configures the consumer made of the README's `name` block; `target` is what is built (app: the program,
# which then runs), the rest are configure arguments.
function(consume name target)
  readme_block(${name} snippet)
  write_consumer_source("${snippet}")
  run("configure the README's ${name} lines" ${CMAKE_COMMAND} -S ${src} -B ${cbuild} ${tool_args}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_EXPORT_COMPILE_COMMANDS=ON ${ARGN})
  run("build ${target}" ${CMAKE_COMMAND} --build ${cbuild} --target ${target})
  if(target STREQUAL "app")
    run("run the program" ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib ${cbuild}/app)
  endif()
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

# The README's pkg-config lines, run as written in the consumer's directory, each program run after: the
# C++ compiler's line, and nvcc's where there is an nvcc. `c++` and `nvcc` are the build's own compilers.
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
  # nvcc takes these host flags as they are; -pthread, -Wl,... and the like it refuses ("Unknown option").
  separate_arguments(all_flags UNIX_COMMAND "${flags}")
  foreach(f IN LISTS all_flags)
    if(NOT f MATCHES "^-[IDLl].")
      message(FATAL_ERROR "${MODE}: pkg-config --cflags --libs launchfit gives '${f}', which nvcc refuses")
    endif()
  endforeach()
  execute_process(COMMAND ${PKG_CONFIG} --cflags launchfit OUTPUT_VARIABLE cflags
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  expect_needed_flags("pkg-config --cflags launchfit" "${cflags}" ${ARGN})

  readme_block(pkg-config lines_text)
  write_consumer_source("")
  # The build's compilers under the names the README's lines use: c++ a link to the build's C++ compiler,
  # nvcc found in its own directory (it finds its tools from where it lies, not through a link).
  file(MAKE_DIRECTORY ${work}/bin)
  set(compiler ${CXX})
  if(NOT compiler)
    find_program(compiler NAMES c++ REQUIRED)
  endif()
  file(CREATE_LINK ${compiler} ${work}/bin/c++ SYMBOLIC)
  set(path "${work}/bin")
  if(NVCC)
    get_filename_component(nvcc_dir ${NVCC} DIRECTORY)
    string(APPEND path ":${nvcc_dir}")
  endif()
  set(ENV{PATH} "${path}:$ENV{PATH}")
  string(REPLACE "\n" ";" lines "${lines_text}")
  set(ran 0)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*(#|$)")
      continue()
    endif()
    if(line MATCHES "^nvcc " AND NOT NVCC)
      message(STATUS "${MODE}: no nvcc here (LAUNCHFIT_BUILD_CUDA=OFF): not run: ${line}")
      continue()
    endif()
    file(REMOVE ${src}/app)
    run("${line}" sh -c "${line}" WORKING_DIRECTORY ${src})
    run("run the program" ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib ${src}/app)
    math(EXPR ran "${ran} + 1")
  endforeach()
  if(ran EQUAL 0)
    message(FATAL_ERROR "${MODE}: the README's pkg-config block has no line to run")
  endif()
endfunction()

if(MODE STREQUAL "staging")
  set(prefix ${staging})
  file(REMOVE_RECURSE ${staging})
  install_launchfit(${BUILD_DIR})
  expect_no_build_dependencies()
elseif(MODE STREQUAL "find-package")
  consume(find-package app ${not_for_installed_users})
  expect_needed_compile_line(-DLAUNCHFIT_CONSUMER_LOGGER)
elseif(MODE STREQUAL "pkg-config")
  consume_pkg_config()
elseif(MODE STREQUAL "add-subdirectory")
  # launchfit built from source with its tests, demos, benchmarks and plugins off (the default for a
  # subproject): their dependencies are not looked for. checks.cmake checks that nlohmann-json, which
  # launchfit's own sources read, reaches neither the consumer's scope nor its compile line.
  consume(add-subdirectory app ${not_for_users})
  expect_needed_compile_line(-DLAUNCHFIT_CONSUMER_LOGGER)
  # LAUNCHFIT_INSTALL is off in a subproject: installing the consumer installs the program alone.
  run("install the consumer" ${CMAKE_COMMAND} --install ${cbuild} --prefix ${prefix})
  file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
  if(NOT installed STREQUAL "bin/app")
    message(FATAL_ERROR "${MODE}: a subproject launchfit installed files: ${installed}")
  endif()
elseif(MODE STREQUAL "fetchcontent")
  # The same subproject as add-subdirectory (FetchContent_MakeAvailable adds it with add_subdirectory),
  # brought in by the README's FetchContent lines: configured and the program's source compiled, launchfit
  # not built again.
  consume(fetchcontent app-object ${not_for_users} -DLAUNCHFIT_CONSUMER_OBJECT=ON)
  expect_needed_compile_line(-DLAUNCHFIT_CONSUMER_LOGGER)
  if(EXISTS ${cbuild}/_deps/launchfit-build/lib/liblaunchfit.a)
    message(FATAL_ERROR "${MODE}: launchfit was built; this test builds the program's source alone")
  endif()
  # LAUNCHFIT_INSTALL is off in a subproject: its install rules install nothing (nothing is built, so a rule
  # that installed the library would fail here).
  run("install the subproject" ${CMAKE_COMMAND} --install ${cbuild}/_deps/launchfit-build --prefix ${prefix})
  file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
  if(installed)
    message(FATAL_ERROR "${MODE}: a subproject launchfit installed files: ${installed}")
  endif()
elseif(MODE STREQUAL "shared")
  # Shared and self-contained at once: one more build of launchfit covers both packaging options (the
  # staging install is the static library with spdlog and fmt as dependencies).
  build_launchfit(-DLAUNCHFIT_SHARED=ON -DLAUNCHFIT_SELF_CONTAINED=ON)
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
  # uses or compiles in (hidden visibility and lib/launchfit.map).
  run("exported symbols" ${SOURCE_DIR}/tests/consumer/check-exports.sh ${lib})
  expect_no_spdlog_fmt(${lib})
  file(STRINGS ${prefix}/lib/pkgconfig/launchfit.pc requires REGEX "^Requires:")
  if(requires MATCHES "spdlog|fmt")
    message(FATAL_ERROR "${MODE}: launchfit.pc requires spdlog or fmt: ${requires}")
  endif()
  # The installed package must not look for spdlog at all.
  expect_no_build_dependencies()
  consume(find-package app -DLAUNCHFIT_CONSUMER_LOGGER=OFF -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON ${not_for_installed_users})
  expect_needed_compile_line(-DLAUNCHFIT_SHARED)
  needed(${cbuild}/app entries)
  if(NOT entries MATCHES "${soname_re}")
    message(FATAL_ERROR "${MODE}: the program does not need liblaunchfit.so.${launchfit_soversion}: ${entries}")
  endif()
  expect_no_spdlog_fmt(${cbuild}/app)
  consume_pkg_config(-DLAUNCHFIT_SHARED)
  expect_no_spdlog_fmt(${src}/app)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

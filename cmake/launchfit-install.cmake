# SPDX-License-Identifier: MIT
# Install rules (LAUNCHFIT_INSTALL): the library, the public headers, a CMake package
# (find_package(launchfit CONFIG)) and a pkg-config file (launchfit.pc).
include(CMakePackageConfigHelpers)

install(TARGETS launchfit EXPORT launchfit-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# (No INCLUDES DESTINATION: the target's INSTALL_INTERFACE include directory already says it, and a consumer
# would get it twice.)
install(DIRECTORY include/launchfit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/launchfit)
install(EXPORT launchfit-targets NAMESPACE launchfit::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/launchfit)
configure_package_config_file(cmake/launchfit-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/launchfit-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/launchfit)
# Before 1.0 a minor release may break compatibility (see the soname in lib/CMakeLists.txt).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/launchfit-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/launchfit-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/launchfit-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/launchfit)

# pkg-config. The prefix is found from the .pc file's own place (${pcfiledir}), so the file stays right
# under `cmake --install --prefix`, DESTDIR staging, or a moved install tree.
set(launchfit_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(LAUNCHFIT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH launchfit_pc_up /prefix/${launchfit_pc_dir} /prefix)
  string(REGEX REPLACE "/$" "" launchfit_pc_up "${launchfit_pc_up}")
  set(LAUNCHFIT_PC_PREFIX "\${pcfiledir}/${launchfit_pc_up}")
endif()
foreach(dir IN ITEMS LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(LAUNCHFIT_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(LAUNCHFIT_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
list(GET CUDAToolkit_INCLUDE_DIRS 0 LAUNCHFIT_PC_CUDA_INCLUDEDIR)
set(LAUNCHFIT_PC_CFLAGS "")
# Boost has no pkg-config file: name its directory unless it is the compiler's own.
foreach(dir IN LISTS Boost_INCLUDE_DIRS)
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES AND NOT dir STREQUAL "/usr/include")
    string(APPEND LAUNCHFIT_PC_CFLAGS " -I${dir}")
  endif()
endforeach()
# What liblaunchfit itself links: needed on a static link line only. Every flag is one nvcc takes as it is
# (-L, -l), so that `nvcc app.cu $(pkg-config --cflags --libs launchfit)` works as `c++ ...` does: -lpthread,
# not -pthread ("nvcc fatal: Unknown option '-pthread'"; g++ and clang++ link the same either way, and
# glibc 2.34 and later keep libpthread as an empty stub).
set(launchfit_pc_own_libs "-lpthread")
# spdlog (launchfit::logger() hands out spdlog loggers; not needed when spdlog is compiled in): its compile
# definitions through spdlog.pc (Requires.private: pkg-config --cflags reads it), its libraries and fmt's by
# name from their CMake targets, not through `Requires: spdlog`, whose Libs carry -pthread.
set(LAUNCHFIT_PC_REQUIRES "")
set(LAUNCHFIT_PC_REQUIRES_PRIVATE "")
function(launchfit_pc_library target out_var)
  set(flags "")
  if(TARGET ${target})
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(SHARED|STATIC|UNKNOWN)_LIBRARY$")
      get_target_property(location ${target} LOCATION)
      get_filename_component(name "${location}" NAME)
      get_filename_component(dir "${location}" DIRECTORY)
      if(name MATCHES "^lib([^.]+)\\.")
        if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
          list(APPEND flags "-L${dir}")
        endif()
        list(APPEND flags "-l${CMAKE_MATCH_1}")
      endif()
    endif()
    get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
    foreach(dep IN LISTS deps)
      if(dep MATCHES "^(spdlog|fmt)::")
        launchfit_pc_library(${dep} dep_flags)
        list(APPEND flags ${dep_flags})
      endif()
    endforeach()
  endif()
  list(REMOVE_DUPLICATES flags)
  set(${out_var} "${flags}" PARENT_SCOPE)
endfunction()
# A program that calls the logger's methods links spdlog itself, static or shared launchfit alike.
set(launchfit_pc_spdlog_libs "")
if(NOT LAUNCHFIT_SELF_CONTAINED)
  set(LAUNCHFIT_PC_REQUIRES_PRIVATE "spdlog")
  launchfit_pc_library(spdlog::spdlog launchfit_pc_spdlog_libs)
  list(JOIN launchfit_pc_spdlog_libs " " launchfit_pc_spdlog_libs)
endif()
foreach(lib IN LISTS CMAKE_DL_LIBS)
  string(APPEND launchfit_pc_own_libs " -l${lib}")
endforeach()
string(APPEND launchfit_pc_own_libs " -liberty")  # libiberty's demangler (Debian ships the archive alone)
if(LAUNCHFIT_SHARED)
  string(APPEND LAUNCHFIT_PC_CFLAGS " -DLAUNCHFIT_SHARED")
  set(LAUNCHFIT_PC_LIBS "${launchfit_pc_spdlog_libs}")
  set(LAUNCHFIT_PC_LIBS_PRIVATE "${launchfit_pc_own_libs}")
else()
  string(STRIP "${launchfit_pc_spdlog_libs} ${launchfit_pc_own_libs}" LAUNCHFIT_PC_LIBS)
  set(LAUNCHFIT_PC_LIBS_PRIVATE "")
endif()
configure_file(cmake/launchfit.pc.in ${CMAKE_CURRENT_BINARY_DIR}/launchfit.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/launchfit.pc DESTINATION ${launchfit_pc_dir})

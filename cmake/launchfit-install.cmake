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
# Public: launchfit::logger() hands out spdlog loggers. Not needed when spdlog is compiled in.
set(LAUNCHFIT_PC_REQUIRES "")
if(NOT LAUNCHFIT_SELF_CONTAINED)
  set(LAUNCHFIT_PC_REQUIRES "spdlog")
endif()
# What liblaunchfit itself links: needed on a static link line only.
set(launchfit_pc_own_libs "-pthread")
foreach(lib IN LISTS CMAKE_DL_LIBS)
  string(APPEND launchfit_pc_own_libs " -l${lib}")
endforeach()
if(LAUNCHFIT_SHARED)
  string(APPEND LAUNCHFIT_PC_CFLAGS " -DLAUNCHFIT_SHARED")
  set(LAUNCHFIT_PC_LIBS "")
  set(LAUNCHFIT_PC_LIBS_PRIVATE "${launchfit_pc_own_libs}")
else()
  set(LAUNCHFIT_PC_LIBS "${launchfit_pc_own_libs}")
  set(LAUNCHFIT_PC_LIBS_PRIVATE "")
endif()
configure_file(cmake/launchfit.pc.in ${CMAKE_CURRENT_BINARY_DIR}/launchfit.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/launchfit.pc DESTINATION ${launchfit_pc_dir})

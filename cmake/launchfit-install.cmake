include(CMakePackageConfigHelpers)

install(TARGETS launchfit EXPORT launchfit-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/launchfit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT launchfit-targets NAMESPACE launchfit::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/launchfit)
configure_package_config_file(cmake/launchfit-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/launchfit-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/launchfit)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/launchfit-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/launchfit-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/launchfit-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/launchfit)

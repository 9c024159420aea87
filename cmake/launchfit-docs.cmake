# SPDX-License-Identifier: MIT
# The API reference: `cmake --build build --target docs` runs Doxygen over the public headers (cmake/Doxyfile.in)
# into build/docs/html, with lib/README.md ("how a launch flows") as its first page. An undocumented public
# name or a documentation error fails the target; CI builds it (.ci/run).
find_program(DOXYGEN_EXECUTABLE doxygen)
if(DOXYGEN_EXECUTABLE)
  set(LAUNCHFIT_DOCS_DIR ${PROJECT_BINARY_DIR}/docs)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/Doxyfile.in ${LAUNCHFIT_DOCS_DIR}/Doxyfile @ONLY)
  file(GLOB launchfit_doc_inputs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/launchfit/*.hpp
       ${PROJECT_SOURCE_DIR}/include/launchfit/*.h)
  add_custom_command(
    OUTPUT ${LAUNCHFIT_DOCS_DIR}/html/index.html
    COMMAND ${CMAKE_COMMAND} -E rm -rf ${LAUNCHFIT_DOCS_DIR}/html
    COMMAND ${DOXYGEN_EXECUTABLE} ${LAUNCHFIT_DOCS_DIR}/Doxyfile
    DEPENDS ${launchfit_doc_inputs} ${PROJECT_SOURCE_DIR}/lib/README.md ${LAUNCHFIT_DOCS_DIR}/Doxyfile
            ${CMAKE_CURRENT_LIST_DIR}/doxygen-filter.sh
    WORKING_DIRECTORY ${LAUNCHFIT_DOCS_DIR}
    COMMENT "Doxygen: the API reference in ${LAUNCHFIT_DOCS_DIR}/html (warnings are errors)"
    VERBATIM)
  add_custom_target(docs DEPENDS ${LAUNCHFIT_DOCS_DIR}/html/index.html)
else()
  add_custom_target(docs COMMAND ${CMAKE_COMMAND} -E echo "launchfit: doxygen not found (cmake/setup.sh installs it)"
                    COMMAND ${CMAKE_COMMAND} -E false)
endif()

# SPDX-License-Identifier: MIT
# The API reference: `cmake --build build --target docs` runs Doxygen over the public headers and cmake/docs/
# (cmake/Doxyfile.in) into build/docs/html: cmake/docs/mainpage.md is its first page, cmake/docs/groups.dox its groups,
# each public header a page of its own, and lib/README.md ("how a launch flows") a page for contributors.
# An undocumented public name or a documentation error fails the target (Doxygen's warnings are errors), and
# so does a public header without a page of its own or in no group, or an empty group
# (cmake/launchfit-docs-check.cmake reads Doxygen's XML). CI builds it (.ci/run).
find_program(DOXYGEN_EXECUTABLE doxygen)
if(DOXYGEN_EXECUTABLE)
  set(LAUNCHFIT_DOCS_DIR ${PROJECT_BINARY_DIR}/docs)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/Doxyfile.in ${LAUNCHFIT_DOCS_DIR}/Doxyfile @ONLY)
  file(GLOB launchfit_doc_inputs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/launchfit/*.hpp
       ${PROJECT_SOURCE_DIR}/include/launchfit/*.h ${PROJECT_SOURCE_DIR}/cmake/docs/*)
  # The stamp is written only when the check passes, so a failed check fails the next build too.
  add_custom_command(
    OUTPUT ${LAUNCHFIT_DOCS_DIR}/checked.stamp
    COMMAND ${CMAKE_COMMAND} -E rm -rf ${LAUNCHFIT_DOCS_DIR}/html ${LAUNCHFIT_DOCS_DIR}/xml
            ${LAUNCHFIT_DOCS_DIR}/checked.stamp
    COMMAND ${DOXYGEN_EXECUTABLE} ${LAUNCHFIT_DOCS_DIR}/Doxyfile
    COMMAND ${CMAKE_COMMAND} -DXML_DIR=${LAUNCHFIT_DOCS_DIR}/xml -DHEADER_DIR=${PROJECT_SOURCE_DIR}/include/launchfit
            -DSTAMP=${LAUNCHFIT_DOCS_DIR}/checked.stamp -P ${CMAKE_CURRENT_LIST_DIR}/launchfit-docs-check.cmake
    DEPENDS ${launchfit_doc_inputs} ${PROJECT_SOURCE_DIR}/lib/README.md ${LAUNCHFIT_DOCS_DIR}/Doxyfile
            ${CMAKE_CURRENT_LIST_DIR}/doxygen-filter.sh ${CMAKE_CURRENT_LIST_DIR}/launchfit-docs-check.cmake
    WORKING_DIRECTORY ${LAUNCHFIT_DOCS_DIR}
    COMMENT "Doxygen: the API reference in ${LAUNCHFIT_DOCS_DIR}/html (warnings are errors; every public header a page in a group)"
    VERBATIM)
  add_custom_target(docs DEPENDS ${LAUNCHFIT_DOCS_DIR}/checked.stamp)
else()
  add_custom_target(docs COMMAND ${CMAKE_COMMAND} -E echo "launchfit: doxygen not found (cmake/setup.sh installs it)"
                    COMMAND ${CMAKE_COMMAND} -E false)
endif()

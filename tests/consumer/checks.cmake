# SPDX-License-Identifier: MIT
# Included after the README's lines in the consumer project that consumer-test.cmake writes: those lines
# brought launchfit in (find_package, add_subdirectory or FetchContent) and made the program `app` from
# app.cpp; this checks what launchfit put into the consumer's scope and finishes the program's set-up.
#   LAUNCHFIT_CONSUMER_LOGGER  the program calls launchfit's spdlog logger itself (off for a self-contained
#                              launchfit, whose spdlog is not the program's)
#   LAUNCHFIT_CONSUMER_OBJECT  also app-object: app.cpp compiled on its own, for a test that builds nothing else
option(LAUNCHFIT_CONSUMER_LOGGER "Use spdlog through launchfit::logger()" ON)
option(LAUNCHFIT_CONSUMER_OBJECT "Add app-object, app.cpp compiled alone" OFF)

if(NOT TARGET app)
  message(FATAL_ERROR "the README's lines made no target 'app'")
endif()
if(NOT TARGET launchfit::launchfit)
  message(FATAL_ERROR "the README's lines brought no launchfit::launchfit")
endif()
if(launchfit_FOUND AND NOT launchfit_LICENSE STREQUAL "MIT")  # an installed package names its licence
  message(FATAL_ERROR "the launchfit package names licence '${launchfit_LICENSE}', not MIT")
endif()

# nlohmann-json is read by launchfit's own sources alone: neither its target nor anything of it reaches a
# project that uses launchfit, however launchfit comes in.
if(TARGET nlohmann_json::nlohmann_json)
  message(FATAL_ERROR "launchfit brought nlohmann_json::nlohmann_json into the consumer's scope")
endif()
foreach(property IN ITEMS INTERFACE_LINK_LIBRARIES INTERFACE_INCLUDE_DIRECTORIES INTERFACE_COMPILE_DEFINITIONS
                          INTERFACE_COMPILE_OPTIONS)
  get_target_property(value launchfit::launchfit ${property})
  if(value MATCHES "nlohmann")
    message(FATAL_ERROR "launchfit::launchfit's ${property} names nlohmann-json: ${value}")
  endif()
endforeach()

if(LAUNCHFIT_CONSUMER_LOGGER)
  target_compile_definitions(app PRIVATE LAUNCHFIT_CONSUMER_LOGGER)
endif()
if(LAUNCHFIT_CONSUMER_OBJECT)
  # Compiling app.cpp needs launchfit's usage requirements (include directories, definitions), not its
  # library: the compile line is checked without building launchfit.
  add_library(app-object OBJECT app.cpp)
  target_link_libraries(app-object PRIVATE launchfit::launchfit)
  if(LAUNCHFIT_CONSUMER_LOGGER)
    target_compile_definitions(app-object PRIVATE LAUNCHFIT_CONSUMER_LOGGER)
  endif()
endif()
install(TARGETS app)

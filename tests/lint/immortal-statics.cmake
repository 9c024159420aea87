# SPDX-License-Identifier: MIT
# launchfit's background thread (lib/background.hpp) may still be writing while exit() destroys statics, so
# nothing in the library is a static or a global whose destructor frees memory: constants are constexpr
# (std::string_view, arrays), state is made with `*new` and never destroyed. A function-local
# `static const std::string` once put heap garbage at the head of every plan file written at exit.
#   cmake -DSOURCE_DIR=<launchfit> -P immortal-statics.cmake
set(owning "std::(string|vector|map|set|unordered_map|unordered_set|deque|list|function|shared_ptr|unique_ptr|regex|ostringstream|optional)")
set(found "")
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/lib/*.cpp ${SOURCE_DIR}/lib/*.hpp
     ${SOURCE_DIR}/plugins/*.cpp)
foreach(f IN LISTS files)
  file(STRINGS ${SOURCE_DIR}/${f} lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    # A local static of an owning type (a reference to a `*new` object holds `&`; a function has `(`), or a
    # namespace-scope variable of one (column 0).
    if(line MATCHES "^[ \t]*static[ \t]+(const[ \t]+)?${owning}[^&(;]*[ \t][A-Za-z_][A-Za-z_0-9]*[ \t]*(=|;|{)"
       OR line MATCHES "^(const[ \t]+)?${owning}[^&(;]*[ \t][A-Za-z_][A-Za-z_0-9]*[ \t]*(=|;|{)")
      list(APPEND found "${f}:${n}: ${line}")
    endif()
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "statics with a destructor that a thread at exit could reach (make them constexpr, "
                      "or `static T& x = *new T`):\n  ${text}")
endif()

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Doxygen input filter: launchfit's headers document every name with a plain `//` comment on the lines
# above it (or after it, on a member's line), as fmt and spdlog do. Doxygen reads only `///`, so this turns
#   `#pragma once` + the opening comment    -> `/// \file` + the file's documentation,
#   the comment block before a declaration  -> `///` lines (its documentation),
#   a comment after code on the same line   -> `///<` (a member's documentation);
# and in the C header plugin.h, `/* ... */` the same way (`/** ... */` before, `/**< ... */` after code).
# A spec setter's `&` overload (on a named spec) is documented once, with its `&&` twin on the line above:
# it gets a one-line comment in place, on its own line, so that no line moves.
# Comments inside function bodies become `///` too; Doxygen ignores those. Line numbers are kept, so a
# warning points at the header's own line.
awk '
  /^#pragma once/ && NR == 1 { print "/// \\file"; next }
  /^  spec& [a-z_]+\(.*\) & \{/ { sub(/^  /, "  /** The same, on a named spec (changed in place and returned). */ ") }
  /^[[:space:]]*\/\*[^*]/ { sub(/\/\*/, "/**"); print; next }
  /[;,{][[:space:]]*\/\*[^*]/ || /[A-Za-z0-9_][[:space:]]+\/\*[^*]/ { sub(/\/\*/, "/**<"); print; next }
  /^[[:space:]]*\/\/([^\/]|$)/ {
    line = $0
    sub(/\/\//, "///", line)
    print line
    next
  }
  {
    # A comment after code, where the // is outside any string literal (an even number of quotes before it).
    pos = index($0, "//")
    if (pos > 1 && substr($0, pos, 3) != "///") {
      before = substr($0, 1, pos - 1)
      quotes = gsub(/"/, "\"", before)
      if (quotes % 2 == 0 && before ~ /[^[:space:]]/) $0 = before "///< " substr($0, pos + 2)
    }
    print
  }
' "$1"

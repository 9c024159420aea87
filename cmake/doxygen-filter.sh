#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Doxygen input filter for launchfit's public headers (FILTER_PATTERNS in Doxyfile.in): they document every
# name with a plain `//` comment on the lines above it (or after it, on a member's line), as fmt and spdlog
# do. Doxygen reads only `///`, so this turns
#   the comment block before a declaration  -> `///` lines (its documentation),
#   a comment after code on the same line   -> `///<` (a member's documentation);
# and in the C header plugin.h, `/* ... */` the same way (`/** ... */` before, `/**< ... */` after code).
# Left as plain comments, so that they document nothing: the licence line at the top of every header (it
# would become the namespace's summary) and a comment after a closing brace (`}  // namespace detail` would
# become the summary of the next declaration). Each header's own page comes from its `/// \file` block.
# CUDA's keywords in comments (`__global__`, `__launch_bounds__`) become code spans, not Markdown's bold.
# A spec setter's `&` overload (on a named spec) is documented once, with its `&&` twin on the line above:
# it gets a one-line comment in place, on its own line, so that no line moves.
# Comments inside function bodies become `///` too; Doxygen ignores those. Line numbers are kept, so a
# warning points at the header's own line.
awk '
  function code_spans(s,   out, pre, tok) {
    out = ""
    while (match(s, /__[A-Za-z][A-Za-z0-9_]*__/)) {
      pre = substr(s, 1, RSTART - 1)
      tok = substr(s, RSTART, RLENGTH)
      out = out pre (substr(pre, length(pre), 1) == "`" ? tok : "`" tok "`")
      s = substr(s, RSTART + RLENGTH)
    }
    return out s
  }
  NR == 1 && /SPDX-License-Identifier/ { print; next }
  /^[[:space:]]*}[^"]*\/\// { print; next }
  /^  spec& [a-z_]+\(.*\) & \{/ { sub(/^  /, "  /** The same, on a named spec (changed in place and returned). */ ") }
  /^[[:space:]]*\/\*[^*]/ { sub(/\/\*/, "/**"); print; next }
  /[;,{][[:space:]]*\/\*[^*]/ || /[A-Za-z0-9_][[:space:]]+\/\*[^*]/ { sub(/\/\*/, "/**<"); print; next }
  /^[[:space:]]*\/\/([^\/]|$)/ {
    line = $0
    sub(/\/\//, "///", line)
    print code_spans(line)
    next
  }
  {
    # A comment after code, where the // is outside any string literal (an even number of quotes before it).
    pos = index($0, "//")
    if (pos > 1 && substr($0, pos, 3) != "///") {
      before = substr($0, 1, pos - 1)
      quotes = gsub(/"/, "\"", before)
      if (quotes % 2 == 0 && before ~ /[^[:space:]]/) $0 = before "///< " code_spans(substr($0, pos + 2))
    }
    print
  }
' "$1"

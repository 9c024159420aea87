#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One line for the end of the test command, from ctest's JUnit file: how many tests passed, failed and
# were skipped, and the skips counted by reason (the test's own words: a GoogleTest skip message or a
# "skipped: ..." line), so "12 skipped" never hides why. Usage: summary.sh ctest-junit.xml
set -euo pipefail
[[ -f ${1:-} ]] || { echo "launchfit tests: no results (ctest wrote no ${1:-JUnit file})"; exit 1; }
awk '
  function unescape(s) {
    gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
    gsub(/&amp;/, "\\&", s)
    return s
  }
  function close_case() {
    if (status == "") return
    if (status == "run") passed++
    else if (status == "fail") failed++
    else {
      skipped++
      if (reason == "") reason = "no reason given"
      if (!(reason in by_reason)) order[++reasons] = reason
      by_reason[reason]++
    }
    status = ""
  }
  /<testcase / {
    close_case()
    status = $0; sub(/.*status="/, "", status); sub(/".*/, "", status)
    reason = ""; after_skipped = 0; in_out = 0
  }
  /<system-out>/ { in_out = 1; sub(/.*<system-out>/, "") }
  in_out && reason == "" {
    line = unescape($0)
    if (after_skipped && line != "") reason = line
    else if (line ~ /: Skipped$/) after_skipped = 1
    else if (line ~ /^skipped: /) { sub(/^skipped: /, "", line); reason = line }
  }
  /<\/system-out>/ { in_out = 0 }
  END {
    close_case()
    text = ""
    for (i = 1; i <= reasons; i++) {
      r = order[i]
      if (length(r) > 120) r = substr(r, 1, 117) "..."
      text = text (i > 1 ? "; " : "") by_reason[order[i]] ": " r
    }
    printf "launchfit tests: %d passed, %d failed, %d skipped%s\n", passed, failed, skipped,
           skipped ? " (" text ")" : ""
    exit failed ? 1 : 0
  }
' "$1"

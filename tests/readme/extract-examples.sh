#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Writes every ```cpp block of a Markdown file into one CUDA translation unit, so that the README's examples
# are compiled as a reader would paste them. Usage: extract-examples.sh README.md out.cu
#
# The rules, explicit so that a block can be a fragment and still be compiled:
#   - `#include` lines go to the top of the file (after readme-prelude.cuh, which declares the kernels and
#     variables the examples use without declaring them: n, x, stream, sgemm_tiled, ...);
#   - lines starting with `__global__`, `template` or `namespace` are declarations: they stay at namespace
#     scope, in the block's own namespace (readme_example_<line>);
#   - every other line is a statement, in the body of `void run()` of that namespace, after the prelude's
#     names (LAUNCHFIT_README_NAMES: locals, so lambdas capture them as in the reader's function);
#   - an HTML comment on the line right before the block, `<!-- example: DECLARATIONS -->`, is put at the
#     start of that body, in a scope of its own so that it may shadow a prelude name: it gives names the block uses a type other than the prelude's (a `k` that is a
#     driver-API kernel, an `in` that is float4). It is invisible on the rendered page.
# A block in another language (```sh, ```cmake, a bare ```) is not compiled.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: extract-examples.sh README.md out.cu" >&2; exit 2; }
awk -v src="$1" '
  function flush_block(   i) {
    decls = decls "\n// " src ":" start "\nnamespace readme_example_" start " {\n" scope "void run() {\n  LAUNCHFIT_README_NAMES;\n  {\n" context body "  }\n}\n}  // namespace readme_example_" start "\n"
    blocks++
  }
  /^```cpp[[:space:]]*$/ && !inside {
    inside = 1; start = NR + 1; scope = ""; body = ""
    context = (prev ~ /^<!-- example: .* -->$/) ? gensub_context(prev) : ""
    next
  }
  /^```/ && inside { inside = 0; flush_block(); next }
  inside {
    if ($0 ~ /^#include/) includes = includes $0 "\n"
    else if ($0 ~ /^(__global__|template|namespace)[[:space:]]/) scope = scope $0 "\n"
    else body = body "  " $0 "\n"
    next
  }
  { prev = $0 }
  function gensub_context(line,   s) {
    s = line
    sub(/^<!-- example: /, "", s)
    sub(/ -->$/, "", s)
    return "  " s "  // declared by the README comment before the block\n"
  }
  END {
    if (inside) { print src ": a ```cpp block starting at line " start " is not closed" > "/dev/stderr"; exit 1 }
    if (!blocks) { print src ": no ```cpp block" > "/dev/stderr"; exit 1 }
    print "// Generated from " src " by tests/readme/extract-examples.sh: every ```cpp block, compiled."
    print "#include \"readme-prelude.cuh\""
    printf "%s", includes
    print decls
  }
' "$1" > "$2"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Compiles the README's ```cpp blocks as one CUDA translation unit (extract-examples.sh says how a block
# becomes code). Usage: compile-examples.sh README.md OUT_DIR NVCC [nvcc arguments: -I, -D, -ccbin ...]
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: compile-examples.sh README.md OUT_DIR NVCC [nvcc arguments]" >&2; exit 2; }
readme=$1 out=$2 nvcc=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
"$here/extract-examples.sh" "$readme" "$out/readme-examples.cu"
echo "readme-examples: $(grep -c '^namespace readme_example_' "$out/readme-examples.cu") blocks of $readme in $out/readme-examples.cu"
# sm_90, compile only: the examples are checked for what a user's nvcc says, not linked or run. 177/550:
# the prelude's names that a given block does not use.
"$nvcc" -std=c++17 -arch=sm_90 -c -diag-suppress 177,550 -Werror all-warnings -I"$here" "$@" \
  "$out/readme-examples.cu" -o "$out/readme-examples.o"
echo "readme-examples: every block compiles"

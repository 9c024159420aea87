#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What including a launchfit header costs a translation unit: preprocessed lines (g++ -E, nvcc -E) and the
# median of N compile-only runs (g++ -fsyntax-only; nvcc -E for CUDA), for each header given. Times are
# CPU seconds (user + sys) of the compiler, which a busy shared machine disturbs less than wall time.
#
#   tests/header-cost/measure.sh [source root, default: this checkout] [runs, default 5]
#
# Prints one Markdown table row per header (headers the tree lacks are left out). What a whole launching
# .cu file costs nvcc, against the same file with <<<>>>: tests/bench/compile-cost.sh. The "before" figures
# in RESULTS.md were taken on an older commit checked out with `git worktree add /tmp/lf-before <commit>`
# and this script pointed at it.
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
runs=${2:-5}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
cxx=${CXX:-g++}
nvcc=${NVCC:-nvcc}
headers=${HEADERS:-"base.hpp launch.hpp policy.hpp launchfit.hpp"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
seconds() {  # CPU seconds (user + sys) of one run of "$@", output discarded
  /usr/bin/time -f '%U %S' -o "$work/time" "$@" > /dev/null
  awk '{printf "%.2f\n", $1 + $2}' "$work/time"
}

echo "| header | g++ -E lines | g++ -fsyntax-only median CPU s | nvcc -E lines (.cu) | nvcc -E median CPU s |"
echo "|---|---:|---:|---:|---:|"
for h in $headers; do
  [[ -f $root/include/launchfit/$h ]] || continue  # an older tree (e.g. without base.hpp)
  printf '#include <launchfit/%s>\nint main() { return 0; }\n' "$h" > "$work/tu.cpp"
  cp "$work/tu.cpp" "$work/tu.cu"
  flags=(-std=c++17 -I "$root/include" -I "$cuda_include")
  lines=$("$cxx" "${flags[@]}" -E "$work/tu.cpp" | wc -l)
  t=$(for _ in $(seq "$runs"); do seconds "$cxx" "${flags[@]}" -fsyntax-only "$work/tu.cpp"; done | median)
  cu_lines=-
  cu_t=-
  if command -v "$nvcc" > /dev/null; then
    cu_lines=$("$nvcc" -std=c++17 -I "$root/include" -arch=sm_90 -E "$work/tu.cu" | wc -l)
    cu_t=$(for _ in $(seq "$runs"); do seconds "$nvcc" -std=c++17 -I "$root/include" -arch=sm_90 -E "$work/tu.cu"; done | median)
  fi
  echo "| $h | $lines | $t | $cu_lines | $cu_t |"
done

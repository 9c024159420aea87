#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What launching through launchfit costs nvcc: one saxpy kernel in a .cu file, launched with <<<>>> in one
# file and with launchfit::launch(saxpy, launchfit::max_occupancy().items(n), ...) in the other (one file per
# header given), each compiled with `nvcc -c -arch=sm_90`, interleaved (A, B, C, A, B, C, ...) so that load
# from other work on the machine hits every file alike. Prints, per file, the median CPU seconds (user + sys of
# nvcc and its children), the median wall seconds, lines of the host pass's preprocessed input (the .cpp4.ii
# that cudafe++ reads) and the ratio of the CPU median to <<<>>>'s.
#
#   tests/bench/compile-cost.sh [source root, default: this checkout] [runs, default 7]
#
# HEADERS (default "base.hpp launch.hpp launchfit.hpp"), NVCC and NVCC_FLAGS may be set in the environment.
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
runs=${2:-7}
nvcc=${NVCC:-nvcc}
headers=${HEADERS:-"base.hpp launch.hpp launchfit.hpp"}
read -r -a extra <<< "${NVCC_FLAGS:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

kernel='__global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}'
printf '%s\nvoid run(float a, const float* x, float* y, int n) { saxpy<<<(n + 255) / 256, 256>>>(a, x, y, n); }\n' \
  "$kernel" > "$work/chevron.cu"
files=(chevron)
for h in $headers; do
  [[ -f $root/include/launchfit/$h ]] || continue
  name=${h%.hpp}
  {
    printf '#include <launchfit/%s>\n%s\n' "$h" "$kernel"
    printf 'void run(float a, const float* x, float* y, int n) {\n'
    printf '  launchfit::launch(saxpy, launchfit::max_occupancy().items(n), a, x, y, n);\n}\n'
  } > "$work/$name.cu"
  files+=("$name")
done

flags=(-c -arch=sm_90 -std=c++17 -I "$root/include" "${extra[@]}")
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for f in "${files[@]}"; do  # one untimed run each: the toolkit's files in the page cache for all alike
  "$nvcc" "${flags[@]}" "$work/$f.cu" -o "$work/$f.o"
done
for _ in $(seq "$runs"); do
  for f in "${files[@]}"; do
    /usr/bin/time -f '%U %S %e' -o "$work/time" "$nvcc" "${flags[@]}" "$work/$f.cu" -o "$work/$f.o"
    awk '{printf "%.2f\n", $1 + $2}' "$work/time" >> "$work/$f.cpu"
    awk '{printf "%.2f\n", $3}' "$work/time" >> "$work/$f.wall"
  done
done

base=$(median < "$work/chevron.cpu")
echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), ${runs} runs each, interleaved; load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| file | launches with | host .ii lines | median CPU s | median wall s | CPU ratio to <<<>>> |"
echo "|---|---|---:|---:|---:|---:|"
for f in "${files[@]}"; do
  mkdir -p "$work/keep-$f"
  "$nvcc" "${flags[@]}" "$work/$f.cu" -o "$work/$f.o" --keep --keep-dir "$work/keep-$f" 2> /dev/null
  lines=$(cat "$work/keep-$f"/*.cpp4.ii | wc -l)
  cpu=$(median < "$work/$f.cpu")
  wall=$(median < "$work/$f.wall")
  with=$([[ $f == chevron ]] && echo '<<<>>>' || echo "launchfit/$f.hpp")
  echo "| $f.cu | $with | $lines | $cpu | $wall | $(awk -v a="$cpu" -v b="$base" 'BEGIN {printf "%.2f", a / b}') |"
done

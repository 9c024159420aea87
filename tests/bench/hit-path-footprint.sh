#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The cache lines launchfit's hit path touches per launch, beside a raw cuLaunchKernelEx: hit-path-footprint
# (built with the benchmarks' CPU programs) run under Valgrind's Cachegrind with the L1 caches of a current
# x86 server core (32 KB instruction, 48 KB data, 64-byte lines), every mode evicting the L1 caches before each
# launch. Prints per launch, for the raw launch and launchfit's (each less the run that evicts and launches
# nothing) and for what launchfit adds: instructions, instruction lines missed, data lines missed on reads and on
# writes. Each mode runs twice, LAUNCHES and 2 x LAUNCHES launches, and the figures are the second run's less the
# first's: a launch in steady state, without the one-time work (the first launch's plan, loading the driver)
# spread over the launches. CPU only (the stub driver); needs valgrind (apt install valgrind).
#   tests/bench/hit-path-footprint.sh [BUILD_DIR (default build)] [LAUNCHES (default 2000)]
set -euo pipefail
build=${1:-build}
launches=${2:-2000}
bin=$build/bench/hit-path-footprint
if ! command -v valgrind >/dev/null; then
  echo "hit-path-footprint.sh: valgrind is not installed (apt install valgrind)" >&2
  exit 2
fi
[[ -x $bin ]] || { echo "hit-path-footprint.sh: no $bin (build the target hit-path-footprint)" >&2; exit 2; }
export LD_LIBRARY_PATH="$build/tests/stub-driver/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LAUNCHFIT_LOG_LEVEL=warn
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for mode in none raw launchfit; do
  for count in "$launches" $((2 * launches)); do
    valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 \
      --cachegrind-out-file="$tmp/$mode-$count.out" "$bin" "$mode" "$count" >"$tmp/$mode.txt" 2>"$tmp/$mode.log" ||
      { cat "$tmp/$mode.log" >&2; exit 1; }
  done
done
# Cachegrind's "events:" and "summary:" lines: the totals of each run, in the order given (each mode's short run,
# then its long one).
awk -v n="$launches" '
  FNR == 1 { file++ }
  /^events:/ { for (i = 2; i <= NF; i++) name[i] = $i; count = NF }
  /^summary:/ { for (i = 2; i <= NF; i++) total[file, i] = $i }
  END {
    want["Ir"] = "instructions"; want["I1mr"] = "instruction lines missed"
    want["D1mr"] = "data lines missed, reads"; want["D1mw"] = "data lines missed, writes"
    printf "| per launch | raw cuLaunchKernelEx | launchfit::launch | launchfit adds |\n|---|---:|---:|---:|\n"
    for (i = 2; i <= count; i++) {
      if (!(name[i] in want)) continue
      none = total[2, i] - total[1, i]; raw = total[4, i] - total[3, i]; lf = total[6, i] - total[5, i]
      printf "| %s | %.1f | %.1f | %.1f |\n", want[name[i]], (raw - none) / n, (lf - none) / n, (lf - raw) / n
    }
  }' "$tmp/none-$launches.out" "$tmp/none-$((2 * launches)).out" "$tmp/raw-$launches.out" \
     "$tmp/raw-$((2 * launches)).out" "$tmp/launchfit-$launches.out" "$tmp/launchfit-$((2 * launches)).out"

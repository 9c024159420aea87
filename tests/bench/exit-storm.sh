#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The exit storm at full strength: tests/fault/exit-test.cpp with every combination 20 times, the 10,000-plan
# ones included (the test command runs those twice), then what a normal exit costs a program with plans
# pending: the wall time of exit-child returning from main with 0, 100 and 10,000 plans not yet written,
# into a plan file, 20 runs each (median and slowest). With LAUNCHFIT_TEST_REDIS set, the storm's Redis runs
# take part (database 9 of that server is emptied first).
#
#   tests/bench/exit-storm.sh [build dir, default build] [runs, default 20]
set -euo pipefail
build=$(cd "${1:-$(dirname "$0")/../../build}" && pwd)
runs=${2:-20}
test=$build/tests/fault/fault-exit-test
child=$build/tests/fault/exit-child
[[ -x $test && -x $child ]] || { echo "exit-storm.sh: build fault-exit-test and exit-child in $build first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "exit storm: $(nproc) cores, LAUNCHFIT_TEST_REDIS=${LAUNCHFIT_TEST_REDIS:-(none: file runs only)}, $(date -u +%F)"
start=$(date +%s.%N)
LAUNCHFIT_EXIT_REPS=$runs LAUNCHFIT_EXIT_REPS_LARGE=$runs "$test" 2>&1 | grep -E "NOTE|OK|FAILED|Failure" | grep -v "^\[ RUN"
echo "storm wall: $(echo "$(date +%s.%N) - $start" | bc) s"

# A normal exit with plans pending: the exit waits for the file's writer.
export LAUNCHFIT_CACHE_MAX_ENTRIES=50000
for pending in 0 100 10000; do
  times=()
  for ((i = 0; i < runs; ++i)); do
    t0=$(date +%s%N)
    "$child" return "$pending" "$work/plans-$pending-$i.json" - 0 "bench$pending$i"
    times+=($((($(date +%s%N) - t0) / 1000000)))
    rm -f "$work/plans-$pending-$i.json"
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  median=$(echo "$sorted" | sed -n "$(((runs + 1) / 2))p")
  echo "return from main, $pending plans pending, plan file: median $median ms, slowest $(echo "$sorted" | tail -1) ms ($runs runs; the process's whole life: stores, flush of 10, exit)"
done

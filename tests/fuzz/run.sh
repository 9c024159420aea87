#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets with clang++ in build-fuzz and runs each for SECONDS (default 60), then
# prints executions, coverage and crashes per target. Crash inputs land in build-fuzz/fuzz-artifacts/.
#   tests/fuzz/run.sh 60
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${LAUNCHFIT_FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(policy-string-fuzz policy-overrides-fuzz cache-file-fuzz log-text-fuzz)

cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-fno-sanitize-recover=all \
  -DLAUNCHFIT_BUILD_FUZZERS=ON -DLAUNCHFIT_SANITIZE=fuzzer-no-link,address,undefined \
  -DLAUNCHFIT_BUILD_CUDA=OFF -DLAUNCHFIT_BUILD_DEMOS=OFF -DLAUNCHFIT_BUILD_PLUGINS=OFF \
  -DLAUNCHFIT_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"

failed=0
printf '%-24s %12s %8s %8s %8s\n' target execs cov ft crashes
for name in "${targets[@]}"; do
  corpus=$build/fuzz-corpus/$name
  artifacts=$build/fuzz-artifacts/$name
  mkdir -p "$corpus" "$artifacts"
  seeds=$root/tests/fuzz/seeds/$name
  log=$build/fuzz-$name.log
  extra=()
  if [ -d "$seeds" ]; then extra+=("$seeds"); fi
  # libFuzzer refuses to start with a dictionary that is missing or empty.
  if [ -s "$root/tests/fuzz/$name.dict" ]; then extra+=("-dict=$root/tests/fuzz/$name.dict"); fi
  stamp=$build/fuzz-$name.started
  touch "$stamp"
  # libFuzzer exits non-zero on a crash (and 0 when its time is up); the summary below reports it.
  rc=0
  "$build/tests/fuzz/$name" "$corpus" ${extra[@]+"${extra[@]}"} \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9][0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  # This run's findings only: artifacts of earlier runs stay where they are, and are not counted again.
  crashes=$(( $(find "$artifacts" -type f -newer "$stamp" \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
                  -o -name 'oom-*' \) | wc -l) ))
  printf '%-24s %12s %8s %8s %8s\n' "$name" "$execs" "$cov" "$ft" "$crashes"
  # A target that ran nothing (libFuzzer refused its arguments) is a failure of this script, not a clean run.
  [ "${execs:-0}" -gt 0 ] || { echo "$name ran no input: see $log" >&2; failed=1; }
  [ "$crashes" -eq 0 ] && [ "$rc" -eq 0 ] || failed=1
done
exit "$failed"

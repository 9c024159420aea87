#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs launchfit's GPU checks on a GPU machine from a build staged by stage-for-device.sh (.device/):
# the GPU tests (LAUNCHFIT_REQUIRE_GPU=1: a missing GPU fails them), the demos, compute-sanitizer, and the
# benchmarks. Logs go to $OUT (default .out/); a short table is printed last.
#   tests/gpu/run-on-device.sh [tests] [demos] [bench] [sanitize]   (default: all four, in this order)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/.out}
logs=${LOG_DIR:-/tmp/launchfit-logs}
rm -rf "$logs"
mkdir -p "$out" "$logs"
steps=("$@")
((${#steps[@]})) || steps=(tests demos bench sanitize)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
# BENCH_ONLY="graph-tuning fleet-tuning ...": only these benchmarks (default: all).
bench() { [[ -z ${BENCH_ONLY-} || " $BENCH_ONLY " == *" $1 "* ]]; }

# The staged build has the source path it was built at baked in (ctest files, PTX paths): recreate it.
built_at=$(cat .device/.source-dir)
[[ -e build-device ]] || ln -s .device build-device
if [[ $built_at != "$root" && ! -e $built_at ]]; then mkdir -p "$(dirname "$built_at")" && ln -s "$root" "$built_at"; fi
export LD_LIBRARY_PATH="$root/.device/_runtime:${LD_LIBRARY_PATH:-}"
export LAUNCHFIT_REQUIRE_GPU=1
# The fleet tuning test starts its own redis-server: the staged one (stage-for-device.sh).
[[ -x $root/.device/_runtime/redis-server ]] && export LAUNCHFIT_REDIS_SERVER=$root/.device/_runtime/redis-server
export PATH="/usr/local/cuda/bin:$PATH"
b=$root/build-device
summary=$out/summary.md
: >"$summary"
row() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" | tee -a "$summary"; }
status() { [[ $1 -eq 0 ]] && echo pass || echo "FAIL ($1)"; }
started=$(date +%s)
# Pack the logs after every step, so a run cut short by a time limit still returns what it did.
pack() { cp "$summary" "$logs/" 2>/dev/null; tar -czf "$out/logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"; }

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
} >"$logs/machine.txt" 2>&1
echo "| step | result | detail |" >>"$summary"
echo "|---|---|---|" >>"$summary"

if want tests; then
  ctest --test-dir "$b" -L gpu --output-on-failure -V >"$logs/gpu-tests.log" 2>&1
  rc=$?
  row "GPU tests (ctest -L gpu)" "$(status $rc)" "$(grep -E 'tests passed|tests failed' "$logs/gpu-tests.log" | tail -1)"
  # NVTX ranges are made only with a tool's injection library named: an absent one exercises the ranges.
  if [[ -x $b/tests/gpu/gpu-observe-test ]]; then
    NVTX_INJECTION64_PATH=/nonexistent/libinjection.so "$b/tests/gpu/gpu-observe-test" >"$logs/gpu-observe-nvtx.log" 2>&1
    row "gpu-observe-test with NVTX ranges made" "$(status $?)" "$(grep -E 'PASSED|FAILED' "$logs/gpu-observe-nvtx.log" | tail -1)"
  fi
  agree=$(grep -ho 'occupancy agreement: [0-9/]* points' "$logs/gpu-tests.log" | tail -1)
  [[ -n $agree ]] && row "calculator vs driver" "-" "$agree"
  if compgen -G "$b/tests/*-test" >/dev/null; then
    ctest --test-dir "$b" -L cpu -E find-package-consumer --output-on-failure >"$logs/cpu-tests.log" 2>&1
    rc=$?
    row "CPU tests on the GPU machine" "$(status $rc)" "$(grep -E 'tests passed|tests failed' "$logs/cpu-tests.log" | tail -1)"
  else
    row "CPU tests on the GPU machine" "not staged" "LAUNCHFIT_STAGE_GPU_ONLY=1"
  fi
fi

pack
if want demos; then
  for demo in dropin cooperative driver_api logging matmul_2d cluster_dsmem pdl_chain; do
    [[ -x $b/demos/$demo ]] || { row "demo $demo" "missing" ""; continue; }
    "$b/demos/$demo" >"$logs/demo-$demo.log" 2>&1
    row "demo $demo" "$(status $?)" "$(tail -1 "$logs/demo-$demo.log" | cut -c1-100)"
  done
  if [[ -x $b/demos/reduction_story ]]; then
    "$b/demos/reduction_story" --svg "$out/reduction_story.svg" --csv "$logs/reduction_story.csv" \
      >"$logs/demo-reduction_story.log" 2>&1
    row "demo reduction_story" "$(status $?)" "$(tail -1 "$logs/demo-reduction_story.log" | cut -c1-100)"
  fi
  if [[ -x $b/demos/launchfit-calc ]]; then
    "$b/demos/launchfit-calc" --device 0 --threads 256 --regs 40 --smem 16K --svg "$out/calc-h200.svg" \
      >"$logs/calc-device.log" 2>&1
    row "launchfit-calc --device 0" "$(status $?)" "$(grep -i 'occupancy' "$logs/calc-device.log" | head -1 | cut -c1-100)"
  fi
fi

pack
if want bench; then
  bb=$b/bench
  if bench bandwidth && [[ -x $bb/bandwidth ]]; then
    "$bb/bandwidth" --json "$logs/bandwidth.json" >"$logs/bench-bandwidth.log" 2>&1
    row "bench bandwidth" "$(status $?)" "$(tail -1 "$logs/bench-bandwidth.log" | cut -c1-110)"
  fi
  if bench launch-overhead && [[ -x $bb/launch-overhead ]]; then
    "$bb/launch-overhead" --json "$logs/launch-overhead.json" >"$logs/bench-launch-overhead.log" 2>&1
    row "bench launch-overhead" "$(status $?)" "$(tail -1 "$logs/bench-launch-overhead.log" | cut -c1-110)"
  fi
  if bench block-placement && [[ -x $bb/block-placement ]]; then
    "$bb/block-placement" --json "$logs/block-placement.json" >"$logs/bench-block-placement.log" 2>&1
    row "bench block-placement" "$(status $?)" "$(tail -1 "$logs/bench-block-placement.log" | cut -c1-110)"
  fi
  if bench plan-lookup && [[ -x $bb/plan-lookup-bench ]]; then
    "$bb/plan-lookup-bench" --benchmark_format=json >"$logs/bench-plan-lookup.json" 2>"$logs/bench-plan-lookup.err"
    row "bench plan-lookup" "$(status $?)" ""
  fi
  if bench launch-options && [[ -x $bb/launch-options ]]; then
    "$bb/launch-options" --json "$logs/launch-options.json" >"$logs/bench-launch-options.log" 2>&1
    row "bench launch-options" "$(status $?)" "$(tail -1 "$logs/bench-launch-options.log" | cut -c1-110)"
  fi
  if bench plan-store && [[ -x $bb/plan-store ]]; then
    # Starts and stops its own Redis (staged in _runtime); without one it skips the Redis rows and says why.
    rm -f "$out/plan-store.json"
    "$bb/plan-store" --json "$out/plan-store.json" --redis-server "$root/.device/_runtime/redis-server" \
      --autotune-plugin "$b/plugins/liblaunchfit-autotune.so" >"$logs/bench-plan-store.log" 2>&1
    rc=$?
    [[ -f $out/plan-store.json ]] && cp "$out/plan-store.json" "$logs/"
    row "bench plan-store" "$(status $rc)" "$(tail -1 "$logs/bench-plan-store.log" | cut -c1-110)"
  fi
  if bench graph-tuning && [[ -x $bb/graph-tuning ]]; then
    "$bb/graph-tuning" --json "$logs/graph-tuning.json" --autotune-plugin "$b/plugins/liblaunchfit-autotune.so" \
      >"$logs/bench-graph-tuning.log" 2>&1
    row "bench graph-tuning" "$(status $?)" "$(tail -1 "$logs/bench-graph-tuning.log" | cut -c1-110)"
  fi
  if bench fleet-tuning && [[ -x $b/tests/gpu/gpu-fleet-tuning-test ]]; then
    # N processes at once on the GPU, one Redis: one tuner per kernel, identical plans, 0 trials with files.
    tests/bench/fleet-tuning.sh "$b" "$logs/fleet-tuning" 8 16 >"$logs/bench-fleet-tuning.log" 2>&1
    row "bench fleet-tuning" "$(status $?)" "$(head -1 "$logs/bench-fleet-tuning.log" | cut -c1-110)"
  fi
  if bench calibrate && [[ -x $b/demos/launchfit-calibrate ]]; then
    "$b/demos/launchfit-calibrate" ${CALIBRATE_ARGS-} --out "$logs/calibration.json" --svg "$out/calibration.svg" \
      --cache "$logs/calibrated-plans.json" --apply \
      >"$logs/calibrate.log" 2>&1
    row "launchfit-calibrate" "$(status $?)" "$(grep -i 'target' "$logs/calibrate.log" | tail -1 | cut -c1-110)"
  fi
  if bench policy-quality && [[ -x $bb/policy-quality ]]; then
    plugin=$b/plugins/liblaunchfit-autotune.so
    args=(--json "$logs/policy-quality.json" ${POLICY_QUALITY_ARGS-})
    [[ -f $logs/calibration.json ]] && args+=(--calibration "$logs/calibration.json")
    [[ -f $plugin ]] && args+=(--autotune-plugin "$plugin")
    "$bb/policy-quality" "${args[@]}" >"$logs/bench-policy-quality.log" 2>&1
    row "bench policy-quality" "$(status $?)" "$(tail -1 "$logs/bench-policy-quality.log" | cut -c1-110)"
  fi
fi

pack
if want sanitize; then
  if command -v compute-sanitizer >/dev/null; then
    # API errors are off: several tests provoke them on purpose (refused arguments, missing kernels), and
    # cuFuncGetParamInfo signals the end of the parameter list with CUDA_ERROR_INVALID_VALUE.
    for tool in ${SANITIZE_TOOLS-memcheck racecheck}; do
      for t in ${SANITIZE_TESTS-gpu-launch-test gpu-bad-input-test}; do
        [[ -x $b/tests/gpu/$t ]] || continue
        timeout ${SANITIZE_TIMEOUT:-200} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 "$b/tests/gpu/$t" \
          --gtest_filter="${SANITIZE_FILTER:--*GridStrideReduction*:*Exhaustive*:*Sweep*:*Overlaps*}" >"$logs/sanitize-$tool-$t.log" 2>&1
        rc=$?
        row "compute-sanitizer $tool $t" "$(status $rc)" "$(grep -E 'ERROR SUMMARY' "$logs/sanitize-$tool-$t.log" | tail -1)"
      done
      for demo in ${SANITIZE_DEMOS-dropin cooperative driver_api}; do
        [[ -x $b/demos/$demo ]] || continue
        timeout ${SANITIZE_TIMEOUT:-200} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 "$b/demos/$demo" >"$logs/sanitize-$tool-$demo.log" 2>&1
        rc=$?
        row "compute-sanitizer $tool $demo" "$(status $rc)" "$(grep -E 'ERROR SUMMARY' "$logs/sanitize-$tool-$demo.log" | tail -1)"
      done
    done
  else
    row "compute-sanitizer" "missing" ""
  fi
fi

row "wall time" "-" "$(($(date +%s) - started)) s"
pack
echo
cat "$summary"

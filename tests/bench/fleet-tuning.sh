#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fleet-tuning: one tuning per fleet on one GPU, as figures. Runs tests/gpu/fleet-tuning-test
# (built as gpu-fleet-tuning-test) with N processes started at once against an empty redis-server of its own
# (started on 127.0.0.1, stopped by its PID), for each N given, and writes one JSON object per run:
#   processes, kernels, tuners (exactly one per kernel is the rule), trials (the tuners' in all), static
#   launches made while waiting, identical (every process runs one plan per kernel), trials_after_restart
#   (processes with their files after the store restarted empty: 0 is the rule);
# and the busy-GPU row: a tuning beside a process that keeps the GPU busy publishes nothing.
#
#   tests/bench/fleet-tuning.sh BUILD_DIR OUT_DIR [N ...]        (default N: 8 16)
#
# Needs a CUDA GPU, the autotune plugin (built with the test) and redis-server (PATH, or
# LAUNCHFIT_REDIS_SERVER=path). Exit status: 0 when every run passed its checks, 1 otherwise, 2 on setup.
set -u
build=${1:?build directory}
out=${2:?output directory}
shift 2
counts=("$@")
[[ ${#counts[@]} -gt 0 ]] || counts=(8 16)
test_bin=$build/tests/gpu/gpu-fleet-tuning-test
[[ -x $test_bin ]] || { echo "fleet-tuning: $test_bin is not built (ninja gpu-fleet-tuning-test)" >&2; exit 2; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >"$out/fleet-tuning-gpu.txt" 2>&1 || true
status=0
for n in "${counts[@]}"; do
  log=$out/fleet-tuning-n$n.log
  LAUNCHFIT_REQUIRE_GPU=1 LAUNCHFIT_FLEET_PROCESSES=$n LAUNCHFIT_FLEET_JSON=$out/fleet-tuning-n$n.json \
    "$test_bin" --gtest_filter='FleetTuning.OneTunerPerKernel*' >"$log" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  echo "N=$n: $(grep -h '^fleet-tuning:' "$log" | tr '\n' ' ') (exit $rc)"
done
log=$out/fleet-tuning-busy.log
LAUNCHFIT_REQUIRE_GPU=1 "$test_bin" --gtest_filter='FleetTuning.ATuningBesideABusyGpu*' >"$log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || status=1
echo "busy GPU: $(grep -h '^fleet-tuning:' "$log" | tr '\n' ' ') (exit $rc)"
exit $status

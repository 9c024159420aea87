#!/usr/bin/env bash
# The test command: sets up and builds if needed, runs every test (GPU tests skip with a reason where no
# GPU is present; LAUNCHFIT_REQUIRE_GPU=1 makes that a failure), then builds a consumer project against
# the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
./cmake/setup.sh
build=${LAUNCHFIT_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j"${LAUNCHFIT_JOBS:-2}" "$@"

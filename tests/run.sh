#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The test command: sets up and builds every target (tests, demos, benchmarks), runs every test (GPU tests
# skip with a reason where no GPU is present; LAUNCHFIT_REQUIRE_GPU=1 makes that a failure), then builds a
# consumer project against the installed package. A redis-server of its own serves the remote plan store tests
# (LAUNCHFIT_TEST_REDIS); where none can start they skip, saying why. The last line counts the tests that
# passed, failed and were skipped, with the reasons for the skips.
set -euo pipefail
cd "$(dirname "$0")/.."
./cmake/setup.sh all
build=${LAUNCHFIT_BUILD_DIR:-build}

# shellcheck source=tests/redis.sh
source "$(dirname "$0")/redis.sh"
if ! start_redis; then
  echo "launchfit tests: no redis-server could start; the remote plan store tests skip" >&2
fi

results=$build/ctest-results.xml
[[ $results == /* ]] || results=$PWD/$results
rm -f "$results"
rc=0
ctest --test-dir "$build" --output-on-failure -j"${LAUNCHFIT_JOBS:-2}" --output-junit "$results" "$@" || rc=$?
./tests/summary.sh "$results" || ((rc)) || rc=1
exit "$rc"

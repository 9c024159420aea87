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

redis_pid=
stop_redis() {
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=
  fi
}
trap stop_redis EXIT

# On 127.0.0.1, a random free port (another on a clash), nothing saved to disk. Up when it answers PING and
# the answer comes from this process (not from a server that already held the port).
start_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || return 1
  local attempt port i
  for attempt in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --loglevel warning >/dev/null 2>&1 &
    redis_pid=$!
    for i in $(seq 50); do  # at most 5 s
      if [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] &&
        redis-cli -p "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$redis_pid"; then
        export LAUNCHFIT_TEST_REDIS=redis://127.0.0.1:$port
        return 0
      fi
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    stop_redis
  done
  return 1
}
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

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CPU part (calculator, policies, cache, registry, parsers, plugin loading, cache file) under
# AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer, each in its own build directory.
# The fault suite (label cpu;fault) runs too, with the fork storms of tests/fault/fork-test.cpp: forks of a
# process whose threads log (synchronously and through the logging thread; here they pause between two log
# calls for each fork, since GCC 12's sanitizer allocator has no fork handlers; the test command forks through
# their logging) and during the logger's first use (those whose children start threads skip under
# ThreadSanitizer, which cannot follow them). The storm with the remote
# plan store's writer and resolver busy needs a redis-server and runs in the test command (tests/run.sh), not
# here: GCC 12's sanitizer allocator has no fork handlers, so a child forked while a parent thread is inside
# it can hang there, which a storm of forks against a store thread busy allocating would hit. The exit suite
# (tests/fault/exit-test.cpp) runs with a redis-server of its own, file, Redis and both.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${LAUNCHFIT_JOBS:-2}
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAUNCHFIT_BUILD_CUDA=OFF -DLAUNCHFIT_BUILD_DEMOS=OFF
        -DLAUNCHFIT_BUILD_BENCH=OFF -DLAUNCHFIT_BUILD_PLUGINS=ON -DLAUNCHFIT_BUILD_TESTS=ON)
run() {
  local dir=$1 sanitizers=$2 start=$SECONDS
  [[ -f $dir/build.ninja ]] || cmake -S . -B "$dir" "${common[@]}" -DLAUNCHFIT_SANITIZE="$sanitizers"
  cmake --build "$dir" -j"$jobs"
  local built=$SECONDS
  ctest --test-dir "$dir" -L cpu -E "find-package-consumer|fault-exit-test" --output-on-failure -j"$jobs"
  # The exit suite, with a Redis of its own (database 9; the other tests run without one, see above): every
  # way of ending, every store, 2 runs of each combination (the test command runs 20).
  LAUNCHFIT_TEST_REDIS=$redis_url LAUNCHFIT_EXIT_REPS=2 LAUNCHFIT_EXIT_REPS_LARGE=1 \
    ctest --test-dir "$dir" -R fault-exit-test --output-on-failure
  echo "sanitize.sh: $sanitizers: build $((built - start)) s, tests $((SECONDS - built)) s ($dir)"
}
# shellcheck source=tests/redis.sh
source "$(dirname "$0")/redis.sh"
redis_url=
if start_redis; then
  redis_url=$LAUNCHFIT_TEST_REDIS
  unset LAUNCHFIT_TEST_REDIS
else
  echo "sanitize.sh: no redis-server could start; the exit suite runs its file runs only" >&2
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# die_after_fork=0: the cache file's writer thread, the logging thread and the remote store's writer start
# again in forked children (the fork tests).
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0
run "${LAUNCHFIT_ASAN_DIR:-build-asan}" address,undefined
run "${LAUNCHFIT_TSAN_DIR:-build-tsan}" thread

# SPDX-License-Identifier: MIT
# Sourced by tests/run.sh and tests/sanitize.sh: a redis-server of the test run's own, on 127.0.0.1 at a
# random free port (another on a clash), nothing saved to disk, stopped by its PID when the script exits.
# start_redis exports LAUNCHFIT_TEST_REDIS once the server answers PING and the answer comes from this
# process (not from a server that already held the port); it returns 1 when none could start.
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

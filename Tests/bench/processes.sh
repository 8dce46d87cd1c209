# Sourced by the benchmarks that start Redis and foldtabled nodes (cluster.sh, cluster-large.sh):
# the processes they start, each bounded by `timeout` and stopped at the end.
#
# The sourcing script sets `work` (a scratch directory), `server_cpu` (where Redis and the nodes
# run) and `bench_name` (its name in messages), keeps its pids in `pids`, and calls `stop_all`
# (and removes `work`) on exit.

pids=()

# stop_all: every process the script started, by its pid (the timeout wrappers).
stop_all() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        timeout 10 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
        { wait "$pid"; } 2>/dev/null || true
    done
    pids=()
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_redis FSYNC SECONDS: a fresh redis-server on the server CPU (appendonly, appendfsync
# FSYNC, its files on disk under $work), ended after SECONDS; sets redis_port and redis_pid.
start_redis() {
    rm -rf "$work/redis" && mkdir -p "$work/redis"
    redis_port=$(free_port)
    timeout -k 3 "$2" taskset -c "$server_cpu" redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work/redis" \
        --save '' --appendonly yes --appendfsync "$1" --maxmemory-policy noeviction >"$work/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
    redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG || { echo "$bench_name: redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1; }
    redis_pid=$(pgrep -P "${pids[-1]}" | head -1)
}

# started_node NAME: waits for the node whose output is $work/NAME.out (started last, its
# timeout wrapper's pid last in `pids`) to listen; sets node_port and node_pid.
started_node() {
    local line=
    for _ in $(seq 150); do
        line=$(head -1 "$work/$1.out" 2>/dev/null || true)
        [[ $line == listening* ]] && break
        sleep 0.1
    done
    [[ $line == listening* ]] || { echo "$bench_name: node $1 did not start" >&2; cat "$work/$1.err" >&2; exit 1; }
    node_port=${line##*:}
    node_pid=$(pgrep -P "${pids[-1]}" | head -1)
}

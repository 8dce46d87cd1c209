#!/usr/bin/env bash
# Cross-node fan-out (issue 14): fan-out scenario 1 of Tests/bench/fanout.sh (1,000 clients in one
# session, one author toggling a small section, 20 in flight) on one node and across two nodes
# sharing the session through one redis-server, in the same run:
#   single        one foldtabled, sessions in memory (fanout.sh's s1 foldtabled-memory)
#   single-redis  one foldtabled over Redis: the Redis path without a second node
#   two-always    two foldtabled nodes over Redis, clients split between them (client n on node
#                 n % 2, the author on node a), Redis with appendonly yes, appendfsync always
#                 (deploy/compose.cluster.yaml's setting)
#   two-everysec  the same with appendfsync everysec
# Each line gives deliveries/s, p50/p99 from the author's send to each receipt, the CPU of every
# node and of Redis with the share of the window each waited for a CPU, and what Redis spent per
# appended change: CPU µs, commands, bytes in and out, AOF bytes, stream bytes per entry, and the
# round trip of an XADD of the same entry while the nodes load Redis (a probe from the generator).
#
# Placement: the whole service (every node and Redis) on CPU 0, the generator alone on CPU 1, so
# the two-node rows have the single node's one core for everything: figures per server CPU-second
# compare without the split. Builds nothing: run `swift build -c release` first. Only 127.0.0.1;
# every process is bounded by `timeout`; Redis keeps its files in a fresh directory on disk.
#
# Settings (environment): CLUSTER_SECONDS (10), CLUSTER_WARMUP (1), CLUSTER_SERVER_CPU (0),
# CLUSTER_LOAD_CPU (1), CLUSTER_BUILD (.build/release), CLUSTER_RUNS ("single single-redis
# two-always two-everysec").
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${CLUSTER_BUILD:-.build/release}
seconds=${CLUSTER_SECONDS:-10}
warmup=${CLUSTER_WARMUP:-1}
server_cpu=${CLUSTER_SERVER_CPU:-0}
load_cpu=${CLUSTER_LOAD_CPU:-1}
runs=${CLUSTER_RUNS:-single single-redis two-always two-everysec}

for binary in "$build/foldtabled" "$build/foldtable-bench"; do
    [[ -x $binary ]] || { echo "cluster: $binary missing: run 'swift build -c release' first" >&2; exit 2; }
done
command -v redis-server >/dev/null || { echo "cluster: redis-server missing (apt-get install redis-server)" >&2; exit 2; }
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# On disk (not /tmp, which may be memory): appendfsync always must cost what it costs.
mkdir -p .build
work=$(mktemp -d "$PWD/.build/bench-cluster.XXXXXX")
bench_name=cluster
source Tests/bench/processes.sh
cleanup() {
    stop_all
    rm -rf "$work"
}
trap cleanup EXIT

# start_node NAME ARGS...: a foldtabled on the server CPU; appends its URL and pid to urls/node_pids.
start_node() {
    local name=$1
    shift
    rm -rf "$work/data-$name" "$work/$name.out"
    # Every client comes from 127.0.0.1 and the author sends thousands of changes a second: far
    # past the per-address cap and the per-connection rate limit.
    timeout -k 3 200 taskset -c "$server_cpu" "$build/foldtabled" --port 0 --web-root web --change-rate 1000000 \
        --change-burst 1000000 --max-connections-per-ip 100000 --demo-large-rows 1000 "$@" \
        >"$work/$name.out" 2>"$work/$name.err" &
    pids+=($!)
    started_node "$name"
    urls+=(--url "ws://127.0.0.1:$node_port/ws")
    node_pids+=(--server-pid "$node_pid")
}

status=0
# run LABEL: starts what LABEL names, runs the generator, prints its lines tagged "[LABEL]".
run() {
    local label=$1
    urls=() node_pids=()
    local redis=()
    case $label in
        single) start_node a --memory ;;
        single-redis)
            start_redis always 200
            start_node a --redis "redis://127.0.0.1:$redis_port/0" --node-id a --data-dir "$work/data-a" ;;
        two-always | two-everysec)
            start_redis "${label#two-}" 200
            for node in a b; do
                start_node "$node" --redis "redis://127.0.0.1:$redis_port/0" --node-id "$node" --data-dir "$work/data-$node"
            done ;;
        *) echo "cluster: no run $label" >&2; exit 2 ;;
    esac
    [[ $label != single ]] && redis=(--redis "127.0.0.1:$redis_port" --redis-pid "$redis_pid")
    timeout -k 3 180 taskset -c "$load_cpu" "$build/foldtable-bench" fanout "${urls[@]}" --kind foldtable "${node_pids[@]}" \
        "${redis[@]}" --clients 1000 --in-flight 20 --seconds "$seconds" --warmup "$warmup" 2>&1 \
        | sed "s/^/[$label] /" | tee -a "$work/results" || status=1
    stop_all
}

# value LABEL LINE-PATTERN KEY: KEY's value on LABEL's line that matches LINE-PATTERN.
value() {
    grep -F "[$1] " "$work/results" | grep -F -- "$2" | head -1 | sed -n "s|.* $3=\\([^ ]*\\).*|\\1|p" || true
}

echo "cluster: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; nodes and Redis on CPU $server_cpu, generator on CPU $load_cpu"
for label in $runs; do run "$label"; done

echo
echo "cluster summary (load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
echo "| run | deliveries/s | p50 | p99 | nodes CPU s (each) | nodes waiting (each) | Redis CPU s (waiting) | deliveries per service CPU-second | generator CPU (share) |"
echo "|---|---|---|---|---|---|---|---|---|"
for label in $runs; do
    line=deliveries/s=
    nodes=$(value "$label" nodes: node0_cpu_s)
    [[ -n $nodes ]] && nodes="$nodes + $(value "$label" nodes: node1_cpu_s)" || nodes=$(value "$label" "$line" server_cpu_s)
    waits=$(value "$label" nodes: node0_waiting)
    [[ -n $waits ]] && waits="$waits + $(value "$label" nodes: node1_waiting)" || waits=$(value "$label" "$line" server_waiting)
    redis_cpu=$(value "$label" redis: redis_cpu_s)
    deliveries=$(grep -F "[$label] " "$work/results" | grep -F -- "$line" | head -1 | sed -n 's|.* deliveries/s=\([0-9]*\).*|\1|p' || true)
    per_cpu=$(awk -v d="$deliveries" -v s="$(value "$label" "$line" server_cpu_s)" -v r="${redis_cpu:-0}" -v t="$seconds" \
        'BEGIN { if (d != "" && s + r > 0) printf "%d", d * t / (s + r) }')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) |\n' "$label" "$deliveries" "$(value "$label" "$line" p50)" \
        "$(value "$label" "$line" p99)" "$nodes" "$waits" "${redis_cpu:-—}${redis_cpu:+ ($(value "$label" redis: redis_waiting))}" \
        "$per_cpu" "$(value "$label" "$line" gen_cpu_s)" "$(value "$label" "$line" gen_cpu)"
done
echo
echo "| Redis per change | CPU µs | commands | bytes in | bytes out | AOF bytes | stream bytes/entry | XADD round trip p50 / p99 | calls in the window (count/µs) |"
echo "|---|---|---|---|---|---|---|---|---|"
for label in $runs; do
    [[ $label == single ]] && continue
    printf '| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s |\n' "$label" "$(value "$label" redis: redis_cpu_us/change)" \
        "$(value "$label" redis: commands/change)" "$(value "$label" redis: in_bytes/change)" "$(value "$label" redis: out_bytes/change)" \
        "$(value "$label" redis: aof_bytes/change)" "$(value "$label" redis: stream_bytes/entry)" \
        "$(value "$label" redis: append_rtt_p50)" "$(value "$label" redis: append_rtt_p99)" "$(value "$label" redis: calls)"
done
single_p99=$(value single deliveries/s= p99)
for label in $runs; do
    [[ $label == two-* ]] || continue
    awk -v l="$label" -v a="$(value "$label" deliveries/s= p99)" -v b="$single_p99" 'BEGIN {
        gsub(/ms/, "", a); gsub(/ms/, "", b)
        if (a == "" || b == "" || b == 0) { print l ": a p99 is missing"; exit }
        r = a / b; printf "%s p99 / single p99: %.2fx (target <= 2x: %s)\n", l, r, r <= 2 ? "met" : "NOT met"
    }'
    gen=$(value "$label" deliveries/s= gen_cpu | tr -d %)
    [[ -n $gen && $gen -ge 85 ]] && echo "$label: the generator used ${gen}% of its CPU: the figure measures the generator"
    rw=$(value "$label" redis: redis_cpu | tr -d %)
    [[ -n $rw && $rw -ge 85 ]] && echo "$label: Redis used ${rw}% of a CPU: Redis is the limit"
done
exit "$status"

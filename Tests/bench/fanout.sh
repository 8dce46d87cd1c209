#!/usr/bin/env bash
# Fan-out benchmark: 1,000 WebSocket clients in one session, one author keeping 20 changes in
# flight, against foldtabled (sessions in memory, then on SQLite) and, in the same run, against libwebsockets-test-server's broadcast
# lws-mirror-protocol as the reference. Prints one line per server and the deliveries ratio
# (target: foldtabled >= 3x the reference).
#
# Builds nothing: run `swift build -c release` first. Servers run on CPU 0, the load generator
# on CPU 1 (taskset). Only 127.0.0.1 is used. Everything is bounded by `timeout`.
#
# Settings (environment): FANOUT_CLIENTS (1000), FANOUT_IN_FLIGHT (20), FANOUT_SECONDS (10),
# FANOUT_WARMUP (1), FANOUT_SERVER_CPU (0), FANOUT_LOAD_CPU (1), FANOUT_BUILD (.build/release).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${FANOUT_BUILD:-.build/release}
clients=${FANOUT_CLIENTS:-1000}
in_flight=${FANOUT_IN_FLIGHT:-20}
seconds=${FANOUT_SECONDS:-10}
warmup=${FANOUT_WARMUP:-1}
server_cpu=${FANOUT_SERVER_CPU:-0}
load_cpu=${FANOUT_LOAD_CPU:-1}

for binary in "$build/foldtabled" "$build/foldtable-bench"; do
    [[ -x $binary ]] || { echo "fanout: $binary missing: run 'swift build -c release' first" >&2; exit 2; }
done
mirror_bin=$(command -v libwebsockets-test-server || true)
[[ -n $mirror_bin ]] || { echo "fanout: libwebsockets-test-server missing (apt-get install libwebsockets-test-server)" >&2; exit 2; }

# A thousand sockets per process, on both sides.
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
wrappers=()
cleanup() {
    for pid in "${wrappers[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${wrappers[@]}"; do timeout 5 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Starts "$@" on the server CPU under a timeout; sets server_pid (the server itself, for its CPU
# time) and wrapper_pid (the timeout around it).
start_server() {
    local name=$1
    shift
    timeout -k 3 80 taskset -c "$server_cpu" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    wrapper_pid=$!
    wrappers+=("$wrapper_pid")
    server_pid=
    for _ in $(seq 50); do
        server_pid=$(pgrep -P "$wrapper_pid" | head -1 || true)
        [[ -n $server_pid ]] && break
        sleep 0.1
    done
    [[ -n $server_pid ]] || { echo "fanout: $name did not start" >&2; cat "$work/$name.err" >&2; exit 1; }
}

stop_server() {
    kill "$1" 2>/dev/null || true
    timeout 5 tail --pid="$1" -f /dev/null 2>/dev/null || kill -9 "$1" 2>/dev/null || true
}

wait_for_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "fanout: nothing listens on 127.0.0.1:$1" >&2
    exit 1
}

run_load() {
    local kind=$1 url=$2 pid=$3
    timeout -k 3 60 taskset -c "$load_cpu" "$build/foldtable-bench" fanout --url "$url" --kind "$kind" \
        --clients "$clients" --in-flight "$in_flight" --seconds "$seconds" --warmup "$warmup" --server-pid "$pid"
}

# 1. foldtabled (port 0: it prints the port it got), sessions in memory and then on SQLite (every
#    event committed before it is broadcast).
run_foldtabled() {
    local label=$1
    shift
    rm -f "$work/foldtabled.out"
    # The author sends thousands of changes a second: far past the per-connection rate limit.
    start_server foldtabled "$build/foldtabled" --port 0 --web-root web --demo-large-rows 1000 \
        --change-rate 1000000 --change-burst 1000000 --max-connections-per-ip 100000 "$@"
    for _ in $(seq 100); do
        line=$(head -1 "$work/foldtabled.out" 2>/dev/null || true)
        [[ $line == listening* ]] && break
        sleep 0.1
    done
    [[ $line == listening* ]] || { echo "fanout: foldtabled did not start" >&2; cat "$work/foldtabled.err" >&2; exit 1; }
    run_load foldtable "ws://127.0.0.1:${line##*:}/ws" "$server_pid" | sed "s/^fanout foldtable/fanout foldtable($label)/" \
        | tee -a "$work/results.$label" || status=1
    stop_server "$wrapper_pid"
}
status=0
run_foldtabled memory --memory
run_foldtabled sqlite --data-dir "$work/data"

# 2. The reference: libwebsockets-test-server's lws-mirror-protocol on a free port.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_server mirror "$mirror_bin" --port="$port"
wait_for_port "$port"
run_load mirror "ws://127.0.0.1:$port/" "$server_pid" | tee -a "$work/results" || status=1
stop_server "$wrapper_pid"
drops=$(grep -c 'dropping!' "$work/mirror.err" || true)
echo "fanout mirror: the server logged $drops \"dropping!\" (ring full: a message refused for everyone)"

theirs=$(sed -n 's/^fanout mirror:.* deliveries\/s=\([0-9]*\).*/\1/p' "$work/results")
theirs_cpu=$(sed -n 's/^fanout mirror:.* deliveries\/server_cpu_s=\([0-9]*\).*/\1/p' "$work/results")
for label in memory sqlite; do
    ours=$(sed -n 's/^fanout foldtable.*: .* deliveries\/s=\([0-9]*\).*/\1/p' "$work/results.$label")
    if [[ -z $ours || -z $theirs || $theirs -eq 0 ]]; then
        echo "fanout: a measurement failed" >&2
        exit 1
    fi
    awk -v a="$ours" -v b="$theirs" -v l="$label" 'BEGIN {
        r = a / b
        printf "fanout: foldtabled(%s)/mirror deliveries ratio = %.1fx (target >= 3x: %s)\n", l, r, (r >= 3 ? "met" : "NOT met")
    }'
    # Per second of server CPU: the same comparison with other load on the machine factored out.
    ours_cpu=$(sed -n 's/^fanout foldtable.*: .* deliveries\/server_cpu_s=\([0-9]*\).*/\1/p' "$work/results.$label")
    if [[ -n $ours_cpu && -n $theirs_cpu && $theirs_cpu -gt 0 ]]; then
        awk -v a="$ours_cpu" -v b="$theirs_cpu" -v l="$label" \
            'BEGIN { printf "fanout: foldtabled(%s)/mirror deliveries per server CPU-second ratio = %.1fx\n", l, a / b }'
    fi
done
exit "$status"

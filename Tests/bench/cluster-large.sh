#!/usr/bin/env bash
# One session of tens of thousands of members over four foldtabled nodes on one Redis (issue 33),
# and what happens when a node holding a quarter of them dies:
#
#   small   4 nodes × CROWD_SMALL/4 members: Redis' cost per change with few members
#   large   4 nodes × CROWD_MEMBERS/4 members (60,000 by default), all joining at once: how long
#           until every one is welcomed, each node's memory per member, then CROWD_TOGGLES real
#           toggles (expand, collapse, ...) one a second by an author on node a: the time from a
#           toggle's send until the last of the members has it, and Redis' cost per change
#           (independent of the members: compare with small); then a newcomer on each node:
#           its presence count and the sample of names it is given
#   kill    4 × CROWD_KILL_MEMBERS/4 (56,000: a survivor then holds 18,667 connections, under the
#           20,000 files a process may open here; 60,000 would need 20,000 each); after
#           CROWD_KILL_AFTER toggles node d gets SIGKILL; its members
#           reconnect as the web client does (backoff 400 ms doubling, jitter 0.75 to 1) to the
#           other nodes (what a load balancer does) and join again: how long until all are back,
#           and what members on the surviving nodes saw meanwhile (p99 of toggles before and
#           after the kill)
#
# One generator process per node (foldtable-bench fanout --crowd watcher: 20,000 open files per
# process here), one author (--crowd author); each process records what it saw and cluster_large.py
# reads the records. Toggle ids are their send times on CLOCK_MONOTONIC, one clock for every
# process, so latencies need no shared memory.
#
# Placement: nodes and Redis on CPU 0, the generators on CPU 1 (CROWD_SERVER_CPU,
# CROWD_LOAD_CPU); on a 2-core machine four nodes share one core, so the figures are of four
# nodes on one core. Builds nothing: run `swift build -c release` first. 127.0.0.1 only; every
# process is bounded by `timeout`.
#
# Settings (environment): CROWD_MEMBERS (60000), CROWD_SMALL (4000), CROWD_KILL_MEMBERS (56000), CROWD_TOGGLES (10),
# CROWD_KILL_AFTER (3), CROWD_RUNS ("small large kill"), CROWD_BUILD (.build/release), CROWD_KEEP
# (a directory: every process's output is copied there), CROWD_PERF (a file: perf record of a
# survivor for 8 s after the kill).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${CROWD_BUILD:-.build/release}
members=${CROWD_MEMBERS:-60000}
small=${CROWD_SMALL:-4000}
kill_members=${CROWD_KILL_MEMBERS:-56000}
toggles=${CROWD_TOGGLES:-10}
kill_after=${CROWD_KILL_AFTER:-3}
runs=${CROWD_RUNS:-small large kill}
server_cpu=${CROWD_SERVER_CPU:-0}
load_cpu=${CROWD_LOAD_CPU:-1}
nodes=(a b c d)

for binary in "$build/foldtabled" "$build/foldtable-bench" "$build/foldtable"; do
    [[ -x $binary ]] || { echo "cluster-large: $binary missing: run 'swift build -c release' first" >&2; exit 2; }
done
command -v redis-server >/dev/null || { echo "cluster-large: redis-server missing (apt-get install redis-server)" >&2; exit 2; }
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
(( members / ${#nodes[@]} + 64 <= $(ulimit -n) )) || { echo "cluster-large: $((members / ${#nodes[@]})) members per process need more open files than $(ulimit -n)" >&2; exit 2; }

mkdir -p .build
work=$(mktemp -d "$PWD/.build/bench-cluster-large.XXXXXX")
bench_name=cluster-large
source Tests/bench/processes.sh
trap 'stop_all; rm -rf "$work"' EXIT

# start_node NAME: a foldtabled over the run's Redis; sets port_NAME and pid_NAME.
start_node() {
    local name=$1
    # Every client comes from 127.0.0.1: far past the per-address cap.
    timeout -k 3 900 taskset -c "$server_cpu" "$build/foldtabled" --port 0 --web-root web --redis "redis://127.0.0.1:$redis_port/0" \
        --node-id "$name" --data-dir "$work/data-$name" --max-connections-per-ip 100000 --change-rate 1000 --change-burst 1000 \
        >"$work/$name.out" 2>"$work/$name.err" &
    pids+=($!)
    started_node "$name"
    printf -v "port_$name" '%s' "$node_port"
    printf -v "pid_$name" '%s' "$node_pid"
}

url() { local port="port_$1"; echo "ws://127.0.0.1:${!port}/ws"; }
pid() { local pid="pid_$1"; echo "${!pid}"; }

status=0
# run LABEL TOTAL: TOTAL members over the four nodes, the author's toggles, and with LABEL kill
# node d's SIGKILL after CROWD_KILL_AFTER toggles.
run() {
    local label=$1 each=$(($2 / ${#nodes[@]}))
    local total=$((each * ${#nodes[@]}))
    rm -rf "$work/data-"* "$work/$label".* "$work/stop"
    start_redis everysec 900
    for node in "${nodes[@]}"; do start_node "$node"; done
    local watchers=()
    for node in "${nodes[@]}"; do
        local reconnect=()
        [[ $label == kill && $node == d ]] && reconnect=(--reconnect-url "$(url a)" --reconnect-url "$(url b)" --reconnect-url "$(url c)")
        timeout -k 3 600 taskset -c "$load_cpu" "$build/foldtable-bench" fanout --crowd watcher --url "$(url "$node")" \
            --server-pid "$(pid "$node")" --clients "$each" --crowd-members "$total" --connect-batch 1000 --stop-file "$work/stop" \
            --record "$work/$label.$node.rec" "${reconnect[@]}" >"$work/$label.$node.out" 2>&1 &
        pids+=($!)
        watchers+=($!)
    done
    # The author starts once every watcher has its members joined (its first line).
    local index=0
    for node in "${nodes[@]}"; do
        for _ in $(seq 1200); do
            grep -q "joins:" "$work/$label.$node.out" 2>/dev/null && break
            kill -0 "${watchers[$index]}" 2>/dev/null || break
            sleep 0.1
        done
        grep -q "joins:" "$work/$label.$node.out" || { echo "cluster-large: the $node watcher did not join:" >&2; cat "$work/$label.$node.out" >&2; status=1; }
        index=$((index + 1))
    done
    local author_pids=()
    for node in "${nodes[@]}"; do author_pids+=(--server-pid "$(pid "$node")"); done
    timeout -k 3 300 taskset -c "$load_cpu" "$build/foldtable-bench" fanout --crowd author --url "$(url a)" --clients 1 \
        "${author_pids[@]}" --redis "127.0.0.1:$redis_port" --redis-pid "$redis_pid" --toggles "$toggles" \
        --record "$work/$label.author.rec" >"$work/$label.author.out" 2>&1 &
    local author=$!
    pids+=($author)
    if [[ $label == kill ]]; then
        # Toggles go out at 0, 1, 2, ... s: the kill comes CROWD_KILL_AFTER.5 s after the first,
        # half a second after toggle CROWD_KILL_AFTER + 1 (which may still be in flight).
        for _ in $(seq 600); do
            grep -q "toggling" "$work/$label.author.out" 2>/dev/null && break
            sleep 0.1
        done
        sleep "$kill_after.5"
        kill -9 "$(pid d)"
        echo "cluster-large: [$label] node d ($(pid d)) killed"
        # CROWD_PERF=FILE: where a survivor (node a) spends the next 8 s, for `perf report -i FILE`.
        [[ -n ${CROWD_PERF:-} ]] && timeout 30 perf record -q -g -p "$(pid a)" -o "$CROWD_PERF" -- sleep 8 >/dev/null 2>&1 &
    fi
    wait "$author" || { echo "cluster-large: [$label] the author failed:" >&2; cat "$work/$label.author.out" >&2; status=1; }
    # Members of the killed node need time to come back: up to a minute past the last toggle.
    if [[ $label == kill ]]; then
        for _ in $(seq 600); do
            grep -q "all back" "$work/$label.d.out" && break
            sleep 0.1
        done
    fi
    # What a newcomer sees of presence on each node: one probe per node joins at the same moment
    # and listens for five heartbeats; cluster_large.py checks each probe's final count (every
    # member and the four probes) and the names its welcome and diffs carry (a bounded sample).
    if [[ $label != kill ]]; then
        local probes=()
        for node in "${nodes[@]}"; do
            timeout -k 1 5 taskset -c "$load_cpu" "$build/foldtable" watch "$(url "$node")" bench --name "probe-$node" \
                >"$work/$label.probe.$node.jsonl" 2>"$work/$label.probe.$node.err" &
            probes+=($!)
        done
        for probe in "${probes[@]}"; do wait "$probe" || true; done
    fi
    touch "$work/stop"
    # A killed node's watcher fails while some of its members are not back: a finding the
    # summary reports (NOT met), not a broken run.
    index=0
    for watcher in "${watchers[@]}"; do
        wait "$watcher" || [[ $label == kill && ${nodes[$index]} == d ]] || status=1
        index=$((index + 1))
    done
    for node in "${nodes[@]}" author; do sed "s/^/[$label $node] /" "$work/$label.$node.out"; done
    python3 Tests/bench/cluster_large.py summary "$label" "$work/$label" || status=1
    [[ -n ${CROWD_KEEP:-} ]] && mkdir -p "$CROWD_KEEP" && cp "$work"/*.err "$work"/*.out "$CROWD_KEEP"/ 2>/dev/null || true
    stop_all
    rm -f "$work/stop"
}

echo "cluster-large: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); nodes and Redis on CPU $server_cpu, generators on CPU $load_cpu"
for label in $runs; do
    case $label in
        small) run small "$small" ;;
        large) run large "$members" ;;
        kill) run kill "$kill_members" ;;
        *) echo "cluster-large: no run $label" >&2; exit 2 ;;
    esac
done
exit "$status"

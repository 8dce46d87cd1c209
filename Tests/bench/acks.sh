#!/usr/bin/env bash
# Acknowledged changes per second: 1,000 clients, every one an author keeping 4 real toggles in
# flight (a section of its own with two rows: expand, collapse, ...), counting acks. Runs
# foldtabled with sessions in memory, then on SQLite (synchronous=full, the default, and normal),
# with a session per client (every commit touches 1,000 sessions' log pages) and with 100
# sessions of 10 clients (every change also reaches 9 other members).
#
# Two placements: the whole server (event loop and the store's writer thread) on one core, and
# the event loop alone on that core with the writer thread beside the load generator.
#
# The target's own configuration (a session per client, whole server on one core, memory and
# SQLite `full`) runs ACKS_ROUNDS times, memory and SQLite alternated, and a summary line gives
# each one's median and range: on a shared VM one 5-second window swings by 10-20% from one
# minute to the next, more than most changes move it, and alternating puts a slow minute on
# both. The other configurations run once.
#
# The steady state is measured the same way (ACKS_SUSTAINED_ROUNDS rounds, memory and SQLite
# alternated): after ACKS_SUSTAINED_WARMUP seconds every session has checkpointed its table
# (every --checkpoint-events) and the journal deletes as many old rows as it writes new ones,
# which a 5-second window starting at the first change never sees. SQLite runs a third time in
# each such round with --huge-pages, so every run records what huge pages bring.
#
# Builds nothing: run `swift build -c release` first. Only 127.0.0.1 is used; every run is
# bounded by `timeout`. Settings (environment): ACKS_CLIENTS (1000), ACKS_IN_FLIGHT (4),
# ACKS_SECONDS (5), ACKS_ROUNDS (3), ACKS_SUSTAINED_WARMUP (25), ACKS_SUSTAINED_ROUNDS (3),
# ACKS_TARGET (100000, acknowledged changes/s with the store on), ACKS_BUILD (.build/release),
# ACKS_TARGET_ONLY (0; 1: only SQLite `full` in the target's configuration, ACKS_ROUNDS times,
# and its summary line: one figure to set beside another build's, as Tests/bench/alternate.sh does).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${ACKS_BUILD:-.build/release}
clients=${ACKS_CLIENTS:-1000}
in_flight=${ACKS_IN_FLIGHT:-4}
seconds=${ACKS_SECONDS:-5}
sustained_warmup=${ACKS_SUSTAINED_WARMUP:-25}
rounds=${ACKS_ROUNDS:-3}
sustained_rounds=${ACKS_SUSTAINED_ROUNDS:-3}
target=${ACKS_TARGET:-100000}
target_only=${ACKS_TARGET_ONLY:-0}
for binary in "$build/foldtabled" "$build/foldtable-bench"; do
    [[ -x $binary ]] || { echo "acks: $binary missing: run 'swift build -c release' first" >&2; exit 2; }
done
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
server=
cleanup() {
    [[ -n $server ]] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
    rm -rf "$work"
}
trap cleanup EXIT

# run LABEL SESSIONS PLACEMENT SERVER-ARGS...   (PLACEMENT: together | writer-apart)
# The warm-up before the measured window is $warmup seconds (1 unless a caller sets it).
warmup=1
run() {
    local label=$1 sessions=$2 placement=$3
    shift 3
    rm -rf "$work/data"
    # Every client comes from 127.0.0.1: far past the per-address cap.
    timeout -k 3 $((60 + warmup)) taskset -c 0 "$build/foldtabled" --port 0 --web-root web --demo-large-rows 100 --max-connections-per-ip 100000 "$@" \
        >"$work/out" 2>"$work/err" &
    server=$!
    local line=
    for _ in $(seq 100); do
        line=$(head -1 "$work/out" 2>/dev/null || true)
        [[ $line == listening* ]] && break
        sleep 0.1
    done
    [[ $line == listening* ]] || { echo "acks: foldtabled did not start" >&2; cat "$work/err" >&2; exit 1; }
    local pid
    pid=$(pgrep -P "$server" | head -1 || echo "$server")
    if [[ $placement == writer-apart ]]; then
        # Every thread but the event loop (the first) goes to CPU 1.
        for task in /proc/"$pid"/task/*; do
            [[ ${task##*/} == "$pid" ]] || taskset -p -c 1 "${task##*/}" >/dev/null
        done
    fi
    local result
    result=$(timeout -k 3 $((60 + warmup)) taskset -c 1 "$build/foldtable-bench" fanout --url "ws://127.0.0.1:${line##*:}/ws" --kind foldtable \
        --every-client-authors --sessions "$sessions" --clients "$clients" --in-flight "$in_flight" --seconds "$seconds" --warmup "$warmup" \
        --server-pid "$pid" | head -1)
    echo "acks $label placement=$placement: ${result#acks foldtable: }"
    # For `summarize`: the configuration and its acknowledged changes per second.
    local rate=${result#*acks/s=}
    echo "$label $sessions $placement $warmup ${rate%% *}" >>"$work/rates"
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=
}

# summarize LABEL SESSIONS PLACEMENT WARMUP: "median (min-max, n runs)" of that configuration.
summarize() {
    awk -v label="$1" -v sessions="$2" -v placement="$3" -v warmup="$4" \
        '$1 == label && $2 == sessions && $3 == placement && $4 == warmup { print $5 }' "$work/rates" |
        sort -n | awk '{ v[NR] = $1 } END {
            if (NR == 0) { print "none"; exit }
            m = NR % 2 ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2)
            printf "%d (%d-%d, %d runs)\n", m, v[1], v[NR], NR }'
}

# verdict LABEL SESSIONS PLACEMENT WARMUP: whether that configuration's median reaches the target.
verdict() {
    local median
    median=$(summarize "$@")
    [[ ${median%% *} =~ ^[0-9]+$ ]] && ((${median%% *} >= target)) && echo met || echo "not met"
}

: >"$work/rates"
if [[ $target_only == 1 ]]; then
    for _ in $(seq "$rounds"); do run sqlite-full "$clients" together --data-dir "$work/data"; done
    echo "acks summary: sessions=$clients placement=together ${seconds}s after 1s: SQLite full $(summarize sqlite-full "$clients" together 1);" \
        "target $target with the store on: $(verdict sqlite-full "$clients" together 1)"
    exit 0
fi
for _ in $(seq "$rounds"); do
    run memory "$clients" together --memory
    run sqlite-full "$clients" together --data-dir "$work/data"
done
run sqlite-full "$clients" writer-apart --data-dir "$work/data"
run sqlite-normal "$clients" together --data-dir "$work/data" --synchronous normal
run memory 100 together --memory
run sqlite-full 100 together --data-dir "$work/data"
run sqlite-full 100 writer-apart --data-dir "$work/data"
run sqlite-normal 100 together --data-dir "$work/data" --synchronous normal

warmup=$sustained_warmup
for _ in $(seq "$sustained_rounds"); do
    run memory-sustained "$clients" together --memory
    run sqlite-full-sustained "$clients" together --data-dir "$work/data"
    # The same with transparent huge pages (--huge-pages): what they bring, in the same minutes.
    run sqlite-full-huge-pages-sustained "$clients" together --data-dir "$work/data" --huge-pages
done

echo "acks summary: sessions=$clients placement=together ${seconds}s after 1s: memory $(summarize memory "$clients" together 1)," \
    "SQLite full $(summarize sqlite-full "$clients" together 1); target $target with the store on: $(verdict sqlite-full "$clients" together 1)"
echo "acks summary: sessions=$clients placement=together ${seconds}s after ${sustained_warmup}s (steady state):" \
    "memory $(summarize memory-sustained "$clients" together "$sustained_warmup")," \
    "SQLite full $(summarize sqlite-full-sustained "$clients" together "$sustained_warmup")," \
    "SQLite full with --huge-pages $(summarize sqlite-full-huge-pages-sustained "$clients" together "$sustained_warmup");" \
    "target $target with the store on: $(verdict sqlite-full-sustained "$clients" together "$sustained_warmup")"

#!/usr/bin/env bash
# Fan-out benchmark (issue 11): the same clients and message sizes, one server after the other,
# against foldtabled and three broadcast servers that do nothing but relay:
#   mirror     libwebsockets-test-server's lws-mirror-protocol (Debian)
#   ws         a Node `ws` broadcast server (Debian node-ws; Tests/bench/peers/ws-broadcast.js)
#   websockets a Python `websockets` broadcast server (PyPI, in .build/bench-venv;
#              Tests/bench/peers/websockets_broadcast.py)
# Scenarios (each reports deliveries/s, p50/p99, server CPU seconds, server peak RSS and the
# generator's own CPU, which shows when a figure measures the generator):
#   1  1,000 clients in one session, one author toggling a small section, 20 in flight
#      (foldtabled with sessions in memory and on SQLite)
#   2  the same with 1 in flight
#   3  100 sessions x 10 clients, an author in every session (not against the mirror: it has at
#      most 10 instances)
#   4  10,000 clients joining one session (time until every welcome, resident memory per member),
#      then toggles one at a time to all of them
#   5  expanding the demo's 50,000-row section with 100 and with 1,000 clients joined; a peer
#      relays the same bytes in as many messages as foldtabled sent one client
#   6  10,000 clients arriving evenly over 25 s, then 25 s of silence (answering pings): what
#      watching members cost a server (foldtabled pings each once per 25 s; the peers never)
# A summary with the targets follows the raw lines.
#
# Builds nothing: run `swift build -c release` first. Servers run on CPU 0, the load generator
# on CPU 1 (taskset). Only 127.0.0.1 is used. Every server and generator run is bounded by
# `timeout`; each run gets a fresh server, so its peak RSS is that run's.
#
# Settings (environment): FANOUT_SCENARIOS ("1 2 3 4 5 6"), FANOUT_SECONDS (10), FANOUT_WARMUP (1),
# FANOUT_SERVER_CPU (0), FANOUT_LOAD_CPU (1), FANOUT_BUILD (.build/release),
# FANOUT_PEERS ("mirror ws websockets"), FANOUT_VENV (.build/bench-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${FANOUT_BUILD:-.build/release}
scenarios=${FANOUT_SCENARIOS:-1 2 3 4 5 6}
seconds=${FANOUT_SECONDS:-10}
warmup=${FANOUT_WARMUP:-1}
server_cpu=${FANOUT_SERVER_CPU:-0}
load_cpu=${FANOUT_LOAD_CPU:-1}
peers=${FANOUT_PEERS:-mirror ws websockets}
venv=${FANOUT_VENV:-.build/bench-venv}
# The Python peer's library, pinned so runs compare.
websockets_version=17.4

for binary in "$build/foldtabled" "$build/foldtable-bench"; do
    [[ -x $binary ]] || { echo "fanout: $binary missing: run 'swift build -c release' first" >&2; exit 2; }
done
for peer in $peers; do
    case $peer in
        mirror) command -v libwebsockets-test-server >/dev/null || { echo "fanout: libwebsockets-test-server missing (apt-get install libwebsockets-test-server)" >&2; exit 2; } ;;
        ws) { command -v node >/dev/null && [[ -d /usr/share/nodejs/ws ]] || node -e 'require("ws")' 2>/dev/null; } \
            || { echo "fanout: node or its ws package missing (apt-get install nodejs node-ws)" >&2; exit 2; } ;;
        websockets)
            if ! "$venv/bin/python" -c "import websockets, sys; sys.exit(websockets.__version__ != '$websockets_version')" 2>/dev/null; then
                python3 -m venv "$venv"
                "$venv/bin/pip" install -q --disable-pip-version-check "websockets==$websockets_version"
            fi ;;
        *) echo "fanout: unknown peer $peer (mirror, ws, websockets)" >&2; exit 2 ;;
    esac
done

# Ten thousand sockets per process, on both sides.
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
wrapper_pid=
cleanup() {
    [[ -n $wrapper_pid ]] && stop_server
    rm -rf "$work"
}
trap cleanup EXIT

# start NAME COMMAND...: starts a server on the server CPU under a timeout and waits for its
# "listening ...:PORT" line; sets server_pid (the server itself, for its CPU time and memory),
# wrapper_pid (the timeout around it) and port.
start() {
    local name=$1
    shift
    # Removed first: the loop below must not read the line of the server before.
    rm -f "$work/server.out"
    timeout -k 3 200 taskset -c "$server_cpu" "$@" >"$work/server.out" 2>"$work/server.err" &
    wrapper_pid=$!
    server_pid=
    local line=
    for _ in $(seq 150); do
        line=$(head -1 "$work/server.out" 2>/dev/null || true)
        [[ $line == listening* ]] && break
        sleep 0.1
    done
    [[ $line == listening* ]] || { echo "fanout: $name did not start" >&2; cat "$work/server.err" >&2; exit 1; }
    server_pid=$(pgrep -P "$wrapper_pid" | head -1 || true)
    [[ -n $server_pid ]] || { echo "fanout: $name exited" >&2; exit 1; }
    port=${line##*:}
}

# The mirror prints no port: it gets a free one and is waited for on it.
start_mirror() {
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    timeout -k 3 200 taskset -c "$server_cpu" libwebsockets-test-server --port="$port" >"$work/server.out" 2>"$work/server.err" &
    wrapper_pid=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    server_pid=$(pgrep -P "$wrapper_pid" | head -1 || true)
    [[ -n $server_pid ]] || { echo "fanout: the mirror did not start" >&2; cat "$work/server.err" >&2; exit 1; }
}

# A server gets 5 s to close its clients (Python's websockets closes 10,000 one by one), then
# is killed; `wait` reaps it quietly.
stop_server() {
    kill "$wrapper_pid" 2>/dev/null || true
    timeout 5 tail --pid="$wrapper_pid" -f /dev/null 2>/dev/null || kill -9 "$wrapper_pid" "$server_pid" 2>/dev/null || true
    { wait "$wrapper_pid"; } 2>/dev/null || true
    wrapper_pid=
}

# serve SERVER [foldtabled arguments...]: starts SERVER (foldtabled-memory, foldtabled-sqlite,
# mirror, ws, websockets) and sets url and kind for the generator.
serve() {
    local server=$1
    shift
    case $server in
        foldtabled-*)
            local store=(--memory)
            [[ $server == foldtabled-sqlite ]] && { rm -rf "$work/data"; store=(--data-dir "$work/data"); }
            # The authors send thousands of changes a second: far past the per-connection rate
            # limit; every client comes from 127.0.0.1: far past the per-address cap.
            start foldtabled "$build/foldtabled" --port 0 --web-root web --change-rate 1000000 --change-burst 1000000 \
                --max-connections-per-ip 100000 "${store[@]}" "$@"
            url="ws://127.0.0.1:$port/ws" kind=foldtable ;;
        mirror) start_mirror; url="ws://127.0.0.1:$port/" kind=mirror ;;
        ws) start ws node Tests/bench/peers/ws-broadcast.js 0; url="ws://127.0.0.1:$port/" kind=broadcast ;;
        websockets) start websockets "$venv/bin/python" Tests/bench/peers/websockets_broadcast.py 0; url="ws://127.0.0.1:$port/" kind=broadcast ;;
    esac
}

status=0
# run SCENARIO SERVER [generator arguments...] -- [foldtabled arguments...]: one fresh server, one
# generator run; its lines are printed and kept, tagged "[SCENARIO SERVER]".
run() {
    local scenario=$1 server=$2
    shift 2
    local load=() extra=()
    while [[ $# -gt 0 && $1 != -- ]]; do load+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    extra=("$@")
    serve "$server" "${extra[@]}"
    local payload=()
    [[ $kind != foldtable ]] && payload=(--payload-bytes "$event_bytes")
    timeout -k 3 180 taskset -c "$load_cpu" "$build/foldtable-bench" fanout --url "$url" --kind "$kind" --server-pid "$server_pid" \
        "${payload[@]}" "${load[@]}" 2>&1 | sed "s/^/[$scenario $server] /" | tee -a "$work/results" || status=1
    if [[ $server == mirror ]]; then
        echo "[$scenario mirror] the mirror logged $(grep -c 'dropping!' "$work/server.err" || true) \"dropping!\" (ring full)" | tee -a "$work/results"
    fi
    stop_server
}

# value TAG LINE-PATTERN KEY: KEY's value on TAG's line that matches LINE-PATTERN.
value() {
    grep -F "[$1] " "$work/results" | grep -F -- "$2" | head -1 | sed -n "s|.* $3=\\([^ ]*\\).*|\\1|p" || true
}

# table SCENARIO SERVERS...: one markdown row per server (the figures README's tables hold).
table() {
    local scenario=$1
    shift
    echo "| $scenario | deliveries/s | p50 | p99 | server CPU s | server peak RSS MB | generator CPU s (share) | server waiting for its CPU |"
    echo "|---|---|---|---|---|---|---|---|"
    for server in "$@"; do
        local tag="$scenario $server" line="deliveries/s="
        printf '| %s | %s | %s | %s | %s | %s | %s (%s) | %s |\n' "$server" "$(value "$tag" "$line" deliveries/s)" \
            "$(value "$tag" "$line" p50)" "$(value "$tag" "$line" p99)" "$(value "$tag" "$line" server_cpu_s)" \
            "$(value "$tag" "$line" server_peak_rss_mb)" "$(value "$tag" "$line" gen_cpu_s)" "$(value "$tag" "$line" gen_cpu)" \
            "$(value "$tag" "$line" server_waiting)"
    done
}

# target LABEL OURS THEIRS FACTOR higher|lower: "OURS is FACTOR x THEIRS or better".
target() {
    [[ -n $2 && -n $3 ]] || { echo "$1: a measurement is missing"; status=1; return; }
    awk -v l="$1" -v a="$2" -v b="$3" -v f="$4" -v d="$5" 'BEGIN {
        gsub(/ms/, "", a); gsub(/ms/, "", b)
        if (d == "higher") { r = a / b; ok = r >= f; printf "%s: %.1fx (target >= %sx: %s)\n", l, r, f, ok ? "met" : "NOT met" }
        else { r = a / b; ok = r <= f; printf "%s: %.2fx (target <= %sx: %s)\n", l, r, f, ok ? "met" : "NOT met" }
    }'
}

echo "fanout: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; servers on CPU $server_cpu, generator on CPU $load_cpu"
# The size of foldtabled's event, which the peers' messages are padded to (measured in scenario 1).
event_bytes=140
servers=(foldtabled-memory $peers)

for scenario in $scenarios; do
    case $scenario in
        1 | 2)
            in_flight=$([[ $scenario == 1 ]] && echo 20 || echo 1)
            for server in foldtabled-memory foldtabled-sqlite $peers; do
                run "s$scenario" "$server" --clients 1000 --in-flight "$in_flight" --seconds "$seconds" --warmup "$warmup" -- --demo-large-rows 1000
                if [[ $server == foldtabled-memory ]]; then
                    measured=$(value "s$scenario foldtabled-memory" detail: bytes/delivery)
                    [[ -n $measured && $measured -gt 16 ]] && event_bytes=$measured
                fi
            done ;;
        3)
            for server in foldtabled-memory foldtabled-sqlite $peers; do
                [[ $server == mirror ]] && { echo "[s3 mirror] skipped: lws-mirror-protocol has at most 10 instances (rooms), not 100" | tee -a "$work/results"; continue; }
                run s3 "$server" --clients 1000 --sessions 100 --in-flight 20 --seconds "$seconds" --warmup "$warmup" -- --demo-large-rows 1000
            done ;;
        4)
            for server in "${servers[@]}"; do
                run s4 "$server" --clients 10000 --connect-batch 200 --in-flight 1 --seconds 3 --warmup 0.5 -- --demo-large-rows 1000
            done ;;
        5)
            for clients in 100 1000; do
                run "s5-$clients" foldtabled-memory --session demo --clients "$clients" --expand big -- --demo-large-rows 50000
                messages=$(value "s5-$clients foldtabled-memory" detail: messages_to_client0)
                bytes=$(value "s5-$clients foldtabled-memory" detail: bytes_to_client0)
                [[ -n $messages && -n $bytes && $messages -gt 0 ]] || { echo "fanout: the expansion was not measured" >&2; status=1; continue; }
                for server in $peers; do
                    run "s5-$clients" "$server" --clients "$clients" --expand-bytes "$bytes" --expand-messages "$messages"
                done
            done ;;
        6)
            for server in "${servers[@]}"; do
                run s6 "$server" --clients 10000 --join-over 25 --idle 25 --in-flight 1 --seconds 1 --warmup 0.5 -- --demo-large-rows 1000
            done ;;
        *) echo "fanout: no scenario $scenario" >&2; exit 2 ;;
    esac
done

echo
echo "fanout summary (peers padded to $event_bytes bytes a message; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
for scenario in $scenarios; do
    case $scenario in
        1 | 2)
            table "s$scenario" foldtabled-memory foldtabled-sqlite $peers
            ours=$(value "s$scenario foldtabled-memory" deliveries/s= deliveries/s)
            for peer in $peers; do
                theirs=$(value "s$scenario $peer" deliveries/s= deliveries/s)
                if [[ $scenario == 1 ]]; then
                    factor=$([[ $peer == websockets ]] && echo 15 || echo 10)
                    target "s1 foldtabled(memory)/$peer deliveries" "$ours" "$theirs" "$factor" higher
                    # Per second of server CPU: the same comparison with a busy machine factored out.
                    target "s1 foldtabled(memory)/$peer deliveries per server CPU-second" \
                        "$(value "s1 foldtabled-memory" deliveries/s= deliveries/server_cpu_s)" "$(value "s1 $peer" deliveries/s= deliveries/server_cpu_s)" "$factor" higher
                elif [[ $peer == mirror ]]; then
                    target "s2 foldtabled(memory)/mirror p99" "$(value "s2 foldtabled-memory" deliveries/s= p99)" "$(value "s2 mirror" deliveries/s= p99)" 0.5 lower
                fi
            done ;;
        3) table s3 foldtabled-memory foldtabled-sqlite $(echo " $peers " | sed 's/ mirror / /') ;;
        4)
            table s4 "${servers[@]}"
            echo "| s4 joins | welcomed s | presence s | server CPU s | resident MB joined | KiB per member | generator CPU s |"
            echo "|---|---|---|---|---|---|---|"
            for server in "${servers[@]}"; do
                tag="s4 $server"
                printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$server" "$(value "$tag" joins: welcomed_s)" "$(value "$tag" joins: presence_s)" \
                    "$(value "$tag" joins: server_cpu_s)" "$(value "$tag" joins: rss_joined_mb)" "$(value "$tag" joins: per_member_kib)" \
                    "$(value "$tag" joins: gen_cpu_s)"
            done
            awk -v w="$(value "s4 foldtabled-memory" joins: welcomed_s)" -v m="$(value "s4 foldtabled-memory" joins: per_member_kib)" 'BEGIN {
                printf "s4 foldtabled: all 10,000 welcomed in %s s (target <= 10 s: %s), %s KiB per member (target <= 16 KiB: %s)\n",
                    w, (w != "" && w <= 10 ? "met" : "NOT met"), m, (m != "" && m <= 16 ? "met" : "NOT met")
            }' ;;
        5)
            for clients in 100 1000; do
                echo "| s5, $clients clients | every client holds every row (s) | deliveries/s | p50 | p99 | server CPU s | server peak RSS MB | generator CPU s | server waiting for its CPU |"
                echo "|---|---|---|---|---|---|---|---|---|"
                for server in foldtabled-memory $peers; do
                    tag="s5-$clients $server"
                    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$server" "$(value "$tag" all_s= all_s)" "$(value "$tag" all_s= deliveries/s)" \
                        "$(value "$tag" all_s= p50)" "$(value "$tag" all_s= p99)" "$(value "$tag" all_s= server_cpu_s)" \
                        "$(value "$tag" all_s= server_peak_rss_mb)" "$(value "$tag" all_s= gen_cpu_s)" "$(value "$tag" all_s= server_waiting)"
                done
            done
            awk -v t="$(value "s5-100 foldtabled-memory" all_s= all_s)" 'BEGIN {
                printf "s5 foldtabled: 100 clients hold all 50,000 rows after %s s (target < 1 s: %s)\n", t, (t != "" && t + 0 < 1 ? "met" : "NOT met")
            }' ;;
        6)
            echo "| s6: 10,000 members arriving over 25 s, then 25 s idle | server CPU s while they arrive | idle: server CPU s | idle: server CPU | pings answered |"
            echo "|---|---|---|---|---|"
            for server in "${servers[@]}"; do
                tag="s6 $server"
                printf '| %s | %s | %s | %s | %s |\n' "$server" "$(value "$tag" joins: server_cpu_s)" "$(value "$tag" idle: server_cpu_s)" \
                    "$(value "$tag" idle: server_cpu)" "$(value "$tag" idle: pings)"
            done ;;
    esac
done
exit "$status"

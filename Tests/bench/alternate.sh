#!/usr/bin/env bash
# Two builds side by side in the same minutes: the three headline figures of `make bench`, each
# run for the old build and the new one in turn, so a slow minute on this shared machine falls on
# both rather than on one build. On a 2-core VM one window swings by 10-20% from one minute to the
# next; a figure taken an hour apart from its old counterpart says little.
#
# Usage: bash Tests/bench/alternate.sh OLD NEW [PAIRS]
#   OLD, NEW  directories of release binaries, each holding at least foldtabled and
#             foldtable-bench (a copy of .build/release); each build is loaded by its own generator.
#   PAIRS     how many old/new pairs of every measurement (4).
#
# The measurements, each the existing script with its own placement (server, or every node and
# Redis, on CPU 0, the load generator on CPU 1) and its headline figure:
#   s1       Tests/bench/fanout.sh scenario 1: 1,000 clients in one session, one author toggling a
#            small section, 20 in flight; deliveries/s of foldtabled with sessions in memory (the
#            figure its targets compare). The same scenario on SQLite runs too and is reported as
#            "s1-sqlite".
#   acks     Tests/bench/acks.sh's target configuration with the store on (ACKS_TARGET_ONLY):
#            1,000 clients each authoring in a session of its own, 4 toggles in flight, SQLite
#            `full`; acknowledged changes/s.
#   cluster  Tests/bench/cluster.sh's two-always run: two nodes over one Redis (appendfsync
#            always), the clients split between them; deliveries/s.
# Within a pair the two builds run back to back, one measurement at a time; the build that goes
# first swaps from one pair to the next (old first in odd pairs), so neither always runs second.
#
# The table at the end gives, per figure, the median of the old runs, of the new runs, and of the
# per-pair ratios new/old with their range (above 1: the new build is faster). A run whose figure
# is missing is named, its log kept, and the script exits 1.
#
# Settings (environment): ALTERNATE_SECONDS (5, the measured window of every run, after the
# scripts' 1 s warm-up), ALTERNATE_RUNS ("s1 acks cluster"). At the defaults a pair takes about
# 70 s on 2 cores (4 pairs: 5 minutes). Builds nothing; every process is bounded by the scripts'
# `timeout`s.
set -euo pipefail
cd "$(dirname "$0")/../.."

[[ $# -ge 2 && $# -le 3 ]] || { sed -n '7,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
old=$(realpath -e "$1") || { echo "alternate: no directory $1" >&2; exit 2; }
new=$(realpath -e "$2") || { echo "alternate: no directory $2" >&2; exit 2; }
pairs=${3:-4}
seconds=${ALTERNATE_SECONDS:-5}
runs=${ALTERNATE_RUNS:-s1 acks cluster}
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "alternate: PAIRS must be a positive number, not $pairs" >&2; exit 2; }
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "alternate: ALTERNATE_SECONDS must be a positive number, not $seconds" >&2; exit 2; }
for build in "$old" "$new"; do
    for binary in foldtabled foldtable-bench; do
        [[ -x $build/$binary ]] || { echo "alternate: $build/$binary missing" >&2; exit 2; }
    done
done
for run in $runs; do
    case $run in
        s1 | acks | cluster) ;;
        *) echo "alternate: no measurement $run (s1, acks, cluster)" >&2; exit 2 ;;
    esac
done

work=$(mktemp -d)
keep_logs=0
cleanup() { [[ $keep_logs == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT
# One line per figure and run: "FIGURE BUILD PAIR VALUE".
: >"$work/figures"

# figure LOG TAG KEY: KEY's value on the first line of LOG that starts with TAG and holds "KEY=".
figure() {
    grep -F -- "$2" "$1" | grep -F -- " $3=" | head -1 | sed -n "s|.* $3=\\([0-9][0-9]*\\).*|\\1|p" || true
}

status=0
# record FIGURE BUILD PAIR VALUE LOG: keeps VALUE, or names the run and keeps its log.
record() {
    if [[ -n $4 ]]; then
        echo "$1 $2 $3 $4" >>"$work/figures"
        printf '  %-10s %s %s\n' "$1" "$2" "$4"
    else
        echo "alternate: pair $3, $2 build: no $1 figure (log: $5)" >&2
        keep_logs=1 status=1
    fi
}

# measure RUN BUILD-NAME PAIR: one run of a measurement against one build.
measure() {
    local run=$1 name=$2 pair=$3 build
    build=$([[ $name == old ]] && echo "$old" || echo "$new")
    local log="$work/$run-$name-$pair.log"
    case $run in
        s1)
            # A blank peer list (an empty one means the default): foldtabled only.
            FANOUT_BUILD=$build FANOUT_SCENARIOS=1 FANOUT_PEERS=' ' FANOUT_SECONDS=$seconds bash Tests/bench/fanout.sh >"$log" 2>&1 || true
            record s1 "$name" "$pair" "$(figure "$log" '[s1 foldtabled-memory] ' deliveries/s)" "$log"
            record s1-sqlite "$name" "$pair" "$(figure "$log" '[s1 foldtabled-sqlite] ' deliveries/s)" "$log" ;;
        acks)
            ACKS_BUILD=$build ACKS_TARGET_ONLY=1 ACKS_ROUNDS=1 ACKS_SECONDS=$seconds bash Tests/bench/acks.sh >"$log" 2>&1 || true
            record acks "$name" "$pair" "$(figure "$log" 'acks sqlite-full placement=together: ' acks/s)" "$log" ;;
        cluster)
            CLUSTER_BUILD=$build CLUSTER_RUNS=two-always CLUSTER_SECONDS=$seconds bash Tests/bench/cluster.sh >"$log" 2>&1 || true
            record cluster "$name" "$pair" "$(figure "$log" '[two-always] ' deliveries/s)" "$log" ;;
    esac
}

echo "alternate: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S) UTC; $pairs pairs of: $runs; ${seconds}s windows"
for name in old new; do
    build=$([[ $name == old ]] && echo "$old" || echo "$new")
    echo "alternate: $name = $build (foldtabled sha256 $(sha256sum "$build/foldtabled" | cut -c1-12)$([[ -f $build/BUILD ]] && echo "; $(head -1 "$build/BUILD")"))"
done
for pair in $(seq "$pairs"); do
    order=$((pair % 2 == 1 ? 0 : 1))
    for run in $runs; do
        echo "pair $pair/$pairs, $run ($(date -u +%H:%M:%S)):"
        if [[ $order == 0 ]]; then
            measure "$run" old "$pair"
            measure "$run" new "$pair"
        else
            measure "$run" new "$pair"
            measure "$run" old "$pair"
        fi
    done
done

echo
echo "alternate summary ($pairs pairs; load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S) UTC)"
echo "| figure | old median | new median | new/old, median of pair ratios (range) | pairs |"
echo "|---|---|---|---|---|"
for figure in s1 s1-sqlite acks cluster; do
    grep -q "^$figure " "$work/figures" || continue
    awk -v f="$figure" '
        function median(a, n,    i, j, t) {
            for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        $1 == f { value[$2, $3] = $4; if ($2 == "old") olds[++no] = $4; else news[++nn] = $4; seen[$3] = 1 }
        END {
            for (p in seen) if ((("old", p) in value) && (("new", p) in value) && value["old", p] > 0) ratios[++nr] = value["new", p] / value["old", p]
            if (nr > 0) {
                lo = hi = ratios[1]
                for (i = 2; i <= nr; i++) { if (ratios[i] < lo) lo = ratios[i]; if (ratios[i] > hi) hi = ratios[i] }
                ratio = sprintf("%.2f (%.2f-%.2f)", median(ratios, nr), lo, hi)
            } else ratio = "none"
            label = f == "s1" ? "s1 deliveries/s (memory)" : f == "s1-sqlite" ? "s1 deliveries/s (SQLite)" : f == "acks" ? "acks/s, SQLite full" : "cluster two-always deliveries/s"
            printf "| %s | %s | %s | %s | %d |\n", label, no ? sprintf("%d", median(olds, no)) : "none", nn ? sprintf("%d", median(news, nn)) : "none", ratio, nr
        }' "$work/figures"
done
[[ $keep_logs == 1 ]] && echo "alternate: logs of every run kept in $work"
exit "$status"

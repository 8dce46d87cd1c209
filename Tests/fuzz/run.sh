#!/usr/bin/env bash
# Builds the libFuzzer target for the client message decoder and Table.apply (FuzzDecoder.swift)
# and runs it for a bounded time: `Tests/fuzz/run.sh [seconds]` (default 60).
#
# The committed corpus (Tests/fuzz/corpus) is a read-only seed; inputs libFuzzer finds go to a
# scratch corpus under .build/fuzz, which later runs start from too. Nothing is written to the
# source tree. A crash (a trap, an ASan report, a timeout, a leak) fails the script and prints the
# path of the input that caused it and the command that replays it.
#
# Ends with a plain line "fuzz: N passed, N failed" (what CI counts).
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

out=.build/fuzz
binary="$out/fuzz-decoder"
scratch="$out/corpus"
artifacts="$out/artifacts"
swiftc="${SWIFTC:-swiftc}"

fail() {
    echo "fuzz: $*" >&2
    echo "fuzz: 0 passed, 1 failed"
    exit 1
}

# -sanitize=fuzzer links clang's libFuzzer runtime, which the Swift toolchain ships next to its
# own clang (usr/lib/clang/<version>/lib/linux/libclang_rt.fuzzer-x86_64.a): no Debian package.
toolchain="$(dirname "$(dirname "$(command -v "$swiftc")")")"
if ! compgen -G "$toolchain/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null; then
    fail "no libFuzzer runtime under $toolchain/lib/clang; this Swift toolchain cannot build fuzz targets"
fi

mkdir -p "$out" "$scratch"
# Rebuild only when a source changed: the -O build of FoldtableCore takes ~20 s of one core.
sources=(Sources/FoldtableCore/*.swift Tests/fuzz/FuzzDecoder.swift)
if [ ! -x "$binary" ] || [ -n "$(find "${sources[@]}" -newer "$binary" -print -quit)" ]; then
    echo "fuzz: building $binary"
    # One module: the target uses FoldtableCore's types without an import (see FuzzDecoder.swift).
    # -parse-as-library: libFuzzer provides main(). ASan too, so memory errors are crashes.
    # lld: the system's gold linker warns about every local ASan symbol it cannot export.
    "$swiftc" -sanitize=fuzzer,address -parse-as-library -O -use-ld=lld -module-name FoldtableCore \
        "${sources[@]}" -o "$binary.tmp" || fail "the fuzz target does not build"
    mv "$binary.tmp" "$binary"
fi

# Each run's crash files only, so the paths printed below are this run's.
rm -rf "$artifacts"
mkdir -p "$artifacts"

# The scratch corpus comes first: libFuzzer writes new inputs to the first directory only.
# -timeout: one input (at most 64 messages on a small table) takes well under a millisecond, so
# 10 s means a hang. -rss_limit_mb: the table's limits keep memory small; 2 GiB means a leak.
# -max_len: room for 64 lines of messages with texts up to the table's 64-byte limit.
# libFuzzer prints a line per new input (hundreds a minute): they go to a log, and only its end
# is shown (the statistics, or the crash report), unless FUZZ_VERBOSE=1.
log="$out/last-run.log"
echo "fuzz: running for ${seconds}s on Tests/fuzz/corpus (+ $scratch), log in $log"
status=0
run=("$binary" "$scratch" Tests/fuzz/corpus
    -dict=Tests/fuzz/protocol.dict
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192
    -artifact_prefix="$artifacts/" -print_final_stats=1)
# No Swift runtime backtracer: on a trap it reads raw stack memory, which ASan reports as an
# overflow in the crash handler, hiding the real report; libFuzzer prints the stack itself.
export SWIFT_BACKTRACE=enable=no
if [ "${FUZZ_VERBOSE:-0}" = 1 ]; then
    "${run[@]}" 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
else
    "${run[@]}" >"$log" 2>&1 || status=$?
fi

if [ "$status" -eq 0 ]; then
    grep -E '^(Done|stat::)' "$log" || true
else
    tail -n 60 "$log" >&2
    # The failed invariant (FuzzDecoder.swift traps with "fuzz invariant: ...") or ASan's verdict.
    grep -m 1 -E 'Fatal error|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$log" >&2 || true
    found=("$artifacts"/*)
    if [ -e "${found[0]}" ]; then
        for input in "${found[@]}"; do
            echo "fuzz: crashing input: $input (replay: $binary $input)" >&2
        done
    fi
    fail "the fuzzer stopped with status $status"
fi
echo "fuzz: 1 passed, 0 failed"

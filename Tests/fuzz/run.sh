#!/usr/bin/env bash
# Builds the libFuzzer targets for every parser of outside input and runs each for a bounded time:
# `Tests/fuzz/run.sh [seconds per target] [target ...]` (default 60 s; all targets unless named).
#
#   decoder  client messages and Table.apply              FuzzDecoder.swift  corpus/
#   policy   Host, Origin, X-Forwarded-For; HTTP API      FuzzPolicy.swift   corpus-policy/
#   token    token verification and claims (OpenSSL)      FuzzToken.swift    corpus-token/
#   csv      CSV import and export                        FuzzCSV.swift      corpus-csv/
#   config   the config file, flags, validation           FuzzConfig.swift   corpus-config/
#   redis    Redis replies, stream entries and codings    FuzzRedis.swift    corpus-redis/
#
# The modules a target needs are built once into .build/fuzz/modules (instrumented, with
# -enable-testing so a target reaches internal parsers through `@testable import`) and shared by
# every target; a module or a target is rebuilt only when one of its sources (or a module under
# it) changed.
#
# The committed corpora (Tests/fuzz/corpus*) are read-only seeds; inputs libFuzzer finds go to a
# scratch corpus per target under .build/fuzz, which later runs start from too. Nothing is written
# to the source tree. A crash (a trap, a failed invariant, an ASan report, a timeout, a leak)
# fails that target and prints the path of the input that caused it and the command that replays
# it; the other targets still run.
#
# Ends with a plain line "fuzz: N passed, N failed", N counting targets (what CI counts).
set -uo pipefail

seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

all_targets=(decoder policy token csv config redis)
if [ "$#" -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi

out=.build/fuzz
modules="$out/modules"
swiftc="${SWIFTC:-swiftc}"
passed=0
failed=0

finish() {
    echo "fuzz: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# -sanitize=fuzzer links clang's libFuzzer runtime, which the Swift toolchain ships next to its
# own clang (usr/lib/clang/<version>/lib/linux/libclang_rt.fuzzer-x86_64.a): no Debian package.
toolchain="$(dirname "$(dirname "$(command -v "$swiftc")")")"
if ! compgen -G "$toolchain/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null; then
    echo "fuzz: no libFuzzer runtime under $toolchain/lib/clang; this Swift toolchain cannot build fuzz targets" >&2
    failed=${#targets[@]}
    finish
fi
mkdir -p "$modules"

# Every module and target is compiled the same way: coverage (fuzzer) and ASan instrumentation,
# so memory errors are crashes; -O, as the server runs; -parse-as-library, as libFuzzer provides
# main().
flags=(-sanitize=fuzzer,address -parse-as-library -O -I "$modules")

# What each module is made of: its sources, the modules it imports, extra flags (C modules).
# (every Swift file under the module's folder, sub-folders included: FoldtableServer is in folders).
module_sources() { find Sources/"$1" -name '*.swift' -not -path '*.docc/*' | LC_ALL=C sort; }
module_deps() {
    case "$1" in
        FoldtableCore) ;;
        FoldtableServer) echo FoldtableCore ;;
        FoldtableAuth) echo FoldtableCore FoldtableServer ;;
        FoldtableRedis) echo FoldtableCore FoldtableServer ;;
    esac
}
# The system-library module maps live in Sources/C*; hiredis's header sits in its own directory.
module_flags() {
    case "$1" in
        FoldtableAuth) echo -I Sources/COpenSSL ;;
        FoldtableRedis) echo -I Sources/CHiredis -Xcc -I/usr/include/hiredis ;;
    esac
}

# Builds .build/fuzz/modules/lib<name>.a and <name>.swiftmodule unless they are newer than their
# sources and the modules under them. Returns non-zero if it does not build.
build_module() {
    local name="$1" dep
    local library="$modules/lib$name.a"
    # shellcheck disable=SC2207
    local sources=($(module_sources "$name"))
    local inputs=("${sources[@]}")
    for dep in $(module_deps "$name"); do
        build_module "$dep" || return 1
        inputs+=("$modules/lib$dep.a")
    done
    if [ -f "$library" ] && [ -z "$(find "${inputs[@]}" -newer "$library" -print -quit)" ]; then return 0; fi
    echo "fuzz: building module $name"
    # shellcheck disable=SC2046
    "$swiftc" "${flags[@]}" -enable-testing -module-name "$name" $(module_flags "$name") \
        -emit-module -emit-module-path "$modules/$name.swiftmodule" \
        -emit-library -static -o "$library.tmp" "${sources[@]}" || return 1
    mv "$library.tmp" "$library"
}

# What each target is: its harness, the modules it links (dependants first), its seed corpus and
# dictionary, the longest input worth trying, and extra link flags.
target_harness() {
    case "$1" in
        decoder) echo Tests/fuzz/FuzzDecoder.swift ;;
        policy) echo Tests/fuzz/FuzzPolicy.swift ;;
        token) echo Tests/fuzz/FuzzToken.swift ;;
        csv) echo Tests/fuzz/FuzzCSV.swift ;;
        config) echo Tests/fuzz/FuzzConfig.swift ;;
        redis) echo Tests/fuzz/FuzzRedis.swift ;;
        *) return 1 ;;
    esac
}
target_modules() {
    case "$1" in
        decoder | csv) echo FoldtableCore ;;
        policy | config) echo FoldtableServer FoldtableCore ;;
        token) echo FoldtableAuth FoldtableServer FoldtableCore ;;
        redis) echo FoldtableRedis FoldtableServer FoldtableCore ;;
    esac
}
target_corpus() { if [ "$1" = decoder ]; then echo Tests/fuzz/corpus; else echo "Tests/fuzz/corpus-$1"; fi; }
target_dict() { if [ "$1" = decoder ]; then echo Tests/fuzz/protocol.dict; else echo "Tests/fuzz/$1.dict"; fi; }
# -max_len: decoder, room for 64 lines of messages with texts up to the table's 64-byte limit;
# csv and redis, room for a few dozen lines or entries; the others, a handful of header-sized
# values (the policy's Host is refused past 255 bytes, a token past 4 KiB).
target_max_len() {
    case "$1" in
        decoder | csv | redis) echo 8192 ;;
        token) echo 5000 ;;
        *) echo 4096 ;;
    esac
}
target_link() {
    case "$1" in
        token) echo -I Sources/COpenSSL -lcrypto ;;
        redis) echo -I Sources/CHiredis -Xcc -I/usr/include/hiredis -lhiredis ;;
    esac
}

# Builds .build/fuzz/fuzz-<target> unless it is newer than its harness and modules.
build_target() {
    local target="$1" harness binary="$out/fuzz-$1" module
    harness="$(target_harness "$target")" || {
        echo "fuzz: no target named $target (targets: ${all_targets[*]})" >&2
        return 1
    }
    local inputs=("$harness" Tests/fuzz/FuzzSupport.swift) libraries=()
    for module in $(target_modules "$target"); do
        build_module "$module" || {
            echo "fuzz: module $module does not build" >&2
            return 1
        }
        inputs+=("$modules/lib$module.a")
        libraries+=("-l$module")
    done
    if [ -x "$binary" ] && [ -z "$(find "${inputs[@]}" -newer "$binary" -print -quit)" ]; then return 0; fi
    echo "fuzz: building $binary"
    # lld: the system's gold linker warns about every local ASan symbol it cannot export.
    # shellcheck disable=SC2046
    "$swiftc" "${flags[@]}" -use-ld=lld "$harness" Tests/fuzz/FuzzSupport.swift -L "$modules" "${libraries[@]}" $(target_link "$target") \
        -o "$binary.tmp" || {
        echo "fuzz: the $target target does not build" >&2
        return 1
    }
    mv "$binary.tmp" "$binary"
}

# Runs one target for $seconds; 0 when libFuzzer found nothing.
run_target() {
    local target="$1" binary="$out/fuzz-$1" corpus dict
    corpus="$(target_corpus "$target")"
    dict="$(target_dict "$target")"
    local scratch="$out/corpus-$target" artifacts="$out/artifacts/$target" log="$out/last-run-$target.log"
    mkdir -p "$scratch"
    # libFuzzer takes one -dict: the hostile bytes and numbers every target gets, then its own.
    cat Tests/fuzz/hostile.dict "$dict" >"$out/$target.dict"
    # Each run's crash files only, so the paths printed below are this run's.
    rm -rf "$artifacts"
    mkdir -p "$artifacts"
    # The scratch corpus comes first: libFuzzer writes new inputs to the first directory only.
    # -timeout: every target takes well under a millisecond an input, so 10 s means a hang.
    # -rss_limit_mb: every parser here works under limits that keep memory small; 2 GiB means
    # a leak. libFuzzer prints a line per new input (hundreds a minute): they go to a log, and
    # only its end is shown (the statistics, or the crash report), unless FUZZ_VERBOSE=1.
    echo "fuzz: $target: running for ${seconds}s on $corpus (+ $scratch), log in $log"
    local status=0
    local run=("$binary" "$scratch" "$corpus" -dict="$out/$target.dict"
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(target_max_len "$target")"
        -artifact_prefix="$artifacts/" -print_final_stats=1)
    if [ "${FUZZ_VERBOSE:-0}" = 1 ]; then
        "${run[@]}" 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
    else
        "${run[@]}" >"$log" 2>&1 || status=$?
    fi
    if [ "$status" -eq 0 ]; then
        grep -E '^(Done|stat::(number_of_executed_units|new_units_added|peak_rss_mb))' "$log" | sed "s/^/fuzz: $target: /" || true
        return 0
    fi
    tail -n 60 "$log" >&2
    # The failed invariant (the targets trap with "fuzz invariant: ...") or ASan's verdict.
    grep -m 1 -E 'Fatal error|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$log" >&2 || true
    local found=("$artifacts"/*)
    if [ -e "${found[0]}" ]; then
        local input
        for input in "${found[@]}"; do
            echo "fuzz: $target: crashing input: $input (replay: $binary $input)" >&2
        done
    fi
    echo "fuzz: $target: the fuzzer stopped with status $status" >&2
    return 1
}

# No Swift runtime backtracer: on a trap it reads raw stack memory, which ASan reports as an
# overflow in the crash handler, hiding the real report; libFuzzer prints the stack itself.
export SWIFT_BACKTRACE=enable=no
for target in "${targets[@]}"; do
    if build_target "$target" && run_target "$target"; then
        passed=$((passed + 1))
        echo "fuzz: $target: passed"
    else
        failed=$((failed + 1))
        echo "fuzz: $target: FAILED"
    fi
done
finish

#!/usr/bin/env bash
# Runs the unit tests under sanitizers: `Tests/sanitizers/run.sh [address] [thread]` (default both).
#
# Each sanitizer builds into its own scratch path (.build/asan, .build/tsan) so neither clobbers
# the normal debug build, nor the other. Both run even when the first fails; the script fails when
# either does, prints how long each took, and ends with "sanitizers: N passed, N failed".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
swift="${SWIFT:-swift}"
supp="$root/Tests/sanitizers"

sanitizers=("$@")
[ ${#sanitizers[@]} -gt 0 ] || sanitizers=(address thread)

passed=0
failed=0
for sanitizer in "${sanitizers[@]}"; do
    case "$sanitizer" in
    address) scratch=.build/asan ;;
    thread) scratch=.build/tsan ;;
    *)
        echo "sanitizers: unknown sanitizer $sanitizer (address or thread)" >&2
        exit 2
        ;;
    esac
    started=$SECONDS
    status=0
    # Suppressions only for leaks and races inside libraries that are not ours; each entry in the
    # files says why. halt_on_error=0 for TSan: report every race of the run, then fail (exit 66).
    # lld (shipped with the toolchain): the system's gold linker prints a warning for every local
    # ASan symbol it cannot export, hundreds of lines per link.
    flags=(--sanitize="$sanitizer" --scratch-path "$scratch" -Xswiftc -use-ld=lld)
    "$swift" build --build-tests "${flags[@]}" || status=$?
    built=$((SECONDS - started))
    if [ "$status" -eq 0 ]; then
        LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0" \
            ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:check_initialization_order=1" \
            TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1:print_suppressions=0" \
            "$root/.ci/watch-tests" --limit 900 --quiet-limit 300 -- "$swift" test --skip-build "${flags[@]}" || status=$?
    fi
    elapsed=$((SECONDS - started))
    if [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        echo "sanitizers: $sanitizer passed in ${elapsed}s (build ${built}s)"
    else
        failed=$((failed + 1))
        echo "sanitizers: $sanitizer FAILED (status $status) in ${elapsed}s (build ${built}s)" >&2
    fi
done
echo "sanitizers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

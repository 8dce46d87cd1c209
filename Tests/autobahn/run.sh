#!/usr/bin/env bash
# RFC 6455 conformance: the Autobahn TestSuite's fuzzingclient against foldtable-echo, once with
# the C echo (the wrapper alone) and once with --swift-echo (messages through the Swift callback
# path the real server uses). Cases excluded, and cases that differ by design on the Swift path,
# are listed with their reasons in README.md beside this script; check.py holds the same lists.
#
# Needs pyenv's Python 2.7.18 (the suite is Python 2 code) and PyPI for its first run; installs
# the suite under .build/autobahn/ and writes reports there, never into the source tree.
# Builds nothing: `make test-autobahn` builds the release foldtable-echo first.
set -euo pipefail
cd "$(dirname "$0")/../.."

work=.build/autobahn
echo_bin=${FOLDTABLE_ECHO_BIN:-.build/release/foldtable-echo}
[[ -x $echo_bin ]] || { echo "autobahn: $echo_bin missing: run 'swift build -c release --product foldtable-echo'" >&2; exit 2; }
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
py2="$root/versions/2.7.18/bin/python2.7"
[[ -x $py2 ]] || { echo "autobahn: Python 2.7.18 not found at $py2 (pyenv install 2.7.18)" >&2; exit 2; }

mkdir -p "$work"
if [[ ! -f $work/site/.installed ]]; then
    rm -rf "$work/site"
    # --target skips *.pth files; wstest.py below adds the directory as a site dir instead.
    "$py2" -m pip install -q --disable-pip-version-check --target "$work/site" autobahntestsuite 2>&1 | grep -v DEPRECATION || true
    [[ -d $work/site/autobahntestsuite ]] || { echo "autobahn: installing autobahntestsuite failed" >&2; exit 1; }
    touch "$work/site/.installed"
fi
printf 'import site,sys\nsite.addsitedir(sys.argv.pop(1))\nfrom autobahntestsuite import wstest\nsys.argv[0]="wstest"\nwstest.run()\n' \
    >"$work/wstest.py"

server=
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true; }
trap cleanup EXIT

status=0
# run NAME ECHO-ARGS...: one server, one fuzzingclient run, one verdict.
run() {
    local name=$1
    shift
    rm -rf "$work/reports/$name"
    # 9.* sends messages up to 16 MiB: the echo's cap is raised past that so they are echoed.
    "$echo_bin" --port 0 --max-message-bytes 20000000 "$@" >"$work/$name.out" 2>"$work/$name.err" &
    server=$!
    local line=
    for _ in $(seq 100); do
        line=$(head -1 "$work/$name.out" 2>/dev/null || true)
        [[ $line == listening* ]] && break
        sleep 0.1
    done
    [[ $line == listening* ]] || { echo "autobahn: foldtable-echo did not start" >&2; cat "$work/$name.err" >&2; exit 1; }
    python3 Tests/autobahn/check.py spec "ws://127.0.0.1:${line##*:}/ws" "$name" "$work/reports/$name" >"$work/$name.json"
    local started=$SECONDS
    (cd "$work" && timeout -k 5 900 "$py2" wstest.py site -m fuzzingclient -s "$name.json") >"$work/$name.wstest.log" 2>&1 || {
        echo "autobahn: wstest failed for $name (see $work/$name.wstest.log)" >&2
        tail -5 "$work/$name.wstest.log" >&2
        status=1
    }
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=
    python3 Tests/autobahn/check.py verdict "$name" "$work/reports/$name/index.json" "$((SECONDS - started))" || status=1
}

run c-echo
run swift-echo --swift-echo
exit "$status"

#!/usr/bin/env bash
# RFC 6455 conformance: the Autobahn TestSuite fuzzingclient against foldtable-echo, once echoing
# text and binary (through the wrapper's message callbacks, as foldtabled is reached) and once with
# --text-only (no binary callback, so binary closes 1003 as in foldtabled); then the
# permessage-deflate cases (12.*, 13.*, RFC 7692) against the full echo with --permessage-deflate.
# Exclusions and expected differences: README.md.
# Needs .build/release/foldtable-echo (`make test-autobahn` builds it). Everything it writes goes
# under .build/autobahn/ (tool install, reports, server logs), never into the source tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=Tests/autobahn
W=.build/autobahn
ECHO_BIN=.build/release/foldtable-echo
# Pinned so a new PyPI release cannot change the case list or grading under us; it pins its own
# dependencies (Twisted 19.10, autobahn 0.10.9, ...).
SUITE_VERSION=25.10.1
# A fuzzingclient run takes ~20 s here, a deflate one (12.* or 13.*) 8-10 min on a busy 2-core
# machine (README.md); the bounds only catch a hung server or client.
RUN_TIMEOUT=${AUTOBAHN_TIMEOUT:-300}
DEFLATE_RUN_TIMEOUT=${AUTOBAHN_DEFLATE_TIMEOUT:-2400}

# autobahntestsuite is Python 2 only: it runs on pyenv's 2.7.18. pyenv may be installed but not on
# PATH in a non-interactive shell (CI), so also look in its usual root.
pyenv_bin=$(command -v pyenv || true)
[ -n "$pyenv_bin" ] || pyenv_bin="${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv"
if [ ! -x "$pyenv_bin" ]; then
    echo "autobahn: pyenv not found (PATH, \$PYENV_ROOT or ~/.pyenv); it needs pyenv's Python 2.7.18" >&2
    exit 1
fi
PY2="$("$pyenv_bin" root)/versions/2.7.18/bin/python2.7"
if [ ! -x "$PY2" ]; then
    echo "autobahn: $PY2 missing; install it with: pyenv install 2.7.18" >&2
    exit 1
fi
[ -x "$ECHO_BIN" ] || { echo "autobahn: $ECHO_BIN missing; run: make test-autobahn" >&2; exit 1; }

mkdir -p "$W"
# Install once into a private dir: pyenv's 2.7 stays untouched and a fresh clone reinstalls.
# Installed to a temporary dir first so an interrupted install is never taken for a finished one.
stamp="$W/site/.autobahntestsuite-$SUITE_VERSION"
if [ ! -e "$stamp" ]; then
    "$PY2" -m pip --version >/dev/null 2>&1 || "$PY2" -m ensurepip --default-pip >/dev/null
    echo "autobahn: installing autobahntestsuite==$SUITE_VERSION into $W/site"
    rm -rf "$W/site" "$W/site.tmp"
    "$PY2" -m pip install -q --disable-pip-version-check --no-warn-script-location \
        --target "$W/site.tmp" "autobahntestsuite==$SUITE_VERSION" 2> >(grep -v DEPRECATION >&2)
    mv "$W/site.tmp" "$W/site"
    touch "$stamp"
fi
# pip --target skips *.pth files (zope's namespace package needs one): addsitedir loads them.
cat > "$W/wstest.py" <<'EOF'
import site, sys
site.addsitedir(sys.argv.pop(1))
from autobahntestsuite import wstest
sys.argv[0] = "wstest"
wstest.run()
EOF

# Each run writes its echo server's pid to $W/AGENT.pid (runs may go in parallel, in subshells);
# whatever is still running when this script ends is stopped by pid.
cleanup() {
    local f
    for f in "$W"/*.pid; do
        [ -e "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
}
trap cleanup EXIT

# run_suite AGENT SPEC [echo options...]: start the echo on a free port (port 0; it prints
# "listening on http://127.0.0.1:PORT" first), run the fuzzingclient spec SPEC against it, stop
# it. --max-message-bytes is spelled out because 9.1.6/9.2.6 send exactly 16 MiB; --log-closes
# writes "close ID CODE" lines that check.py counts.
run_suite() {
    local agent=$1 spec=$2
    shift 2
    local out="$W/$agent.stdout" log="$W/$agent.stderr" reports="$W/reports/$agent"
    rm -rf "$reports"
    mkdir -p "$reports"
    "$ECHO_BIN" --port 0 --max-message-bytes 16777216 --log-closes "$@" >"$out" 2>"$log" &
    local server_pid=$!
    echo "$server_pid" >"$W/$agent.pid"
    local url="" i
    for i in $(seq 100); do
        url=$(sed -n 's|^listening on http://\(.*\)$|ws://\1/ws|p' "$out")
        [ -n "$url" ] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$url" ]; then
        echo "autobahn: $agent: foldtable-echo did not start: $(tail -1 "$log")" >&2
        return 1
    fi
    # The spec in the repo holds the case list and exclusions; only url, agent and outdir are
    # filled in per run.
    python3 - "$HERE/$spec" "$W/$agent.json" "$agent" "$url" "$PWD/$reports" <<'EOF'
import json, sys
src, dst, agent, url, outdir = sys.argv[1:]
spec = json.load(open(src))
spec["servers"] = [{"agent": agent, "url": url}]
spec["outdir"] = outdir
json.dump(spec, open(dst, "w"), indent=2)
EOF
    local start=$SECONDS rc=0
    timeout "$RUN_TIMEOUT" "$PY2" "$W/wstest.py" "$W/site" -m fuzzingclient -s "$W/$agent.json" \
        >"$W/$agent.wstest.log" 2>&1 || rc=$?
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    rm -f "$W/$agent.pid"
    echo "autobahn: $agent: wstest exit $rc in $((SECONDS - start)) s (log $W/$agent.wstest.log, report $reports/index.html)"
}

# A failed run leaves no index.json; check.py then reports that server as failed, so both
# servers always run and the summary is always printed.
run_suite echo fuzzingclient.json || true
run_suite text-echo fuzzingclient.json --text-only || true
# permessage-deflate: 216 cases of 1,000 messages each, where the Python 2 client is the
# bottleneck (most of a core; the echo about a quarter). Two clients in parallel, 12.* and 13.*
# against an echo each, use both cores of a CI machine. Keepalive off (--ping-interval 0): a
# starved client that answers a ping more than 10 s late is hung up (README.md), and keepalive
# is not what these cases test.
RUN_TIMEOUT=$DEFLATE_RUN_TIMEOUT run_suite deflate-12 fuzzingclient-deflate-12.json --permessage-deflate --ping-interval 0 &
RUN_TIMEOUT=$DEFLATE_RUN_TIMEOUT run_suite deflate-13 fuzzingclient-deflate-13.json --permessage-deflate --ping-interval 0 &
wait

python3 "$HERE/check.py" "$HERE/expected.json" \
    echo "$W/reports/echo/index.json" "$W/echo.stderr" \
    text-echo "$W/reports/text-echo/index.json" "$W/text-echo.stderr" \
    deflate-12 "$W/reports/deflate-12/index.json" "$W/deflate-12.stderr" \
    deflate-13 "$W/reports/deflate-13/index.json" "$W/deflate-13.stderr"

#!/usr/bin/env python3
"""Grades Autobahn fuzzingclient reports against expected.json.

Usage: check.py EXPECTED_JSON AGENT INDEX_JSON SERVER_STDERR [AGENT INDEX_JSON SERVER_STDERR ...]

A case passes when its `behavior` is OK, NON-STRICT or INFORMATIONAL and its `behaviorClose` is
OK or INFORMATIONAL; or when only the TCP drop was late (expected.json `lateDrop`: right close
code 1002, `behaviorClose` FAILED BY CLIENT), counted apart; or when it is listed for that server
in expected.json and came out with one of the listed values. SERVER_STDERR is foldtable-echo's --log-closes output: for the cases of a
`serverCloses1003` group it must show that the server closed with 1003 (the client may never see
that close frame: see README.md).
Prints one line per server, then `autobahn: N passed, N failed` (what CI reads); exit 1 on any
failure.
"""
import json
import re
import sys

GOOD_BEHAVIOR = {"OK", "NON-STRICT", "INFORMATIONAL"}
GOOD_CLOSE = {"OK", "INFORMATIONAL"}


def case_key(case_id):
    return [int(part) for part in case_id.split(".")]


def server_close_codes(log_path, run_order):
    """{case id: close code the server reported} from --log-closes lines, or None."""
    try:
        with open(log_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    opened = [m.group(1) for m in map(re.compile(r"open (\d+) ").match, lines) if m]
    codes = dict(m.groups() for m in map(re.compile(r"close (\d+) (\d+)$").match, lines) if m)
    if len(opened) != len(run_order):
        return None
    return {case_id: int(codes.get(conn, 0)) for case_id, conn in zip(run_order, opened)}


def check_server(expected, agent, index_path, log_path):
    """(passed, failed) for one server, printing what went wrong."""
    try:
        with open(index_path) as f:
            index = json.load(f)
        cases = index[agent]
    except (OSError, ValueError, KeyError) as e:
        print(f"{agent}: no usable report at {index_path} ({e}); wstest failed or timed out")
        return 0, expected["caseCount"][agent]

    listed = {}
    for group in expected["groups"]:
        if agent in group["servers"]:
            for case in group["cases"]:
                listed[case] = group

    passed = as_listed = late_drop = failed = 0
    late = expected["lateDrop"]
    # The server's own view: which close code it gave each connection. Autobahn runs the cases
    # one connection at a time in case-id order, so the n-th "open" line is the n-th case.
    server_codes = server_close_codes(log_path, sorted(cases, key=case_key))
    if server_codes is None:
        failed += 1
        print(f"  {agent} FAIL: {log_path} does not list one open per case")
        server_codes = {}

    for case_id in sorted(cases, key=case_key):
        r = cases[case_id]
        strict_ok = r["behavior"] in GOOD_BEHAVIOR and r["behaviorClose"] in GOOD_CLOSE
        group = listed.get(case_id)
        got = f"behavior {r['behavior']}, close {r['behaviorClose']}, code {r['remoteCloseCode']}"
        if group is None:
            if strict_ok:
                passed += 1
            elif (r["behavior"] in GOOD_BEHAVIOR and r["behaviorClose"] == late["behaviorClose"]
                  and r["remoteCloseCode"] in late["remoteCloseCode"]):
                passed += 1
                late_drop += 1
            else:
                failed += 1
                print(f"  {agent} FAIL {case_id}: {got} (report {r['reportfile']})")
        elif strict_ok:
            passed += 1
            if not group.get("mayPass"):
                print(f"  {agent} note {case_id}: passes now, remove it from {group['name']}")
        elif group.get("serverCloses1003") and server_codes.get(case_id) != 1003:
            failed += 1
            print(f"  {agent} FAIL {case_id}: {got}; the server closed it with "
                  f"{server_codes.get(case_id)}, not 1003")
        elif (r["behavior"] in group["behavior"] and r["behaviorClose"] in group["behaviorClose"]
              and r["remoteCloseCode"] in group["remoteCloseCode"]):
            passed += 1
            as_listed += 1
        else:
            failed += 1
            print(f"  {agent} FAIL {case_id}: {got}, not as listed in group {group['name']}")

    for case_id in sorted(set(listed) - set(cases)):
        failed += 1
        print(f"  {agent} FAIL {case_id}: listed in expected.json but not run")
    if len(cases) != expected["caseCount"][agent]:
        failed += 1
        print(f"  {agent} FAIL: {len(cases)} cases ran, expected {expected['caseCount'][agent]}")

    closes_1003 = sum(1 for code in server_codes.values() if code == 1003)
    print(f"{agent}: {len(cases)} cases, {passed - as_listed - late_drop} pass, {late_drop} pass "
          f"but late TCP drop after 1002 (lws), {as_listed} as listed in expected.json, "
          f"{failed} FAIL; the server closed {closes_1003} with 1003")
    return passed, failed


def main():
    args = sys.argv[1:]
    if len(args) < 4 or (len(args) - 1) % 3:
        sys.exit(__doc__)
    with open(args[0]) as f:
        expected = json.load(f)
    total_passed = total_failed = 0
    for i in range(1, len(args), 3):
        p, f = check_server(expected, *args[i:i + 3])
        total_passed += p
        total_failed += f
    print(f"autobahn: {total_passed} passed, {total_failed} failed")
    sys.exit(1 if total_failed else 0)


if __name__ == "__main__":
    main()

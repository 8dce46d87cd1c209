#!/usr/bin/env python3
"""Reads one crowd run's records (Tests/bench/cluster-large.sh) and prints what users felt.

    cluster_large.py summary LABEL PREFIX

PREFIX.{a,b,c,d}.rec are the watchers' records, PREFIX.author.rec the author's, PREFIX.*.out
their printed lines (memory per member). Record lines (CrowdBench.swift):
    J <start ns> <all welcomed ns> <clients> <all saw the whole count ns, 0: not within 30 s>
    D <send ns> <receive ns>
    R <close ns> <welcomed again ns>
    K <send ns>
All times are CLOCK_MONOTONIC of one machine. Prints NOT met when a toggle did not reach every
member it should have (every member of a live node; after a kill, the killed node's members
count once they are back) or a member never saw the whole count.
"""

import os
import re
import sys

NODES = ["a", "b", "c", "d"]


def percentile(values, fraction):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def read(path):
    joins, deliveries, rejoins, toggles = [], [], [], []
    with open(path) as records:
        for line in records:
            kind, *fields = line.split()
            numbers = [int(field) for field in fields]
            if kind == "J":
                joins.append(numbers)
            elif kind == "D":
                deliveries.append(numbers)
            elif kind == "R":
                rejoins.append(numbers)
            elif kind == "K":
                toggles.append(numbers[0])
    return joins, deliveries, rejoins, toggles


def value(path, key):
    if not os.path.exists(path):
        return None
    match = re.search(rf"\b{re.escape(key)}=([^ \n]+)", open(path).read())
    return match.group(1) if match else None


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "summary":
        sys.exit(__doc__)
    label, prefix = sys.argv[2], sys.argv[3]
    ok = True
    _, _, _, toggles = read(f"{prefix}.author.rec")
    per_node = {node: read(f"{prefix}.{node}.rec") for node in NODES if os.path.exists(f"{prefix}.{node}.rec")}
    members = sum(joins[0][2] for joins, _, _, _ in per_node.values() if joins)
    starts = [joins[0][0] for joins, _, _, _ in per_node.values() if joins]
    welcomed = [joins[0][1] for joins, _, _, _ in per_node.values() if joins]
    joined_s = (max(welcomed) - min(starts)) / 1e9 if starts else float("nan")
    seen = [joins[0][3] for joins, _, _, _ in per_node.values() if joins]
    seen_s = (max(seen) - max(welcomed)) / 1e9 if seen and min(seen) > 0 else None
    if seen_s is None:
        ok = False
    memory = [value(f"{prefix}.{node}.out", "per_member_kib") for node in per_node]
    print(f"crowd [{label}]: members={members} nodes={len(per_node)} all_welcomed_s={joined_s:.2f} "
          f"per_member_kib={'/'.join(m or '?' for m in memory)} (each node's resident memory per member it holds)")
    print(f"crowd [{label}]: every member's presence count showed all {members}: "
          + (f"{seen_s:.2f} s after the last welcome (presence beats once a second: target within two)" if seen_s is not None
             else "NOT within 30 s"))

    # The kill, if any: the first close among the records; who came back and when.
    rejoins = [r for _, _, node_rejoins, _ in per_node.values() for r in node_rejoins]
    killed_at = min((r[0] for r in rejoins), default=None)
    lost_nodes = {node for node, (_, _, node_rejoins, _) in per_node.items() if node_rejoins}

    by_toggle = {sent: [] for sent in toggles}
    survivors_before, survivors_after = [], []
    for node, (_, deliveries, _, _) in per_node.items():
        for sent, received in deliveries:
            if sent not in by_toggle:
                continue
            latency = (received - sent) / 1e6
            by_toggle[sent].append(latency)
            if killed_at is not None and node not in lost_nodes:
                (survivors_before if sent < killed_at else survivors_after).append(latency)

    print(f"| [{label}] toggle | sent at s | members reached | p50 ms | p99 ms | to all (last member) ms |")
    print("|---|---|---|---|---|---|")
    to_all = []
    first = min(toggles) if toggles else 0
    for number, sent in enumerate(sorted(toggles)):
        latencies = by_toggle[sent]
        reached = len(latencies)
        expected = members
        if killed_at is not None and sent >= killed_at:
            # A member of the killed node that is back by then (its welcome before the send)
            # gets the toggle; one still reconnecting gets it in its welcome's snapshot instead.
            back = sum(1 for lost, again in rejoins if again <= sent)
            expected = members - len(rejoins) + back
        worst = max(latencies) if latencies else float("nan")
        if reached < expected:
            ok = False
        elif killed_at is None or sent < killed_at:
            to_all.append(worst)
        print(f"| {number + 1} | {(sent - first) / 1e9:.1f} | {reached} of {expected} | {percentile(latencies, 0.5):.1f} | "
              f"{percentile(latencies, 0.99):.1f} | {worst:.1f} |")
    if to_all:
        print(f"crowd [{label}]: toggle to every member: median {percentile(to_all, 0.5):.0f} ms, worst {max(to_all):.0f} ms "
              f"over {len(to_all)} toggles (target 1,000 ms: {'met' if max(to_all) <= 1000 else 'NOT met'})")
    redis = value(f"{prefix}.author.out", "commands/change")
    if redis:
        author = f"{prefix}.author.out"
        print(f"crowd [{label}]: Redis per change: {redis} commands, {value(author, 'cpu_us/change')} CPU µs, "
              f"{value(author, 'out_bytes/change')} bytes out (above a quiet window as long: "
              f"{value(author, 'quiet_commands/s')} commands/s, {value(author, 'quiet_cpu')} CPU)")
    if killed_at is not None:
        back_s = [(again - lost) / 1e9 for lost, again in rejoins]
        all_back = (max(again for _, again in rejoins) - killed_at) / 1e9
        print(f"crowd [{label}]: node killed: {len(rejoins)} members reconnected to the other nodes, all back "
              f"{all_back:.2f} s after the kill; each member's time back p50 {percentile(back_s, 0.5):.2f} s, "
              f"p99 {percentile(back_s, 0.99):.2f} s")
        print(f"crowd [{label}]: survivors' latency p99: {percentile(survivors_before, 0.99):.1f} ms before the kill, "
              f"{percentile(survivors_after, 0.99):.1f} ms after it (p50 {percentile(survivors_before, 0.5):.1f} / "
              f"{percentile(survivors_after, 0.5):.1f} ms)")
    if not ok:
        # A target not met is a finding (printed), not a broken run: `make bench` goes on.
        print(f"crowd [{label}]: NOT met: a toggle did not reach every member it should have, or the count was not seen")
    return 0


if __name__ == "__main__":
    sys.exit(main())

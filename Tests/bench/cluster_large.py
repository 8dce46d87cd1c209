#!/usr/bin/env python3
"""Reads one crowd run's records (Tests/bench/cluster-large.sh) and prints what users felt.

    cluster_large.py summary LABEL PREFIX

PREFIX.{a,b,c,d}.rec are the watchers' records, PREFIX.author.rec the author's, PREFIX.*.out
their printed lines (memory per member), PREFIX.probe.{a,b,c,d}.jsonl what a newcomer on each node
was sent (runs without a kill). Record lines (CrowdBench.swift):
    J <start ns> <all welcomed ns> <clients> <all saw the whole count ns, 0: not within 30 s>
    D <send ns> <receive ns>
    L <close ns>
    R <close ns> <welcomed again ns>
    K <send ns>
All times are CLOCK_MONOTONIC of one machine. Prints NOT met when a toggle did not reach every
member it should have (every member of a live node; after a kill, the killed node's members
count once they are back), a member never saw the whole count, or a newcomer's presence was wrong.
"""

import json
import os
import re
import sys

NODES = ["a", "b", "c", "d"]


def percentile(values, fraction):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# A toggle sent less than this before a member's node died may or may not have reached it (a
# toggle to 56,000 took up to 1.8 s on a loaded machine): such toggles are shown but not judged
# for the lost members.
IN_FLIGHT_NS = 3_000_000_000


def read(path):
    joins, deliveries, rejoins, toggles, losses = [], [], [], [], []
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
            elif kind == "L":
                losses.append(numbers[0])
    return joins, deliveries, rejoins, toggles, losses


def value(path, key):
    if not os.path.exists(path):
        return None
    match = re.search(rf"\b{re.escape(key)}=([^ \n]+)", open(path).read())
    return match.group(1) if match else None


# A welcome names at most this many members (foldtabled's --presence-list-max default), a diff
# that cannot list everyone at most this many who joined (PresenceDiff.sampleLimit).
LIST_MAX = 200
SAMPLE_MAX = 16
NAME = re.compile(r"^(c[0-9]+|probe-[a-d])$")


def probe(path, expected):
    """What one probe (a `foldtable watch` newcomer) saw: its welcome, then presence diffs. Returns
    a line to print and whether presence was right: the last count is every member and every
    probe; the welcome names min(count, LIST_MAX) distinct members, every name one of the run's;
    each diff of an incomplete list carries at most SAMPLE_MAX names."""
    welcome, diffs = None, []
    for line in open(path):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("type") == "welcome":
            welcome = message
        elif message.get("type") == "presence" and welcome is not None:
            diffs.append(message)
    if welcome is None:
        return "no welcome", False
    listed = welcome.get("presence", [])
    count = diffs[-1]["count"] if diffs else welcome.get("presenceCount")
    clients = {member.get("client") for member in listed}
    strange = [member.get("name") for member in listed if not NAME.match(str(member.get("name")))]
    too_many = any(not diff.get("complete") and len(diff.get("joined", [])) > SAMPLE_MAX for diff in diffs)
    right = (count == expected and len(listed) == min(welcome.get("presenceCount", 0), LIST_MAX)
             and len(clients) == len(listed) and not strange and not too_many)
    line = (f"welcomed with count {welcome.get('presenceCount')} and {len(listed)} names ({len(clients)} distinct"
            f"{', strange: ' + ', '.join(map(str, strange[:3])) if strange else ''}), {len(diffs)} diffs"
            f"{' (one over ' + str(SAMPLE_MAX) + ' names)' if too_many else ''}, last count {count} of {expected}")
    return line, right


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "summary":
        sys.exit(__doc__)
    label, prefix = sys.argv[2], sys.argv[3]
    ok = True
    missing = [name for name in NODES + ["author"] if not os.path.exists(f"{prefix}.{name}.rec")]
    if missing:
        print(f"crowd [{label}]: broken run: no record from {', '.join(missing)}")
        return 1
    toggles = read(f"{prefix}.author.rec")[3]
    per_node = {}
    for node in NODES:
        joins, deliveries, node_rejoins, _, node_losses = read(f"{prefix}.{node}.rec")
        per_node[node] = (joins, deliveries, node_rejoins, node_losses)
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

    probes = [node for node in NODES if os.path.exists(f"{prefix}.probe.{node}.jsonl")]
    for node in probes:
        line, right = probe(f"{prefix}.probe.{node}.jsonl", members + len(probes))
        print(f"crowd [{label}]: a newcomer on node {node}: {line}: {'met' if right else 'NOT met'}")
        ok = ok and right

    # The kill, if any: the first loss among the records; each loss and when (if) it came back.
    rejoins = [r for _, _, node_rejoins, _ in per_node.values() for r in node_rejoins]
    back_at = {lost: again for lost, again in rejoins}
    losses = [(lost, back_at.get(lost)) for _, _, _, node_losses in per_node.values() for lost in node_losses]
    killed_at = min((lost for lost, _ in losses), default=None)
    lost_nodes = {node for node, (_, _, _, node_losses) in per_node.items() if node_losses}

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
        # A lost member gets the toggle when it is back before the send (one still reconnecting
        # gets the state in its welcome instead), misses it when lost before the send, and may
        # or may not have it when its node died while the toggle was in flight.
        expected, in_flight = members, 0
        for lost, again in losses:
            if again is not None and again <= sent:
                continue
            if lost <= sent:
                expected -= 1
            elif lost < sent + IN_FLIGHT_NS:
                expected -= 1
                in_flight += 1
        worst = max(latencies) if latencies else float("nan")
        if in_flight:
            judged = f"{reached} of {expected}–{expected + in_flight} (in flight at the kill)"
            if reached < expected:
                ok = False
        else:
            judged = f"{reached} of {expected}"
            if reached < expected:
                ok = False
            elif killed_at is None or sent < killed_at:
                to_all.append(worst)
        print(f"| {number + 1} | {(sent - first) / 1e9:.1f} | {judged} | {percentile(latencies, 0.5):.1f} | "
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
        back_s = [(again - lost) / 1e9 for lost, again in losses if again is not None]
        never = sum(1 for _, again in losses if again is None)
        last = max((again for _, again in losses if again is not None), default=None)
        when = f"the last {(last - killed_at) / 1e9:.2f} s after the kill" if last else "none"
        print(f"crowd [{label}]: node killed: {len(losses)} members lost, {len(back_s)} back on the other nodes "
              f"({when}), {never} not back; each member's time back p50 {percentile(back_s, 0.5):.2f} s, "
              f"p99 {percentile(back_s, 0.99):.2f} s")
        if never:
            ok = False
        print(f"crowd [{label}]: survivors' latency p99: {percentile(survivors_before, 0.99):.1f} ms before the kill, "
              f"{percentile(survivors_after, 0.99):.1f} ms after it (p50 {percentile(survivors_before, 0.5):.1f} / "
              f"{percentile(survivors_after, 0.5):.1f} ms)")
    if not ok:
        # A target not met is a finding (printed), not a broken run: `make bench` goes on.
        print(f"crowd [{label}]: NOT met: a toggle did not reach every member it should have, a count was not seen, or a newcomer's presence was wrong")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The standard crash test of a store (after SQLite's test/crashtest1.c), end to end.

Each round: a fresh data dir; concurrent writers send changes with unique ids as fast as acks
come back; the server is killed with SIGKILL at a seeded random moment (soon after start, after
many changes, near checkpoints); it restarts on the same data dir; then every acknowledged
change must be there exactly once with its acknowledged seq, sequence numbers must have no gaps,
a retry of an acknowledged change id must be acknowledged with its original seq (and applied
once), a client must resume across the restart with `since`, and `PRAGMA integrity_check` must
say ok (of the crashed files and after a clean stop).

FOLDTABLE_CRASH_ROUNDS (default 20) sets the number of rounds, FOLDTABLE_CRASH_SEED replays a
run: every failure names its seed and round.
"""
import asyncio
import os
import random
import shutil
import time

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidMessage

from foldtabled import Client, LoggedServer, TableModel, expand_all_and_read, integrity_check

ROUNDS = int(os.environ.get("FOLDTABLE_CRASH_ROUNDS", "20"))
WRITERS = 4
CHECKPOINT_EVENTS = 20
BIG_HISTORY = 100_000
SMALL_HISTORY = 30
GONE = (ConnectionClosed, OSError, TimeoutError, asyncio.TimeoutError, InvalidHandshake, InvalidMessage, EOFError)


class RoundFailed(AssertionError):
    pass


class KillTrigger:
    """Counts the acks of a round (all sessions) and fires after `kill_after` of them."""

    def __init__(self, kill_after):
        self.kill_after = kill_after
        self.count = 0
        self.enough = asyncio.Event()
        if kill_after == 0:
            self.enough.set()

    def acked(self):
        self.count += 1
        if self.count >= self.kill_after:
            self.enough.set()


class Writes:
    """What the writers of one session sent and what the server acknowledged."""

    def __init__(self, trigger):
        self.sent = {}          # id -> message, in sending order
        self.acked = {}         # id -> seq
        self.refused = {}       # id -> error message
        self.updates = {}       # row key -> [update ids in sending order]
        self.row_origin = {}    # row key -> the id of its addRow
        self.trigger = trigger

    def ack(self, change_id, seq):
        self.acked[change_id] = seq
        self.trigger.acked()


# The writers and the retrier are one client as far as change ids go (one idScope, as a browser
# tab reconnecting keeps): the retrier's retries of the writers' ids are that client's own.
WRITERS_ID_SCOPE = "crash-writers-0001"


async def writer(index, ws, session, rng, writes, depth, limit):
    """Adds its own section, then keeps `depth` changes in flight: addRow (at the end or the
    front), toggle of its section, updateRow of one of its acknowledged rows."""
    section = f"w{index}"
    try:
        client = await Client.join(ws, session=session, name=f"writer{index}", idScope=WRITERS_ID_SCOPE)
    except GONE:
        return
    inflight = set()
    acked_rows = []
    count = 0

    async def send(message):
        writes.sent[message["id"]] = message
        inflight.add(message["id"])
        await client.send(message)

    async def settle_one():
        reply = await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") in inflight, timeout=15)
        inflight.discard(reply["id"])
        if reply["type"] == "ack":
            writes.ack(reply["id"], reply["seq"])
            message = writes.sent[reply["id"]]
            if message["type"] == "addRow":
                acked_rows.append(message["key"])
        else:
            writes.refused[reply["id"]] = reply
        return reply

    try:
        await send({"type": "addSection", "title": f"Writer {index}", "key": section, "id": f"{section}-sec"})
        if (await settle_one())["type"] != "ack":
            return
        while count < limit:
            while len(inflight) < depth and count < limit:
                count += 1
                change_id = f"{section}-{count}"
                roll = rng.random()
                if roll < 0.15:
                    message = {"type": "toggle", "section": section, "id": change_id}
                elif roll < 0.35 and acked_rows:
                    row = rng.choice(acked_rows)
                    message = {"type": "updateRow", "row": row, "set": {"value": f"v-{change_id}"}, "id": change_id}
                    writes.updates.setdefault(row, []).append(change_id)
                else:
                    message = {"type": "addRow", "section": section, "key": f"{section}r{count}",
                               "label": f"{section}-row-{count}", "value": "x" * rng.randint(0, 300), "id": change_id}
                    if rng.random() < 0.3:
                        message["index"] = 0
                    writes.row_origin[message["key"]] = change_id
                await send(message)
            await settle_one()
        while inflight:
            await settle_one()
    except GONE:
        pass
    finally:
        try:
            await client.close()
        except GONE:
            pass


async def observe(client, events):
    """Keeps every event a member got until its connection ends."""
    try:
        while True:
            message = await client.next(lambda m: m["type"] == "event", timeout=30)
            events.append(message)
    except GONE:
        pass


async def events_after(ws, session, since, epoch, name, timeout=10):
    """Joins with since/epoch; returns (the first reply, the events it streams up to its seq)."""
    client = await Client.join(ws, session=session, name=name, since=since, epoch=epoch)
    events = []
    if client.welcome["type"] == "resume":
        while len(events) < client.welcome["seq"] - since:
            events.append(await client.next(lambda m: m["type"] == "event", timeout=timeout))
    await client.close()
    return client.welcome, events


def gaps(events, first, last):
    """What is wrong with `events` as the run first..last of seqs (empty when nothing is)."""
    seqs = [e["seq"] for e in events]
    if seqs == list(range(first, last + 1)):
        return []
    missing = sorted(set(range(first, last + 1)) - set(seqs))
    return [f"event seqs are not {first}..{last}: missing {missing[:20]}, "
            f"duplicated {sorted({s for s in seqs if seqs.count(s) > 1})[:20]}, got {seqs[:5]}...{seqs[-5:]}"]


async def crash_round(seed, round_no, base, log_dir):
    rng = random.Random(f"{seed}/{round_no}")
    data = base / f"round{round_no}"
    # One session, or two whose changes share group commits.
    sessions = [f"crash{round_no}"] if rng.random() < 0.6 else [f"crash{round_no}a", f"crash{round_no}b"]
    history = BIG_HISTORY if rng.random() < 0.7 else SMALL_HISTORY
    depth = rng.randint(1, 4)
    synchronous = rng.choice(["full", "normal"])
    # When to kill: after a number of acks (none, a few, near a checkpoint, many), plus a delay;
    # or at a moment after the writers start, whatever they got done by then.
    if rng.random() < 0.25:
        kill_after, kill_delay = 1 << 30, rng.uniform(0, 0.5)
    else:
        kill_after = rng.choice([
            0, rng.randint(1, 8),
            CHECKPOINT_EVENTS * rng.randint(1, 10) + rng.randint(-3, 3),
            CHECKPOINT_EVENTS * rng.randint(1, 10) + rng.randint(-3, 3),
            rng.randint(50, 800),
        ])
        kill_delay = rng.choice([0, 0, rng.uniform(0, 0.003), rng.uniform(0, 0.03)])
    args = ["--data-dir", str(data), "--checkpoint-events", str(CHECKPOINT_EVENTS), "--history-events", str(history),
            "--synchronous", synchronous, "--demo-large-rows", "10"]
    where = (f"seed={seed} round={round_no} (sessions={len(sessions)} history={history} synchronous={synchronous} "
             f"depth={depth} kill after {kill_after if kill_after < 1 << 30 else 'any number of'} acks + "
             f"{kill_delay * 1000:.1f} ms)")

    def fail(message):
        raise RoundFailed(f"{where}: {message}")

    server = LoggedServer(*args, stderr_path=log_dir / f"round{round_no}-a.stderr")
    trigger = KillTrigger(kill_after)
    runs = {name: {"writes": Writes(trigger), "observed": []} for name in sessions}
    try:
        tasks = []
        for name, state in runs.items():
            state["observer"] = await Client.join(server.ws, session=name, name="observer")
            tasks.append(asyncio.create_task(observe(state["observer"], state["observed"])))
        for i in range(WRITERS):
            name = sessions[i % len(sessions)]
            tasks.append(asyncio.create_task(
                writer(i, server.ws, name, random.Random(f"{seed}/{round_no}/{i}"), runs[name]["writes"], depth, 400)))
        try:
            await asyncio.wait_for(trigger.enough.wait(), 8 if kill_after < 1 << 30 else 0.001)
        except asyncio.TimeoutError:
            pass
        if kill_delay:
            await asyncio.sleep(kill_delay)
        server.kill9()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
    finally:
        server.kill9()
    for state in runs.values():
        for change_id, reply in state["writes"].refused.items():
            fail(f"change {change_id} was refused before the kill: {reply}")

    # The files exactly as the crash left them: a copy, so the restart below recovers the originals.
    crashed = base / f"round{round_no}-crashed"
    crashed.mkdir()
    for name in os.listdir(data) if data.is_dir() else []:
        shutil.copy2(data / name, crashed / name)
    if trigger.count:
        if not (crashed / "foldtable.db").exists():
            fail(f"{trigger.count} changes were acknowledged but there is no {data}/foldtable.db")
        result = integrity_check(crashed / "foldtable.db")
        if result != "ok":
            fail(f"integrity_check of the files the crash left: {result}")

    server = LoggedServer(*args, stderr_path=log_dir / f"round{round_no}-b.stderr")
    summary = []
    try:
        for name, state in runs.items():
            summary.append(await verify_session(server, name, state["writes"], state["observed"], state["observer"].welcome,
                                                history, rng, f"read-{round_no}", lambda m, name=name: fail(f"session {name}: {m}")))
    finally:
        code = server.stop()
    if code != 0:
        fail(f"the restarted server exited {code} on SIGTERM: {server.stderr()[-1000:]}")
    result = integrity_check(data / "foldtable.db")
    if result != "ok":
        fail(f"integrity_check after the restart and a clean stop: {result}")
    return summary


async def verify_session(server, session, writes, observed, first_welcome, history, rng, read_id, fail):
    """Checks one session after the restart; `fail(message)` raises. Returns (acknowledged, seq)."""
    problems = []
    first_epoch = first_welcome["epoch"]
    # What the server holds now: its seq and epoch.
    probe = await Client.join(server.ws, session=session, name="probe")
    top, epoch = probe.welcome["seq"], probe.welcome["epoch"]
    await probe.close()
    if (writes.acked or observed) and epoch != first_epoch:
        fail(f"the epoch changed across the crash ({first_epoch} -> {epoch}) although {len(writes.acked)} changes "
             f"were acknowledged")
    top_acked = max(writes.acked.values(), default=0)
    if top < top_acked:
        lost = sorted((seq, i) for i, seq in writes.acked.items() if seq > top)
        fail(f"seq after restart is {top}, but changes up to seq {top_acked} were acknowledged; lost (seq, id): {lost[:20]}")
    if observed and top < observed[-1]["seq"]:
        fail(f"seq after restart is {top}, but the observer was sent event {observed[-1]['seq']}")

    # Every event the server still has, with no gaps; acknowledged ids at their acknowledged seqs.
    since = 0 if history == BIG_HISTORY else max(0, top - history)
    reply, replay = await events_after(server.ws, session, since, epoch, "replay")
    if reply["type"] != "resume":
        fail(f"join with since={since} (seq {top}, history {history}) got {reply['type']} {reply.get('recovered')} "
             f"instead of resume")
    problems += gaps(replay, since + 1, top)
    by_seq = {e["seq"]: e for e in replay}
    ids = [e.get("id") for e in replay if e.get("id")]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        problems.append(f"change ids applied more than once: {twice[:20]}")
    for change_id, seq in sorted(writes.acked.items(), key=lambda item: item[1]):
        if seq > since and (seq not in by_seq or by_seq[seq].get("id") != change_id):
            problems.append(f"acknowledged {change_id} (seq {seq}) is not event {seq}: {by_seq.get(seq)}")
    for event in observed:
        if event["seq"] > since and by_seq.get(event["seq"]) != event:
            problems.append(f"event {event['seq']} as broadcast before the crash {event} != as replayed {by_seq.get(event['seq'])}")
    if problems:
        fail("; ".join(problems[:10]))

    # The observer resumes across the restart from the last seq it saw.
    last_seen = observed[-1]["seq"] if observed else first_welcome["seq"]
    reply, resumed = await events_after(server.ws, session, last_seen, first_epoch, "observer")
    if epoch == first_epoch and top - last_seen <= history:
        if reply["type"] != "resume" or reply["seq"] != top:
            fail(f"rejoin with since={last_seen} epoch={first_epoch} got {reply} instead of a resume at seq {top}")
        problems += gaps(resumed, last_seen + 1, top)
        for event in resumed:
            if event["seq"] in by_seq and by_seq[event["seq"]] != event:
                problems.append(f"resumed event {event} != replayed {by_seq[event['seq']]}")
    elif epoch != first_epoch and (reply["type"] != "welcome" or reply.get("recovered") is not False):
        fail(f"rejoin with the lost epoch {first_epoch} got {reply} instead of a welcome with recovered false")

    # Retries after the restart: acknowledged ids get their original seq and change nothing;
    # sent-but-unacknowledged ones are applied at most once.
    retried = {}
    retrier = await Client.join(server.ws, session=session, name="retrier", idScope=WRITERS_ID_SCOPE)
    acked_ids = sorted(writes.acked, key=writes.acked.get)
    picks = rng.sample(acked_ids, min(5, len(acked_ids))) + acked_ids[-1:]
    unacked = [i for i, m in writes.sent.items() if i not in writes.acked and m["type"] in ("addRow", "toggle", "addSection")]
    picks += rng.sample(unacked, min(3, len(unacked)))
    for change_id in dict.fromkeys(picks):
        await retrier.send(writes.sent[change_id])
        reply = await retrier.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == change_id)
        retried[change_id] = reply
        if change_id in writes.acked and reply != {"type": "ack", "id": change_id, "seq": writes.acked[change_id]}:
            problems.append(f"retry of acknowledged {change_id} (seq {writes.acked[change_id]}) got {reply}")
        elif change_id not in writes.acked:
            committed = next((e["seq"] for e in replay if e.get("id") == change_id), None)
            if reply["type"] != "ack":
                problems.append(f"retry of unacknowledged {change_id} got {reply}")
            elif committed is not None and reply["seq"] != committed:
                problems.append(f"retry of unacknowledged but committed {change_id} (event {committed}) got seq {reply['seq']}")
            elif committed is None and since == 0 and reply["seq"] <= top:
                problems.append(f"retry of uncommitted {change_id} got old seq {reply['seq']} (top {top})")
    await retrier.close()
    if problems:
        fail("; ".join(problems[:10]))

    # The whole table, every section expanded, against the events that made it.
    reader = await Client.join(server.ws, session=session, name="reader")
    table, final_seq = await expand_all_and_read(reader, read_id)
    await reader.close()
    rows = {r["key"]: r for s in table.values() for r in s.get("rows", [])}
    labels = [r["label"] for s in table.values() for r in s.get("rows", [])]
    duplicated = sorted({label for label in labels if labels.count(label) > 1})
    if duplicated:
        problems.append(f"rows present more than once: {duplicated[:20]}")
    for change_id, seq in writes.acked.items():
        message = writes.sent[change_id]
        if message["type"] == "addRow" and rows.get(message["key"], {}).get("label") != message["label"]:
            problems.append(f"acknowledged row {message['key']} ({change_id}, seq {seq}) is missing: {rows.get(message['key'])}")
        if message["type"] == "addSection" and message["key"] not in table:
            problems.append(f"acknowledged section {message['key']} ({change_id}, seq {seq}) is missing")
    for row, update_ids in writes.updates.items():
        acked_updates = [i for i in update_ids if i in writes.acked]
        allowed = update_ids[update_ids.index(acked_updates[-1]):] if acked_updates else update_ids
        allowed_values = {writes.sent[i]["set"]["value"] for i in allowed}
        if not acked_updates:
            allowed_values.add(writes.sent[writes.row_origin[row]]["value"])
        if row in rows and rows[row]["value"] not in allowed_values:
            problems.append(f"row {row} has value {rows[row]['value'][:20]!r}, not that of its last acknowledged update "
                            f"{acked_updates[-1:]} or a later one")
    if final_seq <= history:
        reply, everything = await events_after(server.ws, session, 0, epoch, "replay2")
        if reply["type"] != "resume":
            fail(f"second replay got {reply}")
        problems += gaps(everything, 1, final_seq)
        model = TableModel()
        for event in everything:
            model.apply(event)
        problems += model.differences(table)
    if problems:
        fail("; ".join(problems[:10]))
    return len(writes.acked), top


def test_acknowledged_changes_survive_kill_9_at_random_moments_exactly_once_and_without_gaps(tmp_path):
    seed = int(os.environ.get("FOLDTABLE_CRASH_SEED", str(random.SystemRandom().randrange(1 << 32))))
    print(f"crash test seed {seed} ({ROUNDS} rounds): replay with FOLDTABLE_CRASH_SEED={seed}")
    logs = tmp_path / "logs"
    logs.mkdir()
    started = time.monotonic()
    totals = []
    for round_no in range(ROUNDS):
        try:
            totals.append(asyncio.run(asyncio.wait_for(crash_round(seed, round_no, tmp_path, logs), 60)))
        except RoundFailed:
            raise
        except Exception as error:
            raise RoundFailed(f"seed={seed} round={round_no}: {type(error).__name__}: {error}") from error
    print(f"{ROUNDS} rounds in {time.monotonic() - started:.1f} s; (acknowledged, seq after restart) per session "
          f"per round: {totals}")
    assert any(acked > CHECKPOINT_EVENTS * 2 for sessions in totals for acked, _ in sessions) or ROUNDS < 5, \
        f"seed={seed}: no session acknowledged more than {CHECKPOINT_EVENTS * 2} changes, checkpoints were never crossed: {totals}"

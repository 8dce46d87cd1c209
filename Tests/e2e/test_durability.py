"""End-to-end tests of foldtabled's storage: SQLite under --data-dir (restarts, resume, epochs,
eviction, deletion) and its faults (read-only or missing dir, full disk, locked database).

The crash loop (kill -9 at random moments) is in test_crash.py.
"""
import asyncio
import json
import os
import resource
import shutil
import sqlite3
import tempfile
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from foldtabled import BIN, Client, LoggedServer, StartFailed, frame, http_get, integrity_check, raw_ws, read_frame, read_welcome_table

SMALL_DEMO = ("--demo-large-rows", "100")


# One client reconnecting (its idScope, kept across connections): its change ids are its own, so
# its retries after a restart are recognised (another client's same id would be a new change).
RETRYING_CLIENT = "durability-client-0001"

def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def launch(tmp_path):
    """Starts foldtabled (stderr in a file under tmp_path); every server is stopped afterwards."""
    servers = []

    def launch(*args, **extra):
        server = LoggedServer(*SMALL_DEMO, *args, stderr_path=tmp_path / f"server-{len(servers)}.stderr", **extra)
        servers.append(server)
        return server

    yield launch
    for server in servers:
        server.stop()


def failed_start(tmp_path, *args, **extra):
    """Starts foldtabled with flags that must stop it: (exit code, stderr)."""
    try:
        server = LoggedServer(*SMALL_DEMO, *args, stderr_path=tmp_path / "failed.stderr", **extra)
    except StartFailed as failed:
        return failed.returncode, failed.stderr
    server.stop()
    pytest.fail(f"foldtabled started with {args}")


async def change(client, message, timeout=10):
    """Sends a change and returns its reply (ack or error with its id)."""
    await client.send(message)
    return await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == message["id"], timeout=timeout)


async def acked(client, message, timeout=10):
    reply = await change(client, message, timeout)
    assert reply["type"] == "ack", f"{message} was not acknowledged: {reply}"
    return reply["seq"]


async def snapshot(ws, session, **extra):
    """A fresh join's view: (welcome, {key: section with rows}); the client leaves again."""
    client = await Client.join(ws, session=session, name="reader", **extra)
    sections = await read_welcome_table(client) if client.welcome["type"] == "welcome" else None
    await client.close()
    return client.welcome, sections


def row_keys(sections):
    return [row["key"] for section in sections.values() for row in section.get("rows", [])]


async def drain(client, seconds):
    """Reads whatever arrives for `seconds` (into client.inbox / client.all)."""
    try:
        await client.next(lambda m: False, timeout=seconds)
    except TimeoutError:
        pass


async def close_code(client, timeout=5):
    """Reads until the server closes the connection; returns the close code it sent."""
    try:
        while True:
            await asyncio.wait_for(client.ws.recv(), timeout)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


async def list_sessions(ws):
    async with connect(ws, open_timeout=5) as conn:
        await conn.send(json.dumps({"type": "list"}))
        while True:
            for line in (await asyncio.wait_for(conn.recv(), 5)).split("\n"):
                message = json.loads(line)
                if message["type"] == "sessions":
                    return {s["name"] for s in message["sessions"]}


def add_row(section, key, change_id, label=None, value="1"):
    return {"type": "addRow", "section": section, "key": key, "label": label or f"label {key}", "value": value, "id": change_id}


# --- Group commit per read ---------------------------------------------------------------------


def server_lines(sock, buffer=b""):
    """Reads one server frame from a raw socket; returns (its JSON messages, the rest read)."""
    opcode, payload, rest = read_frame(sock, buffer)
    assert opcode is not None, "the server closed the connection"
    return [json.loads(line) for line in payload.decode().split("\n")], rest


def metric(port, name):
    _, _, body = http_get(port, "/metrics")
    for line in body.decode().split("\n"):
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_changes_a_client_sends_in_one_write_are_committed_in_one_append_and_each_acknowledged(launch, tmp_path):
    server = launch("--data-dir", str(tmp_path / "data"))
    sock, response = raw_ws(server.port)
    assert " 101 " in response.split("\r\n")[0]
    sock.sendall(frame(json.dumps({"type": "join", "session": "one-read", "name": "ana", "create": True}).encode()))
    buffer = b""
    while True:
        messages, buffer = server_lines(sock, buffer)
        if any(m["type"] == "welcome" for m in messages):
            break
    appends = metric(server.port, "foldtable_commit_seconds_count")
    applied = metric(server.port, "foldtable_changes_applied_total")
    # Eight changes in one write (one read on the server): each is decided after the one before.
    changes = [{"type": "addSection", "title": f"S{n}", "key": f"k{n}", "id": f"c{n}"} for n in range(8)]
    sock.sendall(b"".join(frame(json.dumps(c).encode()) for c in changes))
    acks = {}
    while len(acks) < 8:
        messages, buffer = server_lines(sock, buffer)
        for m in messages:
            assert m["type"] != "error", m
            if m["type"] == "ack":
                acks[m["id"]] = m["seq"]
    assert [acks[f"c{n}"] for n in range(8)] == list(range(1, 9))
    assert metric(server.port, "foldtable_changes_applied_total") == applied + 8
    # One append for the read (two if the kernel split the write across reads), not eight.
    assert metric(server.port, "foldtable_commit_seconds_count") - appends <= 2
    sock.close()


# --- Restarts ---------------------------------------------------------------------------------


def test_an_acknowledged_change_survives_a_sigterm_restart_and_a_kill_9_restart(launch, tmp_path):
    data = tmp_path / "data"
    args = ("--data-dir", str(data))

    async def scenario():
        server = launch(*args)
        a = await Client.join(server.ws, session="keep", name="ana", idScope=RETRYING_CLIENT)
        epoch = a.welcome["epoch"]
        assert await acked(a, {"type": "addSection", "title": "Kept", "key": "k", "id": "keep-1"}) == 1
        assert await acked(a, add_row("k", "r1", "keep-2", value="before sigterm")) == 2
        await a.close()
        assert server.stop() == 0

        server = launch(*args)
        welcome, sections = await snapshot(server.ws, "keep")
        assert (welcome["seq"], welcome["epoch"]) == (2, epoch)
        assert sections["k"]["rows"] == [{"key": "r1", "label": "label r1", "value": "before sigterm"}]
        b = await Client.join(server.ws, session="keep", name="bo", idScope=RETRYING_CLIENT)
        assert await acked(b, add_row("k", "r2", "keep-3", value="before kill -9")) == 3
        server.kill9()

        server = launch(*args)
        welcome, sections = await snapshot(server.ws, "keep")
        assert (welcome["seq"], welcome["epoch"]) == (3, epoch)
        assert [(r["key"], r["value"]) for r in sections["k"]["rows"]] == [("r1", "before sigterm"), ("r2", "before kill -9")]
        # A retry of an acknowledged change after the restarts: its original seq, applied once.
        c = await Client.join(server.ws, session="keep", name="cy", idScope=RETRYING_CLIENT)
        assert await change(c, add_row("k", "r2", "keep-3", value="before kill -9")) == {"type": "ack", "id": "keep-3", "seq": 3}
        assert await change(c, add_row("k", "r1", "keep-2", value="before sigterm")) == {"type": "ack", "id": "keep-2", "seq": 2}
        # The same id for a different change is still told apart from a retry.
        reused = await change(c, add_row("k", "r9", "keep-2", value="something else"))
        assert reused["type"] == "error" and reused["code"] == "id_reused", reused
        await drain(c, 0.2)
        assert not [m for m in c.all if m["type"] == "event"], "a retry was applied again"
        welcome, sections = await snapshot(server.ws, "keep")
        assert welcome["seq"] == 3 and row_keys(sections) == ["r1", "r2"]
        await c.close()
        assert server.stop() == 0
        assert integrity_check(data / "foldtable.db") == "ok"
    run(scenario())


def test_the_database_is_foldtable_db_in_wal_mode_and_data_is_the_default_dir(launch, tmp_path):
    async def scenario():
        server = launch(cwd=str(tmp_path))
        a = await Client.join(server.ws, session="where", name="ana")
        await acked(a, {"type": "addSection", "title": "Here", "key": "h", "id": "w1"})
        await a.close()
        assert server.stop() == 0
    run(scenario())
    db = tmp_path / "data" / "foldtable.db"
    assert db.is_file(), f"no data/foldtable.db in the working directory: {sorted(os.listdir(tmp_path))}"
    conn = sqlite3.connect(str(db))
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    assert integrity_check(db) == "ok"


def test_memory_mode_keeps_nothing_across_a_restart_and_writes_no_files(launch, tmp_path):
    async def scenario():
        server = launch("--memory", cwd=str(tmp_path))
        a = await Client.join(server.ws, session="fleeting", name="ana")
        epoch = a.welcome["epoch"]
        await acked(a, {"type": "addSection", "title": "Gone", "key": "g", "id": "m1"})
        await a.close()
        assert server.stop() == 0
        server = launch("--memory", cwd=str(tmp_path))
        assert "fleeting" not in await list_sessions(server.ws)
        welcome, sections = await snapshot(server.ws, "fleeting")
        assert welcome["seq"] == 0 and sections == {} and welcome["epoch"] != epoch
    run(scenario())
    assert [p for p in os.listdir(tmp_path) if not p.endswith(".stderr")] == []


def test_a_client_resumes_within_history_across_a_sigterm_restart(launch, tmp_path):
    args = ("--data-dir", str(tmp_path / "data"))

    async def scenario():
        server = launch(*args)
        a = await Client.join(server.ws, session="resumer", name="ana")
        epoch = a.welcome["epoch"]
        since = await acked(a, {"type": "addSection", "title": "R", "key": "r", "id": "res-0"})
        await a.close()
        b = await Client.join(server.ws, session="resumer", name="bo")
        for i in range(1, 5):
            await acked(b, add_row("r", f"r{i}", f"res-{i}"))
        missed = [await b.next(lambda m: m["type"] == "event" and m["seq"] == seq) for seq in range(since + 1, since + 5)]
        await b.close()
        assert server.stop() == 0

        server = launch(*args)
        a = await Client.join(server.ws, session="resumer", name="ana", since=since, epoch=epoch)
        assert a.welcome["type"] == "resume", a.welcome
        assert (a.welcome["seq"], a.welcome["epoch"]) == (since + 4, epoch)
        replayed = [await a.next(lambda m: m["type"] == "event") for _ in range(4)]
        assert replayed == missed
        await drain(a, 0.3)
        assert [m for m in a.inbox if m["type"] == "event"] == [], "events beyond the missed ones were replayed"
        await a.close()
    run(scenario())


def test_a_resume_beyond_history_after_a_restart_gets_a_welcome_with_recovered_false(launch, tmp_path):
    args = ("--data-dir", str(tmp_path / "data"), "--history-events", "5", "--checkpoint-events", "3")

    async def scenario():
        server = launch(*args)
        a = await Client.join(server.ws, session="faraway", name="ana")
        epoch = a.welcome["epoch"]
        since = await acked(a, {"type": "addSection", "title": "F", "key": "f", "id": "far-0"})
        for i in range(1, 11):
            await acked(a, add_row("f", f"r{i}", f"far-{i}"))
        await a.close()
        assert server.stop() == 0

        server = launch(*args)
        welcome, sections = await snapshot(server.ws, "faraway", since=since, epoch=epoch)
        assert welcome["type"] == "welcome" and welcome["recovered"] is False, welcome
        assert welcome["seq"] == 11 and welcome["epoch"] == epoch
        assert row_keys(sections) == [f"r{i}" for i in range(1, 11)]
        # Within the window the same restart still resumes.
        close = await Client.join(server.ws, session="faraway", name="bo", since=8, epoch=epoch)
        assert close.welcome["type"] == "resume"
        assert [(await close.next(lambda m: m["type"] == "event"))["seq"] for _ in range(3)] == [9, 10, 11]
        await close.close()
    run(scenario())


def test_a_deleted_and_recreated_session_has_a_new_epoch_and_a_resume_with_the_old_one_gets_a_welcome(launch, tmp_path):
    async def scenario():
        server = launch("--data-dir", str(tmp_path / "data"))
        a = await Client.join(server.ws, session="phoenix", name="ana")
        old_epoch = a.welcome["epoch"]
        await acked(a, {"type": "addSection", "title": "Old", "key": "old", "id": "p1"})
        await acked(a, add_row("old", "o1", "p2"))
        await a.send({"type": "deleteSession"})
        assert await close_code(a) == 4501
        b = await Client.join(server.ws, session="phoenix", name="bo")
        new_epoch = b.welcome["epoch"]
        assert new_epoch != old_epoch and b.welcome["seq"] == 0
        for i in range(3):
            await acked(b, {"type": "addSection", "title": f"New {i}", "key": f"n{i}", "id": f"q{i}"})
        # since=1 exists in the new incarnation too: only the epoch tells the histories apart.
        welcome, sections = await snapshot(server.ws, "phoenix", since=1, epoch=old_epoch)
        assert welcome["type"] == "welcome" and welcome["recovered"] is False, welcome
        assert welcome["epoch"] == new_epoch and welcome["seq"] == 3 and list(sections) == ["n0", "n1", "n2"]
        # The old change ids are gone with the old session: p1 is a new change now.
        assert await acked(b, {"type": "addSection", "title": "Old", "key": "old", "id": "p1"}) == 4
        await b.close()
    run(scenario())


# --- Eviction and deletion --------------------------------------------------------------------


@pytest.mark.parametrize("storage", ["sqlite", "memory"])
def test_an_idle_session_is_evicted_and_the_next_join_loads_the_same_table_seq_and_epoch(launch, tmp_path, storage):
    store = ("--data-dir", str(tmp_path / "data")) if storage == "sqlite" else ("--memory",)

    async def scenario():
        server = launch(*store, "--idle-evict-secs", "1", "--log-level", "info")
        a = await Client.join(server.ws, session="sleepy", name="ana", idScope=RETRYING_CLIENT)
        await acked(a, {"type": "addSection", "title": "Open", "key": "open", "id": "e1"})
        await acked(a, {"type": "addSection", "title": "Shut", "key": "shut", "id": "e2"})
        await acked(a, add_row("open", "o1", "e3", value="one"))
        await acked(a, add_row("shut", "s1", "e4", value="two"))
        await acked(a, {"type": "toggle", "section": "shut", "id": "e5"})
        before, before_sections = await snapshot(server.ws, "sleepy")
        await a.close()
        left = time.monotonic()
        log = await server.wait_for_log("event=session_evicted session=sleepy", timeout=6)
        assert time.monotonic() - left > 0.8, "evicted before it was idle for --idle-evict-secs"
        assert "event=session_loaded session=sleepy" not in log

        after, after_sections = await snapshot(server.ws, "sleepy")
        assert after["seq"] == before["seq"] == 5 and after["epoch"] == before["epoch"]
        assert after["table"] == before["table"] and after_sections == before_sections
        assert f"event=session_loaded session=sleepy seq=5" in server.stderr()
        # The history and the change-id window came back too.
        b = await Client.join(server.ws, session="sleepy", name="bo", since=3, epoch=before["epoch"], idScope=RETRYING_CLIENT)
        assert b.welcome["type"] == "resume", b.welcome
        assert [(await b.next(lambda m: m["type"] == "event"))["id"] for _ in range(2)] == ["e4", "e5"]
        assert await change(b, add_row("open", "o1", "e3", value="one")) == {"type": "ack", "id": "e3", "seq": 3}
        await b.close()
    run(scenario())


@pytest.mark.parametrize("restart", ["sigterm", "kill -9"])
def test_delete_session_closes_every_member_with_4501_and_the_session_stays_deleted_after_a_restart(launch, tmp_path, restart):
    args = ("--data-dir", str(tmp_path / "data"))

    async def scenario():
        server = launch(*args)
        a = await Client.join(server.ws, session="doomed", name="ana")
        b = await Client.join(server.ws, session="doomed", name="bo")
        epoch = a.welcome["epoch"]
        await acked(a, {"type": "addSection", "title": "Doomed", "key": "d", "id": "d1"})
        await acked(a, add_row("d", "d-row", "d2"))
        other = await Client.join(server.ws, session="bystander", name="cy")
        await acked(other, {"type": "addSection", "title": "Safe", "key": "s", "id": "b1"})
        assert {"doomed", "bystander"} <= await list_sessions(server.ws)

        await b.send({"type": "deleteSession"})
        assert await asyncio.gather(close_code(a), close_code(b)) == [4501, 4501]
        if restart == "kill -9":
            server.kill9()  # at once: members were told, so the delete must be committed
        else:
            assert "doomed" not in await list_sessions(server.ws)
            await drain(other, 0.2)
            assert other.ws.close_code is None, "a member of another session was closed"
            await other.close()
            assert server.stop() == 0

        server = launch(*args)
        names = await list_sessions(server.ws)
        assert "doomed" not in names and "bystander" in names
        welcome, sections = await snapshot(server.ws, "doomed")
        assert welcome["seq"] == 0 and sections == {} and welcome["epoch"] != epoch
        welcome, sections = await snapshot(server.ws, "bystander")
        assert welcome["seq"] == 1 and list(sections) == ["s"]
    run(scenario())


# --- Faults -----------------------------------------------------------------------------------


def test_a_read_only_data_dir_stops_the_server_at_start_with_one_line_naming_it(tmp_path):
    # Root writes anywhere, so as root the server runs as nobody on a root-owned 0755 dir.
    base = tempfile.mkdtemp(prefix="foldtable-ro-")
    try:
        os.chmod(base, 0o755)
        data = os.path.join(base, "data")
        os.mkdir(data, 0o755)
        if os.geteuid() == 0:
            def as_nobody():
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            # nobody cannot reach a checkout in a 0700 directory (a mktemp -d clone): run a copy of
            # the binary and an (empty) web root from the 0755 base instead.
            binary = os.path.join(base, "foldtabled")
            shutil.copy(os.path.abspath(BIN), binary)
            code, stderr = failed_start(tmp_path, "--data-dir", data, preexec_fn=as_nobody, binary=binary, web_root=base)
        else:
            os.chmod(data, 0o555)
            code, stderr = failed_start(tmp_path, "--data-dir", data)
        lines = stderr.strip().splitlines()
        assert code == 1
        assert len(lines) == 1 and lines[0].startswith("foldtabled: ") and data in lines[0], stderr
        assert os.listdir(data) == []
    finally:
        shutil.rmtree(base)


def test_a_data_dir_whose_parent_is_missing_stops_the_server_at_start_naming_it(tmp_path):
    data = str(tmp_path / "no-such-parent" / "data")
    code, stderr = failed_start(tmp_path, "--data-dir", data)
    lines = stderr.strip().splitlines()
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("foldtabled: ") and data in lines[0], stderr
    assert not (tmp_path / "no-such-parent").exists()


def test_a_missing_data_dir_whose_parent_exists_is_created(launch, tmp_path):
    data = tmp_path / "fresh"

    async def scenario():
        server = launch("--data-dir", str(data))
        a = await Client.join(server.ws, session="new", name="ana")
        await acked(a, {"type": "addSection", "title": "N", "key": "n", "id": "n1"})
        await a.close()
        assert server.stop() == 0
    run(scenario())
    assert (data / "foldtable.db").is_file()
    assert integrity_check(data / "foldtable.db") == "ok"


def test_a_sigterm_right_after_the_start_line_stops_the_server_with_exit_0(tmp_path):
    # A supervisor may stop a server the moment it reports it is listening, while the store is
    # still writing the new demo session (the default demo, 50,000 rows, on a fresh data dir).
    codes = []
    for attempt in range(5):
        server = LoggedServer("--data-dir", str(tmp_path / f"data{attempt}"), stderr_path=tmp_path / f"s{attempt}.stderr")
        codes.append(server.stop(timeout=3))
    assert codes == [0] * 5, f"exit codes (-9: SIGTERM ignored for 3 s, then killed): {codes}"


def _limit_file_size(limit):
    def preexec():
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    return preexec


def _start_with_little_room(launch, data, headroom, *args):
    """A server on `data` whose files may grow only `headroom` bytes past what a fresh store needs."""
    probe = launch("--data-dir", str(data), *args)
    probe.stop()  # (its exit code is another test's business)
    limit = max(os.path.getsize(data / name) for name in os.listdir(data)) + headroom
    return launch("--data-dir", str(data), *args, preexec_fn=_limit_file_size(limit))


async def _fill(client, section, prefix):
    """Adds 2 KiB rows until one is refused; returns that refusal."""
    for n in range(1, 1000):
        reply = await change(client, add_row(section, f"{prefix}{n}", f"{prefix}-{n}", label="L" * 1000, value="V" * 1024))
        if reply["type"] == "error":
            return reply
    pytest.fail("1,000 rows of 2 KiB fit under the file-size limit")


def _make_room(server):
    hard = resource.prlimit(server.pid, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (hard, hard))


def test_a_full_disk_refuses_changes_with_storage_unavailable_and_they_are_acknowledged_again_when_space_returns(launch, tmp_path):
    # The disk "fills" at a file-size limit (RLIMIT_FSIZE): writes past it fail with EFBIG
    # (the server ignores SIGXFSZ). Lowering one's own soft limit and raising it back up to the
    # hard limit needs no privileges.
    data = tmp_path / "data"
    args = ("--data-dir", str(data))

    async def scenario():
        server = _start_with_little_room(launch, data, 300 * 1024)
        a = await Client.join(server.ws, session="full", name="ana")
        await acked(a, {"type": "addSection", "title": "Big", "key": "big", "id": "f0"})
        await a.close()
        writer = await Client.join(server.ws, session="full", name="writer")
        watcher = await Client.join(server.ws, session="full", name="watcher")
        acks, refused = {}, None
        sent = {}
        for n in range(1, 3000):
            message = add_row("big", f"b{n}", f"f{n}", label=f"{n}:" + "L" * 1000, value="V" * 1024)
            sent[message["id"]] = message
            reply = await change(writer, message)
            if reply["type"] == "ack":
                acks[reply["id"]] = reply["seq"]
                continue
            assert reply["code"] == "storage_unavailable", reply
            refused = message
            break
        assert refused, f"no storage_unavailable after {len(acks)} changes of 2 KiB"
        print(f"{len(acks)} changes acknowledged before the file-size limit refused {refused['id']}")
        assert len(acks) >= 1, "the first change after the start was already refused: the limit left no room"
        await drain(writer, 0.5)
        await drain(watcher, 0.5)
        assert not [m for m in writer.all if m["type"] == "ack" and m["id"] == refused["id"]], "the refused change was also acknowledged"
        assert not [m for m in watcher.all if m["type"] == "event" and m.get("id") == refused["id"]], "the refused change was broadcast"
        assert server.alive()

        # Joins and reads still work, and show every acknowledged row and not the refused one.
        welcome, sections = await snapshot(server.ws, "full")
        keys = row_keys(sections)
        assert refused["key"] not in keys
        assert keys == [sent[i]["key"] for i in acks], "acknowledged rows are missing or doubled"
        assert welcome["seq"] == 1 + len(acks)

        # Space returns: the soft limit goes back up to the hard one (`prlimit --fsize`).
        _make_room(server)
        deadline = time.monotonic() + 5
        while True:
            reply = await change(writer, refused)
            if reply["type"] == "ack" or time.monotonic() > deadline:
                break
            assert reply["code"] == "storage_unavailable", reply
            await asyncio.sleep(0.2)
        assert reply["type"] == "ack", f"still refused 5 s after the limit was lifted: {reply}"
        assert reply["seq"] == 2 + len(acks)
        event = await watcher.next(lambda m: m["type"] == "event" and m.get("id") == refused["id"])
        assert event["seq"] == reply["seq"]
        assert await acked(writer, add_row("big", "after", "f-after")) == reply["seq"] + 1
        await writer.close()
        await watcher.close()
        assert server.stop() == 0

        server = launch(*args)
        welcome, sections = await snapshot(server.ws, "full")
        assert row_keys(sections) == [sent[i]["key"] for i in acks] + [refused["key"], "after"]
        assert server.stop() == 0
        assert integrity_check(data / "foldtable.db") == "ok"
    run(scenario(), timeout=120)


def test_a_session_created_while_the_disk_is_full_takes_changes_once_space_returns(launch, tmp_path):
    data = tmp_path / "data"

    async def scenario():
        server = _start_with_little_room(launch, data, 100 * 1024)
        filler = await Client.join(server.ws, session="filler", name="filler")
        await acked(filler, {"type": "addSection", "title": "F", "key": "f", "id": "f0"})
        assert (await _fill(filler, "f", "r"))["code"] == "storage_unavailable"

        # A new session while the disk is full: the join may be refused (storage_unavailable) or
        # welcomed; a welcomed member's changes are refused...
        first = {"type": "addSection", "title": "N", "key": "n", "id": "n1"}
        newbie = Client(await connect(server.ws, open_timeout=5))
        await newbie.send({"type": "join", "session": "newbie", "name": "newbie", "create": True})
        reply = await newbie.next(lambda m: m["type"] in ("welcome", "error"))
        if reply["type"] == "welcome":
            assert reply["seq"] == 0
            assert (await change(newbie, first))["code"] == "storage_unavailable"
        else:
            assert reply["code"] == "storage_unavailable", reply

        # ...and acknowledged once space returns.
        _make_room(server)
        if reply["type"] == "error":
            await newbie.close()
            newbie = await Client.join(server.ws, session="newbie", name="newbie")
        deadline = time.monotonic() + 5
        while (reply := await change(newbie, first))["type"] != "ack" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert reply == {"type": "ack", "id": "n1", "seq": 1}, f"the new session still refuses changes 5 s after space returned: {reply}"
        await newbie.close()
        await filler.close()
        assert server.stop() == 0
        server = launch("--data-dir", str(data))
        welcome, sections = await snapshot(server.ws, "newbie")
        assert welcome["seq"] == 1 and list(sections) == ["n"]
    run(scenario())


def test_readyz_is_503_while_the_disk_refuses_writes_and_200_once_it_takes_them_again(launch, tmp_path):
    # /healthz says the process serves; /readyz says whether the store does (a load balancer
    # sends clients elsewhere meanwhile).
    data = tmp_path / "data"

    async def scenario():
        server = _start_with_little_room(launch, data, 100 * 1024)
        assert http_get(server.port, "/readyz")[:3:2] == (200, b'{"status":"ready"}')
        writer = await Client.join(server.ws, session="ready", name="writer")
        await acked(writer, {"type": "addSection", "title": "F", "key": "f", "id": "f0"})
        refused = await _fill(writer, "f", "r")
        assert refused["code"] == "storage_unavailable"
        status, headers, body = http_get(server.port, "/readyz")
        assert (status, json.loads(body)) == (503, {"status": "not_ready", "reason": "storage unavailable"})
        assert headers["content-type"] == "application/json"
        assert http_get(server.port, "/healthz")[0] == 200

        _make_room(server)
        deadline = time.monotonic() + 5
        retry = add_row("f", "again", "again")
        while (reply := await change(writer, retry))["type"] != "ack" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert reply["type"] == "ack", reply
        assert http_get(server.port, "/readyz")[0] == 200
        await writer.close()
    run(scenario())


def test_delete_session_on_a_full_disk_is_refused_closes_nobody_and_works_once_space_returns(launch, tmp_path):
    data = tmp_path / "data"

    async def scenario():
        server = _start_with_little_room(launch, data, 100 * 1024)
        a = await Client.join(server.ws, session="stubborn", name="ana")
        b = await Client.join(server.ws, session="stubborn", name="bo")
        await acked(a, {"type": "addSection", "title": "S", "key": "s", "id": "s0"})
        assert (await _fill(a, "s", "r"))["code"] == "storage_unavailable"
        seq = (await snapshot(server.ws, "stubborn"))[0]["seq"]

        await a.send({"type": "deleteSession", "id": "del-1"})
        refusal = await a.next(lambda m: m["type"] == "error")
        assert refusal["code"] == "storage_unavailable" and refusal.get("id") == "del-1", refusal
        await drain(b, 0.3)
        assert a.ws.close_code is None and b.ws.close_code is None, "members were closed by a delete that failed"
        welcome, _ = await snapshot(server.ws, "stubborn")
        assert welcome["seq"] == seq and "stubborn" in await list_sessions(server.ws)

        _make_room(server)
        await asyncio.sleep(0.2)
        await b.send({"type": "deleteSession"})
        assert await asyncio.gather(close_code(a), close_code(b)) == [4501, 4501]
        assert server.stop() == 0
        server = launch("--data-dir", str(data))
        assert "stubborn" not in await list_sessions(server.ws)
    run(scenario())


def test_a_session_created_while_the_database_is_locked_takes_changes_after_the_lock(launch, tmp_path):
    data = tmp_path / "data"

    async def scenario():
        server = launch("--data-dir", str(data))
        await list_sessions(server.ws)
        first = {"type": "addSection", "title": "N", "key": "n", "id": "n1"}
        lock = sqlite3.connect(str(data / "foldtable.db"), isolation_level=None, timeout=5)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            newbie = Client(await connect(server.ws, open_timeout=5))
            await newbie.send({"type": "join", "session": "newbie", "name": "newbie", "create": True})
            joined = await newbie.next(lambda m: m["type"] in ("welcome", "error"))
            if joined["type"] == "welcome":
                await newbie.send(first)
                await drain(newbie, 2.5)
                assert not [m for m in newbie.all if m["type"] == "ack"], "acknowledged while the database was locked"
            else:
                assert joined["code"] == "storage_unavailable", joined
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        if joined["type"] == "error":
            await newbie.close()
            newbie = await Client.join(server.ws, session="newbie", name="newbie")
        else:
            reply = await newbie.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "n1", timeout=10)
            if reply["type"] == "ack":
                assert reply["seq"] == 1
        deadline = time.monotonic() + 5
        while (reply := await change(newbie, first))["type"] != "ack" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert reply == {"type": "ack", "id": "n1", "seq": 1}, f"the new session still refuses changes 5 s after the lock: {reply}"
        await newbie.close()
        assert server.stop() == 0
        server = launch("--data-dir", str(data))
        welcome, sections = await snapshot(server.ws, "newbie")
        assert welcome["seq"] == 1 and list(sections) == ["n"]
    run(scenario())


def test_a_locked_database_never_gets_a_false_ack_and_changes_are_acknowledged_after_the_lock(launch, tmp_path):
    data = tmp_path / "data"

    async def scenario():
        server = launch("--data-dir", str(data))
        writer = await Client.join(server.ws, session="locked", name="writer")
        watcher = await Client.join(server.ws, session="locked", name="watcher")
        await acked(writer, {"type": "addSection", "title": "L", "key": "l", "id": "l0"})
        held = [add_row("l", f"held{i}", f"held-{i}") for i in range(3)]

        lock = sqlite3.connect(str(data / "foldtable.db"), isolation_level=None, timeout=5)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            locked_at = time.monotonic()
            for message in held:
                await writer.send(message)
            await drain(writer, 3.0)
            during = [m for m in writer.all if m.get("id") in {h["id"] for h in held}]
            assert not [m for m in during if m["type"] == "ack"], f"acknowledged while the database was locked: {during}"
            assert all(m["code"] == "storage_unavailable" for m in during if m["type"] == "error"), during
            assert not [m for m in watcher.all if m["type"] == "event" and m.get("id", "").startswith("held")]
            # Joins still work while the database is locked.
            welcome, sections = await snapshot(server.ws, "locked")
            assert welcome["seq"] == 1 and row_keys(sections) == []
            assert time.monotonic() - locked_at < 6
        finally:
            lock.execute("ROLLBACK")
            lock.close()

        # Each held change gets exactly one reply: an ack after the release, or storage_unavailable.
        replies = {}
        for message in held:
            replies[message["id"]] = await writer.next(
                lambda m: m["type"] in ("ack", "error") and m.get("id") == message["id"], timeout=15)
        print("held changes:", {i: (r["type"], r.get("code")) for i, r in replies.items()})
        acked_held = [m for m in held if replies[m["id"]]["type"] == "ack"]
        refused_held = [m for m in held if replies[m["id"]]["type"] == "error"]
        after = await acked(writer, add_row("l", "after", "after-lock"))
        assert after == 2 + len(acked_held)
        welcome, sections = await snapshot(server.ws, "locked")
        assert row_keys(sections) == [m["key"] for m in acked_held] + ["after"], "a refused change showed up"
        # A refused change was not remembered: its retry is applied now, once.
        for n, message in enumerate(refused_held, start=1):
            assert await acked(writer, message) == after + n
        await drain(writer, 0.3)
        await drain(watcher, 0.3)
        for message in acked_held:
            assert len([m for m in writer.all if m.get("id") == message["id"]]) == 1, writer.all
        welcome, sections = await snapshot(server.ws, "locked")
        expected = acked_held + [{"key": "after", "id": "after-lock"}] + refused_held
        assert row_keys(sections) == [m["key"] for m in expected]
        assert welcome["seq"] == 1 + len(expected)
        broadcast = [m["id"] for m in watcher.all if m["type"] == "event" and m.get("id")]
        assert broadcast == ["l0"] + [m["id"] for m in expected]
        await writer.close()
        await watcher.close()
        assert server.stop() == 0
        assert integrity_check(data / "foldtable.db") == "ok"
    run(scenario())


@pytest.mark.parametrize("resident", [False, True], ids=["stored", "resident"])
def test_a_change_sent_right_after_join_is_held_until_the_welcome_then_applied(launch, tmp_path, resident):
    """A client sends `join` and a change back to back, without waiting for the welcome. After a
    restart the session is only stored (its load takes a trip to SQLite); either way the change
    comes after the welcome and is acknowledged, never refused `not_joined`."""
    data = str(tmp_path / "data")
    server = launch("--data-dir", data)

    async def make():
        setup = await Client.join(server.ws, session="held", name="setup")
        await setup.send({"type": "addSection", "key": "s", "title": "S", "id": "s"})
        await setup.next(lambda m: m["type"] == "ack" and m["id"] == "s")
        await setup.close()

    run(make())
    if not resident:
        assert server.stop() == 0
        server = launch("--data-dir", data)

    async def at_once():
        async with connect(server.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "join", "session": "held", "name": "ana"}))
            await ws.send(json.dumps({"type": "toggle", "section": "s", "id": "t1"}))
            await ws.send(json.dumps({"type": "addRow", "section": "s", "label": "x", "id": "t2"}))
            seen = []
            while not any(m.get("id") == "t2" for m in seen):
                for line in (await asyncio.wait_for(ws.recv(), 10)).split("\n"):
                    seen.append(json.loads(line))
            return seen

    seen = run(at_once())
    kinds = [(m["type"], m.get("id")) for m in seen if m["type"] in ("welcome", "ack", "error")]
    assert kinds == [("welcome", None), ("ack", "t1"), ("ack", "t2")], kinds

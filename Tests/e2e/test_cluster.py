"""Several foldtabled nodes sharing sessions through one real redis-server (--redis): clients on
different nodes see the same events in the same order, an HTTP API change on one node reaches
members on the other, a node started late opens the whole table, clients dropping at random
resume with since on other nodes (also one opened late, from a snapshot), clients of a node
killed with SIGKILL resume on another with nothing acknowledged lost, and members on each node see
those on the others (presence heartbeats through Redis): a node killed with -9 loses its members
within the expiry bound, one stopped normally at once. When Redis fails nodes are read-only
(changes refused, /readyz not ready) and come back in step when it returns."""
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from foldtabled import BIN, Client, LoggedServer, Server, TableModel
from test_api import call

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None and os.environ.get("CI") != "true",
                                reason="redis-server is not installed (under CI=true this fails instead)")


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisProcess:
    """A real redis-server on a loopback port, which can be killed and started again on the same
    port and directory (with `appendonly`, what was acknowledged is on its disk)."""

    def __init__(self, appendonly=False, start=True):
        self.directory = tempfile.mkdtemp(prefix="foldtable-redis-")
        self.port = free_port()
        self.appendonly = appendonly
        self.proc = None
        if start:
            self.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always", "--dir", self.directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def kill(self):
        """SIGKILL: a crash, nothing flushed beyond what was fsynced."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="module")
def redis():
    server = RedisProcess()
    yield server.url
    server.close()


@pytest.fixture(scope="module")
def nodes(redis):
    started = [Server("--redis", redis, "--node-id", node) for node in ("a", "b")]
    yield started
    for server in started:
        assert server.stop() == 0


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns()}"


def line(client):
    """The events a client received, in order: (seq, type, section, author)."""
    return [(m["seq"], m["change"]["type"], m["change"].get("section"), m["by"]["client"])
            for m in client.all if m["type"] == "event"]


def test_clients_on_two_nodes_see_the_same_events_in_the_same_order(nodes):
    a, b = nodes
    name = unique("order")

    async def scenario():
        ana = await Client.join(a.ws, session=name, name="ana")
        await ana.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
        await ana.send({"type": "addSection", "key": "y", "title": "Y", "id": "y"})
        await ana.next(lambda m: m["type"] == "ack" and m["id"] == "y")
        bo = await Client.join(b.ws, session=name, name="bo")
        assert ana.welcome["client"].startswith("a.c") and bo.welcome["client"].startswith("b.c")
        assert bo.welcome["epoch"] == ana.welcome["epoch"] and bo.welcome["seq"] == 2
        # Both send at once; the stream decides one order for everyone.
        for n in range(20):
            await ana.send({"type": "toggle", "section": "x", "id": f"a{n}"})
            await bo.send({"type": "toggle", "section": "y", "id": f"b{n}"})
        for client, prefix in ((ana, "a"), (bo, "b")):
            for n in range(20):
                ack = await client.next(lambda m: m["type"] == "ack" and m["id"] == f"{prefix}{n}", timeout=10)
                assert ack["seq"] > 2
        seen_by_ana = [e for e in line(ana) if e[0] > 2]
        while len(seen_by_ana) < 40 or len(line(bo)) < 40:
            for client in (ana, bo):
                try:
                    await client.next(lambda m: m["type"] == "event", timeout=0.2)
                except TimeoutError:
                    pass
            seen_by_ana = [e for e in line(ana) if e[0] > 2]
        assert seen_by_ana == line(bo)
        assert [e[0] for e in line(bo)] == list(range(3, 43))
        # A change refused on every node alike is answered on its author's only.
        await bo.send({"type": "toggle", "section": "nope", "id": "bad"})
        error = await bo.next(lambda m: m["type"] == "error", timeout=10)
        assert error["id"] == "bad"
        await ana.close()
        await bo.close()
    run(scenario())


def test_an_undo_on_one_node_is_applied_alike_on_every_node_and_a_conflicting_one_nowhere(nodes):
    a, b = nodes
    name = unique("undo")

    async def scenario():
        ana = await Client.join(a.ws, session=name, name="ana")
        bo = await Client.join(b.ws, session=name, name="bo")
        for n, message in enumerate([
            {"type": "addSection", "key": "x", "title": "X"},
            {"type": "addRow", "section": "x", "key": "r1", "label": "one", "value": "1"},
        ]):
            await ana.send({**message, "id": f"s{n}"})
            assert (await ana.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == f"s{n}", timeout=10))["type"] == "ack"
        await ana.send({"type": "updateRow", "row": "r1", "set": {"value": "2"}, "id": "c1"})
        changed = await ana.next(lambda m: m["type"] == "ack" and m["id"] == "c1", timeout=10)
        await ana.send({"type": "undo", "id": "u1"})
        undone = await ana.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "u1", timeout=10)
        assert undone["type"] == "ack", undone
        event = await bo.next(lambda m: m["type"] == "event" and m["seq"] == undone["seq"], timeout=10)
        assert event["change"]["type"] == "undo" and event["change"]["of"] == changed["seq"]
        assert event["change"]["changes"] == [{"type": "updateRow", "row": "r1", "set": {"value": "1"}}]
        # Redo, then bo edits the same row on the other node: ana's undo is refused on every node.
        await ana.send({"type": "redo", "id": "r1"})
        assert (await ana.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "r1", timeout=10))["type"] == "ack"
        await bo.send({"type": "updateRow", "row": "r1", "set": {"value": "bo's"}, "id": "b1"})
        edited = await bo.next(lambda m: m["type"] == "ack" and m["id"] == "b1", timeout=10)
        await ana.next(lambda m: m["type"] == "event" and m["seq"] == edited["seq"], timeout=10)
        await ana.send({"type": "undo", "id": "u2"})
        refused = await ana.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "u2", timeout=10)
        assert refused["type"] == "error" and refused["code"] == "undo_conflict", refused
        for server in (a, b):
            status, _, table = call(server, "GET", f"/api/v1/sessions/{name}")
            assert status == 200 and table["sections"][0]["rows"][0]["value"] == "bo's"
        # An undo sent right behind a change, before it came back from the stream, takes back
        # that change (not the one before it).
        await ana.send({"type": "addRow", "section": "x", "key": "q", "label": "quick", "id": "q1"})
        await ana.send({"type": "undo", "id": "q2"})
        added = await ana.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "q1", timeout=10)
        quick = await ana.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "q2", timeout=10)
        assert added["type"] == "ack" and quick["type"] == "ack", (added, quick)
        event = await bo.next(lambda m: m["type"] == "event" and m["seq"] == quick["seq"], timeout=10)
        assert event["change"]["of"] == added["seq"]
        assert event["change"]["changes"] == [{"type": "removeRow", "row": "q"}]
        await ana.close()
        await bo.close()
    run(scenario())


def test_an_api_change_on_one_node_reaches_members_on_the_other(nodes):
    a, b = nodes
    name = unique("api")

    async def scenario():
        bo = await Client.join(b.ws, session=name, name="bo")
        await bo.send({"type": "addSection", "key": "mac", "title": "Mac", "id": "m"})
        await bo.next(lambda m: m["type"] == "ack")
        status, _, body = await asyncio.to_thread(call, a, "PUT", f"/api/v1/sessions/{name}/sections/mac/collapsed", True)
        assert status == 200 and body["seq"] == 2
        event = await bo.next(lambda m: m["type"] == "event" and m["seq"] == 2, timeout=10)
        assert event["collapsed"] == {"mac": True} and event["by"]["client"] == "api"
        status, _, body = await asyncio.to_thread(call, a, "GET", f"/api/v1/sessions/{name}/collapsed")
        assert status == 200 and body == {"mac": True}
        await bo.close()
    run(scenario())


def test_a_node_sharing_sessions_through_redis_opens_no_sqlite_store(redis, tmp_path):
    """With --redis every session lives in Redis: the data directory is never made or read."""
    data = tmp_path / "data"
    node = Server("--redis", redis, "--node-id", "nodb", "--data-dir", str(data))
    name = unique("nodb")

    async def scenario():
        ana = await Client.join(node.ws, session=name, name="ana")
        await ana.send({"type": "addSection", "key": "k", "title": "K", "id": "k1"})
        ack = await ana.next(lambda m: m["type"] == "ack")
        assert ack["seq"] == 1
        await ana.close()
    try:
        run(scenario())
    finally:
        assert node.stop() == 0
    assert not data.exists()


def test_a_node_started_late_opens_the_whole_table(nodes, redis):
    a, _ = nodes
    name = unique("late")

    async def scenario():
        ana = await Client.join(a.ws, session=name, name="ana")
        for n in range(30):
            await ana.send({"type": "addSection", "title": f"S{n}", "id": f"s{n}"})
        await ana.next(lambda m: m["type"] == "ack" and m["id"] == "s29", timeout=10)
        late = Server("--redis", redis, "--node-id", "late", "--checkpoint-events", "10")
        try:
            cy = await Client.join(late.ws, session=name, name="cy")
            assert cy.welcome["seq"] == 30 and len(cy.welcome["table"]["sections"]) == 30
            await ana.send({"type": "toggle", "section": cy.welcome["table"]["sections"][0]["key"]})
            event = await cy.next(lambda m: m["type"] == "event", timeout=10)
            assert event["seq"] == 31 and event["by"]["client"].startswith("a.c")
            await cy.close()
        finally:
            assert late.stop() == 0
        await ana.close()
    run(scenario())


HEARTBEAT_MS = 200
EXPIRY_MS = 1500


async def member_count(client, expected, timeout=10):
    """Waits for a presence diff (or a welcome already) saying `expected` members."""
    if client.welcome["presenceCount"] == expected or any(
            m["type"] == "presence" and m["count"] == expected for m in client.all):
        return
    await client.next(lambda m: m["type"] == "presence" and m["count"] == expected, timeout=timeout)


def listed_members(server, name):
    status, _, body = call(server, "GET", "/api/v1/sessions")
    assert status == 200
    return next(s["members"] for s in body["sessions"] if s["name"] == name)


def test_members_on_three_nodes_see_each_other_and_a_killed_node_leaves_within_the_bound(redis):
    presence = ["--presence-heartbeat-ms", str(HEARTBEAT_MS), "--presence-expiry-ms", str(EXPIRY_MS)]
    a, b, c = (Server("--redis", redis, "--node-id", node, *presence) for node in ("pa", "pb", "pc"))
    name = unique("presence")

    async def scenario():
        ana = await Client.join(a.ws, session=name, name="ana")
        bo = await Client.join(b.ws, session=name, name="bo")
        cy = await Client.join(c.ws, session=name, name="cy")
        for client in (ana, bo, cy):
            await member_count(client, 3)
        joined = {j["client"] for m in ana.all if m["type"] == "presence" for j in m.get("joined", [])}
        assert {bo.welcome["client"], cy.welcome["client"]} <= joined
        for server in (a, b, c):
            assert await asyncio.to_thread(listed_members, server, name) == 3

        # kill -9: pc says nothing more. Its member stays while its last heartbeat lives, and
        # is gone from every other node within the bound.
        killed = time.monotonic()
        c.proc.kill()
        c.proc.wait()
        left = [await client.next(lambda m: m["type"] == "presence" and cy.welcome["client"] in m.get("left", []), timeout=10)
                for client in (ana, bo)]
        elapsed = time.monotonic() - killed
        assert all(m["count"] == 2 for m in left)
        # Its last beat was at most one interval before the kill; two more intervals and the
        # presence interval for the other nodes to read it and tell their members, plus slack.
        assert (EXPIRY_MS - HEARTBEAT_MS - 300) / 1000 <= elapsed <= (EXPIRY_MS + 2 * HEARTBEAT_MS + 100 + 1500) / 1000, elapsed
        assert await asyncio.to_thread(listed_members, a, name) == 2

        # A normal stop takes pb's member away at once, long before the bound.
        stopped = time.monotonic()
        assert b.stop() == 0
        gone = await ana.next(lambda m: m["type"] == "presence" and bo.welcome["client"] in m.get("left", []), timeout=10)
        assert gone["count"] == 1
        assert time.monotonic() - stopped < (EXPIRY_MS - HEARTBEAT_MS) / 1000
        await ana.close()
    try:
        run(scenario())
    finally:
        for server in (a, b, c):
            server.stop()


@pytest.mark.parametrize("args,expected", [
    (["--redis", "rediss://127.0.0.1:6379"], "rediss:// is not supported"),
    (["--redis", "redis://127.0.0.1:notaport"], "--redis"),
    (["--redis", "redis://127.0.0.1:6379", "--memory"], "--redis and --memory"),
    (["--node-id", "a.b"], "--node-id a.b"),
    (["--presence-heartbeat-ms", "2000", "--presence-expiry-ms", "1000"], "--presence-expiry-ms (1000) must be more"),
])
def test_bad_cluster_settings_stop_start_up_with_a_clear_line(args, expected):
    result = subprocess.run([BIN, "--port", "0", *args], capture_output=True, text=True, timeout=20)
    assert result.returncode == 1, result.stderr
    assert expected in result.stderr


def readiness(server):
    status, _, body = call(server, "GET", "/readyz")
    return status, body


def metric(server, name):
    _, _, text = call(server, "GET", "/metrics")
    for row in text.splitlines():
        if row.startswith(name + " "):
            return float(row.split()[1])
    return None


async def wait_until(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def toggles_from_both(ana, bo, label, count=5):
    """`count` toggles from each client at once (ids LABEL-aN and LABEL-bN); their acks' seqs by id."""
    for n in range(count):
        await ana.send({"type": "toggle", "section": "x", "id": f"{label}-a{n}"})
        await bo.send({"type": "toggle", "section": "x", "id": f"{label}-b{n}"})
    acked = {}
    for client, prefix in ((ana, f"{label}-a"), (bo, f"{label}-b")):
        for n in range(count):
            ack = await client.next(lambda m: m["type"] == "ack" and m["id"] == f"{prefix}{n}", timeout=15)
            acked[ack["id"]] = ack["seq"]
    return acked


async def settle_events(clients, count, timeout=15.0):
    """Reads until every client has received `count` events."""
    deadline = time.monotonic() + timeout
    while any(len(line(c)) < count for c in clients):
        assert time.monotonic() < deadline, [len(line(c)) for c in clients]
        for client in clients:
            try:
                await client.next(lambda m: m["type"] == "event", timeout=0.1)
            except TimeoutError:
                pass


def test_while_redis_is_down_nodes_are_read_only_and_not_ready_then_converge_when_it_returns():
    redis = RedisProcess(appendonly=True)
    a = Server("--redis", redis.url, "--node-id", "a")
    b = Server("--redis", redis.url, "--node-id", "b")
    name = unique("outage")

    async def scenario():
        ana = await Client.join(a.ws, session=name, name="ana")
        await ana.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
        await ana.next(lambda m: m["type"] == "ack" and m["id"] == "x", timeout=10)
        bo = await Client.join(b.ws, session=name, name="bo")
        await wait_until(lambda: readiness(a)[0] == 200 and readiness(b)[0] == 200)
        acked = {}
        acked.update(await toggles_from_both(ana, bo, "up"))

        redis.kill()
        await wait_until(lambda: readiness(a)[0] == 503 and readiness(b)[0] == 503)
        status, body = readiness(a)
        assert body["status"] == "not_ready" and "redis" in body["reason"]
        assert call(a, "GET", "/healthz")[0] == 200
        assert metric(a, "foldtable_redis_connected") == 0
        # Changes are refused, never applied locally; reads go on.
        for client, change_id in ((ana, "down-a"), (bo, "down-b")):
            await client.send({"type": "toggle", "section": "x", "id": change_id})
            error = await client.next(lambda m: m["type"] == "error" and m.get("id") == change_id, timeout=10)
            assert error["code"] == "storage_unavailable"
        status, _, _ = await asyncio.to_thread(call, a, "PUT", f"/api/v1/sessions/{name}/sections/x/collapsed", True)
        assert status == 503
        await ana.send({"type": "find", "q": "X", "id": "f"})
        assert (await ana.next(lambda m: m["type"] == "found", timeout=10))["id"] == "f"
        assert metric(a, "foldtable_redis_failed_reads_total") >= 1

        redis.start()
        await wait_until(lambda: readiness(a)[0] == 200 and readiness(b)[0] == 200)
        acked.update(await toggles_from_both(ana, bo, "back"))
        await settle_events([ana], 21)
        await settle_events([bo], 20)
        # The same events with the same seqs on both nodes, no gaps, nothing acknowledged lost,
        # nothing refused applied.
        assert [e for e in line(ana) if e[0] > 1] == line(bo)
        assert [e[0] for e in line(ana)] == list(range(1, 22))
        events = {m["id"]: m["seq"] for m in ana.all if m["type"] == "event" and "id" in m}
        assert all(events.get(change_id) == seq for change_id, seq in acked.items())
        assert "down-a" not in events and "down-b" not in events
        assert [m for m in ana.all if m["type"] == "welcome"] == [ana.welcome]
        assert metric(a, "foldtable_redis_reconnects_total") >= 1
        await ana.close()
        await bo.close()
    try:
        run(scenario())
    finally:
        assert a.stop() == 0 and b.stop() == 0
        redis.close()


async def bo_with_section_x_and_ana(a, b, name):
    """`bo` on node b adds section x to session `name` (acknowledged), then `ana` joins on node
    a, once a is ready: (bo, ana)."""
    bo = await Client.join(b.ws, session=name, name="bo")
    await bo.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
    await bo.next(lambda m: m["type"] == "ack", timeout=10)
    ana = await Client.join(a.ws, session=name, name="ana")
    await wait_until(lambda: readiness(a)[0] == 200)
    return bo, ana


def test_a_node_cut_off_while_its_position_is_trimmed_away_welcomes_its_members_afresh():
    """Only node a loses Redis (a TCP relay between them is closed) while node b goes on and its
    snapshots trim the stream past a's position: a reloads and its members get a fresh welcome."""
    redis = RedisProcess()
    relay = Relay(redis.port)
    small = ("--checkpoint-events", "3", "--history-events", "1")
    a = Server("--redis", f"redis://127.0.0.1:{relay.port}/0", "--node-id", "a", *small)
    b = Server("--redis", redis.url, "--node-id", "b", *small)
    name = unique("trim")

    async def scenario():
        bo, ana = await bo_with_section_x_and_ana(a, b, name)
        relay.cut()
        await wait_until(lambda: readiness(a)[0] == 503)
        for n in range(10):
            await bo.send({"type": "toggle", "section": "x", "id": f"b{n}"})
            await bo.next(lambda m: m["type"] == "ack" and m["id"] == f"b{n}", timeout=10)
        assert line(ana) == []
        relay.restore()
        # The welcome holds the snapshot; the entries after it follow as events, up to seq 11.
        welcome = await ana.next(lambda m: m["type"] == "welcome", timeout=15)
        assert 3 <= welcome["seq"] <= 11 and welcome["epoch"] == ana.welcome["epoch"]
        await settle_events([ana], 11 - welcome["seq"])
        assert [e[0] for e in line(ana)] == list(range(welcome["seq"] + 1, 12))
        await ana.send({"type": "toggle", "section": "x", "id": "a1"})
        ack = await ana.next(lambda m: m["type"] == "ack", timeout=10)
        assert ack["seq"] == 12
        event = await bo.next(lambda m: m["type"] == "event" and m["seq"] == 12, timeout=10)
        assert event["by"]["client"].startswith("a.c")
        assert metric(a, "foldtable_session_reloads_total") == 1
        assert [m["seq"] for m in ana.all if m["type"] == "welcome"] == [1, welcome["seq"]]
        await ana.close()
        await bo.close()
    try:
        run(scenario())
    finally:
        assert a.stop() == 0 and b.stop() == 0
        relay.close()
        redis.close()


def test_a_node_started_while_redis_is_down_is_alive_not_ready_refuses_joins_then_works():
    redis = RedisProcess(start=False)
    node = Server("--redis", redis.url, "--node-id", "a")
    name = unique("cold")

    async def scenario():
        assert call(node, "GET", "/healthz")[0] == 200
        status, body = readiness(node)
        assert status == 503 and "redis" in body["reason"]
        ws = await connect(node.ws, open_timeout=5)
        await ws.send(json.dumps({"type": "join", "session": name, "name": "ana", "create": True}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["type"] == "error" and error["code"] == "storage_unavailable"
        await ws.close()
        redis.start()
        await wait_until(lambda: readiness(node)[0] == 200)
        ana = await Client.join(node.ws, session=name, name="ana")
        await ana.send({"type": "addSection", "title": "Now", "id": "n"})
        assert (await ana.next(lambda m: m["type"] == "ack", timeout=10))["seq"] == 1
        await ana.close()
    try:
        run(scenario())
    finally:
        assert node.stop() == 0
        redis.close()


class Relay:
    """A TCP relay from a loopback port to Redis, on a thread: `cut()` closes every connection
    and stops accepting (the node alone loses Redis), `restore()` accepts again on the same port."""

    def __init__(self, target_port):
        self.target = target_port
        self.port = free_port()
        self.lock = threading.Lock()
        self.sockets = []
        self.listener = None
        self.restore()

    def restore(self):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        # shutdown wakes the thread blocked in accept() (close alone would leave it listening).
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.sockets = []

    def close(self):
        self.cut()
class Member:
    """A client that keeps its own view from the events it receives, drops its connection when
    told, and resumes with since/epoch on whichever node it is given, retrying its changes not
    yet acknowledged with their ids. A fresh welcome on a resume fails the test: every resume
    here is within the history window."""

    def __init__(self, name, session, rng):
        self.name, self.session, self.rng = name, session, rng
        self.ws = self.url = None
        self.epoch = None
        self.seq = None
        self.model = None
        self.events = []
        self.pending = {}
        self.changes = {}
        self.acks = {}
        self.sent = 0
        self.resumes = 0
        # The most events a resume had to send (how far the server was ahead of this client).
        self.reach = 0
        self.buffer = []

    async def connect(self, url):
        self.url, self.buffer = url, []
        self.ws = await connect(url, max_size=None, open_timeout=10)
        # Its idScope, the same on every node and connection: its retries are recognised as its own.
        join = {"type": "join", "session": self.session, "name": self.name, "create": True,
                "idScope": f"member-{self.name}".ljust(16, "0")}
        if self.seq is not None:
            join.update(since=self.seq, epoch=self.epoch)
        await self.ws.send(json.dumps(join))
        while True:
            message = await self.message()
            if message["type"] == "welcome":
                assert self.seq is None, f"{self.name}: fresh welcome at {message['seq']} on a resume from {self.seq} at {url}"
                self.epoch, self.seq, self.model = message["epoch"], message["seq"], TableModel()
                for section in message["table"]["sections"]:
                    assert section["rowCount"] == 0
                    self.model.order.append(section["key"])
                    self.model.sections[section["key"]] = {"title": section["title"], "collapsed": section["collapsed"], "rows": []}
                break
            if message["type"] == "resume":
                assert message["epoch"] == self.epoch and message["seq"] >= self.seq
                self.resumes += 1
                self.reach = max(self.reach, message["seq"] - self.seq)
                break
        for change in list(self.pending.values()):
            await self.ws.send(json.dumps(change))

    async def message(self, timeout=20):
        if not self.buffer:
            frame = await asyncio.wait_for(self.ws.recv(), timeout)
            self.buffer.extend(json.loads(line) for line in frame.split("\n"))
        return self.buffer.pop(0)

    def take(self, message):
        kind = message["type"]
        if kind == "event":
            assert message["seq"] == self.seq + 1, f"{self.name}: event {message['seq']} after {self.seq}"
            self.seq = message["seq"]
            self.model.apply(message)
            self.events.append(message)
        elif kind == "ack":
            assert self.acks.setdefault(message["id"], message["seq"]) == message["seq"], f"{self.name}: {message}"
            self.pending.pop(message["id"], None)
        elif kind == "error":
            raise AssertionError(f"{self.name}: {message}")

    async def drop(self):
        """Gone at once, by a close or by a reset (no close frame), as a network drop would."""
        if self.rng.random() < 0.5:
            await self.ws.close()
        else:
            self.ws.transport.abort()

    async def work(self, changes, sections, next_url, drop_every=(5, 60)):
        """Makes `changes` changes, three in flight at most, dropping after a random number of
        messages and resuming on `next_url(current)`; returns once every change is acknowledged."""
        goal = self.sent + changes
        until_drop = self.rng.randint(*drop_every) if drop_every else None
        while self.sent < goal or self.pending:
            try:
                while len(self.pending) < 3 and self.sent < goal:
                    self.sent += 1
                    cid = f"{self.name}-{self.sent}"
                    key = self.rng.choice(sections)
                    change = ({"type": "toggle", "section": "flag", "id": cid} if key == "flag"
                              else {"type": "addRow", "section": key, "label": cid, "id": cid})
                    self.pending[cid] = self.changes[cid] = change
                    await self.ws.send(json.dumps(change))
                self.take(await self.message())
                if until_drop is not None:
                    until_drop -= 1
                    if until_drop <= 0:
                        await self.drop()
                        until_drop = self.rng.randint(*drop_every)
                        await self.connect(next_url(self.url))
            except (ConnectionClosed, OSError):
                await self.connect(next_url(self.url))

    async def catch_up(self, seq):
        while self.seq < seq:
            self.take(await self.message())


def check_members(members, sections):
    """Every member's view is the same, its seqs have no gaps, and every acknowledged change is
    there exactly once, at the seq it was acknowledged with."""
    first = members[0]
    for member in members:
        assert [e["seq"] for e in member.events] == list(range(member.events[0]["seq"], member.seq + 1))
        assert member.events == first.events[-len(member.events):]
        assert member.model.order == first.model.order and member.model.sections == first.model.sections
    by_id = {}
    for event in first.events:
        if event.get("id"):
            assert event["id"] not in by_id, f"change {event['id']} applied twice"
            by_id[event["id"]] = event["seq"]
    for member in members:
        assert not member.pending
        for cid, seq in member.acks.items():
            assert by_id.get(cid) == seq, f"{cid} acknowledged with {seq}, in the table at {by_id.get(cid)}"
    # Nothing applied that its author was not told of (a retry is told the original seq).
    assert set(by_id) == {cid for member in members for cid in member.acks}
    labels = [row["label"] for key in sections if key != "flag" for row in first.model.sections[key]["rows"]]
    assert sorted(labels) == sorted(e["id"] for e in first.events if e["change"]["type"] == "addRow")


def cluster_node(redis, node, tmp_path, *extra):
    return LoggedServer("--redis", redis, "--node-id", node, "--change-rate", "100000", "--change-burst", "100000", *extra,
                        "--data-dir", str(tmp_path / f"data-{node}"), stderr_path=tmp_path / f"{node}.log")


async def make_session(url, name, sections):
    setup = await Client.join(url, session=name, name="setup")
    for key in sections:
        await setup.send({"type": "addSection", "key": key, "title": key.upper(), "id": key})
    await setup.next(lambda m: m["type"] == "ack" and m["id"] == sections[-1], timeout=10)
    await setup.close()


def stored(redis, *command):
    return subprocess.run(["redis-cli", "-u", redis, *command], capture_output=True, text=True, timeout=10, check=True).stdout


def test_many_clients_dropping_and_resuming_on_the_other_nodes_end_with_one_view(redis, tmp_path):
    """Eight clients on two nodes (a snapshot every 20 events, 300 kept for resume) change
    sections at once and drop at random moments, each resuming with since on another node and
    retrying what was not acknowledged. A third node is started after snapshots and trims; a
    client that dropped before that node's snapshot resumes there, then everyone uses it too."""
    settings = ("--checkpoint-events", "20", "--history-events", "300")
    a, b = (cluster_node(redis, node, tmp_path, *settings) for node in ("a", "b"))
    late = None
    name = unique("resume")
    sections = ["s0", "s1", "s2", "s3", "flag"]
    rng = random.Random(int(os.environ.get("FOLDTABLE_SEED", time.time_ns())))
    seed = rng.getrandbits(32)
    print(f"seed {seed}")

    async def scenario():
        nonlocal late
        await make_session(a.ws, name, sections)
        urls = [a.ws, b.ws]

        def other(url):
            return rng.choice([u for u in urls if u != url])

        members = [Member(f"m{i}", name, random.Random(seed + i)) for i in range(8)]
        for i, member in enumerate(members):
            await member.connect(urls[i % 2])
        sleeper = Member("sleeper", name, random.Random(seed - 1))
        await sleeper.connect(a.ws)
        await asyncio.gather(*(m.work(20, sections, other) for m in members))
        # The sleeper catches up, drops, and stays away while a snapshot passes its seq.
        head = max(m.seq for m in members)
        await sleeper.catch_up(head)
        await sleeper.drop()
        await asyncio.gather(*(m.work(10, sections, other) for m in members))
        covered = json.loads(stored(redis, "HGET", f"foldtable:{{{name}}}:snapshot", "table"))["seq"]
        assert covered > sleeper.seq, (covered, sleeper.seq)
        info = stored(redis, "XINFO", "STREAM", f"foldtable:{{{name}}}:stream").split("\n")
        kept, appended = int(info[info.index("length") + 1]), int(info[info.index("entries-added") + 1])
        history_bytes = int(stored(redis, "HSTRLEN", f"foldtable:{{{name}}}:snapshot", "history"))
        assert kept < appended, f"the stream was not trimmed: {kept} of {appended} entries kept"

        late = cluster_node(redis, "late", tmp_path, *settings)
        urls.append(late.ws)
        await sleeper.connect(late.ws)
        assert sleeper.resumes == 1
        await asyncio.gather(*(m.work(15, sections, other) for m in members + [sleeper]))

        await members[0].ws.send(json.dumps({"type": "toggle", "section": "flag", "id": "end"}))
        members[0].pending["end"] = {}
        while "end" in members[0].pending:
            members[0].take(await members[0].message())
        for member in members + [sleeper]:
            await member.catch_up(members[0].acks["end"])
        check_members(members + [sleeper], sections)
        resumes = sum(m.resumes for m in members)
        assert resumes >= 16, resumes
        print(f"{members[0].seq} events, {resumes} resumes reaching back {max(m.reach for m in members)} events at most, "
              f"snapshot at {covered} (history {history_bytes} bytes) and {kept} of {appended} entries kept before the late "
              "node opened")
        for member in members + [sleeper]:
            await member.ws.close()

    try:
        run(scenario(), timeout=240)
    finally:
        for server in (a, b, late):
            if server is not None:
                assert server.stop() == 0, server.stderr()[-2000:]


def test_clients_of_a_node_killed_with_sigkill_resume_on_another_with_nothing_acknowledged_lost(redis, tmp_path):
    """Six clients on two nodes write at once; node a is killed (kill -9) at a random moment.
    Its clients resume with since on node b and retry what was not acknowledged: every
    acknowledged change is there once, and a change acknowledged before the kill, sent again
    with its id, is acknowledged with its original seq."""
    a, b = (cluster_node(redis, node, tmp_path, "--checkpoint-events", "40") for node in ("a", "b"))
    name = unique("kill")
    sections = ["s0", "s1", "flag"]
    rng = random.Random(int(os.environ.get("FOLDTABLE_SEED", time.time_ns())))
    seed = rng.getrandbits(32)
    kill_after = rng.randint(10, 150)
    print(f"seed {seed}, kill after {kill_after} events")
    alive = {a.ws, b.ws}
    acked_before_kill = {}

    async def scenario():
        await make_session(b.ws, name, sections)

        def other(url):
            return b.ws if url == a.ws or a.ws not in alive else a.ws

        members = [Member(f"m{i}", name, random.Random(seed + i)) for i in range(6)]
        for i, member in enumerate(members):
            await member.connect(a.ws if i % 2 == 0 else b.ws)

        async def killer():
            while max(m.seq for m in members) < kill_after + 3:
                await asyncio.sleep(0.002)
            alive.discard(a.ws)
            a.kill9()
            acked_before_kill.update({m.name: dict(m.acks) for m in members[0::2]})

        await asyncio.gather(killer(), *(m.work(60, sections, other, drop_every=None) for m in members))
        on_a = members[0::2]
        assert all(m.url == b.ws and m.resumes == 1 for m in on_a), [(m.url, m.resumes) for m in on_a]
        # A change acknowledged before the kill, sent again with its id: acknowledged as it was.
        for member in on_a:
            if not acked_before_kill[member.name]:
                continue
            cid, seq = rng.choice(sorted(acked_before_kill[member.name].items()))
            member.pending[cid] = member.changes[cid]
            await member.ws.send(json.dumps(member.changes[cid]))
            while cid in member.pending:
                member.take(await member.message())
            assert member.acks[cid] == seq
        await members[1].ws.send(json.dumps({"type": "toggle", "section": "flag", "id": "end"}))
        members[1].pending["end"] = {}
        while "end" in members[1].pending:
            members[1].take(await members[1].message())
        for member in members:
            await member.catch_up(members[1].acks["end"])
        check_members(members, sections)
        for member in members:
            await member.ws.close()

    try:
        run(scenario(), timeout=120)
    finally:
        a.kill9()
        assert b.stop() == 0, b.stderr()[-2000:]


def http_listing(server):
    """name → members, as GET /api/v1/sessions on `server` lists them."""
    status, _, body = call(server, "GET", "/api/v1/sessions")
    assert status == 200, body
    return {s["name"]: s["members"] for s in body["sessions"]}


async def protocol_listing(server):
    """name → members, as the protocol's list on a fresh connection to `server` answers."""
    async with connect(server.ws, open_timeout=5) as ws:
        await ws.send(json.dumps({"type": "list"}))
        while True:
            for text in (await asyncio.wait_for(ws.recv(), 5)).split("\n"):
                message = json.loads(text)
                if message["type"] == "sessions":
                    return {s["name"]: s["members"] for s in message["sessions"]}


def test_two_nodes_list_the_same_sessions_and_counts_and_a_killed_nodes_members_leave_them_within_the_bound(redis):
    presence = ["--presence-heartbeat-ms", str(HEARTBEAT_MS), "--presence-expiry-ms", str(EXPIRY_MS), "--idle-evict-secs", "1"]
    a, b = (Server("--redis", redis, "--node-id", node, *presence) for node in ("la", "lb"))
    shared, solo, evicted = unique("listed"), unique("solo"), unique("evicted")

    async def listings():
        return [await asyncio.to_thread(http_listing, a), await asyncio.to_thread(http_listing, b),
                await protocol_listing(a), await protocol_listing(b)]

    async def until(expected, timeout=10):
        """Polls every node's listings until each shows `expected` for these sessions."""
        deadline = time.monotonic() + timeout
        while True:
            seen = await listings()
            if all({n: listing.get(n) for n in expected} == expected for listing in seen):
                return seen
            assert time.monotonic() < deadline, (expected, seen)
            await asyncio.sleep(0.05)

    async def scenario():
        ana = await Client.join(a.ws, session=shared, name="ana")
        members = [await Client.join(b.ws, session=shared, name=n) for n in ("bo", "bea")]
        # Only lb ever opens `solo`.
        members += [await Client.join(b.ws, session=solo, name=n) for n in ("cy", "cat")]
        # `evicted` is made on la, which then loses its only member and evicts it; lb keeps one.
        made = await Client.join(a.ws, session=evicted, name="maker")
        members.append(await Client.join(b.ws, session=evicted, name="dan"))
        await made.close()
        await asyncio.sleep(1.5)

        seen = await until({shared: 3, solo: 2, evicted: 1})
        # la holds neither `solo` nor `evicted` (no section count: not in its memory).
        _, _, body = await asyncio.to_thread(call, a, "GET", "/api/v1/sessions")
        assert {s["name"]: s["sections"] for s in body["sessions"] if s["name"] in (solo, evicted)} == {solo: None, evicted: None}
        # Every node, over HTTP and the protocol, lists the same sessions.
        assert all(set(listing) == set(seen[0]) for listing in seen), seen

        # kill -9 lb: its members stay counted while its last heartbeat lives, and leave every
        # listing of la within the bound (by Redis' clock) plus la's heartbeat and slack.
        killed = time.monotonic()
        b.proc.kill()
        b.proc.wait()
        while True:
            listing = await asyncio.to_thread(http_listing, a)
            if listing[solo] == 0:
                break
            assert listing[solo] == 2 and listing[evicted] == 1, listing
            assert time.monotonic() - killed < (EXPIRY_MS + 2 * HEARTBEAT_MS + 1500) / 1000, listing
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - killed
        assert elapsed >= (EXPIRY_MS - HEARTBEAT_MS - 300) / 1000, elapsed
        deadline = time.monotonic() + 5
        while (listing := await asyncio.to_thread(http_listing, a)) != {**listing, shared: 1, solo: 0, evicted: 0}:
            assert time.monotonic() < deadline, listing
            await asyncio.sleep(0.05)
        assert {n: (await protocol_listing(a))[n] for n in (shared, solo, evicted)} == {shared: 1, solo: 0, evicted: 0}
        await ana.close()
    try:
        run(scenario())
    finally:
        for server in (a, b):
            server.stop()


def test_a_node_stopped_while_connected_and_trimmed_past_welcomes_its_members_afresh(tmp_path):
    """Node a is stopped with SIGSTOP (its Redis connections stay up) while node b writes past
    the window and its snapshots trim the stream behind a's position. Continued, a's reader reads
    from a trimmed ID, which Redis answers with the oldest entries left: the entries' numbers
    show the gap, so a reloads from the snapshot (a fresh welcome, same epoch) instead of
    applying what follows it, and both nodes' members end with the same events, no seq gaps."""
    import signal
    redis = RedisProcess()
    small = ("--checkpoint-events", "3", "--history-events", "1")
    a = LoggedServer("--redis", redis.url, "--node-id", "a", "--log-level", "warning", *small, stderr_path=tmp_path / "a.log")
    b = Server("--redis", redis.url, "--node-id", "b", *small)
    name = unique("stopped")

    async def scenario():
        bo, ana = await bo_with_section_x_and_ana(a, b, name)
        await bo.send({"type": "toggle", "section": "x", "id": "b-first"})
        await ana.next(lambda m: m["type"] == "event" and m["seq"] == 2, timeout=10)
        os.kill(a.pid, signal.SIGSTOP)
        try:
            for n in range(10):
                await bo.send({"type": "toggle", "section": "x", "id": f"b{n}"})
                await bo.next(lambda m: m["type"] == "ack" and m["id"] == f"b{n}", timeout=10)
            first = stored(redis.url, "XRANGE", f"foldtable:{{{name}}}:stream", "-", "+", "COUNT", "1")
            assert "\nn\n" in f"\n{first}\n", first
        finally:
            os.kill(a.pid, signal.SIGCONT)
        # The welcome holds the snapshot; the entries after it follow as events, up to seq 12.
        welcome = await ana.next(lambda m: m["type"] == "welcome", timeout=15)
        assert 3 <= welcome["seq"] <= 12 and welcome["epoch"] == ana.welcome["epoch"]
        fresh = [i for i, m in enumerate(ana.all) if m["type"] == "welcome"][1]
        before = [m["seq"] for m in ana.all[:fresh] if m["type"] == "event"]
        # Before the gap only what continued seq 2 (a read that was under way may have brought
        # an entry or two); after it, from the snapshot on.
        assert before == list(range(2, 2 + len(before))) and before[-1] <= welcome["seq"]
        await settle_events([ana], len(before) + 12 - welcome["seq"])
        assert [m["seq"] for m in ana.all[fresh:] if m["type"] == "event"] == list(range(welcome["seq"] + 1, 13))
        await ana.send({"type": "toggle", "section": "x", "id": "a1"})
        ack = await ana.next(lambda m: m["type"] == "ack", timeout=10)
        assert ack["seq"] == 13
        await settle_events([bo], 13)
        assert [e[0] for e in line(bo)] == list(range(1, 14))
        assert line(ana)[-1] == line(bo)[-1]
        # Noticed by the numbers while connected, not by a reconnect.
        assert "stream_gap" in a.stderr() and "session_fell_behind" in a.stderr()
        assert metric(a, "foldtable_session_reloads_total") == 1
        assert metric(a, "foldtable_redis_reconnects_total") == 0
        assert [m["seq"] for m in ana.all if m["type"] == "welcome"] == [1, welcome["seq"]]
        late_a = await Client.join(a.ws, session=name, name="late-a")
        late_b = await Client.join(b.ws, session=name, name="late-b")
        assert late_a.welcome["seq"] == late_b.welcome["seq"] == 13
        assert late_a.welcome["table"] == late_b.welcome["table"]
        for client in (ana, bo, late_a, late_b):
            await client.close()
    try:
        run(scenario())
    finally:
        assert a.stop() == 0 and b.stop() == 0
        redis.close()

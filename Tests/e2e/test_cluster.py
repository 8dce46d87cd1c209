"""Several foldtabled nodes sharing sessions through one real redis-server (--redis): clients on
different nodes see the same events in the same order, an HTTP API change on one node reaches
members on the other, a node started late opens the whole table, and when Redis fails nodes are
read-only (changes refused, /readyz not ready) and come back in step when it returns. Presence
across nodes is not built yet (README, More than one machine)."""
import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from websockets.asyncio.client import connect

from foldtabled import BIN, Client, Server
from test_api import call

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None and os.environ.get("CI") != "true",
                                reason="redis-server is not installed (under CI=true this fails instead)")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


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


@pytest.mark.parametrize("args,expected", [
    (["--redis", "rediss://127.0.0.1:6379"], "rediss:// is not supported"),
    (["--redis", "redis://127.0.0.1:notaport"], "--redis"),
    (["--redis", "redis://127.0.0.1:6379", "--memory"], "--redis and --memory"),
    (["--node-id", "a.b"], "--node-id a.b"),
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
        bo = await Client.join(b.ws, session=name, name="bo")
        await bo.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
        await bo.next(lambda m: m["type"] == "ack", timeout=10)
        ana = await Client.join(a.ws, session=name, name="ana")
        await wait_until(lambda: readiness(a)[0] == 200)
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
        await ws.send(json.dumps({"type": "join", "session": name, "name": "ana"}))
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

"""Several foldtabled nodes sharing sessions through one real redis-server (--redis): clients on
different nodes see the same events in the same order, an HTTP API change on one node reaches
members on the other, a node started late opens the whole table, and members on each node see
those on the others (presence heartbeats through Redis): a node killed with -9 loses its members
within the expiry bound, one stopped normally at once. The read-only mode when Redis fails is not
built yet (README, More than one machine)."""
import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

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


@pytest.fixture(scope="module")
def redis():
    directory = tempfile.mkdtemp(prefix="foldtable-redis-")
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", directory], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)
    shutil.rmtree(directory, ignore_errors=True)


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

"""History end to end: events carry their commit time; who changed what, and when, is read from
the store over HTTP (`GET /api/v1/sessions/NAME/events`), over the WebSocket (`history`) and with
`foldtable history`, also after a restart; viewers may read it, other sessions' tokens may not.

Binaries: FOLDTABLE_BIN (server) and FOLDTABLE_CLIENT_BIN (client), default .build/debug/."""
import asyncio
import json
import os
import re
import subprocess
import tempfile
import time

import pytest

from foldtabled import Client, Server, REPO
from test_api import call, token, SECRET

CLIENT = os.environ.get("FOLDTABLE_CLIENT_BIN", ".build/debug/foldtable")
CLIENT = CLIENT if os.path.isabs(CLIENT) else os.path.join(REPO, CLIENT)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns() % 10**12}"


def now_ms():
    return int(time.time() * 1000)


async def make_changes(url, session, name):
    """As `name`, in a new `session`: adds section Mac (expanded), then collapses it. Returns the
    two events as members received them (the session's epoch in `epoch` of each)."""
    client = await Client.join(url, session=session, name=name)
    await client.send({"type": "addSection", "key": "mac", "title": "Mac", "collapsed": False, "id": "a1"})
    await client.next(lambda m: m["type"] == "ack" and m["id"] == "a1")
    await client.send({"type": "toggle", "section": "mac", "id": "t1"})
    await client.next(lambda m: m["type"] == "ack" and m["id"] == "t1")
    events = [{**m, "epoch": client.welcome["epoch"]} for m in client.all if m["type"] == "event"]
    await client.close()
    return events


def test_events_carry_their_commit_time_and_history_over_http_lists_a_change_made_before_a_restart():
    data = tempfile.mkdtemp(prefix="foldtable-e2e-history-")
    session = unique("hist")
    started = now_ms()
    server = Server("--data-dir", data)
    try:
        events = run(make_changes(server.ws, session, "ana"))
    finally:
        server.stop()
    done = now_ms()
    assert [e["seq"] for e in events] == [1, 2]
    for event in events:
        assert started <= event["time"] <= done, event

    server = Server("--data-dir", data)
    try:
        status, _, body = call(server, "GET", f"/api/v1/sessions/{session}/events")
        assert status == 200, body
        assert body["next"] is None
        assert [e["seq"] for e in body["events"]] == [2, 1]
        newest = body["events"][0]
        assert newest["author"]["name"] == "ana" and newest["author"]["client"].startswith("c")
        assert newest["time"] == events[1]["time"]
        assert newest["change"] == {"type": "toggle", "section": "mac"}
        assert newest["collapsed"] == {"mac": True}
        assert body["events"][1]["change"]["type"] == "addSection"
        # A page at a time, older pages through `next`.
        status, _, page = call(server, "GET", f"/api/v1/sessions/{session}/events?limit=1")
        assert status == 200 and [e["seq"] for e in page["events"]] == [2] and page["next"] == 2
        status, _, page = call(server, "GET", f"/api/v1/sessions/{session}/events?limit=1&before={page['next']}")
        assert status == 200 and [e["seq"] for e in page["events"]] == [1] and page["next"] is None
        # Resuming after the restart replays the missed event with its time too.
        async def resume():
            client = await Client.join(server.ws, session=session, name="bo", since=1, epoch=events[0]["epoch"], create=False)
            replayed = await client.next(lambda m: m["type"] == "event")
            await client.close()
            return client.welcome, replayed
        welcome, replayed = run(resume())
        assert welcome["type"] == "resume", welcome
        assert replayed["seq"] == 2 and replayed["time"] == events[1]["time"]
    finally:
        server.stop()


def test_history_keeps_the_bound_past_checkpoints():
    # Checkpoints every 3 events, 1 kept for resume, 10 for history: 14 changes leave the
    # newest 10 + those after the checkpoint, never fewer than the bound.
    server = Server("--checkpoint-events", "3", "--history-events", "1", "--history-keep-events", "10")
    session = unique("keep")
    try:
        async def changes():
            client = await Client.join(server.ws, session=session, name="ana")
            await client.send({"type": "addSection", "key": "mac", "title": "Mac", "id": "a"})
            await client.next(lambda m: m["type"] == "ack" and m["id"] == "a")
            for n in range(13):
                await client.send({"type": "toggle", "section": "mac", "id": f"t{n}"})
                await client.next(lambda m, n=n: m["type"] == "ack" and m["id"] == f"t{n}")
            await client.close()
        run(changes())
        status, _, body = call(server, "GET", f"/api/v1/sessions/{session}/events?limit=200")
        assert status == 200, body
        seqs = [e["seq"] for e in body["events"]]
        assert seqs == list(range(14, 14 - len(seqs), -1)) and len(seqs) >= 10, seqs
        assert body["next"] is None
    finally:
        server.stop()


def test_bad_before_and_limit_get_400_naming_the_field():
    server = Server("--memory")
    try:
        for query, field in [("limit=0", "limit"), ("limit=201", "limit"), ("limit=x", "limit"), ("before=0", "before"),
                             ("before=-2", "before"), ("before=abc", "before"), ("before=", "before")]:
            status, _, body = call(server, "GET", f"/api/v1/sessions/demo/events?{query}")
            assert status == 400, (query, body)
            assert body["error"]["code"] == "invalid_value" and body["error"]["field"] == field, (query, body)
            assert field in body["error"]["message"]
        status, _, body = call(server, "GET", "/api/v1/sessions/nosuch/events")
        assert status == 404 and body["error"]["code"] == "session_not_found"
        status, _, _ = call(server, "POST", "/api/v1/sessions/demo/events", b"")
        assert status == 405
    finally:
        server.stop()


def test_history_over_the_websocket_newest_first_with_more():
    server = Server("--memory")
    session = unique("ws")
    try:
        async def scenario():
            events = await make_changes(server.ws, session, "ana")
            bo = await Client.join(server.ws, session=session, name="bo", create=False)
            await bo.send({"type": "history", "limit": 1, "id": "h1"})
            first = await bo.next(lambda m: m["type"] == "history")
            await bo.send({"type": "history", "before": 2, "id": "h2"})
            second = await bo.next(lambda m: m["type"] == "history")
            await bo.send({"type": "history", "limit": 500, "id": "h3"})
            refused = await bo.next(lambda m: m["type"] == "error")
            await bo.close()
            return events, first, second, refused
        events, first, second, refused = run(scenario())
        assert first["id"] == "h1" and first["more"] is True
        assert [e["seq"] for e in first["events"]] == [2]
        assert first["events"][0]["author"]["name"] == "ana" and first["events"][0]["time"] == events[1]["time"]
        assert second["id"] == "h2" and second["more"] is False and [e["seq"] for e in second["events"]] == [1]
        assert refused["id"] == "h3" and refused["code"] == "invalid_value" and refused["field"] == "limit"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    secret = tmp_path_factory.mktemp("secret") / "secret"
    secret.write_text(SECRET)
    s = Server("--token-secret-file", str(secret))
    yield s
    s.stop()


def test_viewers_may_read_history_and_other_sessions_need_their_own_token(token_server):
    s = token_server
    session = unique("tok")
    owner = token(s, "--session", session, "--role", "owner", "--name", "ana")
    viewer = token(s, "--session", session, "--role", "viewer", "--name", "vi")
    other = token(s, "--session", "other", "--role", "owner", "--name", "o")
    assert call(s, "POST", f"/api/v1/sessions?name={session}", b"", {"Authorization": f"Bearer {owner}"})[0] == 201
    assert call(s, "POST", f"/api/v1/sessions/{session}/collapse-all", b"", {"Authorization": f"Bearer {owner}"})[0] == 200
    status, _, body = call(s, "GET", f"/api/v1/sessions/{session}/events", headers={"Authorization": f"Bearer {viewer}"})
    assert status == 200, body
    assert [(e["seq"], e["author"]["name"], e["change"]["type"]) for e in body["events"]] == [(1, "ana", "setAll")]
    status, _, body = call(s, "GET", f"/api/v1/sessions/{session}/events", headers={"Authorization": f"Bearer {other}"})
    assert status == 403 and body["error"]["code"] == "forbidden"
    status, _, body = call(s, "GET", f"/api/v1/sessions/{session}/events")
    assert status == 401

    async def over_the_websocket():
        client = await Client.join(s.ws, session=session, name="vi", token=viewer, create=False)
        await client.send({"type": "history", "id": "h"})
        reply = await client.next(lambda m: m["type"] in ("history", "error"))
        await client.close()
        return reply
    reply = run(over_the_websocket())
    assert reply["type"] == "history" and [e["seq"] for e in reply["events"]] == [1], reply


def test_foldtable_history_prints_readable_lines_and_json():
    server = Server("--memory")
    session = unique("cli")
    try:
        run(make_changes(server.ws, session, "ana"))
        done = subprocess.run([CLIENT, "history", server.ws, session], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "TZ": "UTC"})
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 2, done.stdout
        assert re.fullmatch(r"\d\d:\d\d:\d\d ana collapsed Mac", lines[0]), lines
        assert re.fullmatch(r"\d\d:\d\d:\d\d ana added section Mac", lines[1]), lines
        # The clock time is the event's, in the local time zone (UTC here).
        done = subprocess.run([CLIENT, "history", server.ws, session, "--json", "--limit", "1"], capture_output=True, text=True,
                              timeout=20)
        assert done.returncode == 0, done.stderr
        page = json.loads(done.stdout)
        assert page["more"] is True and [e["seq"] for e in page["events"]] == [2]
        stamp = time.gmtime(page["events"][0]["time"] / 1000)
        assert lines[0].startswith(time.strftime("%H:%M:%S", stamp))
        done = subprocess.run([CLIENT, "history", server.ws, "nosuch"], capture_output=True, text=True, timeout=20)
        assert done.returncode == 1 and "nosuch" in done.stderr
    finally:
        server.stop()


def test_the_interactive_client_shows_the_history_live_with_H_and_goes_back_with_Escape():
    from test_terminal import Pane, join_command, tmux_server  # noqa: F401 (the fixture ends the tmux server)

    server = Server("--memory")

    async def scenario():
        bo = await Client.join(server.ws, name="bo", create=False)
        await bo.send({"type": "toggle", "section": "mac", "id": "bo-1"})
        await bo.next(lambda m: m["type"] == "ack")
        pane = Pane(join_command(server.ws))
        try:
            await pane.wait_for("connected", "Inventory")
            pane.keys("H")
            screen = await pane.wait_for("History, newest first")
            assert re.search(r"^ \d\d:\d\d:\d\d bo collapsed Mac", screen, re.M), screen
            assert "Inventory" not in screen  # the history stands in for the table
            # Live: a change made meanwhile goes on top.
            await bo.send({"type": "toggle", "section": "iphone", "id": "bo-2"})
            screen = await pane.wait(lambda t: re.search(r"^ \d\d:\d\d:\d\d bo expanded iPhone", t, re.M), what="the live line")
            lines = [line for line in screen.split("\n") if re.match(r" \d\d:\d\d:\d\d bo ", line)]
            assert "expanded iPhone" in lines[0] and "collapsed Mac" in lines[1], lines
            pane.keys("Escape")
            await pane.wait_for("Inventory", "iPhone 16 Pro")
            pane.keys("q")
            await pane.wait_for("EXIT=0")
        finally:
            pane.close()
            await bo.close()

    try:
        run(scenario())
    finally:
        server.stop()


def test_under_redis_events_carry_the_stream_entrys_time_on_every_node_and_history_is_what_the_session_keeps():
    from test_cluster import REDIS, RedisProcess
    if REDIS is None:
        pytest.skip("redis-server is not installed")
    redis = RedisProcess()
    nodes = [Server("--redis", redis.url, "--node-id", node, "--history-events", "5") for node in ("a", "b")]
    session = unique("redis")
    try:
        async def scenario():
            ana = await Client.join(nodes[0].ws, session=session, name="ana")
            bo = await Client.join(nodes[1].ws, session=session, name="bo")
            await ana.send({"type": "addSection", "key": "mac", "title": "Mac", "id": "a"})
            await ana.next(lambda m: m["type"] == "ack" and m["id"] == "a")
            for n in range(7):
                await ana.send({"type": "toggle", "section": "mac", "id": f"t{n}"})
                await ana.next(lambda m, n=n: m["type"] == "ack" and m["id"] == f"t{n}")
            seen_by_bo = await bo.next(lambda m: m["type"] == "event" and m["seq"] == 8)
            seen_by_ana = next(m for m in ana.all if m["type"] == "event" and m["seq"] == 8)
            await bo.send({"type": "history", "limit": 200, "id": "h"})
            history = await bo.next(lambda m: m["type"] == "history")
            await ana.close()
            await bo.close()
            return seen_by_ana, seen_by_bo, history
        started = now_ms()
        seen_by_ana, seen_by_bo, history = run(scenario())
        # The stream entry's time: the same on both nodes.
        assert seen_by_ana["time"] == seen_by_bo["time"] and started - 1000 <= seen_by_ana["time"] <= now_ms() + 1000
        # The last --history-events events, newest first, nothing older kept.
        assert [e["seq"] for e in history["events"]] == [8, 7, 6, 5, 4] and history["more"] is False
        assert history["events"][0]["time"] == seen_by_ana["time"] and history["events"][0]["author"]["name"] == "ana"
        status, _, body = call(nodes[1], "GET", f"/api/v1/sessions/{session}/events?limit=2")
        assert status == 200 and [e["seq"] for e in body["events"]] == [8, 7] and body["next"] == 7
    finally:
        for node in nodes:
            node.stop()
        redis.close()

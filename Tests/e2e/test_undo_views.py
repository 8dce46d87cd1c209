"""Undo, redo and private views against the real binary, with real WebSocket clients.

Every undo is checked against the session's own export (the whole table: sections, order,
text, collapsed states, rows, options), taken before the change, after it, after its undo and
after its redo."""
import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import os
import time

import pytest

from foldtabled import Client, LoggedServer, Server


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def export(server, name):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", f"/api/v1/sessions/{name}")
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    assert response.status == 200, body
    return body


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    assert s.stop() == 0


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns()}"


async def change(client, message, change_id):
    await client.send({**message, "id": change_id})
    reply = await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == change_id)
    return reply


async def seeded(server, name):
    """Two members of a fresh session holding sections a (2 rows, expanded), b (1 row, collapsed), c (empty)."""
    ana = await Client.join(server.ws, session=name, name="ana", idScope="ana-scope-0123456789")
    ben = await Client.join(server.ws, session=name, name="ben", idScope="ben-scope-0123456789")
    for n, msg in enumerate([
        {"type": "addSection", "key": "a", "title": "Alpha"},
        {"type": "addSection", "key": "b", "title": "Beta", "collapsed": True},
        {"type": "addSection", "key": "c", "title": "Province\nSichuan", "detail": "two lines"},
        {"type": "addRow", "section": "a", "key": "a1", "label": "one", "value": "1"},
        {"type": "addRow", "section": "a", "key": "a2", "label": "two", "value": "2", "detail": "d"},
        {"type": "addRow", "section": "b", "key": "b1", "label": "three"},
    ]):
        assert (await change(ben, msg, f"seed{n}"))["type"] == "ack"
    return ana, ben


CHANGES = [
    {"type": "toggle", "section": "a"},
    {"type": "set", "section": "b", "collapsed": False},
    {"type": "setAll", "collapsed": True},
    {"type": "reveal", "row": "b1"},
    {"type": "addSection", "title": "Delta", "index": 1},
    {"type": "removeSection", "section": "a"},
    {"type": "updateSection", "section": "c", "set": {"title": "Other\ntitle", "footer": "f"}},
    {"type": "moveSection", "section": "c", "index": 0},
    {"type": "addRow", "section": "b", "label": "four", "value": "4", "index": 0},
    {"type": "removeRow", "row": "a1"},
    {"type": "updateRow", "row": "a2", "set": {"value": "deux", "detail": None}},
    {"type": "moveRow", "row": "a1", "section": "b", "index": 1},
    {"type": "setOptions", "options": {"accordion": True, "collapsedIndicator": ">"}},
    {"type": "importRows", "section": "a", "replace": True, "rows": [{"label": "x"}, {"label": "y", "value": "v"}]},
    {"type": "importRows", "section": "b", "replace": False, "rows": [{"label": "z"}]},
]


@pytest.mark.parametrize("message", CHANGES, ids=[c["type"] + str(i) for i, c in enumerate(CHANGES)])
def test_undo_and_redo_of_every_kind_of_change_restore_the_table_exactly(server, message):
    async def scenario():
        name = unique("undo")
        ana, ben = await seeded(server, name)
        before = export(server, name)
        reply = await change(ana, message, "c1")
        assert reply["type"] == "ack", reply
        after = export(server, name)
        assert after != before
        undo = await change(ana, {"type": "undo"}, "u1")
        assert undo["type"] == "ack", undo
        # Everyone sees the undo as an event naming the change it takes back.
        event = await ben.next(lambda m: m["type"] == "event" and m["seq"] == undo["seq"])
        assert event["change"]["type"] == "undo" and event["change"]["of"] == reply["seq"]
        assert "expect" not in event["change"]
        assert export(server, name) == before
        redo = await change(ana, {"type": "redo"}, "r1")
        assert redo["type"] == "ack", redo
        assert export(server, name) == after
        # A retry of the same undo id is acknowledged with its seq, not applied again.
        again = await change(ana, {"type": "undo"}, "u1")
        assert again == {"type": "ack", "id": "u1", "seq": undo["seq"]}
        assert export(server, name) == after
        await ana.close()
        await ben.close()
    run(scenario())


def test_an_undo_of_a_row_someone_else_edited_since_is_refused_and_changes_nothing(server):
    async def scenario():
        name = unique("conflict")
        ana, ben = await seeded(server, name)
        assert (await change(ana, {"type": "updateRow", "row": "a1", "set": {"value": "mine"}}, "c1"))["type"] == "ack"
        assert (await change(ben, {"type": "updateRow", "row": "a1", "set": {"value": "theirs"}}, "c2"))["type"] == "ack"
        table = export(server, name)
        refused = await change(ana, {"type": "undo"}, "u1")
        assert refused["type"] == "error" and refused["code"] == "undo_conflict", refused
        assert export(server, name) == table
        await ana.close()
        await ben.close()
    run(scenario())


def test_undo_takes_back_only_the_senders_own_changes_and_says_when_none_are_left(server):
    async def scenario():
        name = unique("own")
        ana, ben = await seeded(server, name)
        # ana made none of the seed changes.
        refused = await change(ana, {"type": "undo"}, "u1")
        assert refused["type"] == "error" and refused["code"] == "nothing_to_undo"
        assert (await change(ana, {"type": "addRow", "section": "c", "key": "mine", "label": "mine"}, "c1"))["type"] == "ack"
        assert (await change(ben, {"type": "addRow", "section": "c", "key": "his", "label": "his"}, "c2"))["type"] == "ack"
        assert (await change(ana, {"type": "undo"}, "u2"))["type"] == "ack"
        rows = [r["key"] for s in export(server, name)["sections"] if s["key"] == "c" for r in s.get("rows", [])]
        assert rows == ["his"]
        refused = await change(ana, {"type": "redo"}, "r0")
        assert refused["type"] == "ack"
        refused = await change(ana, {"type": "redo"}, "r1")
        assert refused["type"] == "error" and refused["code"] == "nothing_to_redo"
        await ana.close()
        await ben.close()
    run(scenario())


def test_a_private_view_changes_only_what_its_member_sees_and_back_to_shared_shows_the_shared_state(server):
    async def scenario():
        name = unique("view")
        first, ben = await seeded(server, name)
        await first.close()
        # Joined after the seeding: she holds the rows of the expanded sections only.
        ana = await Client.join(server.ws, session=name, name="ana")
        table = export(server, name)
        await ana.send({"type": "view", "mode": "private"})
        view = await ana.next(lambda m: m["type"] == "view")
        assert view == {"type": "view", "mode": "private", "collapsed": {"a": False, "b": True, "c": False}}
        # Private: b expands for ana alone, with its rows; nobody hears of it; the table is unchanged.
        await ana.send({"type": "toggle", "section": "b", "id": "p1"})
        changed = await ana.next(lambda m: m["type"] == "viewChanged")
        assert changed == {"type": "viewChanged", "id": "p1", "collapsed": {"b": False}}
        rows = await ana.next(lambda m: m["type"] == "rows" and m["section"] == "b")
        assert [r["key"] for r in rows["rows"]] == ["b1"]
        assert export(server, name) == table
        # ben's toggle of the shared table reaches ana as an event; her view keeps a as it was.
        assert (await change(ben, {"type": "toggle", "section": "a"}, "t1"))["type"] == "ack"
        event = await ana.next(lambda m: m["type"] == "event" and m["change"]["type"] == "toggle")
        assert event["collapsed"] == {"a": True}
        with pytest.raises(TimeoutError):
            await ben.next(lambda m: m["type"] in ("viewChanged", "view"), timeout=0.5)
        # A section added meanwhile joins ana's view in the state the table gave it.
        assert (await change(ben, {"type": "addSection", "key": "n", "title": "New", "collapsed": True}, "t2"))["type"] == "ack"
        await ana.send({"type": "setAll", "collapsed": True, "id": "p2"})
        changed = await ana.next(lambda m: m["type"] == "viewChanged")
        assert changed["collapsed"] == {"a": True, "b": True, "c": True}
        await ana.send({"type": "view", "mode": "shared"})
        assert await ana.next(lambda m: m["type"] == "view") == {"type": "view", "mode": "shared"}
        shared = {s["key"]: s["collapsed"] for s in export(server, name)["sections"]}
        assert shared == {"a": True, "b": True, "c": False, "n": True}
        await ana.close()
        await ben.close()
    run(scenario())


def test_a_private_view_is_restored_from_what_the_client_saved(server):
    async def scenario():
        name = unique("saved")
        first, ben = await seeded(server, name)
        await first.close()
        ana = await Client.join(server.ws, session=name, name="ana")
        await ana.send({"type": "view", "mode": "private", "collapsed": {"a": True, "b": False, "gone": False}})
        view = await ana.next(lambda m: m["type"] == "view")
        assert view["collapsed"] == {"a": True, "b": False, "c": False}
        rows = await ana.next(lambda m: m["type"] == "rows" and m["section"] == "b")
        assert rows["final"]
        await ana.close()
        await ben.close()
    run(scenario())


# MARK: - A token user's private view, stored with the session

SECRET = os.urandom(32).hex()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(session, sub, role="owner"):
    """An HS256 token signed here, as RFC 7519 describes it (independent of the server's code)."""
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"sub": sub, "sessions": [session], "role": role, "exp": int(time.time()) + 3600}
    signing_input = header + "." + b64url(json.dumps(claims, separators=(",", ":")).encode())
    return signing_input + "." + b64url(hmac.new(SECRET.encode(), signing_input.encode(), hashlib.sha256).digest())


@pytest.fixture
def token_args(tmp_path):
    secret = tmp_path / "token.secret"
    secret.write_text(SECRET + "\n")
    return ("--data-dir", str(tmp_path / "data"), "--token-secret-file", str(secret))


async def private_view_then_leave(server, name):
    """ana (a token user) makes sections a (expanded) and b (collapsed), switches to her own
    view, collapses a in it and leaves; ben, in the shared view, stays in the shared state."""
    ana = await Client.join(server.ws, session=name, name="ana", token=token(name, "ana"))
    for n, msg in enumerate([{"type": "addSection", "key": "a", "title": "Alpha"},
                             {"type": "addSection", "key": "b", "title": "Beta", "collapsed": True},
                             {"type": "addRow", "section": "a", "key": "a1", "label": "one"}]):
        assert (await change(ana, msg, f"seed{n}"))["type"] == "ack"
    await ana.send({"type": "view", "mode": "private"})
    assert (await ana.next(lambda m: m["type"] == "view"))["collapsed"] == {"a": False, "b": True}
    await ana.send({"type": "toggle", "section": "a", "id": "p1"})
    assert await ana.next(lambda m: m["type"] == "viewChanged") == {"type": "viewChanged", "id": "p1", "collapsed": {"a": True}}
    await ana.close()


async def rejoin_finds_private_view(server, name):
    ana = await Client.join(server.ws, session=name, name="ana", token=token(name, "ana", role="viewer"))
    assert ana.welcome["type"] == "welcome"
    # Right after the welcome: her view, before anything else.
    assert await ana.next() == {"type": "view", "mode": "private", "collapsed": {"a": True, "b": True}}
    # The shared state is untouched, and someone else gets no view of hers.
    assert [s["collapsed"] for s in ana.welcome["table"]["sections"]] == [False, True]
    ben = await Client.join(server.ws, session=name, name="ben", token=token(name, "ben", role="viewer"))
    with pytest.raises(TimeoutError):
        await ben.next(lambda m: m["type"] == "view", timeout=0.5)
    await ana.close()
    await ben.close()


def test_a_token_users_private_view_survives_a_restart_of_the_server(token_args):
    name = unique("kept")
    server = Server(*token_args)
    run(private_view_then_leave(server, name))
    # Nothing was logged for the view (no event): the clean stop saves it.
    assert server.stop() == 0
    server = Server(*token_args)
    try:
        run(rejoin_finds_private_view(server, name))
    finally:
        assert server.stop() == 0


def test_a_private_view_saved_when_its_session_was_evicted_survives_a_crash(token_args, tmp_path):
    name = unique("evicted")
    server = LoggedServer(*token_args, "--idle-evict-secs", "1", "--log-level", "info", stderr_path=tmp_path / "first.stderr")
    run(private_view_then_leave(server, name))
    run(server.wait_for_log("session_evicted", timeout=10))
    # A crash after the eviction: what the eviction saved is all there is.
    server.kill9()
    server = LoggedServer(*token_args, stderr_path=tmp_path / "second.stderr")
    try:
        run(rejoin_finds_private_view(server, name))
    finally:
        assert server.stop() == 0

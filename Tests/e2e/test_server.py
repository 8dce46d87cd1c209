"""End-to-end tests of foldtabled: the real binary on port 0, real WebSocket clients."""
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from foldtabled import BIN, Client, Server, frame, http_get, raw_ws, read_close_code


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def web_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("web")
    (root / "index.html").write_text("<!doctype html><title>Foldtable</title><script type=module src=/app.js></script>")
    (root / "app.js").write_text("export const app = 1;\n")
    (root / "style.css").write_text("body{}\n")
    secret = tmp_path_factory.mktemp("outside") / "secret.txt"
    secret.write_text("TOP-SECRET")
    os.symlink(secret, root / "link.txt")
    (root / ".hidden").write_text("TOP-SECRET")
    return root


@pytest.fixture(scope="module")
def server(web_root):
    s = Server("--demo-large-rows", "20000", web_root=str(web_root))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def busy_server(web_root):
    # The stream timeout is raised from 15 s: a Python client on a loaded 2-core CI machine can take
    # longer than that to read 100,000 rows, and these tests are about busy state, not slow readers.
    s = Server("--busy-threshold-ms", "0", "--demo-large-rows", "100000", "--stream-timeout-secs", "120",
               web_root=str(web_root))
    yield s
    assert s.stop() == 0


def test_several_clients_see_the_same_toggle_with_the_same_seq_and_map(server):
    async def scenario():
        session = f"toggle-{time.monotonic_ns()}"
        clients = [await Client.join(server.ws, session=session, name=f"n{i}") for i in range(5)]
        await clients[2].send({"type": "addSection", "title": "Mac", "key": "mac", "id": "a1"})
        await clients[2].next(lambda m: m["type"] == "ack")
        await clients[2].send({"type": "toggle", "title": "Mac", "id": "t1"})
        events = [await c.next(lambda m: m["type"] == "event" and m["change"]["type"] == "toggle") for c in clients]
        ack = await clients[2].next(lambda m: m["type"] == "ack" and m["id"] == "t1")
        assert all(e == events[0] for e in events)
        assert events[0]["seq"] == 2 and ack["seq"] == 2
        assert events[0]["collapsed"] == {"mac": True}
        assert events[0]["by"]["name"] == "n2"
        for c in clients:
            await c.close()
    run(scenario())


def test_the_demo_session_exists_with_its_examples(server):
    async def scenario():
        c = await Client.join(server.ws)
        sections = {s["key"]: s for s in c.welcome["table"]["sections"]}
        assert {"mac", "ipad", "iphone", "guangdong", "friends", "empty", "big"} <= set(sections)
        assert sections["big"]["rowCount"] == 20000
        assert sections["empty"]["rowCount"] == 0
        assert "\n" in sections["guangdong"]["title"]
        assert c.welcome["table"]["options"]["collapsedIndicator"] == "+"
        await c.close()
    run(scenario())


def test_busy_is_shown_around_the_expansion_of_a_large_section(busy_server):
    async def scenario():
        session_clients = [await Client.join(busy_server.ws, name=f"w{i}") for i in range(3)]
        a = session_clients[0]
        big = next(s for s in a.welcome["table"]["sections"] if s["key"] == "big")
        if not big["collapsed"]:
            await a.send({"type": "set", "section": "big", "collapsed": True})
            for c in session_clients:
                await c.next(lambda m: m["type"] == "event" and m["collapsed"].get("big") is True, timeout=20)
        await a.send({"type": "set", "section": "big", "collapsed": False, "id": "open"})

        async def observe(c):
            # Members read concurrently: busy ends only when the rows reached every member.
            event = await c.next(lambda m: m["type"] == "event" and m["collapsed"].get("big") is False, timeout=20)
            await c.next(lambda m: m["type"] == "busy" and m["busy"] is True, timeout=20)
            keys = []
            while True:
                chunk = await c.next(lambda m: m["type"] == "rows" and m["section"] == "big", timeout=20)
                assert chunk["seq"] == event["seq"] and chunk["from"] == len(keys)
                keys += [r["key"] for r in chunk["rows"]]
                if chunk["final"]:
                    break
            assert len(keys) == 100000 == chunk["total"]
            assert keys[0] == "big-0" and keys[-1] == "big-99999"
            await c.next(lambda m: m["type"] == "busy" and m["busy"] is False, timeout=20)
            assert max(len(json.dumps(m)) for m in c.all if m["type"] == "rows") < 100_000
        await asyncio.gather(*(observe(c) for c in session_clients))
        await a.send({"type": "set", "section": "big", "collapsed": True})
        for c in session_clients:
            await c.close()
    run(scenario())


def test_a_second_toggle_of_a_busy_section_waits_and_no_rows_follow_the_collapse(busy_server):
    async def scenario():
        a = await Client.join(busy_server.ws, session="double-tap-src", name="a")
        await a.close()
        a = await Client.join(busy_server.ws, name="tapper")
        b = await Client.join(busy_server.ws, name="watcher")
        big = next(s for s in a.welcome["table"]["sections"] if s["key"] == "big")
        if not big["collapsed"]:
            await a.send({"type": "set", "section": "big", "collapsed": True, "id": "pre"})
            await a.next(lambda m: m["type"] == "ack" and m["id"] == "pre", timeout=20)
        # Double tap: expand then collapse at once.
        await a.send({"type": "toggle", "section": "big", "id": "tap1"})
        await a.send({"type": "toggle", "section": "big", "id": "tap2"})
        async def observe(c):
            # Every member must keep reading: the collapse waits until the rows reached everyone.
            expand = await c.next(lambda m: m["type"] == "event" and m.get("id") == "tap1", timeout=20)
            collapse = await c.next(lambda m: m["type"] == "event" and m.get("id") == "tap2", timeout=30)
            assert expand["collapsed"] == {"big": False} and collapse["collapsed"] == {"big": True}
            assert collapse["seq"] == expand["seq"] + 1
            order = [m for m in c.all if m.get("section") == "big" or m["type"] == "event"]
            after = order[order.index(collapse) + 1:]
            assert not [m for m in after if m["type"] == "rows"], "rows of a stale expansion arrived after the collapse"
            finals = [m for m in order[:order.index(collapse)] if m["type"] == "rows" and m["final"]]
            assert finals, "the expansion completed before the collapse was applied"
        await asyncio.gather(observe(a), observe(b))
        await a.close()
        await b.close()
    run(scenario())


def test_rows_go_on_expand_only_to_members_that_lack_them(server):
    async def scenario():
        session = f"held-{time.monotonic_ns()}"
        a = await Client.join(server.ws, session=session, name="a")
        await a.send({"type": "addSection", "title": "Fruit", "key": "fruit", "collapsed": True, "id": "s"})
        for i, label in enumerate(["Apple", "Pear", "Plum"]):
            await a.send({"type": "addRow", "section": "fruit", "key": f"r{i}", "label": label, "id": f"r{i}"})
        await a.next(lambda m: m["type"] == "ack" and m["id"] == "r2")
        # b joins with Fruit collapsed: its welcome has the row count, not the rows.
        b = await Client.join(server.ws, session=session, name="b")
        fruit = next(s for s in b.welcome["table"]["sections"] if s["key"] == "fruit")
        assert fruit["rowCount"] == 3 and "rows" not in fruit
        await a.send({"type": "toggle", "section": "fruit", "id": "open1"})
        opened = await b.next(lambda m: m["type"] == "event" and m.get("id") == "open1")
        rows = await b.next(lambda m: m["type"] == "rows" and m["section"] == "fruit")
        assert rows["seq"] == opened["seq"] and [r["label"] for r in rows["rows"]] == ["Apple", "Pear", "Plum"]
        # a saw every row added: it gets the event and no rows.
        await a.next(lambda m: m["type"] == "ack" and m["id"] == "open1")
        await a.send({"type": "toggle", "section": "fruit", "id": "close"})
        await a.send({"type": "toggle", "section": "fruit", "id": "open2"})
        for c in (a, b):
            await c.next(lambda m: m["type"] == "event" and m.get("id") == "open2")
            # A refused change is a fence: its error reply is queued behind any rows of open2.
            await c.send({"type": "addRow", "section": "no-such-section", "label": "x", "id": "fence"})
            await c.next(lambda m: m["type"] == "error" and m.get("id") == "fence")
        assert not [m for m in a.all if m["type"] == "rows"], "rows were sent to a member that held them"
        assert len([m for m in b.all if m["type"] == "rows"]) == 1, "rows were sent again to a member that got them"
        await a.close()
        await b.close()
    run(scenario())


def test_find_returns_rows_of_sections_nobody_loaded_and_refuses_a_bad_query(server):
    async def scenario():
        a = await Client.join(server.ws, session="demo", name="finder")
        await a.send({"type": "find", "q": "LESHAN", "id": "f1"})
        found = await a.next(lambda m: m["type"] == "found")
        assert found == {"type": "found", "id": "f1", "q": "LESHAN", "truncated": False,
                         "rows": [{"section": "sichuan", "row": "sichuan-3", "label": "Leshan", "value": ""}]}
        await a.send({"type": "find", "q": "a", "limit": 3, "id": "f2"})
        found = await a.next(lambda m: m["type"] == "found")
        assert len(found["rows"]) == 3 and found["truncated"]
        await a.send({"type": "find", "q": "", "id": "f3"})
        error = await a.next(lambda m: m["type"] == "error")
        assert error["code"] == "invalid_value" and error["field"] == "q" and error["id"] == "f3"
        await a.close()
        # Before joining there is nothing to search.
        b = await connect(server.ws)
        await b.send(json.dumps({"type": "find", "q": "x"}))
        assert json.loads(await b.recv())["code"] == "not_joined"
        await b.close()
    run(scenario())


def names(members):
    return {p["name"] for p in members or []}


def test_presence_reports_joins_and_leaves_with_counts(server):
    async def scenario():
        a = await Client.join(server.ws, session="presence", name="ana")
        b = await Client.join(server.ws, session="presence", name="bo")
        # Both joins may fall in one interval: the diff lists whoever joined in it.
        joined = await a.next(lambda m: m["type"] == "presence" and "bo" in names(m.get("joined")))
        assert joined["count"] == 2 and joined["complete"]
        assert {"client": b.welcome["client"], "name": "bo"} in joined["joined"]
        assert {p["name"] for p in b.welcome["presence"]} == {"ana", "bo"} and b.welcome["presenceCount"] == 2
        await b.close()
        left = await a.next(lambda m: m["type"] == "presence" and m.get("left"))
        assert left["left"] == [b.welcome["client"]] and left["count"] == 1
        await a.close()
    run(scenario())


def test_a_join_storm_reaches_each_member_as_a_few_diffs_not_one_message_per_join(server):
    async def scenario():
        session = f"storm-{time.monotonic_ns()}"
        started = time.monotonic()
        first = await Client.join(server.ws, session=session, name="first")
        others = await asyncio.gather(*(Client.join(server.ws, session=session, name=f"n{i}") for i in range(60)))
        # Everyone has heard of all 61 once a diff says so; the first member got a few diffs
        # (one per 100 ms interval), not 60 presence messages.
        last = await first.next(lambda m: m["type"] == "presence" and m["count"] == 61, timeout=10)
        elapsed = time.monotonic() - started
        assert last["complete"]
        diffs = [m for m in first.all if m["type"] == "presence"]
        # A diff goes out at the end of an interval that a join started, so k diffs take at least
        # k intervals: bounded by how long the storm took here, not by a guess at the machine's
        # speed (about 0.1 s and one diff on a quiet machine; a slow one may spread the joins).
        assert len(diffs) <= elapsed / 0.1 + 1, (len(diffs), elapsed)
        heard = set()
        for d in diffs:
            heard |= names(d.get("joined"))
        assert heard - {"first"} == {f"n{i}" for i in range(60)}
        for c in [first, *others]:
            await c.close()
    run(scenario())


def test_a_vanished_client_leaves_within_the_hangup_time(web_root):
    s = Server("--ping-interval-secs", "1", "--hangup-secs", "2", web_root=str(web_root))
    try:
        async def scenario():
            watcher = await Client.join(s.ws, session="vanish", name="watcher")
            sock, response = raw_ws(s.port)
            assert " 101 " in response
            sock.sendall(frame(json.dumps({"type": "join", "session": "vanish", "name": "ghost", "create": True}).encode()))
            joined = await watcher.next(lambda m: m["type"] == "presence" and "ghost" in names(m.get("joined")))
            ghost = next(p["client"] for p in joined["joined"] if p["name"] == "ghost")
            started = time.monotonic()
            # The ghost never answers pings (a raw socket that stops reading and writing);
            # the watcher keeps answering, so only the ghost is hung up.
            await watcher.next(lambda m: m["type"] == "presence" and ghost in m.get("left", []), timeout=10)
            assert time.monotonic() - started < 6
            sock.close()
            await watcher.close()
        run(scenario())
    finally:
        assert s.stop() == 0


def test_malformed_and_hostile_messages_get_error_replies_and_the_connection_stays_usable(server):
    async def scenario():
        a = await Client.join(server.ws, session="hostile", name="mallory")
        b = await Client.join(server.ws, session="hostile", name="bystander")
        cases = [
            ("{not json", "bad_json"),
            ('{"type":"toggle","section":"x"} trailing', "bad_json"),
            ("[" * 10000 + "]" * 10000, "too_deep"),
            (json.dumps({"type": "launch"}), "unknown_type"),
            (json.dumps({"type": "toggle"}), "missing_field"),
            (json.dumps({"type": "set", "section": "x", "collapsed": "yes"}), "wrong_type"),
            (json.dumps({"type": "toggle", "section": "nope", "id": "e1"}), "unknown_section"),
            (json.dumps({"type": "reveal", "row": "nope"}), "unknown_row"),
            (json.dumps({"type": "toggle", "section": "x" * 9000}), "too_long"),
            (json.dumps({"type": "join", "session": "hostile", "name": "again"}), "already_joined"),
        ]
        for text, code in cases:
            await a.ws.send(text)
            error = await a.next(lambda m: m["type"] == "error")
            assert error["code"] == code, (text[:40], error)
        await a.send({"type": "addSection", "title": "Still here", "id": "ok"})
        assert (await a.next(lambda m: m["type"] == "ack"))["id"] == "ok"
        event = await b.next(lambda m: m["type"] == "event")
        assert event["change"]["title"] == "Still here"
        assert not [m for m in b.all if m["type"] == "error"]
        await a.close()
        await b.close()
    run(scenario())


def test_protocol_violations_close_with_documented_codes_and_others_keep_being_served(server):
    async def scenario():
        bystander = await Client.join(server.ws, session="violations", name="bystander")
        for payload, opcode, expected in [
            (b"\x00\x01binary", 2, 1003),
            (b'{"type":"list","pad":"' + b"x" * 70000 + b'"}', 1, 1009),
            (b'{"type":"list","x":"\xc3\x28"}', 1, 1007),
        ]:
            sock, response = raw_ws(server.port)
            assert " 101 " in response
            sock.sendall(frame(payload, opcode=opcode))
            assert read_close_code(sock) == expected
            sock.close()
        await bystander.send({"type": "addSection", "title": "alive", "id": "alive"})
        assert (await bystander.next(lambda m: m["type"] == "ack"))["id"] == "alive"
        await bystander.close()
    run(scenario())
    assert server.alive()


def test_a_connection_that_never_joins_is_closed_at_the_deadline(web_root):
    s = Server("--join-timeout-ms", "300", web_root=str(web_root))
    try:
        sock, _ = raw_ws(s.port)
        started = time.monotonic()
        for _ in range(20):  # a flood of other messages must not extend the deadline
            sock.sendall(frame(b'{"type":"list"}'))
        assert read_close_code(sock) == 4001
        assert time.monotonic() - started < 3
    finally:
        assert s.stop() == 0


def test_a_dropped_client_resumes_from_its_last_sequence_number(server):
    async def scenario():
        a = await Client.join(server.ws, session="resume", name="ana")
        await a.send({"type": "addSection", "title": "One", "key": "one", "id": "r1"})
        ack = await a.next(lambda m: m["type"] == "ack")
        epoch = a.welcome["epoch"]
        await a.close()
        b = await Client.join(server.ws, session="resume", name="bo")
        await b.send({"type": "addRow", "section": "one", "label": "x", "id": "r2"})
        await b.next(lambda m: m["type"] == "ack")
        await b.send({"type": "toggle", "section": "one", "id": "r3"})
        await b.next(lambda m: m["type"] == "ack")
        back = await Client.join(server.ws, session="resume", name="ana", since=ack["seq"], epoch=epoch)
        assert back.welcome["type"] == "resume" and back.welcome["seq"] == ack["seq"] + 2
        events = [await back.next(lambda m: m["type"] == "event") for _ in range(2)]
        assert [e["seq"] for e in events] == [ack["seq"] + 1, ack["seq"] + 2]
        stale = await Client.join(server.ws, session="resume", name="old", since=1, epoch="not-this-one")
        assert stale.welcome["type"] == "welcome" and stale.welcome["recovered"] is False
        for c in (b, back, stale):
            await c.close()
    run(scenario())


def test_a_retried_change_id_is_applied_once_and_acknowledged_again(server):
    async def scenario():
        a = await Client.join(server.ws, session="retry", name="ana")
        for _ in range(3):
            await a.send({"type": "addSection", "title": "Once", "id": "same"})
        acks = [await a.next(lambda m: m["type"] == "ack") for _ in range(3)]
        assert len({ack["seq"] for ack in acks}) == 1
        # A refused change is a fence: its error reply is queued behind the events of the retries,
        # so a second event, had there been one, is in by then (however slow the machine).
        await a.send({"type": "toggle", "section": "no-such-section", "id": "fence"})
        await a.next(lambda m: m["type"] == "error" and m.get("id") == "fence")
        assert len([m for m in a.all if m["type"] == "event"]) == 1
        await a.close()
    run(scenario())


def test_list_shows_sessions_with_member_counts(server):
    async def scenario():
        a = await Client.join(server.ws, session="listed", name="ana")
        ws = await connect(server.ws)
        await ws.send(json.dumps({"type": "list"}))
        reply = json.loads(await ws.recv())
        assert {"name": "listed", "members": 1} in reply["sessions"]
        assert any(s["name"] == "demo" for s in reply["sessions"])
        await ws.close()
        await a.close()
    run(scenario())


def test_a_cross_origin_upgrade_is_refused_before_the_handshake(server):
    for origin in ("https://evil.example", "null", f"http://127.0.0.1:{server.port + 1}"):
        sock, response = raw_ws(server.port, headers=[f"Origin: {origin}"])
        assert " 101 " not in response, origin
        sock.close()
    sock, response = raw_ws(server.port, headers=[f"Origin: http://127.0.0.1:{server.port}"])
    assert " 101 " in response
    sock.close()


def test_an_upgrade_on_another_path_is_refused(server):
    sock, response = raw_ws(server.port, path="/elsewhere")
    assert " 101 " not in response
    sock.close()


def test_static_files_are_served_from_the_web_root_only(server):
    status, headers, body = http_get(server.port, "/")
    assert status == 200 and headers["content-type"].startswith("text/html") and b"Foldtable" in body
    assert "content-security-policy" in headers
    status, headers, _ = http_get(server.port, "/app.js")
    assert status == 200 and "javascript" in headers["content-type"]
    status, headers, _ = http_get(server.port, "/style.css")
    assert status == 200 and headers["content-type"].startswith("text/css")
    status, _, body = http_get(server.port, "/s/demo")
    assert status == 200 and b"Foldtable" in body
    assert http_get(server.port, "/missing.html")[0] == 404
    for path in ["/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/%252e%252e/etc/passwd", "/app.js%00.html",
                 "/%c0%ae%c0%ae/etc/passwd", "//etc/passwd", "/link.txt", "/.hidden", "/.git/config", "/" + "a" * 8000]:
        status, _, body = http_get(server.port, path)
        assert status in (400, 403, 404, 414, 431) or status == 0, (path, status)
        assert b"TOP-SECRET" not in body and b"root:" not in body, path
    assert server.alive()


def test_sigterm_closes_clients_with_1001_and_exits_zero(web_root):
    s = Server(web_root=str(web_root))

    async def scenario():
        c = await Client.join(s.ws)
        s.proc.send_signal(15)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await c.ws.recv()
        assert closed.value.rcvd.code == 1001
    run(scenario())
    assert s.proc.wait(10) == 0


@pytest.mark.parametrize("args,words", [
    (["--port", "99999"], "--port"),
    (["--tls-cert", "/nonexistent.pem"], "--tls-key"),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "/nonexistent"),
    (["--web-root", "/nonexistent-dir"], "web-root"),
    (["--frobnicate", "1"], "frobnicate"),
])
def test_bad_settings_exit_nonzero_with_one_clear_line(args, words):
    result = subprocess.run([BIN, "--port", "0", *args], capture_output=True, text=True, timeout=10)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert "listening" not in result.stdout


def test_help_lists_every_option_with_its_default():
    result = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0
    for flag in ["--host", "--port", "--web-root", "--busy-threshold-ms", "--tls-cert", "--tls-key", "--memory", "--max-message-bytes"]:
        assert flag in result.stdout


def test_a_client_that_stops_reading_is_closed_as_slow_and_others_are_unaffected(web_root):
    # The cap must hold one commit's burst: the store commits the 50 changes of a batch together
    # and their events (about 45 KB) reach every member at once.
    s = Server("--max-queue-bytes", "65536", "--send-stall-secs", "30", "--change-rate", "1000000", "--change-burst", "1000000",
               web_root=str(web_root))
    try:
        async def scenario():
            slow, response = raw_ws(s.port)
            assert " 101 " in response
            slow.sendall(frame(json.dumps({"type": "join", "session": "slow", "name": "sloth", "create": True}).encode()))
            author = await Client.join(s.ws, session="slow", name="author")
            reader = await Client.join(s.ws, session="slow", name="reader")
            await author.send({"type": "addSection", "title": "x" * 1000, "key": "k", "id": "setup"})
            await author.next(lambda m: m["type"] == "ack")
            closed_code = None
            for batch in range(400):
                for i in range(50):
                    await author.send({"type": "updateSection", "section": "k", "set": {"detail": f"{batch}-{i}-" + "y" * 900}})
                last = lambda m: m["type"] == "event" and m["change"].get("set", {}).get("detail", "").startswith(f"{batch}-49-")
                await asyncio.gather(reader.next(last, timeout=10), author.next(last, timeout=10))
                author.inbox.clear()
                reader.inbox.clear()
                presence = [m for m in reader.all if m["type"] == "presence" and m.get("left")]
                if presence:
                    closed_code = "left"
                    break
            if closed_code is None:
                # Leaves reach members as a presence diff at the end of its interval (100 ms):
                # one that happened during the last batch may still be on its way.
                with contextlib.suppress(TimeoutError):
                    await reader.next(lambda m: m["type"] == "presence" and m.get("left"), timeout=3)
                    closed_code = "left"
            assert closed_code == "left", "the slow reader was never closed"
            assert read_close_code(slow, timeout=5) in (4000, None)
            rss_kb = int(open(f"/proc/{s.proc.pid}/status").read().split("VmRSS:")[1].split()[0])
            assert rss_kb < 200_000, rss_kb
            slow.close()
            await author.close()
            await reader.close()
        run(scenario())
        assert s.alive()
    finally:
        assert s.stop() == 0


def test_with_a_certificate_the_same_port_speaks_wss(web_root, tmp_path):
    import ssl
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    proc = subprocess.Popen([BIN, "--port", "0", "--web-root", str(web_root), "--tls-cert", str(cert), "--tls-key", str(key),
                             "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on https://"), line
        port = int(line.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False

        async def scenario():
            ws = await connect(f"wss://127.0.0.1:{port}/ws", ssl=context)
            await ws.send(json.dumps({"type": "join", "session": "tls", "name": "ana", "create": True}))
            welcome = json.loads((await ws.recv()).split("\n")[0])
            assert welcome["type"] == "welcome"
            await ws.close()
        run(scenario())
        # Plaintext to the TLS port neither works nor crashes the server.
        status, _, _ = http_get(port, "/")
        assert status != 200
        assert proc.poll() is None
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_a_mismatched_key_stops_start_up_with_one_line(tmp_path):
    for name in ("a", "b"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                        "-keyout", str(tmp_path / f"{name}.key"), "-out", str(tmp_path / f"{name}.pem")], check=True, capture_output=True)
    result = subprocess.run([BIN, "--port", "0", "--tls-cert", str(tmp_path / "a.pem"), "--tls-key", str(tmp_path / "b.key")],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode != 0
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr

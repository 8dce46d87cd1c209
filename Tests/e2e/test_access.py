"""End-to-end tests of access control: signed tokens and roles, list filtering, token expiry and
refresh, change rate limits, Host/Origin checks, per-address and global connection caps, and the
start-up rules for open mode and secrets. The real foldtabled binary, real sockets."""
import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import os
import select
import socket
import subprocess
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from foldtabled import BIN, Client, LoggedServer, Server, http_get, raw_ws

SECRET = os.urandom(32).hex()  # 64 bytes of text: the server uses the file's text as the key


def run(coro, limit=30):
    return asyncio.run(asyncio.wait_for(coro, limit))


# MARK: - Tokens, signed here (HS256 as RFC 7519 describes it), independent of the server's code

def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(claims, secret=SECRET, header=None, digest=hashlib.sha256):
    header = header or {"alg": "HS256", "typ": "JWT"}
    signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                     + b64url(json.dumps(claims, separators=(",", ":")).encode()))
    signature = hmac.new(secret.encode(), signing_input.encode(), digest).digest()
    return signing_input + "." + b64url(signature)


def token(sessions, role="editor", ttl=3600, name=None, sub="user-1", **extra):
    claims = {"sub": sub, "sessions": list(sessions), "role": role, "exp": int(time.time()) + ttl, **extra}
    if name is not None:
        claims["name"] = name
    return sign(claims)


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns() % 10**12}"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "token.secret"
    path.write_text(SECRET + "\n")  # surrounding whitespace is ignored
    return path


@pytest.fixture(scope="module")
def tokens(secret_file):
    """A server with tokens on, in memory, with a one-second grace after a token expires."""
    s = Server("--memory", "--token-secret-file", str(secret_file), "--token-grace-secs", "1")
    yield s
    assert s.stop() == 0


# MARK: - Helpers

async def read_until_closed(client, timeout=5.0):
    """Reads (into client.inbox / client.all) until the server closes; returns the close code
    (None when the socket ended without a close frame). Raises TimeoutError if it stays open."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"still open after {timeout} s; got {[m['type'] for m in client.all][-20:]}")
            try:
                frame = await asyncio.wait_for(client.ws.recv(), remaining)
            except TimeoutError:
                raise TimeoutError(f"still open after {timeout} s; got {client.all[-5:]}") from None
            for line in frame.split("\n"):
                message = json.loads(line)
                client.inbox.append(message)
                client.all.append(message)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


async def quiet_for(client, predicate, seconds):
    """Asserts no message matching predicate arrives for `seconds`."""
    try:
        message = await client.next(predicate, timeout=seconds)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected message {message}")


async def refused_join(url, session, join_token=None, name="intruder"):
    """A join that must be refused: returns (messages before the close, close code)."""
    ws = await connect(url, max_size=None, open_timeout=5)
    client = Client(ws)
    join = {"type": "join", "session": session, "name": name, "create": True}
    if join_token is not None:
        join["token"] = join_token
    await client.send(join)
    code = await read_until_closed(client, timeout=5)
    return client.all, code


async def made(server, *sessions):
    """Makes each session as its owner would (a join asking to create it), then leaves: viewers
    and editors only join sessions that exist."""
    for session in sessions:
        owner = await Client.join(server.ws, session=session, name="maker", token=token([session], role="owner", sub="maker"))
        await owner.close()


def assert_join_refused(server, join_token, session=None, watch_session=None):
    """The documented refusal: exactly one `unauthorized` error naming the token field, then close
    4502; a member already in the session sees nobody join."""
    session = session or unique("guarded")
    watch_session = watch_session or session

    async def scenario():
        await made(server, watch_session)
        watcher = await Client.join(server.ws, session=watch_session, name="watcher",
                                    token=token([watch_session], role="viewer"))
        messages, code = await refused_join(server.ws, session, join_token)
        assert [m["type"] for m in messages] == ["error"], messages
        assert messages[0]["code"] == "unauthorized" and messages[0].get("field") == "token", messages
        assert code == 4502, f"close code {code}, expected 4502"
        if watch_session == session:
            # The watcher hears of itself (its own join's diff), of nobody else.
            await quiet_for(watcher, lambda m: m["type"] == "presence" and m["count"] != 1, 0.3)
        await watcher.close()
    run(scenario())


def status_of(head):
    first = head.split("\r\n", 1)[0].split()
    return int(first[1]) if len(first) > 1 and first[1].isdigit() else 0


def upgrade(port, host, origin=None, headers=()):
    """A raw WebSocket upgrade with the given Host (and Origin): (socket, HTTP status)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    request = (f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
    if origin is not None:
        request += f"Origin: {origin}\r\n"
    for header in headers:
        request += header + "\r\n"
    sock.sendall((request + "\r\n").encode())
    response = b""
    while b"\r\n\r\n" not in response:
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        response += chunk
    return sock, status_of(response.split(b"\r\n\r\n")[0].decode(errors="replace"))


def upgrade_status(port, host, origin=None, headers=()):
    sock, status = upgrade(port, host, origin, headers)
    sock.close()
    return status


def get_with_host(port, path, host):
    """A raw GET with the given Host: (status, body)."""
    status, _, body = http_get(port, path, host=host)
    return status, body


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_must_fail(args, env=None, timeout=5.0):
    """Runs foldtabled with args that must stop start-up: (exit code, non-empty stderr lines)."""
    environment = {k: v for k, v in os.environ.items() if k != "FOLDTABLE_TOKEN_SECRET"}
    environment.update(env or {})
    proc = subprocess.Popen([BIN, "--port", "0", "--memory", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment)
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().strip() if ready else ""
    if proc.poll() is None:
        proc.kill()
    _, stderr = proc.communicate(timeout=5)
    assert not line.startswith("listening"), f"foldtabled started with {args}: {line}"
    return proc.returncode, [l for l in stderr.splitlines() if l.strip()]


# MARK: - Refused joins

def test_a_token_with_a_forged_signature_is_refused_with_4502(tokens):
    session = unique("forged")
    forged = sign({"sub": "mallory", "sessions": [session], "role": "owner", "exp": int(time.time()) + 3600},
                  secret=os.urandom(32).hex())
    assert_join_refused(tokens, forged, session)


def test_a_token_with_alg_none_is_refused_with_4502(tokens):
    session = unique("alg-none")
    claims = {"sub": "mallory", "sessions": [session], "role": "owner", "exp": int(time.time()) + 3600}
    unsigned = (b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode()) + "." + b64url(json.dumps(claims).encode()) + ".")
    assert_join_refused(tokens, unsigned, session)
    # The same with the genuine HS256 signature of those claims attached: alg none is still refused.
    genuine = sign(claims)
    relabelled = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode()) + "." + genuine.split(".", 1)[1]
    assert_join_refused(tokens, relabelled, session)


def test_a_token_signed_with_hs512_is_refused_with_4502(tokens):
    session = unique("hs512")
    hs512 = sign({"sub": "u", "sessions": [session], "role": "editor", "exp": int(time.time()) + 3600},
                 header={"alg": "HS512", "typ": "JWT"}, digest=hashlib.sha512)
    assert_join_refused(tokens, hs512, session)


def test_an_expired_token_is_refused_with_4502(tokens):
    session = unique("expired")
    assert_join_refused(tokens, token([session], ttl=-120), session)  # past exp and past the 60 s leeway


def test_a_token_that_is_not_yet_valid_is_refused_with_4502(tokens):
    session = unique("nbf")
    assert_join_refused(tokens, token([session], nbf=int(time.time()) + 300), session)


def test_a_token_for_one_session_does_not_open_another(tokens):
    a, b = unique("sess-a"), unique("sess-b")
    assert_join_refused(tokens, token([a], role="owner"), session=b)


def test_a_truncated_token_is_refused_with_4502(tokens):
    session = unique("truncated")
    good = token([session])
    assert_join_refused(tokens, good[:-6], session)            # signature cut short
    assert_join_refused(tokens, good[:len(good) // 2], session)  # cut inside the claims


def test_an_oversized_token_is_refused_with_4502(tokens):
    session = unique("oversized")
    big = token([session], pad="x" * 5000)  # correctly signed, only too large
    assert len(big) > 4096
    assert_join_refused(tokens, big, session)


def test_a_join_without_a_token_is_refused_with_4502(tokens):
    assert_join_refused(tokens, None)


# MARK: - Roles

def test_a_viewer_cannot_change_anything_and_nobody_sees_an_event(tokens):
    session = unique("viewer")

    async def scenario():
        await made(tokens, session)
        editor = await Client.join(tokens.ws, session=session, name="ed", token=token([session], role="editor"))
        await editor.send({"type": "addSection", "title": "Base", "key": "base", "id": "base"})
        base_ack = await editor.next(lambda m: m["type"] == "ack" and m["id"] == "base")
        await editor.next(lambda m: m["type"] == "event" and m.get("id") == "base")
        viewer = await Client.join(tokens.ws, session=session, name="vi", token=token([session], role="viewer"))
        assert viewer.welcome["role"] == "viewer"
        attempts = [
            {"type": "addSection", "title": "Nope", "id": "v1"},
            {"type": "toggle", "section": "base", "id": "v2"},
            {"type": "setAll", "collapsed": True, "id": "v3"},
            {"type": "updateSection", "section": "base", "set": {"title": "Hijacked"}, "id": "v4"},
            {"type": "removeSection", "section": "base", "id": "v5"},
            {"type": "setOptions", "options": {"accordion": True}, "id": "v6"},
            {"type": "deleteSession", "id": "v7"},
        ]
        for attempt in attempts:
            await viewer.send(attempt)
            error = await viewer.next(lambda m: m["type"] == "error")
            assert error["code"] == "forbidden" and error.get("id") == attempt["id"], (attempt, error)
        await quiet_for(editor, lambda m: m["type"] == "event", 0.5)
        assert not [m for m in viewer.all if m["type"] in ("event", "ack")], viewer.all
        check = await Client.join(tokens.ws, session=session, name="check", token=token([session], role="viewer"))
        assert check.welcome["seq"] == base_ack["seq"]
        sections = check.welcome["table"]["sections"]
        assert [(s["key"], s["title"], s["collapsed"]) for s in sections] == [("base", "Base", False)]
        assert check.welcome["table"]["options"]["accordion"] is False
        for c in (editor, viewer, check):
            await c.close()
    run(scenario())


def test_an_editor_changes_the_table_and_other_members_see_it(tokens):
    session = unique("editor")

    async def scenario():
        await made(tokens, session)
        editor = await Client.join(tokens.ws, session=session, name="ed", token=token([session], role="editor"))
        assert editor.welcome["type"] == "welcome" and editor.welcome["role"] == "editor"
        other = await Client.join(tokens.ws, session=session, name="other", token=token([session], role="viewer"))
        await editor.send({"type": "addSection", "title": "Mac", "key": "mac", "id": "e1"})
        await editor.send({"type": "addRow", "section": "mac", "label": "Mini", "key": "r1", "id": "e2"})
        await editor.send({"type": "toggle", "section": "mac", "id": "e3"})
        acks = [await editor.next(lambda m: m["type"] == "ack" and m["id"] == i) for i in ("e1", "e2", "e3")]
        events = [await other.next(lambda m: m["type"] == "event" and m.get("id") == i) for i in ("e1", "e2", "e3")]
        assert [a["seq"] for a in acks] == [e["seq"] for e in events]
        assert events[2]["collapsed"] == {"mac": True}
        epoch, seq = editor.welcome["epoch"], acks[-1]["seq"]
        await editor.close()
        # A resume carries the role too.
        back = await Client.join(tokens.ws, session=session, name="ed", since=seq, epoch=epoch,
                                 token=token([session], role="editor"))
        assert back.welcome["type"] == "resume" and back.welcome["role"] == "editor", back.welcome
        await back.close()
        await other.close()
    run(scenario())


def test_an_editor_cannot_change_options_or_delete_the_session(tokens):
    session = unique("editor-opts")

    async def scenario():
        await made(tokens, session)
        editor = await Client.join(tokens.ws, session=session, name="ed", token=token([session], role="editor"))
        other = await Client.join(tokens.ws, session=session, name="other", token=token([session], role="editor"))
        await editor.send({"type": "setOptions", "options": {"accordion": True, "collapsedIndicator": ">"}, "id": "o1"})
        error = await editor.next(lambda m: m["type"] == "error")
        assert error["code"] == "forbidden" and error.get("id") == "o1", error
        await editor.send({"type": "deleteSession", "id": "d1"})
        error = await editor.next(lambda m: m["type"] == "error")
        assert error["code"] == "forbidden" and error.get("id") == "d1", error
        await quiet_for(other, lambda m: m["type"] == "event", 0.3)
        # Still connected, still an editor, options unchanged.
        await editor.send({"type": "addSection", "title": "After", "id": "ok"})
        assert (await editor.next(lambda m: m["type"] in ("ack", "error")))["type"] == "ack"
        check = await Client.join(tokens.ws, session=session, name="check", token=token([session], role="viewer"))
        assert check.welcome["table"]["options"]["accordion"] is False
        assert check.welcome["table"]["options"]["collapsedIndicator"] != ">"
        for c in (editor, other, check):
            await c.close()
    run(scenario())


def test_an_owner_changes_options_and_deleting_the_session_closes_every_member_with_4501(tokens):
    session = unique("owner")

    async def scenario():
        await made(tokens, session)
        owner = await Client.join(tokens.ws, session=session, name="own", token=token([session], role="owner"))
        assert owner.welcome["role"] == "owner"
        member = await Client.join(tokens.ws, session=session, name="mem", token=token([session], role="editor"))
        await owner.send({"type": "addSection", "title": "Doomed", "id": "a1"})
        await owner.next(lambda m: m["type"] == "ack" and m["id"] == "a1")
        await owner.send({"type": "setOptions", "options": {"accordion": True}, "id": "o1"})
        reply = await owner.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "o1")
        assert reply["type"] == "ack", reply
        event = await member.next(lambda m: m["type"] == "event" and m.get("id") == "o1")
        assert event["change"]["type"] == "setOptions"
        epoch = owner.welcome["epoch"]
        await owner.send({"type": "deleteSession", "id": "del"})
        codes = await asyncio.gather(read_until_closed(owner), read_until_closed(member))
        assert codes == [4501, 4501], codes
        assert not [m for m in owner.all if m["type"] == "error"], owner.all
        # Only an owner asking to create makes the name again (a viewer would get session_not_found).
        fresh = await Client.join(tokens.ws, session=session, name="new", token=token([session], role="owner"))
        assert fresh.welcome["epoch"] != epoch and fresh.welcome["table"]["sections"] == []
        await fresh.close()
    run(scenario())


# MARK: - list

async def list_sessions(ws, list_token=None):
    message = {"type": "list"}
    if list_token is not None:
        message["token"] = list_token
    await ws.send(json.dumps(message))
    return json.loads((await asyncio.wait_for(ws.recv(), 5)).split("\n")[0])


def test_list_shows_only_the_sessions_the_token_names(tokens):
    names = [unique(p) for p in ("alpha", "beta", "gamma")]

    async def scenario():
        await made(tokens, *names)
        creators = [await Client.join(tokens.ws, session=n, name="c", token=token([n], role="editor")) for n in names]
        ws = await connect(tokens.ws, open_timeout=5)
        reply = await list_sessions(ws, token(names[:2], role="viewer"))
        assert reply["type"] == "sessions", reply
        assert sorted(s["name"] for s in reply["sessions"]) == sorted(names[:2]), reply
        assert all(s["members"] == 1 for s in reply["sessions"]), reply
        # A wildcard token sees them all (the demo too).
        reply = await list_sessions(ws, token(["*"], role="viewer"))
        assert set(names) | {"demo"} <= {s["name"] for s in reply["sessions"]}, reply
        await ws.close()
        # After a join, list without a token uses the joined token's sessions.
        joined = await Client.join(tokens.ws, session=names[2], name="j", token=token([names[2]], role="viewer"))
        await joined.send({"type": "list"})
        reply = await joined.next(lambda m: m["type"] in ("sessions", "error"))
        assert reply["type"] == "sessions" and [s["name"] for s in reply["sessions"]] == [names[2]], reply
        for c in (*creators, joined):
            await c.close()
    run(scenario())


def test_list_without_a_valid_token_is_refused_and_the_socket_stays_open(tokens):
    async def scenario():
        ws = await connect(tokens.ws, open_timeout=5)
        reply = await list_sessions(ws)
        assert reply["type"] == "error" and reply["code"] == "unauthorized", reply
        reply = await list_sessions(ws, sign({"sub": "m", "sessions": ["*"], "role": "owner", "exp": int(time.time()) + 60},
                                             secret="another-secret-of-enough-length-0123456789"))
        assert reply["type"] == "error" and reply["code"] == "unauthorized", reply
        reply = await list_sessions(ws, token(["demo"], role="viewer"))
        assert reply["type"] == "sessions" and [s["name"] for s in reply["sessions"]] == ["demo"], reply
        await ws.close()
    run(scenario())


# MARK: - Expiry and refresh

def about_to_expire(sessions, role="editor", seconds=2, **kw):
    """A token whose exp plus the server's 60 s leeway passes `seconds` from now."""
    claims = {"sub": "user-1", "sessions": list(sessions), "role": role, "exp": int(time.time()) - 60 + seconds, **kw}
    return sign(claims)


def test_an_expired_member_without_a_fresh_token_is_closed_with_4002_after_the_grace(tokens):
    session = unique("expiry")

    async def scenario():
        await made(tokens, session)
        member = await Client.join(tokens.ws, session=session, name="m", token=about_to_expire([session]))
        watcher = await Client.join(tokens.ws, session=session, name="w", token=token([session], role="viewer"))
        warning = await member.next(lambda m: m["type"] == "error", timeout=5)
        warned_at = time.monotonic()
        assert warning["code"] == "token_expired", warning
        # A forged or foreign refresh does not count.
        await member.send({"type": "auth", "token": sign({"sub": "x", "sessions": [session], "role": "owner",
                                                           "exp": int(time.time()) + 3600}, secret="z" * 40)})
        assert (await member.next(lambda m: m["type"] == "error"))["code"] == "unauthorized"
        await member.send({"type": "auth", "token": token(["other-session"], role="editor")})
        assert (await member.next(lambda m: m["type"] == "error"))["code"] == "unauthorized"
        code = await read_until_closed(member, timeout=5)
        assert code == 4002, code
        assert 0.7 <= time.monotonic() - warned_at < 4, time.monotonic() - warned_at
        # (The session's maker may be seen leaving first: it left as the others came.)
        left = await watcher.next(lambda m: m["type"] == "presence" and member.welcome["client"] in m.get("left", []))
        assert left["left"] == [member.welcome["client"]]
        await watcher.close()
    run(scenario())


def test_an_expired_member_that_sends_a_fresh_token_in_time_stays(tokens):
    session = unique("refresh")

    async def scenario():
        await made(tokens, session)
        member = await Client.join(tokens.ws, session=session, name="m", token=about_to_expire([session], role="viewer"))
        assert member.welcome["role"] == "viewer"
        warning = await member.next(lambda m: m["type"] == "error", timeout=5)
        assert warning["code"] == "token_expired", warning
        fresh = token([session], role="editor", ttl=3600)
        fresh_exp = json.loads(b64url_decode(fresh.split(".")[1]))["exp"]
        await member.send({"type": "auth", "token": fresh})
        reply = await member.next(lambda m: m["type"] in ("authorized", "error"))
        assert reply == {"type": "authorized", "role": "editor", "expires": fresh_exp}, reply
        await asyncio.sleep(2.0)  # twice the grace period
        await member.send({"type": "addSection", "title": "Still here", "id": "s1"})
        reply = await member.next(lambda m: m["type"] in ("ack", "error"))
        assert reply["type"] == "ack", reply  # open, and the refreshed role (editor) applies
        await member.close()
    run(scenario())


# MARK: - Names and logs

def test_the_token_name_overrides_the_name_the_join_asks_for(tokens):
    session = unique("named")

    async def scenario():
        await made(tokens, session)
        watcher = await Client.join(tokens.ws, session=session, name="watcher", token=token([session], role="viewer"))
        member = await Client.join(tokens.ws, session=session, name="Impostor", token=token([session], name="Ana Real"))
        assert member.welcome["name"] == "Ana Real", member.welcome
        joined = await watcher.next(lambda m: m["type"] == "presence" and member.welcome["client"] in
                                    [p["client"] for p in m.get("joined", [])])
        assert {"client": member.welcome["client"], "name": "Ana Real"} in joined["joined"], joined
        await member.send({"type": "addSection", "title": "By Ana", "id": "n1"})
        event = await watcher.next(lambda m: m["type"] == "event" and m.get("id") == "n1")
        assert event["by"]["name"] == "Ana Real", event
        assert "Impostor" not in json.dumps(watcher.all) + json.dumps(member.all)
        await member.close()
        await watcher.close()
    run(scenario())


def test_tokens_never_appear_in_the_server_log(secret_file, tmp_path):
    s = LoggedServer("--memory", "--token-secret-file", str(secret_file), "--log-level", "debug",
                     stderr_path=tmp_path / "stderr.log")
    session = unique("logged")
    used = {
        "join": token([session], role="owner", name="Logged"),
        "forged": sign({"sub": "m", "sessions": [session], "role": "owner", "exp": int(time.time()) + 3600}, secret="q" * 40),
        "list": token(["*"], role="viewer"),
        "auth": token([session], role="editor"),
        "bad_auth": token(["elsewhere"], role="editor"),
    }
    try:
        async def scenario():
            member = await Client.join(s.ws, session=session, name="x", token=used["join"])
            await member.send({"type": "auth", "token": used["auth"]})
            assert (await member.next(lambda m: m["type"] in ("authorized", "error")))["type"] == "authorized"
            await member.send({"type": "auth", "token": used["bad_auth"]})
            assert (await member.next(lambda m: m["type"] == "error"))["code"] == "unauthorized"
            await member.send({"type": "list", "token": used["list"]})
            assert (await member.next(lambda m: m["type"] in ("sessions", "error")))["type"] == "sessions"
            _, code = await refused_join(s.ws, session, used["forged"])
            assert code == 4502
            await member.close()
        run(scenario())
    finally:
        assert s.stop() == 0
    log = s.stderr()
    assert "event=join" in log and "event=open" in log, log[-2000:]
    for what, value in used.items():
        header, payload, signature = value.split(".")
        for part_name, part in (("token", value), ("claims", payload), ("signature", signature)):
            assert part not in log, f"the {what} token's {part_name} is in the log"
    assert SECRET not in log


# MARK: - Rate limit

def test_changes_past_the_rate_are_refused_then_the_flooder_is_closed_with_4500_and_others_go_on():
    s = Server("--memory", "--change-rate", "1", "--change-burst", "5")
    try:
        async def scenario():
            session = unique("flood")
            flooder = await Client.join(s.ws, session=session, name="flooder")
            bystander = await Client.join(s.ws, session=session, name="bystander")
            # One change at a time, each answered before the next: the server reads everything
            # that was sent before it closes.
            acked, limited, in_a_row = [], [], 0
            started = time.monotonic()
            for i in range(200):
                await flooder.send({"type": "addSection", "title": f"F{i}", "key": f"f{i}", "id": f"f{i}"})
                reply = await flooder.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == f"f{i}")
                if reply["type"] == "ack":
                    acked.append(reply["id"])
                    in_a_row = 0
                else:
                    assert reply["code"] == "rate_limited", reply
                    limited.append(reply["id"])
                    in_a_row += 1
                    if in_a_row == 50:  # maxConsecutiveErrors: the 50th refusal in a row closes
                        break
            assert in_a_row == 50, (acked, len(limited))
            # The burst, plus one refill (1/s) for each second the loop took here: bounded by the
            # time it took, not by a guess at how fast this machine answers.
            elapsed = time.monotonic() - started
            assert 5 <= len(acked) <= 5 + int(elapsed) + 1, (acked, elapsed)
            assert acked[:5] == ["f0", "f1", "f2", "f3", "f4"], acked
            code = await read_until_closed(flooder, timeout=5)
            assert code == 4500, code
            # Refused changes were not applied: the bystander saw only the acknowledged ones.
            seen = [(await bystander.next(lambda m: m["type"] == "event"))["change"]["key"] for _ in acked]
            assert seen == acked, (seen, acked)
            await quiet_for(bystander, lambda m: m["type"] == "event", 0.3)
            # The bystander has its own allowance and keeps receiving events.
            await bystander.send({"type": "addSection", "title": "Calm", "key": "calm", "id": "calm"})
            assert (await bystander.next(lambda m: m["type"] in ("ack", "error")))["type"] == "ack"
            third = await Client.join(s.ws, session=session, name="third")
            await third.send({"type": "addSection", "title": "Third", "key": "third", "id": "t1"})
            event = await bystander.next(lambda m: m["type"] == "event" and m["change"].get("key") == "third")
            assert event["by"]["name"] == "third"
            assert [sec["key"] for sec in third.welcome["table"]["sections"]] == [*acked, "calm"]
            await bystander.close()
            await third.close()
        run(scenario())
        assert s.alive()
    finally:
        assert s.stop() == 0


# MARK: - Connection caps

def wait_for_upgrade(port, host, headers=(), timeout=3.0):
    """Retries an upgrade until it succeeds (a freed slot is counted down asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        sock, status = upgrade(port, host, headers=headers)
        if status == 101 or time.monotonic() > deadline:
            return sock, status
        sock.close()
        time.sleep(0.1)


def test_connections_past_the_per_address_cap_get_429_and_closing_one_frees_a_slot():
    s = Server("--memory", "--max-connections-per-ip", "2", "--trusted-proxies", "10.99.99.99")
    host = f"127.0.0.1:{s.port}"
    held = []
    try:
        for _ in range(2):
            sock, status = upgrade(s.port, host)
            held.append(sock)
            assert status == 101
        assert upgrade_status(s.port, host) == 429
        assert upgrade_status(s.port, host) == 429
        held.pop().close()
        sock, status = wait_for_upgrade(s.port, host)
        held.append(sock)
        assert status == 101, "closing a connection did not free its slot"
        assert upgrade_status(s.port, host) == 429
        assert get_with_host(s.port, "/", host)[0] == 200  # the cap is for WebSockets only
    finally:
        for sock in held:
            sock.close()
        assert s.stop() == 0


def test_a_trusted_proxy_gives_each_forwarded_address_its_own_quota(tmp_path):
    s = LoggedServer("--memory", "--max-connections-per-ip", "1", "--trusted-proxies", "127.0.0.1", "--log-level", "info",
                     stderr_path=tmp_path / "stderr.log")
    host = f"127.0.0.1:{s.port}"
    held = []
    try:
        for forwarded in ("203.0.113.5", "203.0.113.6"):
            sock, status = upgrade(s.port, host, headers=[f"X-Forwarded-For: {forwarded}"])
            held.append(sock)
            assert status == 101, forwarded
        # Each forwarded address has used its one connection; the proxy's own address has not.
        assert upgrade_status(s.port, host, headers=["X-Forwarded-For: 203.0.113.5"]) == 429
        assert upgrade_status(s.port, host, headers=["X-Forwarded-For: 198.51.100.1, 203.0.113.6"]) == 429  # the last one counts
        sock, status = upgrade(s.port, host)
        held.append(sock)
        assert status == 101
        log = run(s.wait_for_log("peer=127.0.0.1", timeout=5))  # the last one opened: the others are logged before it
        opens = [line for line in log.splitlines() if "event=open" in line]
        peers = sorted(part.split("=", 1)[1] for line in opens for part in line.split() if part.startswith("peer="))
        assert peers == ["127.0.0.1", "203.0.113.5", "203.0.113.6"], opens
    finally:
        for sock in held:
            sock.close()
        assert s.stop() == 0


def test_an_untrusted_peers_x_forwarded_for_is_ignored(tmp_path):
    s = LoggedServer("--memory", "--max-connections-per-ip", "1", "--trusted-proxies", "10.99.99.99", "--log-level", "info",
                     stderr_path=tmp_path / "stderr.log")
    host = f"127.0.0.1:{s.port}"
    held = []
    try:
        sock, status = upgrade(s.port, host, headers=["X-Forwarded-For: 203.0.113.5"])
        held.append(sock)
        assert status == 101
        # A made-up address does not buy a second quota.
        assert upgrade_status(s.port, host, headers=["X-Forwarded-For: 203.0.113.6"]) == 429
        log = run(s.wait_for_log("event=open", timeout=5))
        opens = [line for line in log.splitlines() if "event=open" in line]
        assert len(opens) == 1 and "peer=127.0.0.1" in opens[0].split(), opens
        assert "203.0.113" not in log
    finally:
        for sock in held:
            sock.close()
        assert s.stop() == 0


def test_connections_past_the_global_cap_get_503():
    s = Server("--memory", "--max-connections", "2")
    host = f"127.0.0.1:{s.port}"
    held = []
    try:
        for forwarded in ("203.0.113.1", "203.0.113.2"):  # different addresses: the per-address cap is not what refuses
            sock, status = upgrade(s.port, host, headers=[f"X-Forwarded-For: {forwarded}"])
            held.append(sock)
            assert status == 101
        assert upgrade_status(s.port, host, headers=["X-Forwarded-For: 203.0.113.3"]) == 503
        held.pop().close()
        sock, status = wait_for_upgrade(s.port, host, headers=["X-Forwarded-For: 203.0.113.3"])
        held.append(sock)
        assert status == 101, "closing a connection did not free a place"
    finally:
        for sock in held:
            sock.close()
        assert s.stop() == 0


# MARK: - Host and Origin

@pytest.fixture(scope="module")
def plain():
    s = Server("--memory")
    yield s
    assert s.stop() == 0


def test_a_dns_rebinding_upgrade_with_a_foreign_host_gets_421(plain):
    evil = f"evil.example:{plain.port}"
    assert upgrade_status(plain.port, evil, origin=f"http://{evil}") == 421
    assert upgrade_status(plain.port, evil) == 421  # no Origin either
    # Controls: the same request by address or as localhost is upgraded.
    assert upgrade_status(plain.port, f"127.0.0.1:{plain.port}", origin=f"http://127.0.0.1:{plain.port}") == 101
    assert upgrade_status(plain.port, f"localhost:{plain.port}", origin=f"http://localhost:{plain.port}") == 101


def test_a_dns_rebinding_page_request_with_a_foreign_host_gets_421(plain):
    status, body = get_with_host(plain.port, "/", f"evil.example:{plain.port}")
    assert status == 421, (status, body[:200])
    assert b"<script" not in body, body[:200]  # the page itself is not served
    assert get_with_host(plain.port, "/app.js", "evil.example")[0] == 421
    assert get_with_host(plain.port, "/", f"127.0.0.1:{plain.port}")[0] == 200


def test_a_name_given_with_public_url_is_accepted_in_host_and_origin():
    port = free_port()
    # A public name in open mode takes --open (as a public bind does).
    s = Server("--memory", "--open", "--port", str(port), "--public-url", f"http://tables.test:{port}")
    try:
        assert s.port == port
        host = f"tables.test:{port}"
        sock, status = upgrade(port, host, origin=f"http://{host}")
        assert status == 101
        sock.close()
        # The public URL's origin may also open a WebSocket addressed by IP (its origin is listed).
        assert upgrade_status(port, f"127.0.0.1:{port}", origin=f"http://{host}") == 101
        status, body = get_with_host(port, "/", host)
        assert status == 200 and b"<" in body
        # Other names are still refused.
        assert upgrade_status(port, f"tables.evil:{port}", origin=f"http://tables.evil:{port}") == 421
        assert get_with_host(port, "/", f"tables.evil:{port}")[0] == 421

        async def scenario():
            ws = await connect(f"ws://127.0.0.1:{port}/ws", open_timeout=5,
                               additional_headers={"Origin": f"http://{host}"})
            await ws.send(json.dumps({"type": "join", "session": "pub", "name": "p", "create": True}))
            assert json.loads((await asyncio.wait_for(ws.recv(), 5)).split("\n")[0])["type"] == "welcome"
            await ws.close()
        run(scenario())
    finally:
        assert s.stop() == 0


def test_an_embed_origin_may_open_a_websocket_and_an_origin_not_listed_still_gets_403():
    s = Server("--memory", "--embed-origins", "https://blog.example.com")
    try:
        host = f"127.0.0.1:{s.port}"
        assert upgrade_status(s.port, host, origin="https://blog.example.com") == 101
        assert upgrade_status(s.port, host, origin="https://blog.example.com.evil.example") == 403
        assert upgrade_status(s.port, host, origin="http://blog.example.com") == 403  # another scheme is another origin
        assert upgrade_status(s.port, host, origin="https://evil.example") == 403
    finally:
        assert s.stop() == 0


def test_an_embed_origin_may_open_a_websocket_but_gets_403_from_the_http_api():
    # A listed blog's page may send `POST /api/...` without a preflight (a no-cors fetch): were
    # its origin allowed there too, any reader of the blog would fold or delete sessions.
    s = Server("--memory", "--embed-origins", "https://blog.example.com", "--allowed-origins", "https://admin.example.com")
    try:
        host = f"127.0.0.1:{s.port}"
        assert upgrade_status(s.port, host, origin="https://blog.example.com") == 101

        def post(origin):
            connection = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
            connection.request("POST", "/api/v1/sessions/demo/collapse-all", body=b"", headers={"Origin": origin})
            response = connection.getresponse()
            body = response.read()
            connection.close()
            return response.status, body

        status, body = post("https://blog.example.com")
        assert status == 403 and json.loads(body)["error"]["code"] == "forbidden", (status, body)
        # Control: an allowed origin's call goes through, so the 403 is the embed origin's.
        assert post("https://admin.example.com")[0] == 200
    finally:
        assert s.stop() == 0


def test_a_foreign_origin_with_an_allowed_host_gets_403(plain):
    host = f"127.0.0.1:{plain.port}"
    assert upgrade_status(plain.port, host, origin=f"http://evil.example:{plain.port}") == 403
    assert upgrade_status(plain.port, host, origin="https://evil.example") == 403
    assert upgrade_status(plain.port, host, origin="null") == 403
    assert upgrade_status(plain.port, host, origin=f"http://127.0.0.1:{plain.port}") == 101


# MARK: - Start-up rules

def test_open_mode_on_a_public_address_is_refused_without_open():
    code, lines = start_must_fail(["--host", "0.0.0.0"])
    assert code == 1, code
    assert len(lines) == 1 and "--open" in lines[0], lines


def test_open_mode_on_a_public_address_starts_with_open(secret_file):
    s = Server("--memory", "--host", "0.0.0.0", "--open")
    try:
        assert s.url.startswith("http://0.0.0.0:")

        async def scenario():
            c = await Client.join(s.ws, session="open", name="anyone")
            assert c.welcome["type"] == "welcome" and "role" not in c.welcome
            await c.send({"type": "setOptions", "options": {"accordion": True}, "id": "o"})
            assert (await c.next(lambda m: m["type"] in ("ack", "error")))["type"] == "ack"
            await c.close()
        run(scenario())
    finally:
        assert s.stop() == 0
    # With a secret, a public bind needs no --open.
    s = Server("--memory", "--host", "0.0.0.0", "--token-secret-file", str(secret_file))
    try:
        async def guarded():
            messages, code = await refused_join(s.ws, "open")
            assert code == 4502 and messages[0]["code"] == "unauthorized"
        run(guarded())
    finally:
        assert s.stop() == 0


def test_a_secret_given_as_a_flag_is_refused_with_one_line():
    value = "this-secret-would-show-in-ps-0123456789abcdef"
    for args in (["--token-secret", value], [f"--token-secret={value}"]):
        code, lines = start_must_fail(args)
        assert code == 1, (args, code)
        assert len(lines) == 1 and "--token-secret-file" in lines[0], lines
        assert value not in lines[0]


def test_a_secret_shorter_than_32_bytes_is_refused_with_one_line(tmp_path):
    short = tmp_path / "short.secret"
    short.write_text("x" * 31 + "\n")
    code, lines = start_must_fail(["--token-secret-file", str(short)])
    assert code == 1 and len(lines) == 1 and "32" in lines[0], (code, lines)
    code, lines = start_must_fail([], env={"FOLDTABLE_TOKEN_SECRET": "y" * 31})
    assert code == 1 and len(lines) == 1 and "32" in lines[0], (code, lines)
    # Whitespace does not count towards the length.
    padded = tmp_path / "padded.secret"
    padded.write_text("   " + "z" * 31 + "   \n")
    code, lines = start_must_fail(["--token-secret-file", str(padded)])
    assert code == 1 and len(lines) == 1, (code, lines)
    # Exactly 32 bytes is enough.
    enough = tmp_path / "enough.secret"
    enough.write_text("k" * 32)
    s = Server("--memory", "--token-secret-file", str(enough))
    assert s.stop() == 0


def test_the_token_command_prints_a_working_token_and_fails_without_a_session(secret_file, tokens):
    def token_command(*args, env=None):
        environment = {k: v for k, v in os.environ.items() if k != "FOLDTABLE_TOKEN_SECRET"}
        environment.update(env or {})
        return subprocess.run([BIN, "token", *args], capture_output=True, text=True, timeout=10, env=environment)

    result = token_command("--token-secret-file", str(secret_file), "--session", "demo", "--role", "editor",
                           "--name", "ana", "--ttl", "1h")
    assert result.returncode == 0, result.stderr
    printed = result.stdout.strip()
    header, payload, signature = printed.split(".")
    assert json.loads(b64url_decode(header))["alg"] == "HS256"
    claims = json.loads(b64url_decode(payload))
    assert claims["sessions"] == ["demo"] and claims["role"] == "editor" and claims["name"] == "ana", claims
    assert abs(claims["exp"] - (time.time() + 3600)) < 30, claims
    expected = hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert b64url_decode(signature) == expected

    async def scenario():
        c = await Client.join(tokens.ws, session="demo", name="someone", token=printed)
        assert c.welcome["role"] == "editor" and c.welcome["name"] == "ana"
        await c.close()
    run(scenario())

    # The secret from the environment works too.
    result = token_command("--session", "a,b", "--role", "viewer", env={"FOLDTABLE_TOKEN_SECRET": SECRET})
    assert result.returncode == 0, result.stderr
    assert json.loads(b64url_decode(result.stdout.strip().split(".")[1]))["sessions"] == ["a", "b"]

    for args in (["--token-secret-file", str(secret_file)],                                        # no --session
                 ["--token-secret-file", str(secret_file), "--session", "demo", "--role", "admin"],  # no such role
                 ["--token-secret-file", str(secret_file), "--session", "demo", "--ttl", "soon"],    # bad ttl
                 ["--session", "demo"]):                                                             # no secret
        result = token_command(*args)
        assert result.returncode != 0, args
        assert result.stderr.strip() and not result.stdout.strip(), (args, result.stdout, result.stderr)


# MARK: - Roles and identity hold

def test_a_viewer_with_every_session_cannot_create_one_and_nothing_is_there_after_a_restart(secret_file, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = ("--data-dir", str(data), "--token-secret-file", str(secret_file))
    server = Server(*args)
    name = unique("ghost")
    try:
        async def scenario():
            ws = await connect(server.ws, max_size=None, open_timeout=5)
            viewer = Client(ws)
            await viewer.send({"type": "join", "session": name, "name": "v", "create": True,
                               "token": token(["*"], role="viewer", sub="viewer-1")})
            refusal = await viewer.next(lambda m: m["type"] in ("error", "welcome"))
            assert refusal["type"] == "error" and refusal["code"] == "session_not_found", refusal
            await viewer.close()
            lister = await connect(server.ws, max_size=None, open_timeout=5)
            await lister.send(json.dumps({"type": "list", "token": token(["*"], role="viewer")}))
            listed = json.loads(await asyncio.wait_for(lister.recv(), 5))
            await lister.close()
            return [s["name"] for s in listed["sessions"]]

        assert name not in run(scenario())
    finally:
        assert server.stop() == 0
    server = Server(*args)
    try:
        async def after():
            lister = await connect(server.ws, max_size=None, open_timeout=5)
            await lister.send(json.dumps({"type": "list", "token": token(["*"], role="owner")}))
            listed = json.loads(await asyncio.wait_for(lister.recv(), 5))
            await lister.close()
            return [s["name"] for s in listed["sessions"]]

        assert name not in run(after())
    finally:
        assert server.stop() == 0


def test_a_session_an_owner_deleted_is_not_brought_back_by_a_viewer(tokens):
    name = unique("deleted")

    async def scenario():
        owner = await Client.join(tokens.ws, session=name, name="o", token=token([name], role="owner", sub="owner-1"))
        await owner.send({"type": "addSection", "title": "Doomed", "id": "d1"})
        await owner.next(lambda m: m["type"] == "ack")
        await owner.send({"type": "deleteSession"})
        assert await read_until_closed(owner) == 4501
        ws = await connect(tokens.ws, max_size=None, open_timeout=5)
        viewer = Client(ws)
        await viewer.send({"type": "join", "session": name, "name": "v", "create": True,
                           "token": token([name], role="viewer", sub="viewer-1")})
        answer = await viewer.next(lambda m: m["type"] in ("error", "welcome"))
        assert answer["type"] == "error" and answer["code"] == "session_not_found", answer
        await viewer.close()
        # Nothing was made: an owner looking (without create) finds no session either.
        ws = await connect(tokens.ws, max_size=None, open_timeout=5)
        looker = Client(ws)
        await looker.send({"type": "join", "session": name, "name": "o",
                           "token": token([name], role="owner", sub="owner-1")})
        answer = await looker.next(lambda m: m["type"] in ("error", "welcome"))
        assert answer["type"] == "error" and answer["code"] == "session_not_found", answer
        await looker.close()

    run(scenario())


def test_rename_is_refused_when_the_token_names_the_member(tokens):
    name = unique("names")

    async def scenario():
        ana = await Client.join(tokens.ws, session=name, name="x", token=token([name], role="owner", name="ana", sub="ana"))
        bo = await Client.join(tokens.ws, session=name, name="bo", token=token([name], role="editor", sub="bo"))
        await ana.send({"type": "rename", "name": "Boss"})
        refusal = await ana.next(lambda m: m["type"] == "error")
        assert refusal["code"] == "forbidden" and refusal["message"] == "your name comes from your token", refusal
        await ana.send({"type": "addSection", "title": "Mine", "id": "a1"})
        event = await bo.next(lambda m: m["type"] == "event")
        assert event["by"]["name"] == "ana", event
        # A token without a name leaves it to its bearer.
        await bo.send({"type": "rename", "name": "Bo B"})
        await bo.send({"type": "addSection", "title": "His", "id": "b1"})
        event = await ana.next(lambda m: m["type"] == "event" and m["change"].get("title") == "His")
        assert event["by"]["name"] == "Bo B", event
        await ana.close()
        await bo.close()

    run(scenario())


def test_a_change_with_another_members_id_is_applied_for_the_victim_and_not_for_the_attacker(tokens):
    name = unique("ids")

    async def scenario():
        victim = await Client.join(tokens.ws, session=name, name="v", token=token([name], role="owner", sub="victim"))
        attacker = await Client.join(tokens.ws, session=name, name="a", token=token([name], role="editor", sub="attacker"))
        await victim.send({"type": "addSection", "title": "Victim 1", "id": "tab-1"})
        ack = await victim.next(lambda m: m["type"] == "ack")
        event = await attacker.next(lambda m: m["type"] == "event")
        assert event["id"] == "tab-1", event  # the id as sent, never the scope it is kept under
        # The attacker guesses the victim's next id and sends a change of its own with it first.
        await attacker.send({"type": "addSection", "title": "Attacker", "id": "tab-2"})
        squat = await attacker.next(lambda m: m["type"] in ("ack", "error"))
        assert squat["type"] == "ack" and squat["seq"] == ack["seq"] + 1, squat
        # The victim's change with that id is applied, acknowledged with its own seq.
        await victim.send({"type": "addSection", "title": "Victim 2", "id": "tab-2"})
        mine = await victim.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "tab-2")
        assert mine["type"] == "ack" and mine["seq"] == squat["seq"] + 1, mine
        # The attacker replaying the victim's first id is a change of its own, never the victim's seq.
        await attacker.send({"type": "addSection", "title": "Victim 1", "id": "tab-1"})
        replay = await attacker.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "tab-1")
        assert replay["type"] == "ack" and replay["seq"] == mine["seq"] + 1, replay
        # And the victim's own retry is still recognised.
        await victim.send({"type": "addSection", "title": "Victim 2", "id": "tab-2"})
        again = await victim.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == "tab-2")
        assert again == mine, again
        await victim.close()
        await attacker.close()

    run(scenario())

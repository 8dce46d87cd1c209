"""Helpers for end-to-end tests: start the real foldtabled binary and talk to it with real
WebSocket clients (the Python `websockets` library) or raw sockets."""
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import tempfile
import time

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

BIN = os.environ.get("FOLDTABLE_BIN", ".build/debug/foldtabled")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Server:
    """A running foldtabled on a free port (port 0, read back from its first line)."""

    def __init__(self, *args, web_root=None, env=None):
        web_root = web_root or os.path.join(REPO, "web")
        if "--memory" not in args and not any(str(a).startswith("--data-dir") for a in args):
            # The store is the default: every server gets a fresh data directory of its own.
            self.data_dir = tempfile.mkdtemp(prefix="foldtable-e2e-")
            args = (*args, "--data-dir", self.data_dir)
        self.proc = subprocess.Popen(
            [BIN, "--port", "0", "--web-root", web_root, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        # Bounded (generously: a loaded machine starts slowly), so a server that never prints
        # its start line fails the test instead of hanging the whole run.
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("listening on http"):
            self.proc.kill()
            self.proc.wait()
        assert line.startswith("listening on http"), f"unexpected start line {line!r}: {self.proc.stderr.read()}"
        self.url = line.split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.ws = f"ws://127.0.0.1:{self.port}/ws"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def alive(self):
        return self.proc.poll() is None


class Client:
    """A WebSocket client that splits batched messages (one JSON object per line)."""

    def __init__(self, ws):
        self.ws = ws
        self.inbox = []
        self.all = []

    @classmethod
    async def join(cls, url, session="demo", name="ana", create=True, **extra):
        """Joins as a client opening `session`: with `create`, made when missing (and allowed)."""
        ws = await connect(url, max_size=None, open_timeout=5)
        client = cls(ws)
        await client.send({"type": "join", "session": session, "name": name, **({"create": True} if create else {}), **extra})
        client.welcome = await client.next(lambda m: m["type"] in ("welcome", "resume"))
        return client

    async def send(self, obj):
        await self.ws.send(json.dumps(obj))

    async def next(self, predicate=lambda m: True, timeout=5.0):
        """The next message matching predicate; earlier non-matching ones stay in the inbox."""
        deadline = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self.inbox):
                if predicate(message):
                    return self.inbox.pop(i)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching message; inbox has {[m['type'] for m in self.inbox][:20]}")
            frame = await asyncio.wait_for(self.ws.recv(), remaining)
            for line in frame.split("\n"):
                message = json.loads(line)
                self.inbox.append(message)
                self.all.append(message)

    async def close(self):
        """Closes, reading (and dropping) whatever the server still sends meanwhile: websockets
        stops reading once 16 frames wait unread, and would then not see the server's close frame
        and wait out its 10 s close timeout."""
        async def drain():
            with contextlib.suppress(ConnectionClosed):
                async for _ in self.ws:
                    pass
        drainer = asyncio.create_task(drain())
        await self.ws.close()
        await drainer


def raw_ws(port, path="/ws", headers=()):
    """A raw socket after a WebSocket handshake: for frames the libraries refuse to send."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
    for header in headers:
        request += header + "\r\n"
    sock.sendall((request + "\r\n").encode())
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(4096)
        if not chunk:
            break
        response += chunk
    return sock, response.split(b"\r\n\r\n")[0].decode(errors="replace")


def frame(payload, opcode=1, fin=True, mask=True):
    """One client frame (masked, as RFC 6455 requires of clients)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    length = len(payload)
    mask_bit = 0x80 if mask else 0
    if length < 126:
        head += bytes([mask_bit | length])
    elif length < 65536:
        head += bytes([mask_bit | 126]) + length.to_bytes(2, "big")
    else:
        head += bytes([mask_bit | 127]) + length.to_bytes(8, "big")
    if not mask:
        return head + payload
    key = b"\x01\x02\x03\x04"
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def read_frame(sock, buf):
    """(opcode, payload, rest) from buf plus socket reads; opcode None on EOF/reset."""
    while True:
        if len(buf) >= 2:
            n, pos = buf[1] & 0x7F, 2
            if n == 126 and len(buf) >= 4:
                n, pos = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127 and len(buf) >= 10:
                n, pos = int.from_bytes(buf[2:10], "big"), 10
            if n < 126 or pos > 2:
                if len(buf) >= pos + n:
                    return buf[0] & 0x0F, buf[pos:pos + n], buf[pos + n:]
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            return None, b"", b""
        buf += chunk


def read_close_code(sock, timeout=5):
    """Reads server frames until a close frame; returns its code (None if the socket just ends)."""
    sock.settimeout(timeout)
    buffer = b""
    while True:
        while len(buffer) >= 2:
            length = buffer[1] & 0x7F
            offset = 2
            if length == 126:
                if len(buffer) < 4:
                    break
                length = int.from_bytes(buffer[2:4], "big")
                offset = 4
            elif length == 127:
                if len(buffer) < 10:
                    break
                length = int.from_bytes(buffer[2:10], "big")
                offset = 10
            if len(buffer) < offset + length:
                break
            opcode = buffer[0] & 0x0F
            payload = buffer[offset:offset + length]
            buffer = buffer[offset + length:]
            if opcode == 8:
                return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            return None
        if not chunk:
            return None
        buffer += chunk


def http_get(port, path, headers=(), host=None):
    """A raw HTTP/1.1 GET (the path is sent exactly as given, no normalisation); `host` replaces
    the Host header's 127.0.0.1:PORT."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    request = f"GET {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\nConnection: close\r\n"
    for header in headers:
        request += header + "\r\n"
    sock.sendall((request + "\r\n").encode())
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    header_map = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            header_map[key.strip().lower()] = value.strip()
    return status, header_map, body


class StartFailed(Exception):
    """foldtabled exited (or printed no start line) instead of starting: its exit code and stderr."""

    def __init__(self, returncode, stderr):
        super().__init__(f"foldtabled did not start (exit {returncode}): {stderr!r}")
        self.returncode = returncode
        self.stderr = stderr


class LoggedServer:
    """A foldtabled whose stderr goes to a file, readable at any time (a chatty `--log-level`
    never blocks it on a full pipe), started with optional Popen extras (cwd, preexec_fn).
    Raises StartFailed when the process exits or prints no start line within `timeout`."""

    def __init__(self, *args, stderr_path, web_root=None, cwd=None, preexec_fn=None, timeout=10.0, binary=None):
        import select
        web_root = web_root or os.path.join(REPO, "web")
        self.stderr_path = str(stderr_path)
        self.args = args
        with open(self.stderr_path, "a") as err:
            self.proc = subprocess.Popen(
                [os.path.abspath(binary or BIN), "--port", "0", "--web-root", web_root, *args],
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=cwd, preexec_fn=preexec_fn)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("listening on http"):
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            raise StartFailed(self.proc.returncode, self.stderr())
        self.url = line.split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.ws = f"ws://127.0.0.1:{self.port}/ws"
        self.pid = self.proc.pid

    def stderr(self):
        with open(self.stderr_path) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=10):
        """SIGTERM, wait, return the exit code (SIGKILLed if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode

    def kill9(self):
        """SIGKILL now (a crash: nothing is flushed) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode

    async def wait_for_log(self, needle, timeout=5.0):
        """Polls stderr until it contains `needle`; returns the stderr text or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.stderr()
            if needle in text:
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"{needle!r} not in stderr after {timeout} s: {text[-2000:]!r}")
            await asyncio.sleep(0.05)


async def collect_rows(client, section, seq=None, timeout=10.0):
    """The rows of one streamed section, chunk after chunk until `final` (only chunks of `seq`,
    when given)."""
    rows = []
    while True:
        chunk = await client.next(lambda m: m["type"] == "rows" and m["section"] == section
                                  and (seq is None or m["seq"] == seq), timeout=timeout)
        assert chunk["from"] == len(rows), f"rows of {section} out of order: {chunk['from']} after {len(rows)}"
        rows += chunk["rows"]
        if chunk["final"]:
            return rows


async def read_welcome_table(client, timeout=10.0):
    """The table of a fresh welcome as {key: section}, in order, each expanded section with all
    its rows (inline or streamed); collapsed sections keep `rowCount` and have no `rows`."""
    sections = {}
    for section in client.welcome["table"]["sections"]:
        section = dict(section)
        if not section["collapsed"] and "rows" not in section:
            section["rows"] = await collect_rows(client, section["key"], timeout=timeout)
        sections[section["key"]] = section
    return sections


async def expand_all_and_read(client, change_id, timeout=10.0):
    """Reads every row of a joined session: the welcome's, then `setAll collapsed:false` (a
    change, acknowledged with a seq) and the rows it streams. Returns (sections, ack seq)."""
    sections = await read_welcome_table(client, timeout)
    await client.send({"type": "setAll", "collapsed": False, "id": change_id})
    reply = await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == change_id, timeout=timeout)
    assert reply["type"] == "ack", f"setAll refused: {reply}"
    event = await client.next(lambda m: m["type"] == "event" and m["seq"] == reply["seq"], timeout=timeout)
    for key, collapsed in event["collapsed"].items():
        if key in sections and not collapsed:
            # An empty section gets no rows message (its rowCount, 0, says it all).
            if sections[key].get("rowCount", 0) == 0:
                sections[key]["rows"] = []
            else:
                sections[key]["rows"] = await collect_rows(client, key, seq=event["seq"], timeout=timeout)
            sections[key]["collapsed"] = False
    return sections, reply["seq"]


class TableModel:
    """A table rebuilt from events (the kinds the durability tests send), to compare with what a
    server holds: sections in order, each with title, collapsed state and rows."""

    def __init__(self):
        self.order = []
        self.sections = {}

    def apply(self, event):
        change = event["change"]
        kind = change["type"]
        if kind == "addSection":
            self.order.insert(change["index"], change["key"])
            self.sections[change["key"]] = {"title": change["title"], "collapsed": change["collapsed"], "rows": []}
        elif kind == "addRow":
            self.sections[change["section"]]["rows"].insert(change["index"], dict(change["row"]))
        elif kind == "updateRow":
            row = next(r for s in self.sections.values() for r in s["rows"] if r["key"] == change["row"])
            for field, value in change["set"].items():
                if value is None:
                    row.pop(field, None)
                else:
                    row[field] = value
        elif kind not in ("toggle", "set", "setAll", "reveal"):
            raise ValueError(f"TableModel does not apply {kind}")
        for key, collapsed in event["collapsed"].items():
            self.sections[key]["collapsed"] = collapsed

    def differences(self, sections):
        """What differs between the model and `sections` (from read_welcome_table or
        expand_all_and_read), as readable lines; empty when they agree."""
        found = []
        if list(sections) != self.order:
            found.append(f"section order {list(sections)} != {self.order}")
        for key in self.order:
            if key not in sections:
                continue
            want, got = self.sections[key], sections[key]
            if got["title"] != want["title"] or got["collapsed"] != want["collapsed"]:
                found.append(f"section {key}: title/collapsed {got['title']!r}/{got['collapsed']} != {want['title']!r}/{want['collapsed']}")
            if got["rowCount"] != len(want["rows"]) and "rows" not in got:
                found.append(f"section {key}: rowCount {got['rowCount']} != {len(want['rows'])}")
            if "rows" in got and got["rows"] != want["rows"]:
                got_keys = [r["key"] for r in got["rows"]]
                want_keys = [r["key"] for r in want["rows"]]
                found.append(f"section {key}: rows differ; missing {sorted(set(want_keys) - set(got_keys))[:10]}, "
                             f"extra {sorted(set(got_keys) - set(want_keys))[:10]}, "
                             f"duplicated {sorted({k for k in got_keys if got_keys.count(k) > 1})[:10]}, "
                             f"first difference at {next((i for i, (a, b) in enumerate(zip(got['rows'], want['rows'])) if a != b), min(len(got_keys), len(want_keys)))}")
        return found


def integrity_check(db_path):
    """`PRAGMA integrity_check` of a SQLite file (its -wal beside it is read too): 'ok' or the
    problems. Opens it read-write (a WAL file needs that): only on a copy or a stopped server's."""
    import sqlite3
    conn = sqlite3.connect(str(db_path), timeout=5)
    try:
        return "\n".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()

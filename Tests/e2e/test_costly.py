"""One costly request cannot make everyone wait or pin memory, against the real foldtabled: a
find built to defeat a naive scan, 30 slow readers of a large export, a reader below the minimum
rate, the API's rate limit and its cap on answers in flight per address."""
import asyncio
import json
import socket
import threading
import time
import urllib.parse

import pytest

from foldtabled import Client, Server

# 5,000 rows of 3 KiB: label, value and detail each 1,024 × "a" (a field's limit).
ROWS = 5_000
FIELD = "a" * 1_024
# 255 × "a" + "b": a naive scan compares ~255 bytes at each offset of every field.
PATHOLOGICAL = "a" * 255 + "b"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def request(port, method, path, body=b"", headers=(), rcvbuf=None):
    """A socket that has sent one HTTP/1.1 request (Connection: close)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # Set before connecting, so the advertised window stays small: the server meets the
        # client's pace instead of filling megabytes of kernel buffers.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    for header in headers:
        head += header + "\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def read_head(sock, data=b""):
    """(status, headers, body bytes read so far) once the header block is in."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before the headers: {data[:200]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    return int(lines[0].split()[1]), headers, rest


def read_rest(sock, body):
    """Reads until the peer closes (or resets); returns everything."""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        body += chunk
    sock.close()
    return body


def get(port, path, headers=()):
    """(status, headers, body) of one GET read at full speed."""
    sock = request(port, "GET", path, headers=headers)
    status, head, body = read_head(sock)
    return status, head, read_rest(sock, body)


def timed_get(port, path):
    start = time.monotonic()
    status, _, _ = get(port, path)
    return status, time.monotonic() - start


def resident_bytes(server):
    with open(f"/proc/{server.proc.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def make_big_session(server, name):
    lines = ["section,label,value,detail"] + [f"Big,{FIELD},{FIELD},{FIELD}"] * ROWS
    body = ("\n".join(lines) + "\n").encode()
    sock = request(server.port, "POST", f"/api/v1/sessions?name={name}", body, headers=["Content-Type: text/csv"])
    status, _, rest = read_head(sock)
    rest = read_rest(sock, rest)
    assert status == 201, rest[:300]


@pytest.fixture(scope="module")
def big():
    s = Server("--memory", "--max-http-body-bytes", str(32 * 1_048_576), "--api-rate", "1000", "--api-burst", "1000",
               "--demo-large-rows", "100")
    make_big_session(s, "big")
    yield s
    s.stop()


def test_a_pathological_find_leaves_healthz_and_another_sessions_changes_answered_promptly(big):
    port = big.port
    path = "/api/v1/sessions/big/find?" + urllib.parse.urlencode({"q": PATHOLOGICAL, "limit": 5})
    # The same measurement without a find running, for the record (and a warm server).
    quiet = [timed_get(port, "/healthz") for _ in range(5)]
    assert all(status == 200 for status, _ in quiet)

    finds, stop = [], threading.Event()

    def keep_finding():
        # One find at a time, paced: far below the API's rate; the point is the find's cost.
        while not stop.is_set():
            start = time.monotonic()
            status, _, body = get(port, path)
            finds.append((status, body, time.monotonic() - start))
            time.sleep(0.02)

    async def scenario():
        searcher = await Client.join(big.ws, session="big", name="seeker")
        member = await Client.join(big.ws, session="demo", name="ana")
        section = member.welcome["table"]["sections"][0]["key"]
        thread = threading.Thread(target=keep_finding)
        thread.start()
        try:
            while not finds and thread.is_alive():
                await asyncio.sleep(0.01)  # the first find has run once: the table is warm
            health, toggles, found = [], [], []
            for round in range(20):
                # A member's find of the same kind over WebSocket, too (one at a time: a second
                # while the first runs would be refused, see the next test).
                await searcher.send({"type": "find", "q": PATHOLOGICAL, "id": f"f{round}"})
                status, took = await asyncio.to_thread(timed_get, port, "/healthz")
                assert status == 200
                health.append(took)
                start = time.monotonic()
                await member.send({"type": "toggle", "section": section, "id": f"t{round}"})
                await member.next(lambda m: m["type"] == "ack" and m["id"] == f"t{round}", timeout=10)
                toggles.append(time.monotonic() - start)
                found.append(await searcher.next(lambda m: m["type"] == "found", timeout=30))
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await asyncio.to_thread(thread.join)
        await searcher.close()
        await member.close()
        return health, toggles, found

    health, toggles, found = run(scenario())
    assert finds and all(status == 200 for status, _, _ in finds)
    assert all(json.loads(body)["rows"] == [] for _, body, _ in finds)
    assert all(message["rows"] == [] for message in found)
    # Seconds on the service thread before (2.2 s here for one find); now it serves on.
    print(f"healthz quiet max {max(t for _, t in quiet):.3f}s, during finds max {max(health):.3f}s; "
          f"toggle ack max {max(toggles):.3f}s; find took {min(t for _, _, t in finds):.3f}-{max(t for _, _, t in finds):.3f}s")
    # Bounds far above what the fix gives (milliseconds) and below what one find on the service
    # thread cost even on a quiet machine (2.2 s): they hold with a busy core beside the tests.
    assert max(health) < 1.0, health
    assert max(toggles) < 1.0, toggles


def test_finds_sent_while_ones_own_runs_are_refused_and_do_not_delay_another_members_find(big):
    """One member sends 50 costly finds back to back: those that come while its search runs are
    answered `rate_limited` (one search each on the queue), so another member's find is not
    lined up behind dozens of them."""

    async def scenario():
        flooder = await Client.join(big.ws, session="big", name="flooder")
        other = await Client.join(big.ws, session="big", name="other")
        for i in range(50):
            await flooder.send({"type": "find", "q": PATHOLOGICAL, "id": f"x{i}"})
        start = time.monotonic()
        await other.send({"type": "find", "q": PATHOLOGICAL, "id": "mine"})
        mine = await other.next(lambda m: m["type"] == "found", timeout=30)
        took = time.monotonic() - start
        answers = [await flooder.next(lambda m: m.get("id", "").startswith("x"), timeout=30) for _ in range(50)]
        # A find of the flooder's alone, for the record: what "behind one search" costs.
        start = time.monotonic()
        await flooder.send({"type": "find", "q": PATHOLOGICAL, "id": "alone"})
        await flooder.next(lambda m: m["type"] == "found" and m["id"] == "alone", timeout=30)
        alone = time.monotonic() - start
        await flooder.close()
        await other.close()
        return mine, took, answers, alone

    mine, took, answers, alone = run(scenario())
    assert mine["rows"] == []
    kinds = [m["type"] if m["type"] == "found" else m["code"] for m in answers]
    assert set(kinds) <= {"found", "rate_limited"}, kinds
    assert kinds.count("found") >= 1 and kinds.count("rate_limited") >= 1, kinds
    print(f"{kinds.count('rate_limited')} of 50 refused; the other member's find took {took:.3f}s, one alone {alone:.3f}s")
    # Behind at most the flooder's one search and its own, not dozens (generous for slow machines).
    assert took < 10 * alone + 1.0, (took, alone)


def test_thirty_slow_readers_of_a_large_export_share_one_copy_and_each_gets_the_exact_bytes(big):
    port = big.port
    status, head, reference = get(port, "/api/v1/sessions/big")
    assert status == 200 and len(reference) == int(head["content-length"]) > 15_000_000
    time.sleep(0.5)
    before = resident_bytes(big)
    readers = [request(port, "GET", "/api/v1/sessions/big", rcvbuf=65_536) for _ in range(30)]
    heads = [read_head(sock) for sock in readers]
    assert all(status == 200 for status, _, _ in heads)
    bodies = [rest for _, _, rest in heads]
    # Slow for three seconds: 4 KiB per reader every 0.1 s (about 40 KB/s, above the minimum
    # rate), then the rest at full speed.
    peak = before
    for _ in range(30):
        for index, sock in enumerate(readers):
            bodies[index] += sock.recv(4_096)
        peak = max(peak, resident_bytes(big))
        time.sleep(0.1)
    for index, sock in enumerate(readers):
        bodies[index] = read_rest(sock, bodies[index])
    assert all(body == reference for body in bodies)
    growth = peak - before
    print(f"export {len(reference)} bytes; RSS {before / 1e6:.0f} MB -> peak {peak / 1e6:.0f} MB (+{growth / 1e6:.0f} MB) "
          f"with 30 readers")
    # One private copy per reader was +30 × the export; now one shared copy and a chunk each.
    assert growth < 4 * len(reference), growth
    assert get(port, "/healthz")[0] == 200


def test_a_reader_below_the_minimum_rate_is_dropped_while_a_normal_one_completes():
    s = Server("--memory", "--demo-large-rows", "300000", "--http-min-send-rate", "131072", "--http-send-window-secs", "1")
    try:
        status, head, reference = get(s.port, "/api/v1/sessions/demo")
        assert status == 200 and len(reference) > 10_000_000
        slow = request(s.port, "GET", "/api/v1/sessions/demo", rcvbuf=8_192)
        fast = request(s.port, "GET", "/api/v1/sessions/demo")
        status, _, slow_body = read_head(slow)
        assert status == 200
        # The normal reader takes its answer at full speed while the slow one trickles.
        status, _, fast_body = read_head(fast)
        assert read_rest(fast, fast_body) == reference
        # 1 KiB every 0.25 s (4 KB/s) for 8 s against a minimum of 128 KiB/s over 1 s windows:
        # dropped within a few windows. Then read at full speed: a reader still served would get
        # the rest; a dropped one gets what the kernel held and the end of the connection.
        for _ in range(32):
            slow_body += slow.recv(1_024)
            time.sleep(0.25)
        slow_body = read_rest(slow, slow_body)
        print(f"slow reader got {len(slow_body)} of {len(reference)} bytes before it was dropped")
        assert len(slow_body) < len(reference)
        assert reference.startswith(slow_body)
        assert s.alive() and get(s.port, "/healthz")[0] == 200
    finally:
        s.stop()


def test_more_answers_in_flight_from_one_address_than_its_cap_get_429_until_one_ends():
    s = Server("--memory", "--demo-large-rows", "300000", "--max-http-requests-per-ip", "3")
    try:
        # Three exports the client does not read: each stays in flight (being written).
        holding = [request(s.port, "GET", "/api/v1/sessions/demo", rcvbuf=8_192) for _ in range(3)]
        assert all(read_head(sock)[0] == 200 for sock in holding)
        status, head, body = get(s.port, "/api/v1/sessions")
        assert status == 429 and head["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "too_many_requests"
        for sock in holding:
            sock.close()
        # The server notices the closes as it writes; then the address is under its cap again.
        deadline = time.monotonic() + 20
        while (status := get(s.port, "/api/v1/sessions")[0]) == 429 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200
    finally:
        s.stop()


def test_the_api_answers_429_with_retry_after_past_an_addresss_burst():
    s = Server("--memory", "--api-rate", "1", "--api-burst", "5")
    try:
        # The point is the refusal: 20 calls back to back against a burst of 5 at 1 a second
        # (only a machine taking over 15 s for them would see no 429).
        answers = [get(s.port, "/api/v1/sessions") for _ in range(20)]
        assert [status for status, _, _ in answers[:5]] == [200] * 5
        refused = [answer for answer in answers if answer[0] == 429]
        assert refused
        status, head, body = refused[0]
        assert int(head["retry-after"]) >= 1
        assert json.loads(body)["error"]["code"] == "rate_limited"
        # Health checks are not the API's: never limited.
        assert get(s.port, "/healthz")[0] == 200
        time.sleep(int(head["retry-after"]) + 0.1)
        assert get(s.port, "/api/v1/sessions")[0] == 200
    finally:
        s.stop()

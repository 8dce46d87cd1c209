"""The C WebSocket/HTTP wrapper (CFoldtableWS) through foldtable-echo: framing, limits, hostile
peers, static files, TLS and shutdown. Echo replies may arrive joined by '\\n' in one frame
(outbound batching), so echoed messages never contain a newline and replies are split."""
import asyncio
import base64
import contextlib
import os
import re
import socket
import ssl
import time

import pytest
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from foldtabled import read_frame

# ---- raw WebSocket helpers (for what a well-behaved client library refuses to send) ----------

TEXT, BINARY, CONT, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA


def raw_ws(port, path="/ws", rcvbuf=None):
    """A TCP socket that completed the WebSocket handshake."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "connection closed during handshake"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def mask(data, key):
    """XOR with the repeated 4-byte key, as one big-integer operation (fast for 64 KB)."""
    n = len(data)
    if not n:
        return data
    keystream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(keystream, "big")).to_bytes(n, "big")


def frame(opcode, payload=b"", fin=True, masked=True, rsv=0, length=None):
    """One client frame; length overrides the announced payload length (payload is then only
    the first bytes of it, masked with the same key)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    bit = 0x80 if masked else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + mask(payload, key)


def close_code(sock, timeout=5):
    """Read until the server's close frame: its code, or 1006 if the TCP connection just ended."""
    sock.settimeout(timeout)
    buf = b""
    while True:
        opcode, payload, buf = read_frame(sock, buf)
        if opcode is None:
            return 1006
        if opcode == CLOSE:
            return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005


def closed_with(ws_call):
    """Run a websockets call that must fail because the server closed; the server's code."""
    with pytest.raises(ConnectionClosed) as info:
        ws_call()
    return info.value.rcvd.code if info.value.rcvd else 1006


def http_get(port, path):
    """(status or None when the server hung up without answering, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    if not data.startswith(b"HTTP/1."):
        return None, {}, data
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def echo_parts(ws, count):
    """Receive until count newline-separated echoes arrived; (parts, frames received)."""
    parts, frames = [], 0
    while len(parts) < count:
        parts.extend(ws.recv(timeout=10).split("\n"))
        frames += 1
    return parts, frames


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# ---- echo and framing ------------------------------------------------------------------------


def unacked_segments(sock):
    """tcpi_unacked of the client's socket: segments sent that the server has not yet ACKed."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int.from_bytes(info[24:28], "little")  # after 8 bytes of fields, then rto, ato, snd_mss, rcv_mss


def test_a_read_with_no_reply_has_its_tcp_ack_held_for_the_next_reply(echo_server):
    # The server turns TCP_QUICKACK off once per turn a connection reads (ftws_ws.c), so a
    # change acknowledged after its commit carries the TCP ACK instead of costing a segment.
    # Linux quick-acks after its delayed-ACK timer fired, so: let it fire after a first fragment
    # (no reply), send a second (quick-acked, and the server turns quick ACKs off on reading it),
    # then a pong, which gets no reply: its ACK must be held, not sent at once.
    sock = raw_ws(echo_server.port)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(frame(TEXT, b"a", fin=False))
    timely = held = 0
    for attempt in range(10):
        time.sleep(0.3)  # the delayed-ACK timer (40 ms to 200 ms) has fired
        sock.sendall(frame(CONT, b"b", fin=False))
        deadline = time.monotonic() + 2
        while unacked_segments(sock) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert unacked_segments(sock) == 0
        time.sleep(0.005)  # the server has read the fragment and turned quick ACKs off
        sent = time.monotonic()
        sock.sendall(frame(PONG))
        time.sleep(0.005)
        unacked = unacked_segments(sock)
        if time.monotonic() - sent < 0.03:  # well inside the 40 ms timer, so the answer counts
            timely += 1
            # A server that has not yet run since the fragment arrived (a busy machine) still
            # quick-acks: only a server that never holds the ACK gets it sent at once every time.
            if unacked == 1:
                held += 1
                break
    assert timely, "the test never sampled within 30 ms of its send (an overloaded machine)"
    assert held, f"the server acknowledged a read at once instead of holding the ACK ({timely} timely tries)"
    deadline = time.monotonic() + 2
    while unacked_segments(sock) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert unacked_segments(sock) == 0, "the held ACK never went out"
    sock.sendall(frame(CONT, b"c"))
    buf = b""
    opcode, payload, buf = read_frame(sock, buf)
    assert (opcode, payload) == (TEXT, b"abc")
    sock.close()


def test_a_text_message_is_echoed(echo_server):
    with connect(echo_server.ws_url) as ws:
        ws.send("hello, table")
        assert ws.recv(timeout=5) == "hello, table"


def test_a_fragmented_text_message_is_echoed_whole(echo_server):
    with connect(echo_server.ws_url) as ws:
        ws.send(["first part ", "second part ", "third €"])
        assert ws.recv(timeout=5) == "first part second part third €"


def test_a_binary_message_is_echoed_as_binary_through_the_binary_callback(echo_server):
    with connect(echo_server.ws_url) as ws:
        ws.send(b"\x00\x01\xffbinary")
        assert ws.recv(timeout=5) == b"\x00\x01\xffbinary"


def test_clients_with_and_without_the_foldtable_subprotocol_are_both_accepted(echo_server):
    with connect(echo_server.ws_url) as ws:
        assert ws.subprotocol is None
        ws.send("plain")
        assert ws.recv(timeout=5) == "plain"
    with connect(echo_server.ws_url, subprotocols=["foldtable"]) as ws:
        assert ws.subprotocol == "foldtable"


def test_64_concurrent_clients_each_get_their_200_echoes_in_order(echo_server):
    async def client(i):
        async with aconnect(echo_server.ws_url) as ws:
            sent = [f"client {i} message {j}" for j in range(200)]
            for text in sent:
                await ws.send(text)
            got = []
            while len(got) < len(sent):
                got.extend((await asyncio.wait_for(ws.recv(), 10)).split("\n"))
            return got == sent

    async def main():
        return await asyncio.gather(*(client(i) for i in range(64)))

    assert all(asyncio.run(main()))


def test_500_quick_messages_are_echoed_in_order_and_batched_into_fewer_frames(echo_server):
    # All 500 frames leave in one write, so they are queued before the server may write: the
    # echoes must then share frames. (Sent one by one, a fast enough server may echo each alone.)
    sock = raw_ws(echo_server.port)
    sent = [f"quick {j}" for j in range(500)]
    sock.sendall(b"".join(frame(TEXT, text.encode()) for text in sent))
    parts, frames, buf = [], 0, b""
    while len(parts) < len(sent):
        opcode, payload, buf = read_frame(sock, buf)
        assert opcode == TEXT, f"expected a text frame, got {opcode}"
        parts.extend(payload.decode().split("\n"))
        frames += 1
    sock.close()
    assert parts == sent
    assert frames < len(sent)


def test_messages_of_mixed_sizes_around_the_batch_limit_echo_intact_and_in_order(echo_server):
    sizes = [1, 65535, 2, 65536, 0, 30000, 40000, 70000, 3, 65534, 1, 1] * 4
    with connect(echo_server.ws_url, max_size=None) as ws:
        sent = [chr(ord("a") + i % 26) * n for i, n in enumerate(sizes)]
        for text in sent:
            ws.send(text)
        parts, _ = echo_parts(ws, len(sent))
        assert parts == sent


# ---- limits ----------------------------------------------------------------------------------


@pytest.fixture
def small_cap_server(echo_server_factory):
    return echo_server_factory("--max-message-bytes", "1024")


def test_a_message_of_exactly_the_size_cap_is_accepted(small_cap_server):
    with connect(small_cap_server.ws_url) as ws:
        ws.send("a" * 1024)
        assert ws.recv(timeout=5) == "a" * 1024


def test_a_message_one_byte_over_the_cap_closes_1009(small_cap_server):
    with connect(small_cap_server.ws_url) as ws:
        ws.send("a" * 1025)
        assert closed_with(lambda: ws.recv(timeout=5)) == 1009


def test_a_fragmented_message_growing_over_the_cap_closes_1009(small_cap_server):
    with connect(small_cap_server.ws_url) as ws:
        # The close may already arrive while the second fragment is being sent.
        assert closed_with(lambda: (ws.send(["a" * 600, "b" * 600]), ws.recv(timeout=5))) == 1009


def test_a_frame_announcing_2_to_the_63_minus_1_bytes_closes_1009_without_allocating(echo_server):
    before = echo_server.rss_kb()
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"x" * 4096, length=2**63 - 1))
    assert close_code(sock) == 1009
    sock.close()
    assert echo_server.rss_kb() - before < 8 * 1024


def test_a_64_bit_length_with_the_top_bit_set_closes_1002(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"x" * 64, length=2**63))
    assert close_code(sock) == 1002
    sock.close()


# ---- protocol violations -------------------------------------------------------------------


def test_invalid_utf8_closes_1007(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"ok \xff\xfe"))
    assert close_code(sock) == 1007


def test_invalid_utf8_split_across_two_fragments_closes_1007(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"euro \xe2\x82", fin=False) + frame(CONT, b"("))
    assert close_code(sock) == 1007


def test_a_utf8_character_split_across_two_fragments_is_accepted(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"euro \xe2\x82", fin=False) + frame(CONT, b"\xac"))
    opcode, payload, _ = read_frame(sock, b"")
    assert (opcode, payload.decode()) == (TEXT, "euro €")


@pytest.mark.xfail(strict=True, reason="lws 4.1.6 accepts unmasked client frames (the check "
                   "only arrived upstream later); nothing above the parser can see the mask bit")
def test_an_unmasked_client_frame_closes_1002(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"not masked", masked=False))
    assert close_code(sock, timeout=1) == 1002


def test_reserved_bits_close_1002(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(TEXT, b"rsv1 set", rsv=0b100))
    assert close_code(sock) == 1002


def test_an_unknown_opcode_closes_1002(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(0x3, b"reserved opcode"))
    assert close_code(sock) == 1002


def test_a_ping_longer_than_125_bytes_closes_1002(echo_server):
    sock = raw_ws(echo_server.port)
    sock.sendall(frame(PING, b"p" * 126))
    assert close_code(sock) == 1002


def test_a_binary_message_closes_1003_when_the_owner_takes_no_binary_messages(echo_server_factory):
    server = echo_server_factory("--text-only")
    with connect(server.ws_url) as ws:
        ws.send("text still goes through")
        assert ws.recv(timeout=5) == "text still goes through"
        ws.send(b"binary")
        assert closed_with(lambda: ws.recv(timeout=5)) == 1003


# ---- slow and silent peers ---------------------------------------------------------------------


def test_a_reader_that_never_reads_is_closed_as_slow_while_others_are_served(echo_server_factory):
    server = echo_server_factory("--max-queue-bytes", "262144", "--send-stall", "1", "--log-closes")
    baseline = server.rss_kb()
    sock = raw_ws(server.port, rcvbuf=4096)
    big = frame(TEXT, b"s" * 65536)
    try:
        for _ in range(400):  # 26 MB of echoes requested, never read
            sock.sendall(big)
    except OSError:
        pass  # the server hung up on us: expected
    assert wait_for(lambda: re.search(r"^close \d+ 4008$", server.stderr(), re.M))
    with connect(server.ws_url) as ws:
        ws.send("still serving")
        assert ws.recv(timeout=5) == "still serving"
    assert server.rss_kb() - baseline < 32 * 1024
    assert close_code(sock) in (4008, 1006)
    sock.close()


@pytest.fixture
def ping_server(echo_server_factory):
    return echo_server_factory("--ping-interval", "1", "--hangup", "2", "--log-closes")


def test_an_idle_client_that_answers_pings_stays_connected(ping_server):
    with connect(ping_server.ws_url, ping_interval=None) as ws:
        time.sleep(2.6)  # past the hangup time: only the pongs keep it alive
        ws.send("still here")
        assert ws.recv(timeout=5) == "still here"


def test_a_client_that_never_answers_pings_is_hung_up(ping_server):
    sock = raw_ws(ping_server.port)
    start = time.monotonic()
    sock.settimeout(3)
    opcode, _, buf = read_frame(sock, b"")
    assert opcode == PING
    # Ping interval 1 s, hangup 2 s, each up to a second late (the keepalive wheel's slot).
    assert time.monotonic() - start < 2.5
    while opcode is not None and opcode != CLOSE:
        opcode, _, buf = read_frame(sock, buf)
    assert time.monotonic() - start < 3.5
    assert wait_for(lambda: re.search(r"^close \d+ 1006$", ping_server.stderr(), re.M))


def test_a_client_that_keeps_sending_is_never_pinged(ping_server):
    # Pings are for silent connections ("idle seconds before a ping"): traffic is proof enough
    # that the peer is there. lws 4.1.6's own keepalive pinged every connection once per
    # interval, busy or not, and re-armed a timer in a list of all of them for each ping.
    sock = raw_ws(ping_server.port)
    sock.settimeout(3)
    buf = b""
    start = time.monotonic()
    while time.monotonic() - start < 3.5:  # past 3 ping intervals and the hangup time
        sock.sendall(frame(TEXT, b"busy"))
        opcode, payload, buf = read_frame(sock, buf)
        assert (opcode, payload) == (TEXT, b"busy")
        time.sleep(0.3)
    sock.close()


def test_a_protocol_violation_on_a_connection_older_than_the_hangup_time_still_closes_1002(ping_server):
    # The 1002 for a violation lws fails without a reason (ftws__ws_drop_protocol) used to be
    # withheld once the connection was older than the hangup time since its last pong: lws's
    # keepalive pinged with an empty payload, whose pong lws never reported, so every connection
    # past that age looked like one lws's keepalive had hung up.
    sock = raw_ws(ping_server.port)
    sock.settimeout(3)
    buf = b""
    start = time.monotonic()
    while time.monotonic() - start < 3.0:  # past the hangup time (2 s), answering every ping
        opcode, payload, buf = read_frame(sock, buf)
        assert opcode == PING
        sock.sendall(frame(PONG, payload))
    sock.sendall(frame(PING, b"p" * 126))
    assert close_code(sock) == 1002


def test_a_silent_client_is_pinged_once_per_interval_while_it_answers(ping_server):
    sock = raw_ws(ping_server.port)
    sock.settimeout(3)
    buf = b""
    pings = []
    start = time.monotonic()
    while time.monotonic() - start < 6.5:
        opcode, payload, buf = read_frame(sock, buf)
        assert opcode == PING
        pings.append(time.monotonic() - start)
        sock.sendall(frame(PONG, payload))  # a pong echoes the ping's payload
    # Interval 1 s, counted from the last pong, up to a second late (the wheel's slot).
    gaps = [later - earlier for earlier, later in zip(pings, pings[1:])]
    assert len(pings) >= 3 and all(0.9 < gap < 2.3 for gap in gaps), pings
    sock.close()


# ---- HTTP --------------------------------------------------------------------------------------


def test_index_html_is_served_at_root_with_html_type_and_security_headers(echo_server):
    status, headers, body = http_get(echo_server.port, "/")
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert headers["cache-control"] == "no-cache"
    assert "script-src 'self'" in headers["content-security-policy"]
    assert b"<title>foldtable</title>" in body


def test_assets_are_served_with_their_content_types(echo_server):
    for path, type_prefix in [("/app.js", "text/javascript"), ("/style.css", "text/css"),
                              ("/logo.svg", "image/svg+xml")]:
        status, headers, _ = http_get(echo_server.port, path)
        assert (status, headers["content-type"].split(";")[0]) == (200, type_prefix), path


def test_paths_under_the_spa_prefix_serve_index_html(echo_server):
    for path in ["/s/demo", "/s/some/deep/name"]:
        status, headers, body = http_get(echo_server.port, path)
        assert status == 200 and b"<title>foldtable</title>" in body, path


def test_an_unknown_path_is_404(echo_server):
    assert http_get(echo_server.port, "/nothing-here.js")[0] == 404


@pytest.mark.parametrize("path", [
    "/../secret.txt", "/../../../../etc/passwd", "/%2e%2e/secret.txt", "/%2e%2e%2fsecret.txt",
    "/%252e%252e/secret.txt", "/escape.txt%00", "/escape.txt%00.html", "/%00../secret.txt",
    "/%c0%ae%c0%ae/secret.txt", "//etc/passwd", "/escape.txt", "/up/secret.txt", "/up/",
    "/.git/config", "/%2egit/config", "/.git/", "/" + "a" * 8192,
])
def test_traversal_symlink_dotfile_and_huge_paths_never_return_the_secret(echo_server,
                                                                         echo_web_root, path):
    secret = (echo_web_root.parent / "secret.txt").read_bytes()
    status, _, body = http_get(echo_server.port, path)
    assert secret not in body and b"root:" not in body
    # None: lws's own request parser hung up (a decoded NUL followed by more path, or a
    # request line over its 4 KB header budget) without answering.
    assert status in (400, 403, 404, None)


def test_a_websocket_upgrade_on_another_path_is_refused(echo_server):
    with pytest.raises(InvalidStatus) as info:
        connect(f"ws://127.0.0.1:{echo_server.port}/other")
    assert info.value.response.status_code == 404


# ---- TLS ---------------------------------------------------------------------------------------


def test_wss_echo_works_with_a_test_certificate(tls_files, echo_server_factory):
    server = echo_server_factory("--tls-cert", str(tls_files / "a.crt"), "--tls-key",
                                 str(tls_files / "a.key"))
    assert server.url.startswith("https://")
    context = ssl.create_default_context(cafile=str(tls_files / "a.crt"))
    with connect(server.ws_url, ssl=context, server_hostname="localhost") as ws:
        ws.send("over tls")
        assert ws.recv(timeout=5) == "over tls"


def test_a_missing_tls_key_exits_1_with_one_line_naming_the_file(tls_files, tmp_path,
                                                                   echo_failed_start):
    missing = tmp_path / "nope.key"
    code, stderr = echo_failed_start("--tls-cert", str(tls_files / "a.crt"), "--tls-key",
                                     str(missing))
    lines = stderr.strip().splitlines()
    assert code == 1 and len(lines) == 1 and str(missing) in lines[0]


def test_a_mismatched_tls_key_exits_1_with_one_line(tls_files, echo_failed_start):
    code, stderr = echo_failed_start("--tls-cert", str(tls_files / "a.crt"), "--tls-key",
                                     str(tls_files / "b.key"))
    assert code == 1 and len(stderr.strip().splitlines()) == 1


def test_plaintext_http_to_the_tls_port_does_not_crash_the_server(tls_files, echo_server_factory):
    server = echo_server_factory("--tls-cert", str(tls_files / "a.crt"), "--tls-key",
                                 str(tls_files / "a.key"))
    status, _, _ = http_get(server.port, "/")
    assert status is None or status >= 400
    context = ssl.create_default_context(cafile=str(tls_files / "a.crt"))
    with connect(server.ws_url, ssl=context, server_hostname="localhost") as ws:
        ws.send("still alive")
        assert ws.recv(timeout=5) == "still alive"
    assert server.proc.poll() is None


# ---- shutdown ----------------------------------------------------------------------------------


def test_sigterm_closes_clients_with_1001_and_exits_0(echo_server_factory):
    server = echo_server_factory()
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(connect(server.ws_url)) for _ in range(3)]
        for ws in clients:
            ws.send("hi")
            assert ws.recv(timeout=5) == "hi"
        assert server.stop() == 0
        for ws in clients:
            assert closed_with(lambda: ws.recv(timeout=5)) == 1001

"""Webhooks against the real foldtabled and a real local receiver (Python's http.server on a
thread) that verifies every signature twice: the Standard Webhooks way written here from the
spec (HMAC-SHA256 of "id.timestamp.body" with the base64-decoded part of whsec_..., base64,
"v1,"), and with the convention's own Python library (`standardwebhooks`, what receivers use).
The receiver fails, stalls and recovers; the server is killed with SIGKILL in between; every
change must still arrive, in seq order."""
import base64
import hashlib
import hmac
import http.client
import http.server
import json
import os
import re
import socket
import threading
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from foldtabled import Server

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Short timeouts and waits, so failures and recoveries fit a test's time.
FAST = ("--webhook-connect-ms", "500", "--webhook-timeout-ms", "1000", "--webhook-retry-max-ms", "2000")


def verify(secret, headers, body, tolerance=300):
    """The receiver's check, per the Standard Webhooks spec: raises on any mismatch."""
    msg_id, timestamp, signatures = headers["webhook-id"], headers["webhook-timestamp"], headers["webhook-signature"]
    assert msg_id and timestamp.isdigit(), headers
    assert abs(time.time() - int(timestamp)) <= tolerance, "timestamp outside tolerance"
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()).decode()
    for signature in signatures.split(" "):
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return
    raise AssertionError(f"no valid signature in {signatures!r}")


class Receiver:
    """A webhook receiver on 127.0.0.1: `mode` is "ok" (204), "fail" (500) or "stall" (answers
    nothing until after the server's timeout). `accepted` lists (id, body) of what it took."""

    def __init__(self, secret=SECRET):
        self.secret = secret
        self.mode = "ok"
        self.accepted = []
        self.attempts = 0
        self.bad = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.attempts += 1
                    mode = receiver.mode
                try:
                    verify(receiver.secret, headers, body)
                    Webhook(receiver.secret).verify(body, headers)
                except (AssertionError, WebhookVerificationError) as error:
                    with receiver.lock:
                        receiver.bad.append(str(error))
                if mode == "stall":
                    time.sleep(1.6)
                    status = 503
                else:
                    status = 204 if mode == "ok" else 500
                if status == 204:
                    with receiver.lock:
                        receiver.accepted.append((headers["webhook-id"], json.loads(body)))
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the server gave up on a stalled answer

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def seqs(self):
        with self.lock:
            return [body["seq"] for _, body in self.accepted]

    def close(self):
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def call(server, method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, (json.loads(raw) if raw else None)


def change(server, session, title):
    status, body = call(server, "POST", f"/api/v1/sessions/{session}/changes", {"type": "addSection", "title": title})
    assert status == 200, body
    return body["seq"]


def metric(server, name):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def assert_in_order_without_gaps(seqs, last):
    """Every seq from 1 to `last` arrived, first arrivals in order; a repeat only of one that
    came before (at-least-once)."""
    seen = []
    for seq in seqs:
        if seq in seen:
            continue
        seen.append(seq)
    assert seen == list(range(1, last + 1)), seqs


@pytest.mark.parametrize("storage", [(), ("--memory",)], ids=["sqlite", "memory"])
def test_every_change_arrives_once_in_seq_order_with_a_valid_signature(receiver, storage):
    # Both verifiers accept the convention's published vector and refuse a changed body.
    vector = {"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
              "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
    verify(SECRET, vector, b'{"test": 2432232314}', tolerance=10**10)
    with pytest.raises(AssertionError):
        verify(SECRET, vector, b'{"test": 2432232315}', tolerance=10**10)
    server = Server("--webhook-allow", "127.0.0.1/32", *FAST, *storage)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=hooked")[0] == 201
        status, body = call(server, "PUT", "/api/v1/sessions/hooked/webhook", {"url": receiver.url, "secret": SECRET})
        assert status == 200 and body["url"] == receiver.url and "secret" not in body, body
        for index in range(20):
            change(server, "hooked", f"t{index}")
        wait_for(lambda: len(receiver.accepted) >= 20, 20, "20 deliveries")
        time.sleep(0.3)
        assert receiver.seqs() == list(range(1, 21))
        assert receiver.bad == []
        ids = [msg_id for msg_id, _ in receiver.accepted]
        assert len(set(ids)) == 20 and all(msg_id.startswith("hooked-") and msg_id.endswith(f"-{seq}") for msg_id, seq in zip(ids, range(1, 21)))
        first = receiver.accepted[0][1]
        assert first["session"] == "hooked" and first["change"]["type"] == "addSection" and first["change"]["title"] == "t0"
        assert first["author"]["client"] == "api" and isinstance(first["time"], int)
        status, shown = call(server, "GET", "/api/v1/sessions/hooked/webhook")
        assert status == 200 and shown["state"] == "active" and shown["delivered"] == 20 and shown["backlog"] == 0 and shown["lagMs"] == 0
        assert "secret" not in json.dumps(shown)
        assert metric(server, "foldtable_webhook_deliveries_total") >= 20
        assert metric(server, "foldtable_webhooks") == 1

        # Without a secret one is made and answered once; deliveries are signed with it.
        status, body = call(server, "PUT", "/api/v1/sessions/hooked/webhook", {"url": receiver.url})
        assert status == 200 and body["secret"].startswith("whsec_") and body["from"] == 20
        receiver.secret = body["secret"]
        change(server, "hooked", "after")
        wait_for(lambda: len(receiver.accepted) >= 21, 10, "the delivery signed with the generated secret")
        assert receiver.seqs()[-1] == 21 and receiver.bad == []

        # The export lists the URL, never the secret; importing it sets no webhook.
        status, document = call(server, "GET", "/api/v1/sessions/hooked")
        assert status == 200 and document["webhook"] == {"url": receiver.url}
        assert "whsec_" not in json.dumps(document)
        assert call(server, "POST", "/api/v1/sessions?name=copied", document)[0] == 201
        assert call(server, "GET", "/api/v1/sessions/copied/webhook")[0] == 404

        assert call(server, "DELETE", "/api/v1/sessions/hooked/webhook")[0] == 204
        assert call(server, "GET", "/api/v1/sessions/hooked/webhook")[0] == 404
        change(server, "hooked", "unheard")
        time.sleep(0.5)
        assert len(receiver.accepted) == 21
    finally:
        server.stop()


def test_a_receiver_that_fails_and_stalls_for_thirty_seconds_gets_everything_after_across_a_kill_9(receiver, tmp_path):
    data = str(tmp_path / "data")
    server = Server("--webhook-allow", "127.0.0.1/32", "--data-dir", data, *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=flaky")[0] == 201
        assert call(server, "PUT", "/api/v1/sessions/flaky/webhook", {"url": receiver.url, "secret": SECRET})[0] == 200
        for index in range(3):
            change(server, "flaky", f"early{index}")
        wait_for(lambda: len(receiver.accepted) >= 3, 10, "the first deliveries")
        started = time.monotonic()
        receiver.mode = "fail"
        last = 3
        for index in range(5):
            last = change(server, "flaky", f"failing{index}")
            time.sleep(1)
        assert metric(server, "foldtable_webhook_failures_total") >= 1
        receiver.mode = "stall"
        for index in range(4):
            last = change(server, "flaky", f"stalling{index}")
            time.sleep(1)
        status, shown = call(server, "GET", "/api/v1/sessions/flaky/webhook")
        assert shown["state"] == "retrying" and shown["delivered"] == 3 and shown["backlog"] == last - 3, shown
        assert shown["lagMs"] >= 3000, shown
        server.proc.kill()
        server.proc.wait()

        server = Server("--webhook-allow", "127.0.0.1/32", "--data-dir", data, *FAST)
        receiver.mode = "fail"
        for index in range(5):
            last = change(server, "flaky", f"restarted{index}")
            time.sleep(1)
        while time.monotonic() - started < 30:
            time.sleep(0.5)
        assert metric(server, "foldtable_webhook_retries_total") >= 1
        receiver.mode = "ok"
        wait_for(lambda: set(receiver.seqs()) >= set(range(1, last + 1)), 20, "every change after the recovery")
        time.sleep(0.5)
        assert_in_order_without_gaps(receiver.seqs(), last)
        assert receiver.bad == []
        # Each message's id is the same whenever it is sent again.
        ids = {}
        for msg_id, body in receiver.accepted:
            assert ids.setdefault(body["seq"], msg_id) == msg_id
        status, shown = call(server, "GET", "/api/v1/sessions/flaky/webhook")
        assert shown["state"] == "active" and shown["delivered"] == last and shown["backlog"] == 0, shown
        assert metric(server, "foldtable_webhook_backlog_events") == 0
    finally:
        server.stop()


def test_a_webhook_to_loopback_is_refused_unless_allowed(receiver):
    server = Server("--log-level", "warning", *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=guarded")[0] == 201
        for url in (receiver.url, f"http://localhost:{receiver.port}/hook", f"http://[::ffff:127.0.0.1]:{receiver.port}/",
                    "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/"):
            status, body = call(server, "PUT", "/api/v1/sessions/guarded/webhook", {"url": url, "secret": SECRET})
            assert status == 400 and body["error"]["code"] == "invalid_value" and body["error"]["field"] == "url", (url, body)
            assert "--webhook-allow" in body["error"]["message"]
        status, body = call(server, "PUT", "/api/v1/sessions/guarded/webhook", {"url": "ftp://example.com/"})
        assert status == 400 and body["error"]["field"] == "url"
        # A name that resolves to loopback passes the PUT and is refused at the connection.
        name = socket.gethostname()
        try:
            resolved = {info[4][0] for info in socket.getaddrinfo(name, receiver.port, proto=socket.IPPROTO_TCP)}
        except OSError:
            resolved = set()
        if not resolved or not all(address.startswith("127.") or address == "::1" for address in resolved):
            pytest.skip(f"the host name {name} does not resolve to loopback only here")
        status, body = call(server, "PUT", "/api/v1/sessions/guarded/webhook", {"url": f"http://{name}:{receiver.port}/hook", "secret": SECRET})
        assert status == 200, body
        change(server, "guarded", "x")
        wait_for(lambda: (metric(server, "foldtable_webhook_refused_addresses_total") or 0) >= 1, 10, "a refused connection")
        assert receiver.attempts == 0
        status, shown = call(server, "GET", "/api/v1/sessions/guarded/webhook")
        assert shown["state"] == "retrying" and shown["delivered"] == 0 and shown["failures"] >= 1, shown
    finally:
        server.stop()
    log = server.proc.stderr.read()
    assert "webhook_failed" in log and "refused_loopback" in log and "--webhook-allow" in log, log


def test_a_receiver_down_past_the_backlog_bound_is_paused_and_an_owner_resumes_it(receiver):
    server = Server("--webhook-allow", "127.0.0.1/32", "--webhook-backlog-events", "5", *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=paused")[0] == 201
        assert call(server, "PUT", "/api/v1/sessions/paused/webhook", {"url": receiver.url, "secret": SECRET})[0] == 200
        receiver.mode = "fail"
        for index in range(6):
            last = change(server, "paused", f"p{index}")
        wait_for(lambda: call(server, "GET", "/api/v1/sessions/paused/webhook")[1]["state"] == "paused_backlog", 10, "the pause")
        assert metric(server, "foldtable_webhooks_paused") == 1
        assert metric(server, "foldtable_webhook_pauses_total") == 1
        # A POST already on its way when the bound was passed may still land; none after it.
        time.sleep(1.5)
        attempts = receiver.attempts
        # Paused: changes still commit, nothing more is sent.
        change(server, "paused", "while paused")
        time.sleep(2.5)
        assert receiver.attempts == attempts
        receiver.mode = "ok"
        status, shown = call(server, "POST", "/api/v1/sessions/paused/webhook/resume")
        assert status == 200 and shown["state"] == "active" and shown["delivered"] == last + 1 and shown["backlog"] == 0, shown
        assert metric(server, "foldtable_webhooks_paused") == 0
        after = change(server, "paused", "after resume")
        wait_for(lambda: after in receiver.seqs(), 10, "the first change after the resume")
        assert receiver.seqs() == [after]
        assert call(server, "POST", "/api/v1/sessions/nosuch/webhook/resume")[0] == 404
    finally:
        server.stop()


def own_address():
    """This host's address on its default route (no packet is sent), or None."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("8.8.8.8", 53))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_the_hosts_own_address_is_refused_unless_allowed():
    address = own_address()
    if address is None:
        pytest.skip("no interface address besides loopback here")
    # A receiver on every interface: reachable at the host's own address when the operator lists it.
    outside = Receiver()
    outside.http.server_close()
    outside.http = http.server.ThreadingHTTPServer(("0.0.0.0", 0), outside.http.RequestHandlerClass)
    outside.port = outside.http.server_address[1]
    threading.Thread(target=outside.http.serve_forever, daemon=True).start()
    url = f"http://{address}:{outside.port}/hook"
    server = Server("--webhook-allow", "127.0.0.1/32", *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=own")[0] == 201
        status, body = call(server, "PUT", "/api/v1/sessions/own/webhook", {"url": url, "secret": SECRET})
        assert status == 400 and body["error"]["field"] == "url" and "--webhook-allow" in body["error"]["message"], body
    finally:
        server.stop()
    server = Server("--webhook-allow", f"{address}/32", *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=own")[0] == 201
        assert call(server, "PUT", "/api/v1/sessions/own/webhook", {"url": url, "secret": SECRET})[0] == 200
        change(server, "own", "listed")
        wait_for(lambda: outside.seqs() == [1], 10, "the delivery to the listed own address")
    finally:
        server.stop()
        outside.close()


def test_a_put_racing_the_sessions_delete_leaves_no_webhook_for_the_next_session_of_that_name(tmp_path):
    server = Server("--data-dir", str(tmp_path / "data"), "--api-rate", "10000", "--api-burst", "10000", *FAST)

    def send(method, path, body=b""):
        connection = socket.create_connection(("127.0.0.1", server.port))
        connection.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        return connection

    try:
        hook = json.dumps({"url": "https://hooks.example.com/old-owner", "secret": SECRET}).encode()
        for _ in range(20):
            assert call(server, "POST", "/api/v1/sessions?name=raced")[0] == 201
            deleting = send("DELETE", "/api/v1/sessions/raced")
            putting = send("PUT", "/api/v1/sessions/raced/webhook", hook)
            for connection in (deleting, putting):
                connection.recv(4096)
                connection.close()
            time.sleep(0.05)
            if call(server, "GET", "/api/v1/sessions/raced")[0] == 200:
                call(server, "DELETE", "/api/v1/sessions/raced")
            assert call(server, "POST", "/api/v1/sessions?name=raced")[0] == 201
            status, body = call(server, "GET", "/api/v1/sessions/raced/webhook")
            assert status == 404, body
            assert call(server, "DELETE", "/api/v1/sessions/raced")[0] == 204
        server.stop()
        # Nor is one left in the store for a restart to find.
        server = Server("--data-dir", str(tmp_path / "data"), *FAST)
        assert call(server, "POST", "/api/v1/sessions?name=raced")[0] == 201
        assert call(server, "GET", "/api/v1/sessions/raced/webhook")[0] == 404
    finally:
        server.stop()


def slow_receiver(delay):
    """A receiver that answers 204 after `delay` seconds; returns (url, seqs taken, server)."""
    taken = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            time.sleep(delay)
            taken.append(body["seq"])
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/hook", taken, httpd


def test_a_resume_during_a_delivery_keeps_its_cursor_and_resuming_an_active_webhook_is_409():
    url, taken, httpd = slow_receiver(1.0)
    server = Server("--memory", "--webhook-allow", "127.0.0.1/32", "--webhook-backlog-events", "5", "--webhook-timeout-ms", "3000")
    try:
        assert call(server, "POST", "/api/v1/sessions?name=s")[0] == 201
        assert call(server, "PUT", "/api/v1/sessions/s/webhook", {"url": url, "secret": SECRET})[0] == 200
        for index in range(8):
            last = change(server, "s", f"t{index}")
        wait_for(lambda: call(server, "GET", "/api/v1/sessions/s/webhook")[1]["state"] == "paused_backlog", 5, "the pause")
        status, shown = call(server, "POST", "/api/v1/sessions/s/webhook/resume")
        assert status == 200 and shown["delivered"] == last, shown
        # The POST of seq 1 was in flight: its late 204 must not move the cursor back.
        wait_for(lambda: taken, 5, "the in-flight delivery's answer")
        time.sleep(0.5)
        status, shown = call(server, "GET", "/api/v1/sessions/s/webhook")
        assert shown["delivered"] == last and shown["backlog"] == 0, shown
        status, body = call(server, "POST", "/api/v1/sessions/s/webhook/resume")
        assert status == 409 and body["error"]["code"] == "webhook_not_paused", body
    finally:
        server.stop()
        httpd.shutdown()
        httpd.server_close()


def test_a_second_put_starts_the_new_webhook_after_its_answers_from_even_across_a_kill_9(tmp_path):
    old_url, _, old_httpd = slow_receiver(0.02)
    new_url, new_taken, new_httpd = slow_receiver(0)
    data = str(tmp_path / "data")
    server = Server("--data-dir", data, "--webhook-allow", "127.0.0.1/32", "--api-rate", "10000", "--api-burst", "10000", *FAST)
    try:
        for round in range(4):
            name = f"r{round}"
            new_taken.clear()
            assert call(server, "POST", f"/api/v1/sessions?name={name}")[0] == 201
            assert call(server, "PUT", f"/api/v1/sessions/{name}/webhook", {"url": old_url, "secret": SECRET})[0] == 200
            for index in range(30):
                change(server, name, f"t{index}")
            time.sleep(0.1 + 0.05 * round)
            status, body = call(server, "PUT", f"/api/v1/sessions/{name}/webhook", {"url": new_url, "secret": SECRET})
            assert status == 200, body
            start = body["from"]
            time.sleep(0.3)
            server.proc.kill()
            server.proc.wait()
            server = Server("--data-dir", data, "--webhook-allow", "127.0.0.1/32", "--api-rate", "10000", "--api-burst", "10000", *FAST)
            time.sleep(1.0)
            assert [seq for seq in new_taken if seq <= start] == [], (round, start, new_taken)
            status, shown = call(server, "GET", f"/api/v1/sessions/{name}/webhook")
            assert shown["url"] == new_url and shown["delivered"] >= start, shown
    finally:
        server.stop()
        for httpd in (old_httpd, new_httpd):
            httpd.shutdown()
            httpd.server_close()


def test_the_put_answer_that_carries_a_generated_secret_is_not_cached_and_from_is_the_stored_cursor(receiver):
    server = Server("--memory", "--webhook-allow", "127.0.0.1/32", *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=s")[0] == 201
        for index in range(3):
            change(server, "s", f"t{index}")
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("PUT", "/api/v1/sessions/s/webhook", body=json.dumps({"url": receiver.url}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        body = json.loads(response.read())
        connection.close()
        assert response.status == 200 and body["secret"].startswith("whsec_"), body
        assert response.getheader("Cache-Control") == "no-store"
        status, shown = call(server, "GET", "/api/v1/sessions/s/webhook")
        assert body["from"] == shown["delivered"] == 3, (body, shown)
    finally:
        server.stop()


def test_numeric_host_forms_of_loopback_are_refused_at_the_put():
    server = Server("--memory", *FAST)
    try:
        assert call(server, "POST", "/api/v1/sessions?name=s")[0] == 201
        for url in ("http://127.1/", "http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/", "http://169.254.43518/"):
            status, body = call(server, "PUT", "/api/v1/sessions/s/webhook", {"url": url, "secret": SECRET})
            assert status == 400 and body["error"]["field"] == "url" and "--webhook-allow" in body["error"]["message"], (url, body)
        status, body = call(server, "PUT", "/api/v1/sessions/s/webhook", {"url": "http://1.2.3.4.5/", "secret": SECRET})
        assert status == 400 and body["error"]["field"] == "url", body
    finally:
        server.stop()


def test_a_put_past_the_nodes_webhook_cap_is_refused_and_replacing_one_is_not(receiver):
    server = Server("--memory", "--webhook-allow", "127.0.0.1/32", "--webhook-max-sessions", "1", "--webhook-max-connections", "2", *FAST)
    try:
        for name in ("a", "b"):
            assert call(server, "POST", f"/api/v1/sessions?name={name}")[0] == 201
        assert call(server, "PUT", "/api/v1/sessions/a/webhook", {"url": receiver.url, "secret": SECRET})[0] == 200
        status, body = call(server, "PUT", "/api/v1/sessions/b/webhook", {"url": receiver.url, "secret": SECRET})
        assert status == 409 and body["error"]["code"] == "limit_reached", body
        assert call(server, "PUT", "/api/v1/sessions/a/webhook", {"url": receiver.url + "2", "secret": SECRET})[0] == 200
        assert call(server, "DELETE", "/api/v1/sessions/a/webhook")[0] == 204
        assert call(server, "PUT", "/api/v1/sessions/b/webhook", {"url": receiver.url, "secret": SECRET})[0] == 200
        change(server, "b", "x")
        wait_for(lambda: receiver.seqs() == [1], 10, "the delivery under the cap")
    finally:
        server.stop()

"""The HTTP side: foldtabled's endpoints (/healthz, /readyz, API errors, body limits, keep-alive,
HTTPS), static files' validators (ETag, Last-Modified, 304), and the C seam under them through
foldtable-echo's HTTP test mode (deferred answers, clients that leave, deadlines, big answers,
pipelining). Real binaries, real sockets: Python's http.client, or raw bytes for what it will not
send."""
import http.client
import json
import os
import re
import signal
import socket
import ssl
import struct
import time

import pytest

from foldtabled import REPO, Server

SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "deny",
    "referrer-policy": "no-referrer",
}


def assert_secure(headers):
    """Every answer, whatever its status, carries the strict headers static files carry."""
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, (name, headers)
    assert "default-src 'none'" in headers.get("content-security-policy", ""), headers


def connection(port, tls=None, timeout=5):
    if tls:
        return http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=timeout)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)


def fetch(conn, method, path, headers=None, body=None):
    """One request on a (kept-alive) http.client connection: (status, lowercase headers, body)."""
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def get(port, path, headers=None, tls=None, method="GET", body=None):
    conn = connection(port, tls)
    try:
        return fetch(conn, method, path, headers, body)
    finally:
        conn.close()


def raw_http(port, data, timeout=5):
    """Raw bytes in, (status, lowercase headers, body, closed) out: the first response, read to
    its Content-Length; closed says whether the server then closed the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                return None, {}, b"", True
            buffer += chunk
        head, _, body = buffer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        sock.settimeout(1)
        try:
            closed = sock.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            closed = False
        return int(lines[0].split()[1]), headers, body, closed
    finally:
        sock.close()


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture(scope="module")
def server():
    s = Server("--memory", "--demo-large-rows", "100", "--max-http-body-bytes", "1024")
    yield s
    assert s.stop() == 0


@pytest.fixture
def tls(tls_files):
    context = ssl.create_default_context(cafile=str(tls_files / "a.crt"))
    context.check_hostname = False  # the test certificate names localhost; we dial 127.0.0.1
    return context


# ---- foldtabled: endpoints ----------------------------------------------------------------------


def test_healthz_is_200_json_with_the_security_headers_and_no_store(server):
    status, headers, body = get(server.port, "/healthz")
    assert (status, body) == (200, b'{"status":"ok"}')
    assert headers["content-type"] == "application/json"
    assert headers["cache-control"] == "no-store"
    assert headers["content-length"] == str(len(body))
    assert_secure(headers)


def test_readyz_is_200_while_the_store_works(server):
    status, headers, body = get(server.port, "/readyz")
    assert (status, body) == (200, b'{"status":"ready"}')
    assert_secure(headers)


def test_an_unknown_api_path_is_404_with_a_json_error(server):
    status, headers, body = get(server.port, "/api/v1/x")
    assert status == 404
    assert headers["content-type"] == "application/json"
    assert body == b'{"error":{"code":"not_found","message":"no endpoint /api/v1/x"}}'
    assert_secure(headers)


def test_metrics_is_the_servers_own_not_a_static_file(server):
    status, headers, body = get(server.port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE foldtable_connections gauge" in body


def test_a_wrong_method_is_405_with_allow(server):
    for method in ("POST", "DELETE", "PUT"):
        status, headers, body = get(server.port, "/healthz", method=method, body=b"" if method != "DELETE" else None)
        assert status == 405, method
        assert headers["allow"] == "GET, HEAD, OPTIONS"
        assert b'"method_not_allowed"' in body
        assert_secure(headers)


def test_head_gets_the_length_of_the_body_it_does_not_get(server):
    status, headers, body = get(server.port, "/healthz", method="HEAD")
    assert status == 200 and body == b""
    assert headers["content-length"] == str(len(b'{"status":"ok"}'))
    assert_secure(headers)


def test_options_answers_204_with_allow(server):
    status, headers, body = get(server.port, "/readyz", method="OPTIONS")
    assert (status, body) == (204, b"")
    assert headers["allow"] == "GET, HEAD, OPTIONS"
    assert "content-length" not in headers


def test_a_host_the_server_does_not_answer_to_gets_421_for_the_api_and_for_files(server):
    status, headers, body = get(server.port, "/healthz", headers={"Host": "evil.example"})
    assert status == 421 and b'"misdirected"' in body
    assert_secure(headers)
    assert get(server.port, "/", headers={"Host": "evil.example"})[0] == 421
    assert get(server.port, "/healthz", headers={"Host": "localhost:1"})[0] == 200


def test_an_encoded_line_break_in_a_url_is_a_clear_400_not_a_421_nor_a_cut_url(server):
    # lws 4.1.6 decodes %0A and %0D while it parses the request line and takes them for its end:
    # after %0A the Host header was lost (421 "does not answer to that Host"), after %0D the URL
    # was silently cut there (find?q=a%0Db searched for "a"). Now both are a 400 that says why.
    for target in (b"/api/v1/sessions/demo/find?q=a%0Ab", b"/api/v1/sessions/demo/find?q=a%0Db",
                   b"/api/v1/sessions/demo/sections/Province%0AGuangdong/rows?by=title",
                   b"/api/v1/sessions/demo/sections/Province%0D%0AGuangdong/rows?by=title"):
        status, headers, body, closed = raw_http(server.port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status == 400 and closed, (target, status, body)
        error = json.loads(body)["error"]
        assert error["code"] == "bad_request" and "line break" in error["message"], error
        assert_secure(headers)
    for target in (b"/index.html%0A", b"/index.html%0D"):
        status, _, _, closed = raw_http(server.port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (status, closed) == (400, True), target
    # Other escapes are still decoded as before.
    status, _, body = get(server.port, "/api/v1/sessions/demo/find?q=Mac%20mini")
    assert status == 200 and json.loads(body)["q"] == "Mac mini"
    assert server.alive()


def test_a_body_over_the_cap_is_413_before_it_is_sent(server):
    # Only the headers go out: the answer must come without the body (which would be 2000 bytes).
    status, headers, body, closed = raw_http(
        server.port, f"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2000\r\n\r\n".encode())
    assert status == 413 and b'"too_large"' in body and closed
    # It says what to change: the limit and the setting that raises it.
    assert b"limit of 1024 bytes (--max-http-body-bytes)" in body, body
    assert headers["connection"] == "close"
    assert_secure(headers)
    # At the cap it is read, and routed (there is no such endpoint yet: 404).
    status, _, _, _ = raw_http(
        server.port, b"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1024\r\n\r\n" + b"x" * 1024)
    assert status == 404


def test_a_chunked_body_is_411(server):
    for request in (b"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                    b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"):
        status, headers, _, closed = raw_http(server.port, request)
        assert status == 411 and closed, request
        assert_secure(headers)


def test_a_post_without_a_body_or_a_length_is_answered_as_having_an_empty_body_and_then_closed(server):
    # What `curl -X POST URL` sends: no Content-Length, no Transfer-Encoding, so no body (RFC 9112
    # §6.3). lws still waits for a body then: the answer closes the connection, and nothing the
    # client sends after it is taken for a request.
    request = b"POST /api/v1/sessions/demo/expand-all HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    status, headers, body, closed = raw_http(server.port, request)
    assert status == 200 and "seq" in json.loads(body) and closed, (status, body)
    assert headers["connection"] == "close"
    assert_secure(headers)
    # The same for PUT and for a path no route takes: the route's own answer, not 411.
    status, _, body, closed = raw_http(server.port, b"PUT /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status == 404 and b'"not_found"' in body and closed
    # A handler that needs a body says so about the empty one.
    status, _, body, closed = raw_http(
        server.port, b"POST /api/v1/sessions/demo/changes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n")
    assert status == 400 and closed, body
    # A second request pipelined behind it is not read as that POST's body, nor answered.
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        sock.sendall(request + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        assert received.startswith(b"HTTP/1.1 200") and received.count(b"HTTP/1.1 ") == 1, received
    finally:
        sock.close()
    # A file path takes no POST: 405, and closed for the same reason.
    status, _, _, closed = raw_http(server.port, b"POST /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status == 405 and closed
    assert server.alive()


def test_curl_x_post_without_data_gets_the_endpoints_answer(server):
    import shutil
    import subprocess
    if not shutil.which("curl"):
        pytest.skip("no curl")
    done = subprocess.run(["curl", "-sS", "-X", "POST", "-w", "\n%{http_code}", f"http://127.0.0.1:{server.port}/api/v1/sessions/demo/collapse-all"],
                          capture_output=True, text=True, timeout=20)
    body, _, code = done.stdout.rpartition("\n")
    assert done.returncode == 0 and code == "200" and "seq" in json.loads(body), done
    # And twice on one command line: curl opens a second connection after the close.
    url = f"http://127.0.0.1:{server.port}/api/v1/sessions/demo/expand-all"
    done = subprocess.run(["curl", "-sS", "-X", "POST", "-w", "%{http_code}\n", "-o", "/dev/null", url, "-o", "/dev/null", url],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout.split() == ["200", "200"], done


def test_a_content_length_that_is_not_a_number_is_400(server):
    for value in (b"12x", b"-1", b"1, 2"):
        status, _, _, closed = raw_http(
            server.port, b"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + value + b"\r\n\r\nxx")
        assert (status, closed) == (400, True), value
    # An empty value is no length at all to lws (it cannot tell the two apart): no body, the
    # route's answer (no such endpoint), and the connection closed, so "xx" is never a request.
    status, _, _, closed = raw_http(server.port, b"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \r\n\r\nxx")
    assert (status, closed) == (404, True)


def test_two_requests_and_more_share_one_keep_alive_connection(server):
    conn = connection(server.port)
    try:
        assert fetch(conn, "GET", "/healthz")[0] == 200
        sock = conn.sock
        assert fetch(conn, "GET", "/readyz")[0] == 200
        assert fetch(conn, "GET", "/api/v1/nothing")[0] == 404
        assert fetch(conn, "GET", "/")[0] == 200
        assert fetch(conn, "HEAD", "/healthz")[0] == 200
        assert fetch(conn, "GET", "/healthz")[0] == 200
        assert conn.sock is sock, "the connection was not kept alive"
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(server):
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /api/v1/a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.sendall(request + b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]
    assert statuses == [200, 404, 200]
    assert data.index(b'"ok"') < data.index(b'"not_found"') < data.index(b'"ready"')


def test_clients_that_leave_mid_request_do_not_hurt_the_server(server):
    port = server.port
    for request in (b"GET /healthz HTTP/1.1\r\nHost: 12",              # headers cut short
                    b"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc",  # body cut short
                    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"):  # answer never read
        for linger in (False, True):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            if linger:  # close with a reset instead of a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(request)
            sock.close()
    assert server.alive()
    assert get(port, "/healthz")[0] == 200


# ---- foldtabled: static files' validators ------------------------------------------------------


def test_a_static_file_has_an_etag_and_last_modified_and_a_matching_if_none_match_gets_304(server):
    status, headers, body = get(server.port, "/app.js")
    assert status == 200 and body
    etag, modified = headers["etag"], headers["last-modified"]
    assert etag.startswith('"') and etag.endswith('"')
    assert modified.endswith(" GMT")
    assert headers["cache-control"] == "no-cache"
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        status, headers304, body = get(server.port, "/app.js", headers={"If-None-Match": header})
        assert (status, body) == (304, b""), header
        assert headers304["etag"] == etag and headers304["last-modified"] == modified
        assert "content-length" not in headers304
        assert_secure(headers304)
    assert get(server.port, "/app.js", headers={"If-None-Match": '"other"'})[0] == 200
    assert get(server.port, "/index.html", headers={"If-None-Match": etag})[0] == 200  # another file's tag


def test_if_modified_since_gives_304_only_without_if_none_match(server):
    _, headers, _ = get(server.port, "/")
    modified = headers["last-modified"]
    status, headers304, body = get(server.port, "/", headers={"If-Modified-Since": modified})
    assert (status, body) == (304, b"")
    assert_secure(headers304)
    assert get(server.port, "/", headers={"If-Modified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"})[0] == 200
    assert get(server.port, "/", headers={"If-Modified-Since": "not a date"})[0] == 200
    assert get(server.port, "/", headers={"If-Modified-Since": modified, "If-None-Match": '"other"'})[0] == 200
    # HEAD revalidates the same way.
    assert get(server.port, "/", method="HEAD", headers={"If-Modified-Since": modified})[0] == 304


def test_a_rewritten_file_gets_a_new_etag(tmp_path):
    root = tmp_path / "web"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>one</title>")
    s = Server("--memory", "--demo-large-rows", "10", web_root=str(root))
    try:
        _, headers, _ = get(s.port, "/")
        etag = headers["etag"]
        time.sleep(0.01)
        (root / "index.html").write_text("<!doctype html><title>two</title>")
        status, headers, body = get(s.port, "/", headers={"If-None-Match": etag})
        assert status == 200 and b"two" in body and headers["etag"] != etag
    finally:
        assert s.stop() == 0


def test_a_static_file_request_with_a_body_is_refused_and_closed(server):
    status, _, _, closed = raw_http(server.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
    assert status == 413 and closed
    status, _, _, closed = raw_http(server.port, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
    assert status == 405 and closed


# ---- foldtabled: cross-origin module scripts for embedding sites (--embed-origins) -------------

EMBED_FILES = ("/embed.js", "/protocol.js", "/model.js", "/table.js", "/table.css", "/embed.css")


def test_a_listed_embed_origin_may_load_the_module_scripts_and_no_other_origin_may():
    s = Server("--memory", "--demo-large-rows", "10", "--embed-origins", "https://blog.example.com, http://127.0.0.2:8000")
    try:
        for origin in ("https://blog.example.com", "http://127.0.0.2:8000"):
            for path in EMBED_FILES:
                status, headers, body = get(s.port, path, headers={"Origin": origin})
                assert status == 200 and body, path
                assert headers.get("access-control-allow-origin") == origin, (path, headers)
                assert headers.get("vary") == "Origin", (path, headers)
                assert "access-control-allow-credentials" not in headers  # the files are the same for everyone
                assert_secure(headers)  # the strict headers stay, X-Frame-Options: deny among them
        # A revalidation keeps them: the browser checks CORS on the 304 too.
        etag = get(s.port, "/embed.js")[1]["etag"]
        status, headers, body = get(s.port, "/embed.js", headers={"Origin": "https://blog.example.com", "If-None-Match": etag})
        assert (status, body) == (304, b"")
        assert headers.get("access-control-allow-origin") == "https://blog.example.com" and headers.get("vary") == "Origin"
        assert_secure(headers)
        # Any other origin, or none: the file, and no permission to run it elsewhere. Vary stays,
        # so a cache never hands the listed origin's answer to another.
        for origin in ("https://evil.example", "https://blog.example.com.evil.example", "http://blog.example.com",
                       "https://blog.example.com:444", "null", None):
            status, headers, body = get(s.port, "/embed.js", headers={"Origin": origin} if origin else {})
            assert status == 200 and body, origin
            assert "access-control-allow-origin" not in headers, (origin, headers)
            assert headers.get("vary") == "Origin", (origin, headers)
            assert_secure(headers)
    finally:
        assert s.stop() == 0


def test_without_embed_origins_no_file_carries_cors_headers(server):
    for path in ("/embed.js", "/app.js", "/"):
        status, headers, _ = get(server.port, path, headers={"Origin": "https://blog.example.com"})
        assert status == 200, path
        assert "access-control-allow-origin" not in headers and "vary" not in headers, (path, headers)
        assert_secure(headers)


def test_an_embed_origin_that_is_not_an_origin_alone_stops_start_up():
    with pytest.raises(AssertionError, match="--embed-origins https://blog.example.com/page must be an origin alone"):
        Server("--memory", "--embed-origins", "https://blog.example.com/page")


# ---- foldtabled over HTTPS -----------------------------------------------------------------------


def test_over_https_health_404_keep_alive_and_304_work(tls_files, tls):
    s = Server("--memory", "--demo-large-rows", "10", "--tls-cert", str(tls_files / "a.crt"), "--tls-key", str(tls_files / "a.key"))
    try:
        assert s.url.startswith("https://")
        conn = connection(s.port, tls)
        status, headers, body = fetch(conn, "GET", "/healthz")
        assert (status, body) == (200, b'{"status":"ok"}')
        assert_secure(headers)
        sock = conn.sock
        assert fetch(conn, "GET", "/api/v1/x")[0] == 404
        _, headers, _ = fetch(conn, "GET", "/")
        status, headers304, body = fetch(conn, "GET", "/", headers={"If-None-Match": headers["etag"]})
        assert (status, body) == (304, b"")
        assert_secure(headers304)
        assert fetch(conn, "HEAD", "/readyz")[0] == 200
        assert conn.sock is sock
        conn.close()
        # A refused body over TLS: 413, and the server goes on.
        conn = connection(s.port, tls)
        conn.putrequest("POST", "/api/v1/x")
        conn.putheader("Content-Length", str(8 * 1024 * 1024))  # over the default limit (4 MiB)
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413
        conn.close()
        assert get(s.port, "/healthz", tls=tls)[0] == 200
    finally:
        assert s.stop() == 0


# ---- the C seam, through foldtable-echo's HTTP test mode ----------------------------------------


@pytest.fixture
def echo_http(echo_server_factory, echo_web_root):
    return echo_server_factory("--web-root", str(echo_web_root), "--http-prefix", "/api/", "--log-closes",
                               "--http-answer-ms", "1500", "--max-http-body-bytes", "65536")


def test_the_owner_gets_method_path_query_headers_peer_and_body(echo_http):
    import json
    status, headers, body = get(echo_http.port, "/api/x?a=1&b=two+words&c=%26&flag", method="POST", body=b"hello",
                                headers={"Idempotency-Key": "k-1", "Authorization": "Bearer t", "Content-Type": "text/plain",
                                         "X-Forwarded-For": "203.0.113.9", "X-Ignored": "not passed"})
    assert status == 200
    seen = json.loads(body)
    assert seen["method"] == "POST" and seen["path"] == "/api/x"
    assert seen["query"] == ["a=1", "b=two words", "c=&", "flag"]
    assert seen["headers"]["idempotency-key"] == "k-1"
    assert seen["headers"]["authorization"] == "Bearer t"
    assert seen["headers"]["content-type"] == "text/plain"
    assert seen["headers"]["x-forwarded-for"] == "203.0.113.9"
    assert seen["headers"]["host"].startswith("127.0.0.1:")
    assert "x-ignored" not in seen["headers"]
    assert seen["peer"] == "127.0.0.1" and seen["body_length"] == 5
    assert_secure(headers)
    # Paths outside the prefix stay static files.
    assert get(echo_http.port, "/")[0] == 200
    assert get(echo_http.port, "/nothing.js")[0] == 404


def test_a_body_up_to_the_cap_comes_back_whole_and_one_byte_more_is_413(echo_http):
    payload = os.urandom(65536)
    status, headers, body = get(echo_http.port, "/api/echo", method="PUT", body=payload)
    assert status == 200 and body == payload and headers["x-body-length"] == "65536"
    status, _, _, closed = raw_http(echo_http.port, b"PUT /api/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 65537\r\n\r\n")
    assert status == 413 and closed


def test_a_post_with_an_empty_body_and_a_delete_without_one_reach_the_owner(echo_http):
    status, headers, body = get(echo_http.port, "/api/echo", method="POST", body=b"")
    assert (status, body, headers["x-body-length"]) == (200, b"", "0")
    status, headers, body = get(echo_http.port, "/api/thing", method="DELETE")
    assert (status, body) == (204, b"") and "content-length" not in headers
    assert_secure(headers)


def test_a_large_answer_is_written_whole_in_chunks(echo_http):
    status, headers, body = get(echo_http.port, "/api/big?bytes=3000000")
    assert status == 200 and len(body) == 3_000_000 and headers["content-length"] == "3000000"
    assert body[:10] == b"0123456789" and body[-10:] == b"0123456789"
    status, headers, body = get(echo_http.port, "/api/big?bytes=3000000", method="HEAD")
    assert (status, body, headers["content-length"]) == (200, b"", "3000000")


def test_a_deferred_answer_arrives_and_the_connection_stays_usable(echo_http):
    conn = connection(echo_http.port)
    try:
        started = time.monotonic()
        status, _, body = fetch(conn, "GET", "/api/later?delay_ms=400")
        assert status == 200 and b'"/api/later"' in body
        assert time.monotonic() - started >= 0.35
        sock = conn.sock
        assert fetch(conn, "GET", "/api/now")[0] == 200
        assert conn.sock is sock
    finally:
        conn.close()


def test_pipelined_requests_behind_a_deferred_one_wait_their_turn(echo_http):
    sock = socket.create_connection(("127.0.0.1", echo_http.port), timeout=5)
    sock.sendall(b"GET /api/first?delay_ms=300 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                 b"GET /api/second HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert data.count(b"HTTP/1.1 200") == 2
    assert data.index(b'"/api/first"') < data.index(b'"/api/second"')


def test_a_waiting_request_costs_no_cpu_even_when_its_client_half_closes(echo_http):
    # lws does not read a socket whose request is being answered; a readable one (the FIN here)
    # must not make the loop spin while the owner thinks.
    sock = socket.create_connection(("127.0.0.1", echo_http.port), timeout=5)
    sock.sendall(b"GET /api/slow?delay_ms=1200 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                 b"GET /api/next HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    sock.shutdown(socket.SHUT_WR)
    time.sleep(0.1)
    before = cpu_seconds(echo_http.proc.pid)
    time.sleep(0.8)
    assert cpu_seconds(echo_http.proc.pid) - before < 0.3, "the service loop spun while a request waited"
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert b'"/api/slow"' in data  # a half-closed client still gets its answers
    assert echo_http.proc.poll() is None


def test_a_client_that_resets_before_its_answer_is_reported_and_the_late_answer_is_refused(echo_http):
    sock = socket.create_connection(("127.0.0.1", echo_http.port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.sendall(b"GET /api/gone?delay_ms=400 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    time.sleep(0.1)
    sock.close()
    assert wait_for(lambda: "http_abandoned" in echo_http.stderr())
    request_id = echo_http.stderr().split("http_abandoned ")[1].split()[0]
    # The owner answered later anyway: ftws_http_respond refused the dead id (-1), nothing broke.
    assert wait_for(lambda: f"http_respond {request_id} -1" in echo_http.stderr())
    assert get(echo_http.port, "/api/alive")[0] == 200


def test_no_answer_in_time_gets_503_and_the_owner_is_told(echo_http):
    started = time.monotonic()
    status, headers, body = get(echo_http.port, "/api/never")
    assert status == 503 and b'"unavailable"' in body
    assert 1.2 <= time.monotonic() - started < 5
    assert_secure(headers)
    assert wait_for(lambda: "http_abandoned" in echo_http.stderr())


def test_an_answer_with_a_header_that_would_split_the_response_becomes_500(echo_http):
    status, headers, body = get(echo_http.port, "/api/bad")
    assert status == 500 and b"split" not in body and "x-split" not in headers
    assert_secure(headers)
    assert "http_respond" in echo_http.stderr() and " -2" in echo_http.stderr()


def test_over_tls_the_seam_answers_later_keeps_alive_and_writes_big_answers(echo_server_factory, tls_files, tls):
    server = echo_server_factory("--http-prefix", "/api/", "--tls-cert", str(tls_files / "a.crt"), "--tls-key",
                                 str(tls_files / "a.key"))
    conn = connection(server.port, tls)
    try:
        status, headers, body = fetch(conn, "GET", "/api/x?delay_ms=200")
        assert status == 200 and b'"/api/x"' in body
        assert_secure(headers)
        sock = conn.sock
        status, _, body = fetch(conn, "GET", "/api/big?bytes=2000000")
        assert status == 200 and len(body) == 2_000_000
        payload = os.urandom(50_000)
        assert fetch(conn, "POST", "/api/echo", body=payload)[2] == payload
        assert conn.sock is sock
    finally:
        conn.close()


def test_sigterm_with_a_request_waiting_stops_within_the_grace(echo_server_factory):
    server = echo_server_factory("--http-prefix", "/api/", "--http-answer-ms", "60000", "--grace-ms", "500")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.sendall(b"GET /api/never HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    time.sleep(0.2)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0
    assert time.monotonic() - started < 5
    sock.close()


def test_the_web_client_is_still_served_by_the_real_server(server):
    # The repository's web/ through foldtabled: files, the SPA route, and their validators.
    status, headers, body = get(server.port, "/s/demo")
    assert status == 200 and headers["content-type"].startswith("text/html") and headers["etag"]
    assert body == open(os.path.join(REPO, "web", "index.html"), "rb").read()

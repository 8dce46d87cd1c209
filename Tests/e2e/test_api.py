"""The HTTP API (/api/v1) and /metrics over real HTTP against the real foldtabled, next to real
WebSocket clients: what a script changes, members see; what members change, the API reads."""
import asyncio
import http.client
import json
import os
import time

import pytest

from foldtabled import Client, Server, REPO

SECRET = "s" * 40


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def call(server, method, path, body=None, headers=None, content_type="application/json"):
    """(status, headers, parsed JSON or raw text) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = dict(headers or {})
    if body is not None:
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if content_type:
            headers.setdefault("Content-Type", content_type)
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    kind = response.getheader("Content-Type") or ""
    data = json.loads(raw) if kind.startswith("application/json") and raw else raw.decode("utf-8", "replace")
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns()}"


def test_create_from_json_read_back_export_and_delete(server):
    name = unique("api")
    # The document's options as an export writes them (every option is required on import).
    options = call(server, "GET", "/api/v1/sessions/demo")[2]["options"]
    doc = {"options": options, "sections": [
        {"key": "fruit", "title": "Fruit", "collapsed": False, "rowCount": 2,
         "rows": [{"key": "a", "label": "Apple", "value": "red"}, {"key": "p", "label": "Pear", "value": "green"}]},
        {"key": "nuts", "title": "Nuts", "collapsed": True, "rowCount": 0}]}
    status, headers, body = call(server, "POST", f"/api/v1/sessions?name={name}", doc)
    assert status == 201, body
    assert headers["location"] == f"/api/v1/sessions/{name}" and body == {"name": name, "sections": 2}
    status, _, body = call(server, "POST", f"/api/v1/sessions?name={name}", doc)
    assert status == 409 and body["error"]["code"] == "duplicate_key"
    status, _, table = call(server, "GET", f"/api/v1/sessions/{name}")
    assert status == 200 and [s["key"] for s in table["sections"]] == ["fruit", "nuts"]
    assert [r["label"] for r in table["sections"][0]["rows"]] == ["Apple", "Pear"]
    status, headers, csv = call(server, "GET", f"/api/v1/sessions/{name}?format=csv")
    assert status == 200 and headers["content-type"].startswith("text/csv") and "Apple" in csv
    # Export -> import round-trips.
    copy = unique("copy")
    status, _, _ = call(server, "POST", f"/api/v1/sessions?name={copy}", csv, content_type="text/csv")
    assert status == 201
    _, _, again = call(server, "GET", f"/api/v1/sessions/{copy}?format=csv")
    assert again == csv
    status, _, listing = call(server, "GET", "/api/v1/sessions")
    names = {s["name"]: s for s in listing["sessions"]}
    assert status == 200 and names[name]["sections"] == 2 and names[name]["members"] == 0
    status, _, _ = call(server, "DELETE", f"/api/v1/sessions/{name}")
    assert status == 204
    status, _, body = call(server, "GET", f"/api/v1/sessions/{name}")
    assert status == 404 and body["error"]["code"] == "session_not_found"


def test_collapsed_map_set_collapsed_and_changes_reach_members_and_are_answered_with_their_seq(server):
    name = unique("live")

    async def scenario():
        member = await Client.join(server.ws, session=name, name="watcher")
        await member.send({"type": "addSection", "key": "mac", "title": "Mac", "id": "a"})
        await member.next(lambda m: m["type"] == "ack")
        status, _, body = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/collapsed")
        assert status == 200 and body == {"mac": False}
        status, _, body = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/collapsed?by=title")
        assert body == {"Mac": False}
        status, _, body = await asyncio.to_thread(call, server, "PUT", f"/api/v1/sessions/{name}/sections/mac/collapsed", True)
        assert status == 200 and body["seq"] == 2
        event = await member.next(lambda m: m["type"] == "event" and m["seq"] == 2)
        assert event["collapsed"] == {"mac": True} and event["by"]["client"] == "api"
        status, _, body = await asyncio.to_thread(call, server, "PUT", f"/api/v1/sessions/{name}/sections/Mac/collapsed?by=title",
                                                  {"collapsed": False})
        assert status == 200 and body["seq"] == 3
        status, _, body = await asyncio.to_thread(call, server, "POST", f"/api/v1/sessions/{name}/collapse-all", b"")
        assert status == 200 and body["seq"] == 4
        # Any change of the protocol, retried with one Idempotency-Key: applied once.
        change = {"type": "addRow", "section": "mac", "label": "iMac"}
        first = await asyncio.to_thread(call, server, "POST", f"/api/v1/sessions/{name}/changes", change, {"Idempotency-Key": "k1"})
        again = await asyncio.to_thread(call, server, "POST", f"/api/v1/sessions/{name}/changes", change, {"Idempotency-Key": "k1"})
        assert first[0] == 200 and again[0] == 200 and first[2]["seq"] == again[2]["seq"] == 5
        _, _, table = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}")
        assert [r["label"] for r in table["sections"][0]["rows"]] == ["iMac"]
        status, _, found = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/find?q=imac")
        assert status == 200 and [r["label"] for r in found["rows"]] == ["iMac"]
        await member.close()
    run(scenario())


def test_the_collapsed_map_by_title_refuses_two_sections_of_one_title_instead_of_dropping_one(server):
    name = unique("twins")

    async def scenario():
        member = await Client.join(server.ws, session=name, name="twin")
        for key in ("a", "b"):
            await member.send({"type": "addSection", "key": key, "title": "Same", "id": key})
            await member.next(lambda m, key=key: m["type"] == "ack" and m["id"] == key)
        status, _, body = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/collapsed?by=title")
        assert status == 409 and body["error"]["code"] == "ambiguous_title" and "Same" in body["error"]["message"]
        status, _, body = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/collapsed")
        assert status == 200 and body == {"a": False, "b": False}
        await member.close()
    run(scenario())


@pytest.mark.parametrize("method,path,body,content_type,status,code", [
    ("POST", "/api/v1/sessions?name=bad-json", b"{not json", "application/json", 400, "bad_json"),
    ("POST", "/api/v1/sessions?name=bad-csv", b'section,label\n"Fruit,Apple\n', "text/csv", 400, "invalid_csv"),
    ("POST", "/api/v1/sessions?name=bad-cols", b"section,label\nFruit,Apple,extra\n", "text/csv", 400, "invalid_csv"),
    ("POST", "/api/v1/sessions?name=bad-utf8", b"section,label\nFruit,\xff\xfe\n", "text/csv", 400, "invalid_csv"),
    ("POST", "/api/v1/sessions?name=bad%20name", b"", "application/json", 400, "invalid_session"),
    ("POST", "/api/v1/sessions?name=plain", b"x", "text/plain", 415, "unsupported_media_type"),
    ("GET", "/api/v1/sessions/nope-nope", None, None, 404, "session_not_found"),
    ("PUT", "/api/v1/sessions/demo/sections/nope/collapsed", b"true", "application/json", 404, "unknown_section"),
    ("PUT", "/api/v1/sessions/demo/sections/mac/collapsed", b"\"yes\"", "application/json", 400, "wrong_type"),
    ("POST", "/api/v1/sessions/demo/changes", b'{"type":"join","session":"x","name":"y"}', "application/json", 400, "unknown_type"),
    ("POST", "/api/v1/sessions/demo/changes", b'{"type":"toggle"}', "application/json", 400, "missing_field"),
    ("GET", "/api/v1/sessions/demo/find", None, None, 400, "invalid_value"),
    ("DELETE", "/api/v1/sessions", None, None, 405, "method_not_allowed"),
    ("GET", "/api/v1/nothing/here", None, None, 404, "not_found"),
])
def test_bad_requests_get_a_clear_json_error_and_change_nothing(server, method, path, body, content_type, status, code):
    _, _, before = call(server, "GET", "/api/v1/sessions/demo")
    got, headers, reply = call(server, method, path, body, content_type=content_type)
    assert got == status and reply["error"]["code"] == code, reply
    if status == 405:
        assert "GET" in headers["allow"]
    _, _, after = call(server, "GET", "/api/v1/sessions/demo")
    assert before == after


def test_a_foreign_origin_is_refused_in_open_mode(server):
    status, _, body = call(server, "POST", "/api/v1/sessions/demo/collapse-all", b"", {"Origin": "https://evil.example"})
    assert status == 403 and body["error"]["code"] == "forbidden"


def test_metrics_parse_with_prometheus_client_and_move_as_clients_act(server):
    from prometheus_client.parser import text_string_to_metric_families

    def sample(name, labels=None):
        status, headers, text = call(server, "GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and (labels is None or s.labels == labels):
                    return s.value
        return 0.0

    before_in, before_changes = sample("foldtable_messages_received_total"), sample("foldtable_changes_applied_total")

    async def act():
        c = await Client.join(server.ws, session=unique("metrics"), name="m")
        await c.send({"type": "addSection", "title": "T", "id": "x"})
        await c.next(lambda m: m["type"] == "ack")
        await c.send({"type": "toggle", "section": "nope", "id": "y"})
        await c.next(lambda m: m["type"] == "error")
        assert sample("foldtable_connections") >= 1
        await c.close()
    run(act())
    assert sample("foldtable_messages_received_total") >= before_in + 3
    assert sample("foldtable_changes_applied_total") >= before_changes + 1
    assert sample("foldtable_errors_total", {"code": "unknown_section"}) >= 1
    assert sample("foldtable_commit_seconds_count") >= 1
    assert sample("foldtable_frames_written_total") >= 1
    assert sample("foldtable_frames_written_total") + sample("foldtable_frames_coalesced_total") >= sample("foldtable_frames_written_total")


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    secret = tmp_path_factory.mktemp("secret") / "secret"
    secret.write_text(SECRET)
    s = Server("--token-secret-file", str(secret))
    yield s
    s.stop()


def token(server, *args):
    import subprocess
    secret = [a for a in server.proc.args if a.endswith("/secret")][0]
    done = subprocess.run([server.proc.args[0], "token", "--token-secret-file", secret, *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_with_tokens_each_call_needs_a_bearer_token_with_the_right_role(token_server):
    s = token_server
    status, headers, body = call(s, "GET", "/api/v1/sessions/demo")
    assert status == 401 and body["error"]["code"] == "unauthorized" and headers["www-authenticate"].startswith("Bearer")
    viewer = token(s, "--session", "demo", "--role", "viewer", "--name", "v")
    editor = token(s, "--session", "demo", "--role", "editor", "--name", "e")
    other = token(s, "--session", "other", "--role", "owner", "--name", "o")
    assert call(s, "GET", "/api/v1/sessions/demo", headers={"Authorization": f"Bearer {viewer}"})[0] == 200
    status, _, body = call(s, "POST", "/api/v1/sessions/demo/collapse-all", b"", {"Authorization": f"Bearer {viewer}"})
    assert status == 403 and body["error"]["code"] == "forbidden"
    assert call(s, "POST", "/api/v1/sessions/demo/collapse-all", b"", {"Authorization": f"Bearer {editor}"})[0] == 200
    status, _, _ = call(s, "DELETE", "/api/v1/sessions/demo", headers={"Authorization": f"Bearer {editor}"})
    assert status == 403
    status, _, _ = call(s, "GET", "/api/v1/sessions/demo", headers={"Authorization": f"Bearer {other}"})
    assert status == 403
    status, _, _ = call(s, "GET", "/api/v1/sessions/demo", headers={"Authorization": "Bearer not.a.token"})
    assert status == 401
    # An owner token for one session may create that session, and no other.
    mine = unique("mine")
    owner = token(s, "--session", mine, "--role", "owner", "--name", "o")
    assert call(s, "POST", f"/api/v1/sessions?name={mine}", b"", {"Authorization": f"Bearer {owner}"})[0] == 201
    assert call(s, "POST", f"/api/v1/sessions?name={mine}-2", b"", {"Authorization": f"Bearer {owner}"})[0] == 403
    _, _, listing = call(s, "GET", "/api/v1/sessions", headers={"Authorization": f"Bearer {owner}"})
    assert [x["name"] for x in listing["sessions"]] == [mine]


def test_the_api_answers_over_https_too(tls_files):
    import ssl
    s = Server("--memory", "--tls-cert", str(tls_files / "a.crt"), "--tls-key", str(tls_files / "a.key"))
    try:
        context = ssl.create_default_context(cafile=str(tls_files / "a.crt"))
        context.check_hostname = False  # the test certificate names localhost; we dial 127.0.0.1
        connection = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=10, context=context)
        connection.request("PUT", "/api/v1/sessions/demo/sections/mac/collapsed", body="true", headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["seq"] >= 1
        connection.request("GET", "/api/v1/sessions/demo/collapsed")
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["mac"] is True
        connection.close()
    finally:
        s.stop()


def test_load_makes_sessions_from_csv_and_json_files_at_start_and_a_bad_file_stops_start_up(tmp_path):
    import subprocess
    from foldtabled import BIN
    csv = tmp_path / "fruit.csv"
    csv.write_text('section,label,value,detail\nFruit,Apple,red,\nFruit,"Pear, green",green,\nNuts,Pecan,,"from ""Texas"""\n')
    source = Server("--memory")
    try:
        _, _, document = call(source, "GET", "/api/v1/sessions/demo")
    finally:
        source.stop()
    doc = tmp_path / "copy.json"
    doc.write_text(json.dumps(document))
    s = Server("--load", f"fruit={csv},copy={doc}")
    try:
        _, _, fruit = call(s, "GET", "/api/v1/sessions/fruit")
        assert [x["title"] for x in fruit["sections"]] == ["Fruit", "Nuts"]
        assert [r["label"] for r in fruit["sections"][0]["rows"]] == ["Apple", "Pear, green"]
        assert fruit["sections"][1]["rows"][0]["detail"] == 'from "Texas"'
        _, _, copy = call(s, "GET", "/api/v1/sessions/copy")
        assert [x["key"] for x in copy["sections"]] == [x["key"] for x in document["sections"]]
    finally:
        s.stop()
    bad = tmp_path / "bad.csv"
    bad.write_text('section,label\n"Fruit,Apple\n')
    done = subprocess.run([BIN, "--port", "0", "--memory", "--load", f"broken={bad}"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 1 and "--load broken" in done.stderr and str(bad) in done.stderr and "invalid_csv" not in done.stdout
    done = subprocess.run([BIN, "--port", "0", "--memory", "--load", "no-equals-sign"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 1 and "NAME=PATH" in done.stderr


def test_the_demo_sessions_own_export_imports_back_under_the_default_body_limit():
    # Default settings: the export (50,000 rows in its large section, about 2.7 MB) is a body
    # the same server takes back.
    s = Server("--memory")
    try:
        status, _, document = call(s, "GET", "/api/v1/sessions/demo")
        assert status == 200
        exported = json.dumps(document).encode()
        assert len(exported) > 2_000_000, len(exported)
        status, _, body = call(s, "POST", "/api/v1/sessions?name=demo-copy", exported)
        assert status in (200, 201), (status, body)
        _, _, copy = call(s, "GET", "/api/v1/sessions/demo-copy")
        assert copy["sections"] == document["sections"]
    finally:
        s.stop()


def test_a_body_over_the_limit_is_refused_naming_the_setting_and_the_limit():
    s = Server("--memory", "--max-http-body-bytes", "4096")
    try:
        status, _, body = call(s, "POST", "/api/v1/sessions?name=big", b"x" * 5000)
        assert status == 413 and body["error"]["code"] == "too_large"
        assert body["error"]["message"] == "the request body is over the server's limit of 4096 bytes (--max-http-body-bytes)"
    finally:
        s.stop()


def test_changes_that_add_a_row_or_a_section_answer_with_its_key(server):
    name = unique("keys")
    path = f"/api/v1/sessions/{name}/changes"
    assert call(server, "POST", f"/api/v1/sessions?name={name}", b"")[0] in (200, 201)
    # The table chooses the key when the change names none...
    status, _, added = call(server, "POST", path, {"type": "addSection", "title": "Mac"})
    assert status == 200 and added == {"seq": added["seq"], "key": added["key"]} and added["key"].startswith("s"), added
    section = added["key"]
    status, _, row = call(server, "POST", path, {"type": "addRow", "section": section, "label": "iMac"})
    assert status == 200 and set(row) == {"seq", "key"} and row["key"].startswith("r"), row
    # ...and the key is the one the table holds: the row is addressed by it next.
    status, _, _ = call(server, "POST", path, {"type": "updateRow", "row": row["key"], "set": {"value": "M4"}})
    assert status == 200
    _, _, table = call(server, "GET", f"/api/v1/sessions/{name}")
    assert [(s["key"], [(r["key"], r["value"]) for r in s["rows"]]) for s in table["sections"]] == [(section, [(row["key"], "M4")])]
    # A key the change names comes back as it is; a retry with one Idempotency-Key gets the same.
    named = {"type": "addRow", "section": section, "label": "Mac mini", "key": "mini"}
    assert call(server, "POST", path, named)[2] == {"seq": row["seq"] + 2, "key": "mini"}
    change = {"type": "addRow", "section": section, "label": "Mac Pro"}
    first = call(server, "POST", path, change, {"Idempotency-Key": "pro-1"})[2]
    again = call(server, "POST", path, change, {"Idempotency-Key": "pro-1"})[2]
    assert first["key"].startswith("r") and again["seq"] == first["seq"], (first, again)
    # Other changes answer with their seq alone.
    status, _, toggled = call(server, "POST", path, {"type": "toggle", "section": section})
    assert status == 200 and set(toggled) == {"seq"}


def test_load_of_a_session_that_exists_already_says_so_in_one_log_line(tmp_path):
    csv = tmp_path / "fruit.csv"
    csv.write_text("section,label,value,detail\nFruit,Apple,red,\n")
    data = tmp_path / "data"
    first = Server("--data-dir", str(data), "--load", f"fruit={csv}", "--log-level", "info")
    try:
        assert call(first, "GET", "/api/v1/sessions/fruit")[0] == 200
    finally:
        first.stop()
    first_log = first.proc.stderr.read()
    assert "event=load_skipped" not in first_log and "event=load session=fruit" in first_log, first_log
    # A restart finds the session the first start made (maybe changed since): left as it is,
    # and the log says why the file was not read into it.
    second = Server("--data-dir", str(data), "--load", f"fruit={csv}", "--log-level", "warning")
    try:
        assert call(second, "GET", "/api/v1/sessions/fruit")[0] == 200
    finally:
        second.stop()
    lines = [line for line in second.proc.stderr.read().splitlines() if "event=load_skipped" in line]
    assert len(lines) == 1, lines
    assert "reason=exists" in lines[0] and "session=fruit" in lines[0], lines


def test_past_the_memory_budget_joins_and_new_sessions_are_refused_and_counted():
    from prometheus_client.parser import text_string_to_metric_families
    # A budget of 1 MiB: any real process is past it, so every join and creation is refused.
    s = Server("--memory", "--memory-budget-mb", "1")
    try:
        async def scenario():
            from websockets.asyncio.client import connect
            async with connect(s.ws) as ws:
                await ws.send(json.dumps({"type": "join", "session": "demo", "name": "late"}))
                return json.loads(await asyncio.wait_for(ws.recv(), 5))
        reply = run(scenario())
        assert reply["type"] == "error" and reply["code"] == "limit_reached" and "memory budget" in reply["message"], reply
        status, _, body = call(s, "POST", "/api/v1/sessions?name=more", b"")
        assert status == 409 and body["error"]["code"] == "limit_reached" and "memory budget" in body["error"]["message"]
        _, _, text = call(s, "GET", "/metrics")
        values = {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}
        assert values["foldtable_memory_refusals_total"] >= 2
        assert values["foldtable_resident_bytes"] > 1_048_576
    finally:
        s.stop()


def test_an_idempotency_key_cannot_be_squatted_by_another_user(token_server):
    s = token_server
    name = unique("keys")
    owner = token(s, "--session", name, "--role", "owner", "--user", "victim")
    attacker = token(s, "--session", name, "--role", "owner", "--user", "attacker")

    async def create():
        member = await Client.join(s.ws, session=name, name="o", token=owner)
        await member.close()

    run(create())
    path = f"/api/v1/sessions/{name}/changes"
    # The attacker takes the key first, with a change of its own.
    squat = call(s, "POST", path, {"type": "addSection", "title": "Attacker"}, {"Authorization": f"Bearer {attacker}", "Idempotency-Key": "nightly-7"})
    assert squat[0] == 200, squat
    # The victim's change with the same key is applied as its own, not refused nor answered with the attacker's seq.
    mine = call(s, "POST", path, {"type": "addSection", "title": "Victim"}, {"Authorization": f"Bearer {owner}", "Idempotency-Key": "nightly-7"})
    assert mine[0] == 200 and mine[2]["seq"] == squat[2]["seq"] + 1, mine
    # Each one's retry is still its own.
    again = call(s, "POST", path, {"type": "addSection", "title": "Victim"}, {"Authorization": f"Bearer {owner}", "Idempotency-Key": "nightly-7"})
    assert again[0] == 200 and again[2]["seq"] == mine[2]["seq"], again
    titles = [x["title"] for x in call(s, "GET", f"/api/v1/sessions/{name}", headers={"Authorization": f"Bearer {owner}"})[2]["sections"]]
    assert titles == ["Attacker", "Victim"], titles


def test_text_with_a_line_break_is_found_with_a_find_posted_in_a_body(server):
    # A URL cannot carry a line break through libwebsockets 4.1.6 (see test_http.py): the body can.
    status, _, found = call(server, "POST", "/api/v1/sessions/demo/find", {"q": "Province\nGuangdong"})
    assert status == 200 and found["q"] == "Province\nGuangdong"
    status, _, found = call(server, "POST", "/api/v1/sessions/demo/find", {"q": "leshan", "limit": 1})
    assert status == 200 and [m["row"] for m in found["rows"]] == ["sichuan-3"]
    status, _, error = call(server, "POST", "/api/v1/sessions/demo/find", {"q": "x", "limit": 0})
    assert status == 400 and error["error"]["field"] == "limit"
    status, _, error = call(server, "POST", "/api/v1/sessions/demo/find", {"limit": 3})
    assert status == 400 and error["error"]["field"] == "q"

"""GET /api/v1/openapi.json against the real foldtabled: a valid OpenAPI 3.1 document (checked by
an independent validator), and true of the server: every documented operation answers on its
path and method, with a status the document lists and, for JSON, a body its schema accepts."""
import asyncio
import http.client
import json
import os
import subprocess
import sys

import jsonschema
import pytest
from openapi_spec_validator import validate

from foldtabled import Client, Server
from test_access import SECRET, token

# An owner of every session: each operation is called with the role it needs at most.
OWNER = token(["*"], role="owner", sub="openapi-owner", name="Olga", ttl=3600)


def call(server, method, path, body=None, content_type="application/json"):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Authorization": f"Bearer {OWNER}"}
    if body is not None:
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        headers["Content-Type"] = content_type
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type") or "", raw


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # With tokens, so that every operation (invites too) can answer as it does for its users.
    secret = tmp_path_factory.mktemp("secret") / "token.secret"
    secret.write_text(SECRET + "\n")
    s = Server("--token-secret-file", str(secret))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def document(server):
    status, kind, raw = call(server, "GET", "/api/v1/openapi.json")
    assert status == 200 and kind.startswith("application/json")
    return json.loads(raw)


def resolved(schema, components):
    """The schema with every `$ref` to a component replaced by the component (none is recursive)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return resolved(components[schema["$ref"].rsplit("/", 1)[1]], components)
        return {key: resolved(value, components) for key, value in schema.items()}
    if isinstance(schema, list):
        return [resolved(item, components) for item in schema]
    return schema


def test_the_document_is_valid_openapi_3_1(document):
    validate(document)
    assert document["openapi"] == "3.1.0"


# A request that should succeed for each operation, by operationId: (query, body, content type).
# Sections and rows are those of the session the test creates.
REQUESTS = {
    "createSession": ("?name=oa-new", None, None),
    "exportTable": ("", None, None),
    "collapsedMap": ("", None, None),
    "setCollapsed": ("", {"collapsed": True}, "application/json"),
    "exportRows": ("", None, None),
    "importRows": ("?mode=append", "label,value,detail\nKiwi,green,\n", "text/csv"),
    "postChange": ("", {"type": "addRow", "section": "fruit", "label": "Fig"}, "application/json"),
    "find": ("?q=App", None, None),
    "findByBody": ("", {"q": "App"}, "application/json"),
    "events": ("?limit=5", None, None),
    "mintInvite": ("", {"role": "viewer", "label": "docs"}, "application/json"),
    # A public address (never reached in the test: nothing here waits for a delivery).
    "putWebhook": ("", {"url": "https://receiver.example.com/hooks"}, "application/json"),
}


def test_every_documented_operation_answers_as_documented(server, document):
    components = document["components"]["schemas"]
    options = json.loads(call(server, "GET", "/api/v1/sessions/demo")[2])["options"]
    table = {"options": options,
             "sections": [{"key": "fruit", "title": "Fruit", "collapsed": False, "rowCount": 1,
                           "rows": [{"key": "a", "label": "Apple", "value": "red"}]}]}
    assert call(server, "POST", "/api/v1/sessions?name=oa", table)[0] == 201
    # Real things for the calls that name one: an invite to withdraw, a member to disconnect.
    invite = json.loads(call(server, "POST", "/api/v1/sessions/oa/invites", {})[2])["id"]
    member = asyncio.run(Client.join(server.ws, session="oa", name="Guest", create=False, token=OWNER))
    operations = [(path, method.upper(), op) for path, item in document["paths"].items() for method, op in item.items()]
    # Deletes last, so every other operation finds its session.
    operations.sort(key=lambda o: o[1] == "DELETE")
    seen = 0
    for path, method, operation in operations:
        query, body, kind = REQUESTS.get(operation["operationId"], ("", None, None))
        url = (path.replace("{name}", "oa-new" if operation["operationId"] == "deleteSession" else "oa").replace("{section}", "fruit")
               .replace("{id}", invite).replace("{client}", member.welcome["client"]) + query)
        status, content_type, raw = call(server, method, url, body, kind or "application/json")
        responses = operation["responses"]
        assert str(status) in responses, (method, url, status, raw[:300])
        # The webhook set here delivers (it is not paused): resuming it is the documented 409.
        if operation["operationId"] == "resumeWebhook" and status == 409:
            assert json.loads(raw)["error"]["code"] == "webhook_not_paused", raw
        else:
            assert 200 <= status < 300, (method, url, status, raw[:300])
        documented = responses[str(status)].get("content", {})
        media = content_type.split(";")[0].strip()
        if documented:
            assert media in documented or (media == "text/plain" and "text/plain" in documented), (method, url, media)
        if media == "application/json" and raw:
            jsonschema.Draft202012Validator(resolved(documented[media]["schema"], components)).validate(json.loads(raw))
        seen += 1
    assert seen == len(operations) > 15


def test_refusals_are_documented_statuses_with_the_error_schema(server, document):
    components = document["components"]["schemas"]
    error = resolved({"$ref": "#/components/schemas/Error"}, components)
    for method, url, body, operation in [
        ("GET", "/api/v1/sessions/no-such-session", None, ("/api/v1/sessions/{name}", "get")),
        ("PUT", "/api/v1/sessions/demo/sections/no-such/collapsed", True, ("/api/v1/sessions/{name}/sections/{section}/collapsed", "put")),
        ("GET", "/api/v1/sessions/demo/find?q=", None, ("/api/v1/sessions/{name}/find", "get")),
        # A choice the call does not offer is an error naming it, not a quiet default.
        ("GET", "/api/v1/sessions/demo?format=xml", None, ("/api/v1/sessions/{name}", "get")),
        ("GET", "/api/v1/sessions/demo/collapsed?by=name", None, ("/api/v1/sessions/{name}/collapsed", "get")),
        ("POST", "/api/v1/sessions/demo/changes", {"type": "nonsense"}, ("/api/v1/sessions/{name}/changes", "post")),
    ]:
        status, _, raw = call(server, method, url, body)
        assert 400 <= status < 500, (url, status)
        assert str(status) in document["paths"][operation[0]][operation[1]]["responses"], (url, status)
        jsonschema.Draft202012Validator(error).validate(json.loads(raw))


def test_a_fuzzer_driven_by_the_document_finds_no_server_error_and_no_undocumented_answer(tmp_path):
    """Schemathesis generates requests from the document (valid and not) for every operation and
    checks each answer: never a 5xx, always a status, media type, headers and body the document
    lists. Seeded, so a failure reproduces. NUL bytes are not generated: libwebsockets drops the
    connection on a %00 in a query before the server sees the request (no answer to check)."""
    secret = tmp_path / "token.secret"
    secret.write_text(SECRET + "\n")
    server = Server("--memory", "--token-secret-file", str(secret), "--api-rate", "100000", "--api-burst", "100000")
    try:
        st = os.path.join(os.path.dirname(sys.executable), "st")
        url = f"http://127.0.0.1:{server.port}"
        result = subprocess.run(
            [st, "run", f"{url}/api/v1/openapi.json", "--url", url, "--max-examples", "25", "--seed", "1",
             "--header", f"Authorization: Bearer {OWNER}", "--generation-allow-x00", "false", "--workers", "1", "--phases", "examples,coverage,fuzzing",
             "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                         "response_schema_conformance,response_headers_conformance"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
        assert server.alive()
    finally:
        server.stop()

"""End-to-end tests of invites, withdrawn tokens and members: an owner mints a link over the API,
a second client joins with it in the invited role; withdrawing it closes that client with 4503 and
refuses the token from then on (WebSocket and HTTP API, after a restart, and on a second node
sharing Redis); the members list and an owner's kick (4504). The real foldtabled binary, real
sockets, a real redis-server."""
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from foldtabled import BIN, Client, Server
from test_access import SECRET, b64url_decode, read_until_closed, refused_join, token, unique
from test_api import call

REDIS = shutil.which("redis-server")


def run(coro, limit=30):
    return asyncio.run(asyncio.wait_for(coro, limit))


def claims(jwt):
    return json.loads(b64url_decode(jwt.split(".")[1]))


def bearer(jwt):
    return {"Authorization": f"Bearer {jwt}"}


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "token.secret"
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture(scope="module")
def server(secret_file):
    s = Server("--token-secret-file", str(secret_file))
    yield s
    assert s.stop() == 0


def owner_of(session):
    # Thirty days: an invite never outlives the token that minted it, and the tests ask for seven.
    return token([session], role="owner", sub="owner-1", name="Olga", ttl=30 * 86400)


async def made(server, session):
    owner = await Client.join(server.ws, session=session, name="maker", token=owner_of(session))
    await owner.close()


def mint(server, session, body=None, as_token=None):
    return call(server, "POST", f"/api/v1/sessions/{session}/invites", body if body is not None else {},
                headers=bearer(as_token or owner_of(session)))


def test_an_owners_invite_lets_a_second_client_join_with_the_invited_role(server):
    session = unique("inv")

    async def scenario():
        await made(server, session)
        status, headers, answer = mint(server, session, {"role": "editor", "expiresIn": 3600, "label": "for Bo"})
        assert status == 201, answer
        assert headers.get("cache-control") == "no-store"
        # A page address the page accepts: /s/NAME with the token in the fragment.
        assert answer["url"] == f"http://127.0.0.1:{server.port}/s/{session}#token={answer['token']}"
        assert answer["path"] == f"/s/{session}#token={answer['token']}"
        assert (answer["role"], answer["label"], answer["createdBy"]) == ("editor", "for Bo", "owner-1")
        granted = claims(answer["token"])
        assert granted["jti"] == answer["id"] and granted["sessions"] == [session] and granted["role"] == "editor"
        assert granted["exp"] == answer["expires"] and answer["expires"] - answer["created"] == 3600
        assert SECRET not in json.dumps(answer)
        bo = await Client.join(server.ws, session=session, name="Bo", create=False, token=answer["token"])
        assert bo.welcome["role"] == "editor"
        # The invited role is what it may do: an editor changes the table, an owner's option not.
        await bo.send({"type": "addSection", "title": "From Bo", "id": "s1"})
        ack = await bo.next(lambda m: m["type"] in ("ack", "error"))
        assert ack["type"] == "ack", ack
        await bo.send({"type": "setOptions", "options": {"accordion": True}, "id": "o1"})
        refused = await bo.next(lambda m: m["type"] in ("ack", "error"))
        assert refused["type"] == "error" and refused["code"] == "forbidden", refused
        await bo.close()

    run(scenario())


def test_the_default_invite_is_a_viewer_for_seven_days_and_a_viewer_cannot_change_the_table(server):
    session = unique("inv")

    async def scenario():
        await made(server, session)
        status, _, answer = mint(server, session)
        assert status == 201, answer
        assert answer["role"] == "viewer" and answer["expires"] - answer["created"] == 7 * 86400
        viewer = await Client.join(server.ws, session=session, name="Vi", create=False, token=answer["token"])
        assert viewer.welcome["role"] == "viewer"
        await viewer.send({"type": "addSection", "title": "nope", "id": "v1"})
        refused = await viewer.next(lambda m: m["type"] in ("ack", "error"))
        assert refused["type"] == "error" and refused["code"] == "forbidden"
        await viewer.close()

    run(scenario())


def test_a_viewer_and_an_editor_cannot_mint_and_an_owner_only_for_its_own_session(server):
    session, other = unique("inv"), unique("inv")
    run(made(server, session))
    run(made(server, other))
    for role in ("viewer", "editor"):
        status, _, answer = mint(server, session, {"role": "viewer"}, as_token=token([session], role=role))
        assert status == 403 and answer["error"]["code"] == "forbidden", answer
    # An owner of `session` cannot mint for `other`, owner invites included.
    status, _, answer = mint(server, other, {"role": "owner"}, as_token=owner_of(session))
    assert status == 403 and answer["error"]["code"] == "forbidden", answer
    # Nor can an invite it minted open another session: the token names this session alone.
    status, _, answer = mint(server, session, {"role": "owner"})
    assert status == 201 and claims(answer["token"])["sessions"] == [session]
    status, _, answer = call(server, "GET", f"/api/v1/sessions/{other}/collapsed", headers=bearer(answer["token"]))
    assert status == 403, answer


@pytest.mark.parametrize("body,field", [
    ({"role": "admin"}, "role"),
    ({"expiresIn": 59}, "expiresIn"),
    ({"expiresIn": 7_776_001}, "expiresIn"),
    ({"expiresIn": "1h"}, "expiresIn"),
    ({"label": "x" * 129}, "label"),
])
def test_an_invite_outside_the_bounds_is_refused_naming_the_field(server, body, field):
    session = unique("inv")
    run(made(server, session))
    status, _, answer = mint(server, session, body)
    assert status == 400 and answer["error"]["field"] == field, answer


def test_minting_for_a_session_that_does_not_exist_is_404(server):
    status, _, answer = mint(server, unique("missing"), {"role": "viewer"})
    assert status == 404, answer


def test_the_invites_list_shows_live_invites_to_owners_and_never_a_token(server):
    session = unique("inv")
    run(made(server, session))
    first = mint(server, session, {"role": "viewer", "label": "one"})[2]
    second = mint(server, session, {"role": "editor", "label": "two"})[2]
    status, _, listed = call(server, "GET", f"/api/v1/sessions/{session}/invites", headers=bearer(owner_of(session)))
    assert status == 200, listed
    # Oldest first (two minted in the same second: by id).
    assert sorted((i["id"], i["role"], i["label"]) for i in listed["invites"]) == sorted([
        (first["id"], "viewer", "one"), (second["id"], "editor", "two")])
    assert set(listed["invites"][0]) == {"id", "role", "label", "created", "expires", "createdBy"}
    assert first["token"] not in json.dumps(listed) and second["token"] not in json.dumps(listed)
    status, _, answer = call(server, "GET", f"/api/v1/sessions/{session}/invites",
                             headers=bearer(token([session], role="editor")))
    assert status == 403, answer


def test_withdrawing_an_invite_closes_its_members_with_4503_and_refuses_the_token(server):
    session = unique("inv")

    async def scenario():
        await made(server, session)
        invite = mint(server, session, {"role": "editor"})[2]
        kept = mint(server, session, {"role": "editor"})[2]
        bo = await Client.join(server.ws, session=session, name="Bo", create=False, token=invite["token"])
        cy = await Client.join(server.ws, session=session, name="Cy", create=False, token=kept["token"])
        status, _, answer = call(server, "DELETE", f"/api/v1/sessions/{session}/invites/{invite['id']}",
                                 headers=bearer(owner_of(session)))
        assert status == 204, answer
        assert await read_until_closed(bo) == 4503
        # Only that token's members: another invite's member stays.
        await cy.send({"type": "addSection", "title": "still here", "id": "c1"})
        assert (await cy.next(lambda m: m["type"] in ("ack", "error")))["type"] == "ack"
        # Refused from now on: a join (4502, the documented refusal) and an API call (401).
        messages, code = await refused_join(server.ws, session, invite["token"])
        assert code == 4502 and messages[0]["code"] == "unauthorized" and "withdrawn" in messages[0]["message"]
        status, _, answer = call(server, "GET", f"/api/v1/sessions/{session}", headers=bearer(invite["token"]))
        assert status == 401 and "withdrawn" in answer["error"]["message"], answer
        listed = call(server, "GET", f"/api/v1/sessions/{session}/invites", headers=bearer(owner_of(session)))[2]
        assert [i["id"] for i in listed["invites"]] == [kept["id"]]
        # Withdrawn twice, or an id the session never minted: 404.
        status, _, _ = call(server, "DELETE", f"/api/v1/sessions/{session}/invites/{invite['id']}",
                            headers=bearer(owner_of(session)))
        assert status == 404
        await cy.close()

    run(scenario())


def test_a_token_from_foldtabled_token_with_a_jti_is_withdrawn_by_an_owner_of_every_session(server, secret_file):
    session = unique("inv")
    printed = subprocess.run(
        [BIN, "token", "--token-secret-file", str(secret_file), "--session", session, "--role", "editor",
         "--jti", "script-7", "--label", "nightly job"], capture_output=True, text=True, check=True).stdout.strip()
    assert claims(printed)["jti"] == "script-7" and claims(printed)["label"] == "nightly job"
    # Without --jti the command makes a random one, so every token it prints can be withdrawn.
    plain = subprocess.run([BIN, "token", "--token-secret-file", str(secret_file), "--session", session],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert len(claims(plain)["jti"]) == 32

    async def scenario():
        await made(server, session)
        job = await Client.join(server.ws, session=session, name="job", create=False, token=printed)
        # An owner of this session alone cannot withdraw an id it never minted (it could be any
        # session's token); an owner of every session can.
        status, _, _ = call(server, "DELETE", f"/api/v1/sessions/{session}/invites/script-7", headers=bearer(owner_of(session)))
        assert status == 404
        status, _, answer = call(server, "DELETE", f"/api/v1/sessions/{session}/invites/script-7",
                                 headers=bearer(token(["*"], role="owner", sub="admin")))
        assert status == 204, answer
        assert await read_until_closed(job) == 4503
        _, code = await refused_join(server.ws, session, printed)
        assert code == 4502

    run(scenario())


def test_a_token_without_a_jti_keeps_working_and_an_id_that_cannot_be_one_is_refused(server):
    session = unique("inv")
    old = token([session], role="editor", sub="legacy")  # no jti, as tokens before ids

    async def scenario():
        await made(server, session)
        member = await Client.join(server.ws, session=session, name="old", create=False, token=old)
        assert member.welcome["role"] == "editor"
        await member.close()

    run(scenario())
    status, _, answer = call(server, "DELETE", f"/api/v1/sessions/{session}/invites/bad.id", headers=bearer(owner_of(session)))
    assert status == 400 and answer["error"]["field"] == "id", answer


def test_the_withdrawn_list_survives_a_restart(secret_file):
    data = tempfile.mkdtemp(prefix="foldtable-invites-")
    session = unique("inv")
    first = Server("--token-secret-file", str(secret_file), "--data-dir", data)
    try:
        run(made(first, session))
        invite = mint(first, session, {"role": "editor"})[2]
        kept = mint(first, session, {"role": "viewer", "label": "stays"})[2]
        status, _, _ = call(first, "DELETE", f"/api/v1/sessions/{session}/invites/{invite['id']}", headers=bearer(owner_of(session)))
        assert status == 204
    finally:
        assert first.stop() == 0
    second = Server("--token-secret-file", str(secret_file), "--data-dir", data)
    try:
        _, code = run(refused_join(second.ws, session, invite["token"]))
        assert code == 4502
        listed = call(second, "GET", f"/api/v1/sessions/{session}/invites", headers=bearer(owner_of(session)))[2]
        assert [(i["id"], i["label"]) for i in listed["invites"]] == [(kept["id"], "stays")]

        async def joins():
            member = await Client.join(second.ws, session=session, name="Vi", create=False, token=kept["token"])
            await member.close()

        run(joins())
    finally:
        assert second.stop() == 0
        shutil.rmtree(data, ignore_errors=True)


def test_members_are_listed_with_role_and_token_and_an_owner_can_disconnect_one(server):
    session = unique("inv")

    async def scenario():
        await made(server, session)
        invite = mint(server, session, {"role": "viewer", "label": "guest"})[2]
        olga = await Client.join(server.ws, session=session, name="Olga", create=False, token=owner_of(session))
        guest = await Client.join(server.ws, session=session, name="Guest", create=False, token=invite["token"])
        status, _, listed = call(server, "GET", f"/api/v1/sessions/{session}/members", headers=bearer(invite["token"]))
        assert status == 200, listed
        members = {m["name"]: m for m in listed["members"]}
        assert set(members) == {"Olga", "Guest"}
        # A viewer sees names and roles, not token ids or labels (what owners withdraw by).
        assert members["Guest"]["role"] == "viewer" and members["Guest"]["token"] is None and members["Guest"]["label"] is None
        status, _, as_owner = call(server, "GET", f"/api/v1/sessions/{session}/members", headers=bearer(owner_of(session)))
        assert status == 200, as_owner
        owned = {m["name"]: m for m in as_owner["members"]}
        assert owned["Guest"]["token"] == invite["id"]
        assert owned["Guest"]["label"] == "guest" and owned["Olga"]["label"] is None
        assert members["Olga"]["role"] == "owner" and members["Guest"]["client"] == guest.welcome["client"]
        # A viewer cannot disconnect anyone; an owner can, with 4504.
        path = f"/api/v1/sessions/{session}/members/{members['Olga']['client']}"
        assert call(server, "DELETE", path, headers=bearer(invite["token"]))[0] == 403
        path = f"/api/v1/sessions/{session}/members/{guest.welcome['client']}"
        status, _, answer = call(server, "DELETE", path, headers=bearer(owner_of(session)))
        assert status == 204, answer
        assert await read_until_closed(guest) == 4504
        assert call(server, "DELETE", path, headers=bearer(owner_of(session)))[0] == 404
        # Disconnected, not withdrawn: the same token joins again.
        again = await Client.join(server.ws, session=session, name="Guest", create=False, token=invite["token"])
        assert again.welcome["role"] == "viewer"
        await again.close()
        await olga.close()

    run(scenario())


def test_an_open_mode_server_has_no_invites(tmp_path):
    open_server = Server("--memory")
    try:
        run(made_open(open_server, "openinv"))
        status, _, answer = call(open_server, "POST", "/api/v1/sessions/openinv/invites", {})
        assert status == 400 and "token" in answer["error"]["message"], answer
    finally:
        open_server.stop()


async def made_open(server, session):
    member = await Client.join(server.ws, session=session, name="maker")
    await member.close()


@pytest.mark.skipif(REDIS is None and os.environ.get("CI") != "true", reason="redis-server is not installed")
def test_a_withdrawal_on_one_node_closes_and_refuses_the_token_on_the_other(secret_file):
    from test_cluster import RedisProcess
    redis = RedisProcess()
    a = Server("--redis", redis.url, "--node-id", "a", "--token-secret-file", str(secret_file))
    b = Server("--redis", redis.url, "--node-id", "b", "--token-secret-file", str(secret_file))
    session = unique("inv")
    try:
        async def scenario():
            await made(a, session)
            invite = mint(a, session, {"role": "editor", "label": "on b"})[2]
            # Minted on a, listed on b: the list lives in Redis.
            listed = call(b, "GET", f"/api/v1/sessions/{session}/invites", headers=bearer(owner_of(session)))[2]
            assert [i["id"] for i in listed["invites"]] == [invite["id"]]
            bo = await Client.join(b.ws, session=session, name="Bo", create=False, token=invite["token"])
            watcher = await Client.join(a.ws, session=session, name="Wa", create=False, token=owner_of(session))
            # Both nodes' members, each with its node, once presence has carried b's to a. (The
            # owner's token names its bearer Olga, whatever the join asked.)
            wanted = {("Olga", "a"), ("Bo", "b")}
            deadline = time.monotonic() + 15
            while True:
                members = call(a, "GET", f"/api/v1/sessions/{session}/members", headers=bearer(owner_of(session)))[2]["members"]
                if {(m["name"], m["node"]) for m in members} >= wanted or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert {(m["name"], m["node"]) for m in members} >= wanted, members
            status, _, _ = call(a, "DELETE", f"/api/v1/sessions/{session}/invites/{invite['id']}", headers=bearer(owner_of(session)))
            assert status == 204
            assert await read_until_closed(bo, timeout=5) == 4503
            _, code = await refused_join(b.ws, session, invite["token"])
            assert code == 4502
            status, _, answer = call(b, "GET", f"/api/v1/sessions/{session}", headers=bearer(invite["token"]))
            assert status == 401 and "withdrawn" in answer["error"]["message"], answer
            await watcher.close()
            return invite

        invite = run(scenario(), limit=60)
        # A node that starts after the withdrawal refuses the token too, from its first request.
        late = Server("--redis", redis.url, "--node-id", "late", "--token-secret-file", str(secret_file))
        try:
            status, _, answer = call(late, "GET", f"/api/v1/sessions/{session}", headers=bearer(invite["token"]))
            assert status == 401 and "withdrawn" in answer["error"]["message"], answer
            listed = call(late, "GET", f"/api/v1/sessions/{session}/invites", headers=bearer(owner_of(session)))[2]
            assert listed["invites"] == []
        finally:
            assert late.stop() == 0
    finally:
        assert a.stop() == 0
        assert b.stop() == 0
        redis.close()


def test_two_people_on_one_invite_link_are_two_authors_for_undo(server):
    """An invite is a link many people open: its token's sub names the link, not a person. Each
    is told apart (by the scope the client declares), so one guest's undo never takes back the
    other's change."""
    session = unique("inv")

    async def scenario():
        await made(server, session)
        link = mint(server, session, {"role": "editor"})[2]["token"]
        ana = await Client.join(server.ws, session=session, name="Ana", create=False, token=link, idScope="ana-scope-0123456789")
        ben = await Client.join(server.ws, session=session, name="Ben", create=False, token=link, idScope="ben-scope-0123456789")
        async def change(client, message, change_id):
            await client.send({**message, "id": change_id})
            return await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == change_id)

        assert (await change(ana, {"type": "addSection", "key": "anas", "title": "Ana's"}, "c1"))["type"] == "ack"
        # Ben's own id c1 is not Ana's, and nothing of his is to undo.
        refused = await change(ben, {"type": "undo"}, "c1")
        assert refused["type"] == "error" and refused["code"] == "nothing_to_undo", refused
        assert (await change(ana, {"type": "undo"}, "u1"))["type"] == "ack"
        await ana.close()
        await ben.close()
    run(scenario())


def test_an_invite_never_outlives_the_token_that_minted_it(server):
    session = unique("inv")

    async def scenario():
        await made(server, session)
        short = token([session], role="owner", sub="owner-2", name="Oz", ttl=600)
        status, _, answer = mint(server, session, {"role": "owner", "expiresIn": 30 * 86400}, as_token=short)
        assert status == 201, answer
        assert answer["expires"] == claims(short)["exp"], answer
    run(scenario())

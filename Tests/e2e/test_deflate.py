"""permessage-deflate (RFC 7692) end to end: the `permessage-deflate` setting, real foldtabled,
and the Python `websockets` client, which offers the extension unless told `compression=None`."""
import asyncio
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from foldtabled import Client, Server, http_get

ROWS = 20_000


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


@pytest.fixture(scope="module")
def deflate_server():
    s = Server("--permessage-deflate", "--memory", "--demo-large-rows", str(ROWS))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def plain_server():
    s = Server("--memory", "--demo-large-rows", str(ROWS))
    yield s
    assert s.stop() == 0


def metric(server, name):
    status, _, body = http_get(server.port, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} missing from /metrics")


async def join(server, compression, session, name):
    ws = await connect(server.ws, max_size=None, open_timeout=5, compression=compression)
    client = Client(ws)
    await client.send({"type": "join", "session": session, "name": name, "create": True})
    client.welcome = await client.next(lambda m: m["type"] in ("welcome", "resume"))
    return client


def negotiated(client):
    return client.ws.response.headers.get("Sec-WebSocket-Extensions")


async def rows_of_big(client, timeout=30):
    """Every row of the expansion of section "big", in order, checked chunk by chunk."""
    event = await client.next(lambda m: m["type"] == "event" and m["collapsed"].get("big") is False, timeout)
    rows = []
    while True:
        chunk = await client.next(lambda m: m["type"] == "rows" and m["section"] == "big", timeout)
        assert chunk["seq"] == event["seq"] and chunk["from"] == len(rows)
        rows += chunk["rows"]
        if chunk["final"]:
            return rows


def assert_demo_rows(rows):
    assert len(rows) == ROWS
    for i in (0, 1, 999, 1000, ROWS // 2, ROWS - 1):
        assert rows[i]["key"] == f"big-{i}"
        assert rows[i]["label"] == f"Item {i}" and rows[i]["value"] == str(i % 1000)


def test_with_the_setting_on_a_compressing_and_a_plain_client_both_get_every_row_of_a_large_section(deflate_server):
    async def scenario():
        before_wire = metric(deflate_server, "foldtable_written_bytes_total")
        before_payload = metric(deflate_server, "foldtable_written_payload_bytes_total")
        zipped = await join(deflate_server, "deflate", "demo", "zipped")
        plain = await join(deflate_server, None, "demo", "plain")
        assert negotiated(zipped).startswith("permessage-deflate")
        assert negotiated(plain) is None
        await zipped.send({"type": "set", "section": "big", "collapsed": False})
        zipped_rows, plain_rows = await asyncio.gather(rows_of_big(zipped), rows_of_big(plain))
        assert_demo_rows(zipped_rows)
        assert zipped_rows == plain_rows
        await zipped.send({"type": "set", "section": "big", "collapsed": True, "id": "done"})
        await zipped.next(lambda m: m["type"] == "ack" and m["id"] == "done")
        await zipped.close()
        await plain.close()
        # The plain client alone was sent as many bytes as the payload; with the compressed
        # copy on top, the wire still carries far less than twice the payload.
        wire = metric(deflate_server, "foldtable_written_bytes_total") - before_wire
        payload = metric(deflate_server, "foldtable_written_payload_bytes_total") - before_payload
        assert payload > 1.8 * len(json.dumps(plain_rows, separators=(",", ":")))
        assert payload / 2 < wire < payload * 0.75
    run(scenario())


def test_with_the_setting_on_many_small_messages_arrive_whole_and_in_order(deflate_server):
    async def scenario():
        session = "deflate-small"
        writer = await join(deflate_server, "deflate", session, "writer")
        reader = await join(deflate_server, "deflate", session, "reader")
        for i in range(300):
            await writer.send({"type": "addSection", "title": f"S{i}", "key": f"s{i}", "id": f"a{i}"})
        added = []
        while len(added) < 300:
            event = await reader.next(lambda m: m["type"] == "event" and m["change"]["type"] == "addSection")
            added.append(event["change"]["key"])
        assert added == [f"s{i}" for i in range(300)]
        await writer.close()
        await reader.close()
    run(scenario())


def test_a_compressed_message_that_inflates_past_the_message_cap_closes_1009(deflate_server):
    async def scenario():
        client = await join(deflate_server, "deflate", "deflate-bomb", "bomb")
        # 1 MB of one letter deflates to about a kilobyte; the default cap is 64 KiB.
        await client.send({"type": "addSection", "title": "x" * 1_000_000, "id": "bomb"})
        with pytest.raises(ConnectionClosed):
            while True:
                await client.ws.recv()
        assert client.ws.close_code == 1009
        assert deflate_server.alive()
        again = await join(deflate_server, "deflate", "deflate-bomb", "after")
        await again.close()
    run(scenario())


def test_with_the_setting_off_nothing_is_negotiated_and_rows_arrive_plain(plain_server):
    async def scenario():
        client = await join(plain_server, "deflate", "demo", "offers")
        assert negotiated(client) is None
        await client.send({"type": "set", "section": "big", "collapsed": False})
        assert_demo_rows(await rows_of_big(client))
        await client.send({"type": "set", "section": "big", "collapsed": True})
        await client.close()
        assert metric(plain_server, "foldtable_written_bytes_total") > metric(
            plain_server, "foldtable_written_payload_bytes_total")
    run(scenario())


def test_the_wrapper_echoes_big_compressed_messages_and_batches_intact(echo_server_factory):
    """The C wrapper alone (foldtable-echo): messages larger than lws's inflate and deflate
    buffers arrive in pieces and leave in several fragments, while later writes reuse nothing
    lws still reads; queued echoes are batched into one compressed frame."""
    echo = echo_server_factory("--permessage-deflate", "--max-message-bytes", "4194304")

    async def scenario():
        async with connect(echo.ws_url, max_size=None, compression="deflate") as ws:
            assert negotiated(Client(ws)).startswith("permessage-deflate")
            for size in (0, 1, 1_000, 70_000, 300_000, 3_000_000):
                text = "".join(f"{i % 997},row {i};" for i in range(size // 10 + 1))[:size]
                await ws.send(text)
                assert await ws.recv() == text
            blob = bytes(range(256)) * 400
            await ws.send(blob)
            assert await ws.recv() == blob
            lines = [f"message {i} " + "x" * (i % 500) for i in range(3_000)]
            for line in lines:
                await ws.send(line)
            got = []
            while len(got) < len(lines):
                got += (await ws.recv()).split("\n")
            assert got == lines
    run(scenario())

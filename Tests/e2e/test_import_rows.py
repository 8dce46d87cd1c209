"""Importing rows into one section over the HTTP API (POST /api/v1/sessions/N/sections/K/rows),
against the real foldtabled with real WebSocket members: the import is one change in the session's
order; members get its event at once and the rows in chunks, with busy on and off around them."""
import asyncio
import csv
import io
import json

import pytest

from foldtabled import Client, Server
from test_api import call, run, unique


@pytest.fixture(scope="module")
def server():
    # 8,000 rows of CSV are ~360 KB, under the default body cap (4 MiB; test_http.py tests it).
    s = Server()
    yield s
    s.stop()


def csv_of(rows, header=("label", "value", "detail")):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


def lines(count):
    # Commas, quotes, line breaks and non-ASCII text in the fields: RFC 4180 quoting on the way in.
    return [(f"Row {i}, \"quoted\"", f"v{i}\nsecond line", f"détail {i}") for i in range(count)]


async def section(member, key, title, collapsed):
    await member.send({"type": "addSection", "key": key, "title": title, "collapsed": collapsed, "id": f"add-{key}"})
    await member.next(lambda m: m["type"] == "ack" and m["id"] == f"add-{key}")


def test_a_csv_import_into_one_section_reaches_members_with_busy_on_and_off_around_its_rows(server):
    name = unique("import")
    given = lines(8_000)  # ~360 KB: read off the service thread (past 256 KiB)

    async def scenario():
        author = await Client.join(server.ws, session=name, name="author")
        await section(author, "big", "Big", collapsed=False)
        await author.send({"type": "addRow", "section": "big", "label": "old", "id": "old"})
        await author.next(lambda m: m["type"] == "ack" and m["id"] == "old")
        # Busy at once (threshold 0) so that the test does not depend on how fast this machine is.
        await author.send({"type": "setOptions", "options": {"busyThresholdMs": 0}, "id": "opt"})
        await author.next(lambda m: m["type"] == "ack" and m["id"] == "opt")
        watcher = await Client.join(server.ws, session=name, name="watcher")
        assert [r["label"] for r in watcher.welcome["table"]["sections"][0]["rows"]] == ["old"]

        status, _, body = await asyncio.to_thread(
            call, server, "POST", f"/api/v1/sessions/{name}/sections/big/rows", csv_of(given), content_type="text/csv")
        assert status == 200 and body["rows"] == 8_000, body
        seq = body["seq"]
        for member in (author, watcher):
            event = await member.next(lambda m: m["type"] == "event" and m["seq"] == seq)
            change = event["change"]
            # The event carries the count; the rows follow in chunks.
            assert change == {"type": "importRows", "section": "big", "replace": True, "count": 8_000}
            rows = []
            while True:
                chunk = await member.next(lambda m: m["type"] == "rows" and m["section"] == "big", timeout=15)
                assert chunk["seq"] == seq and chunk["from"] == len(rows) and chunk["total"] == 8_000
                rows += chunk["rows"]
                if chunk["final"]:
                    break
            assert [(r["label"], r["value"], r["detail"]) for r in rows] == given
            assert [r["key"] for r in rows[:2]] == [f"r{seq}.1", f"r{seq}.2"]
            off = await member.next(lambda m: m["type"] == "busy" and not m["busy"])
            assert off["section"] == "big"
            # In arrival order: event, busy on, the rows, busy off.
            order = [m for m in member.all if m.get("section") == "big" or m.get("seq") == seq]
            kinds = [m["type"] if m["type"] != "busy" else f"busy:{m['busy']}" for m in order if m["type"] in ("event", "rows", "busy")]
            start = kinds.index("event")
            assert kinds[start:start + 2] == ["event", "busy:True"], kinds[:10]
            assert kinds[-1] == "busy:False" and kinds.count("busy:True") == 1

        # Export of the section -> import back: the same rows, keys and all.
        status, headers, exported = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/sections/big/rows?format=csv")
        assert status == 200 and headers["content-type"].startswith("text/csv")
        status, _, again = await asyncio.to_thread(
            call, server, "POST", f"/api/v1/sessions/{name}/sections/big/rows", exported.encode(), content_type="text/csv")
        assert status == 200 and again["rows"] == 8_000
        _, _, reexported = await asyncio.to_thread(call, server, "GET", f"/api/v1/sessions/{name}/sections/big/rows?format=csv")
        assert reexported == exported
        # ...but not into another section: the export names its own.
        await section(author, "other", "Other", collapsed=True)
        status, _, refused = await asyncio.to_thread(
            call, server, "POST", f"/api/v1/sessions/{name}/sections/other/rows", exported.encode(), content_type="text/csv")
        assert status == 400 and refused["error"]["field"] == "section_key"
        await author.close()
        await watcher.close()
    run(scenario())


def test_a_json_import_by_title_appends_sends_no_rows_to_a_collapsed_section_and_survives_a_restart(tmp_path):
    name = unique("append")
    data = tmp_path / "data"
    first = Server("--data-dir", str(data))
    try:
        async def scenario():
            member = await Client.join(first.ws, session=name, name="ana")
            await section(member, "fruit", "Fruit", collapsed=True)
            await member.send({"type": "addRow", "section": "fruit", "label": "Apple", "id": "apple"})
            await member.next(lambda m: m["type"] == "ack" and m["id"] == "apple")
            body = {"rows": [{"label": "Pear", "value": "green"}, {"label": "Plum", "key": "plum", "detail": "dark"}]}
            status, _, answer = await asyncio.to_thread(
                call, first, "POST", f"/api/v1/sessions/{name}/sections/Fruit/rows?by=title&mode=append", body)
            assert status == 200 and answer["rows"] == 2
            event = await member.next(lambda m: m["type"] == "event" and m["seq"] == answer["seq"])
            assert event["change"]["replace"] is False and event["change"]["count"] == 2
            # Collapsed: nothing follows until someone expands it; then every row comes.
            await member.send({"type": "toggle", "section": "fruit", "id": "open"})
            await member.next(lambda m: m["type"] == "ack" and m["id"] == "open")
            rows = await member.next(lambda m: m["type"] == "rows" and m["section"] == "fruit")
            assert rows["final"] and [r["label"] for r in rows["rows"]] == ["Apple", "Pear", "Plum"]
            assert not [m for m in member.all if m["type"] == "rows" and m["seq"] == answer["seq"]]
            await member.close()
        run(scenario())
        _, _, before = call(first, "GET", f"/api/v1/sessions/{name}/sections/fruit/rows")
    finally:
        first.stop()
    second = Server("--data-dir", str(data))
    try:
        _, _, after = call(second, "GET", f"/api/v1/sessions/{name}/sections/fruit/rows")
        assert after == before and [r["key"] for r in after["rows"]][2] == "plum"
    finally:
        second.stop()


@pytest.mark.parametrize("path,body,content_type,status,code,field", [
    ("fruit/rows", b'label,value\n"Pear,green\n', "text/csv", 400, "invalid_csv", None),
    ("fruit/rows", b"label,value\nPear,green,extra\n", "text/csv", 400, "invalid_csv", None),
    ("fruit/rows", b"label,value\nPear,\xff\xfe\n", "text/csv", 400, "invalid_csv", None),
    ("fruit/rows", b"label,color\nPear,green\n", "text/csv", 400, "invalid_csv", None),
    ("fruit/rows", b"section,label\nVeg,Leek\n", "text/csv", 400, "invalid_value", "section"),
    ("fruit/rows", b'{"rows":[{"label":"ok"},{"label":""}]}', "application/json", 400, "invalid_value", "rows.1.label"),
    ("fruit/rows", b'{"rows":[{"label":"a","key":"k"},{"label":"b","key":"k"}]}', "application/json", 409, "duplicate_key", "rows.1.key"),
    ("fruit/rows", b'{"items":[]}', "application/json", 400, "missing_field", "rows"),
    ("fruit/rows", b'{"rows":[', "application/json", 400, "bad_json", None),
    ("fruit/rows?mode=merge", b"label\nPear\n", "text/csv", 400, "invalid_value", "mode"),
    ("fruit/rows", b"Pear", "text/plain", 415, "unsupported_media_type", None),
    ("nope/rows", b"label\nPear\n", "text/csv", 404, "unknown_section", "section"),
    ("Nope/rows?by=title", b"label\nPear\n", "text/csv", 404, "unknown_section", "title"),
])
def test_bad_imports_get_a_clear_error_and_change_nothing(server, path, body, content_type, status, code, field):
    name = unique("bad")

    async def setup():
        member = await Client.join(server.ws, session=name, name="ana")
        await section(member, "fruit", "Fruit", collapsed=False)
        await member.send({"type": "addRow", "section": "fruit", "label": "Apple", "id": "apple"})
        await member.next(lambda m: m["type"] == "ack" and m["id"] == "apple")
        await member.close()
    run(setup())
    _, _, before = call(server, "GET", f"/api/v1/sessions/{name}")
    got, _, reply = call(server, "POST", f"/api/v1/sessions/{name}/sections/{path}", body, content_type=content_type)
    assert got == status and reply["error"]["code"] == code, reply
    if field:
        assert reply["error"]["field"] == field, reply
    _, _, after = call(server, "GET", f"/api/v1/sessions/{name}")
    assert after == before


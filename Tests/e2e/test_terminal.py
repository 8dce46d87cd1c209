"""End-to-end tests of `foldtable`, the terminal client, against the real foldtabled.

Script mode: every subcommand and its failures, run as a subprocess (exit status, stdout JSON,
one line on stderr). Interactive mode: the client runs full-screen inside tmux (its own tmux
server, so nothing else running tmux is disturbed); keys go in with send-keys and the screen
comes back with capture-pane. A second member is a Python `websockets` client (foldtabled.py).

Binaries: FOLDTABLE_BIN (server) and FOLDTABLE_CLIENT_BIN (client), default .build/debug/.
"""
import asyncio
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import threading
import time

import pytest

from foldtabled import BIN, REPO, Client, Server

CLIENT = os.environ.get("FOLDTABLE_CLIENT_BIN", ".build/debug/foldtable")
CLIENT = CLIENT if os.path.isabs(CLIENT) else os.path.join(REPO, CLIENT)
TMUX = ["tmux", "-L", f"foldtable-test-{os.getpid()}"]


def demo_server(*args):
    return Server("--demo-large-rows", "2000", *args)


@pytest.fixture
def server():
    s = demo_server()
    yield s
    s.stop()


def ft(*args, timeout=20):
    """Runs the client in script mode; returns the finished process (text stdout/stderr)."""
    return subprocess.run([CLIENT, *args], capture_output=True, text=True, timeout=timeout)


def one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    return lines[0]


def free_port():
    """A port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def collapsed_map(url, session="demo"):
    done = ft("get", url, session)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run(coroutine):
    return asyncio.run(coroutine)


class Lines:
    """A process's output line by line, each read bounded: a thread reads the pipe into a queue
    (a select on the pipe would miss lines Python has already buffered). "" at the end."""

    def __init__(self, stream):
        self.queue = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.queue.put(line)
        self.queue.put("")

    def next(self, timeout=15):
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line of output within {timeout} s") from None


# ---- script mode -----------------------------------------------------------------------------


def test_get_prints_each_sections_state_by_key_and_by_title(server):
    by_key = ft("get", server.ws, "demo")
    assert by_key.returncode == 0 and by_key.stderr == ""
    assert by_key.stdout.count("\n") == 1
    assert json.loads(by_key.stdout) == {
        "mac": False, "ipad": False, "iphone": True, "guangdong": True, "zhejiang": True,
        "sichuan": True, "friends": True, "roommates": True, "climbing": True, "empty": False, "big": True}
    assert list(json.loads(by_key.stdout)) == ["mac", "ipad", "iphone", "guangdong", "zhejiang", "sichuan",
                                              "friends", "roommates", "climbing", "empty", "big"]
    by_title = ft("get", server.ws, "demo", "--by-title")
    assert by_title.returncode == 0
    titles = json.loads(by_title.stdout)
    assert titles["Mac"] is False and titles["Province\nGuangdong"] is True and titles["Inventory"] is True


def test_toggle_expand_and_collapse_change_the_session_for_everyone(server):
    async def scenario():
        other = await Client.join(server.ws, name="bo")
        done = ft("toggle", server.ws, "demo", "mac", "--name", "script")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"mac": True}
        event = await other.next(lambda m: m["type"] == "event")
        assert event["by"]["name"] == "script" and event["collapsed"] == {"mac": True}

        done = ft("expand", server.ws, "demo", "--title", "Province\nSichuan")
        assert done.returncode == 0 and json.loads(done.stdout) == {"sichuan": False}
        assert (await other.next(lambda m: m["type"] == "event"))["collapsed"] == {"sichuan": False}

        done = ft("collapse", server.ws, "demo", "ipad")
        assert done.returncode == 0 and json.loads(done.stdout) == {"ipad": True}
        # Collapsing what is collapsed changes nothing, and says so.
        done = ft("collapse", server.ws, "demo", "ipad")
        assert done.returncode == 0 and json.loads(done.stdout) == {}
        await other.close()

    run(scenario())
    state = collapsed_map(server.ws)
    assert state["mac"] is True and state["sichuan"] is False and state["ipad"] is True


def test_expand_all_and_collapse_all(server):
    done = ft("expand-all", server.ws, "demo")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {k: False for k in
                                       ["iphone", "guangdong", "zhejiang", "sichuan", "friends", "roommates",
                                        "climbing", "big"]}
    assert not any(collapsed_map(server.ws).values())
    done = ft("collapse-all", server.ws, "demo")
    assert done.returncode == 0, done.stderr
    assert all(collapsed_map(server.ws).values())


def test_an_unknown_section_fails_with_one_line(server):
    for args in (["toggle", server.ws, "demo", "nope"], ["expand", server.ws, "demo", "--title", "Nope"]):
        done = ft(*args)
        assert done.returncode == 1 and done.stdout == ""
        line = one_line(done.stderr)
        assert line.startswith("foldtable: no section has the") and "nope" in line.lower()


def test_a_refused_change_fails_with_the_servers_reason(server):
    async def accordion_on():
        owner = await Client.join(server.ws, name="owner")
        await owner.send({"type": "setOptions", "options": {"accordion": True}, "id": "acc-1"})
        await owner.next(lambda m: m["type"] == "ack")
        await owner.close()

    run(accordion_on())
    done = ft("expand-all", server.ws, "demo")
    assert done.returncode == 1 and done.stdout == ""
    assert one_line(done.stderr) == "foldtable: expand all is not possible in accordion mode"


def test_bad_urls_and_arguments_fail_before_connecting():
    cases = [
        (["get", "http://127.0.0.1:1/ws", "demo"], "bad URL"),
        (["get", "ws://127.0.0.1:99999/ws", "demo"], "port"),
        (["get", "127.0.0.1:8080", "demo"], "ws://"),
        (["get", "ws://127.0.0.1:1/ws", "no such session!"], "bad session name"),
        (["toggle", "ws://127.0.0.1:1/ws", "demo"], "section key"),
        (["frobnicate", "ws://127.0.0.1:1/ws", "demo"], "unknown command"),
        (["get", "ws://127.0.0.1:1/ws", "demo", "--colour"], "unknown option"),
        ([], "no command"),
    ]
    for args, words in cases:
        done = ft(*args)
        assert done.returncode == 2, (args, done)
        assert words in one_line(done.stderr), (args, done.stderr)
    help_text = ft("--help")
    assert help_text.returncode == 0 and "expand-all" in help_text.stdout


def test_an_unreachable_server_fails_with_one_line():
    port = free_port()
    for command in (["get"], ["toggle"], ["watch"], ["collapse-all"]):
        args = [*command, f"ws://127.0.0.1:{port}/ws", "demo"] + (["mac"] if command == ["toggle"] else [])
        started = time.monotonic()
        done = ft(*args)
        assert done.returncode == 3, (args, done)
        assert time.monotonic() - started < 5
        line = one_line(done.stderr)
        assert line.startswith(f"foldtable: cannot connect to ws://127.0.0.1:{port}/ws"), line


def test_a_server_that_never_answers_times_out():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # accepts TCP (the kernel does), never speaks WebSocket
        port = silent.getsockname()[1]
        started = time.monotonic()
        done = ft("get", f"ws://127.0.0.1:{port}/ws", "demo", "--timeout", "1")
        assert done.returncode == 3
        assert one_line(done.stderr) == f"foldtable: no answer from ws://127.0.0.1:{port}/ws within 1 s"
        assert time.monotonic() - started < 4


def test_watch_prints_every_message_as_one_json_line_until_interrupted(server):
    watch = subprocess.Popen([CLIENT, "watch", server.ws, "demo", "--name", "watcher"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = Lines(watch.stdout)
    try:
        first = json.loads(output.next())
        assert first["type"] == "welcome" and first["name"] == "watcher"
        assert ft("toggle", server.ws, "demo", "iphone").returncode == 0
        seen = []
        while not any(m["type"] == "event" for m in seen):
            line = output.next()
            assert line.endswith("\n")
            seen.append(json.loads(line))  # every line is exactly one JSON object
        event = next(m for m in seen if m["type"] == "event")
        assert event["change"] == {"type": "toggle", "section": "iphone"}
        assert event["collapsed"] == {"iphone": False}
        # The expansion's rows follow as a rows message.
        rows = json.loads(output.next())
        assert rows["type"] == "rows" and rows["section"] == "iphone" and rows["final"] is True
    finally:
        watch.send_signal(signal.SIGINT)
        assert watch.wait(5) == 0
    assert watch.stderr.read() == ""


# ---- script mode: list, find, edits, options, --json and --id ---------------------------------


def ft_json(*args, timeout=20):
    """Runs the client with --json; asserts exit 0, nothing on stderr and exactly one JSON
    document on stdout, and returns it."""
    done = ft(*args, "--json", timeout=timeout)
    assert done.returncode == 0, (args, done.stderr)
    assert done.stderr == "", done.stderr
    assert done.stdout.count("\n") == 1, done.stdout
    return json.loads(done.stdout)


def table_of(url, session):
    """The session's table as a fresh member sees it: {section key: (title, collapsed, rowCount)}."""
    async def look():
        member = await Client.join(url, session=session, name="checker")
        await member.close()
        return {s["key"]: (s["title"], s["collapsed"], s["rowCount"]) for s in member.welcome["table"]["sections"]}

    return run(look())


def test_list_prints_the_sessions_with_their_member_counts(server):
    async def scenario():
        member = await Client.join(server.ws, session="other", name="bo")
        text = ft("list", server.ws)
        assert text.returncode == 0 and text.stderr == ""
        assert text.stdout.splitlines() == ["demo\t0", "other\t1"]
        assert ft_json("list", server.ws) == {"sessions": [{"name": "demo", "members": 0},
                                                           {"name": "other", "members": 1}]}
        await member.close()

    run(scenario())


def test_edits_from_the_command_line_reach_every_member(server):
    async def scenario():
        other = await Client.join(server.ws, session="work", name="bo")
        url = server.ws
        added = ft_json("add-section", url, "work", "Tools", "--detail", "hand and power", "--name", "script")
        assert added["repeated"] is False and added["collapsed"] == {} and added["key"] == "s1"
        assert added["seq"] == 1 and added["id"]
        event = await other.next(lambda m: m["type"] == "event")
        assert event["by"]["name"] == "script" and event["id"] == added["id"]
        assert event["change"]["title"] == "Tools" and event["change"]["detail"] == "hand and power"

        # Without --json, add-section and add-row print the new key.
        parts = ft("add-section", url, "work", "Parts", "--key", "parts", "--collapsed", "--index", "0")
        assert parts.returncode == 0 and parts.stdout == "parts\n" and parts.stderr == ""
        hammer = ft("add-row", url, "work", "s1", "Hammer", "--value", "12", "--detail", "steel")
        assert hammer.returncode == 0 and hammer.stdout == "r3\n"
        bolt = ft_json("add-row", url, "work", "--title", "Parts", "Bolt", "--value", "M6", "--key", "bolt")
        assert bolt["key"] == "bolt" and bolt["seq"] == 4
        for _ in range(3):
            await other.next(lambda m: m["type"] == "event")

        # Other changes print nothing without --json.
        updated = ft("update-row", url, "work", "r3", "--value", "13", "--clear-detail")
        assert updated.returncode == 0 and updated.stdout == "" and updated.stderr == ""
        event = await other.next(lambda m: m["type"] == "event")
        assert event["change"] == {"type": "updateRow", "row": "r3", "set": {"value": "13", "detail": None}}
        moved = ft_json("move-row", url, "work", "r3", "parts", "--index", "0")
        assert moved["seq"] == 6 and moved["repeated"] is False
        event = await other.next(lambda m: m["type"] == "event")
        assert event["change"] == {"type": "moveRow", "row": "r3", "section": "parts", "index": 0}
        renamed = ft_json("rename-section", url, "work", "s1", "Hand tools")
        assert renamed["seq"] == 7
        event = await other.next(lambda m: m["type"] == "event")
        assert event["change"] == {"type": "updateSection", "section": "s1", "set": {"title": "Hand tools"}}
        removed = ft("remove-row", url, "work", "bolt")
        assert removed.returncode == 0 and removed.stdout == ""
        event = await other.next(lambda m: m["type"] == "event")
        assert event["change"] == {"type": "removeRow", "row": "bolt"}
        await other.close()

    run(scenario())
    assert table_of(server.ws, "work") == {"parts": ("Parts", True, 1), "s1": ("Hand tools", False, 0)}


def test_find_finds_rows_of_collapsed_sections_and_reveal_shows_them(server):
    url = server.ws
    assert ft("add-section", url, "hay", "Stack", "--collapsed").stdout == "s1\n"
    for label in ("straw", "Needle", "more straw", "straw again"):
        assert ft("add-row", url, "hay", "s1", label, "--value", label.upper()).returncode == 0
    assert table_of(url, "hay")["s1"] == ("Stack", True, 4)

    found = ft("find", url, "hay", "needle")
    assert found.returncode == 0 and found.stderr == ""
    assert found.stdout == "r3\ts1\tNeedle\tNEEDLE\n"
    assert ft_json("find", url, "hay", "NEEDLE") == {
        "q": "NEEDLE", "rows": [{"section": "s1", "row": "r3", "label": "Needle", "value": "NEEDLE"}],
        "truncated": False}
    # More matches than the limit: the first ones, and it says so.
    assert ft_json("find", url, "hay", "straw", "--limit", "2") == {
        "q": "straw", "rows": [{"section": "s1", "row": "r2", "label": "straw", "value": "STRAW"},
                               {"section": "s1", "row": "r4", "label": "more straw", "value": "MORE STRAW"}],
        "truncated": True}
    truncated = ft("find", url, "hay", "straw", "--limit", "2")
    assert truncated.returncode == 0 and truncated.stdout.count("\n") == 2
    assert "more rows match than the 2 shown" in one_line(truncated.stderr)
    # Nothing found is not an error.
    nothing = ft("find", url, "hay", "gold")
    assert nothing.returncode == 0 and nothing.stdout == "" and nothing.stderr == ""
    assert ft_json("find", url, "hay", "gold") == {"q": "gold", "rows": [], "truncated": False}

    revealed = ft("reveal", url, "hay", "r3")
    assert revealed.returncode == 0 and json.loads(revealed.stdout) == {"s1": False}
    assert collapsed_map(url, "hay") == {"s1": False}
    # Revealing a visible row changes nothing.
    again = ft_json("reveal", url, "hay", "r3")
    assert again["collapsed"] == {} and again["repeated"] is False


def test_a_change_retried_with_the_same_id_is_applied_once(server):
    url = server.ws
    first = ft_json("add-section", url, "retry", "Only once", "--id", "script-7")
    again = ft_json("add-section", url, "retry", "Only once", "--id", "script-7")
    assert first["repeated"] is False and first["key"] == "s1" and first["id"] == "script-7"
    assert again == {"seq": first["seq"], "id": "script-7", "repeated": True, "collapsed": {}}
    assert list(table_of(url, "retry")) == ["s1"]

    row = ft("add-row", url, "retry", "s1", "Nail", "--key", "nail", "--id", "script-8")
    assert row.returncode == 0 and row.stdout == "nail\n"
    # A repeat knows the key when it was given.
    row = ft("add-row", url, "retry", "s1", "Nail", "--key", "nail", "--id", "script-8")
    assert row.returncode == 0 and row.stdout == "nail\n"
    assert table_of(url, "retry")["s1"][2] == 1

    toggled = ft("toggle", url, "retry", "s1", "--id", "script-9")
    assert json.loads(toggled.stdout) == {"s1": True}
    toggled = ft("toggle", url, "retry", "s1", "--id", "script-9")
    assert toggled.returncode == 0 and json.loads(toggled.stdout) == {}  # not toggled back
    assert collapsed_map(url, "retry") == {"s1": True}

    # The same id for another change is refused, not acknowledged.
    reused = ft("collapse-all", url, "retry", "--id", "script-9", "--json")
    assert reused.returncode == 1
    assert json.loads(reused.stdout)["error"]["code"] == "id_reused"
    assert one_line(reused.stderr).startswith("foldtable: ")


def test_a_retried_id_is_still_recognised_after_a_restart(tmp_path):
    first = demo_server("--data-dir", str(tmp_path))
    try:
        added = ft_json("add-section", first.ws, "keep", "Shelf", "--id", "restart-1")
    finally:
        first.stop()
    second = demo_server("--data-dir", str(tmp_path))
    try:
        again = ft_json("add-section", second.ws, "keep", "Shelf", "--id", "restart-1")
        assert again["seq"] == added["seq"] and again["repeated"] is True
        assert table_of(second.ws, "keep") == {"s1": ("Shelf", False, 0)}
    finally:
        second.stop()


def test_options_prints_and_sets_the_table_options(server):
    url = server.ws
    # Reading options makes no session: a missing one is refused, then one is made on purpose.
    missing = ft("options", url, "opts")
    assert missing.returncode == 1 and "no session is named" in missing.stderr, missing

    async def create():
        member = await Client.join(url, session="opts", name="maker")
        await member.close()

    run(create())
    before = ft("options", url, "opts")
    assert before.returncode == 0 and before.stderr == ""
    options = json.loads(before.stdout)
    assert options["accordion"] is False and options["busyThresholdMs"] == 500
    assert ft_json("options", url, "opts") == options
    changed = ft_json("options", url, "opts", "--accordion", "on", "--collapsed-indicator", "▸",
                      "--busy-threshold-ms", "250", "--sections-initially-collapsed", "yes")
    assert changed["repeated"] is False and changed["seq"] == 1
    after = ft_json("options", url, "opts")
    assert after == {**options, "accordion": True, "collapsedIndicator": "▸", "busyThresholdMs": 250,
                     "sectionsInitiallyCollapsed": True}
    silent = ft("options", url, "opts", "--accordion", "off")
    assert silent.returncode == 0 and silent.stdout == ""
    # The busy indicator switch and title lines; the server checks the range (at most 10 lines).
    assert options["showBusyIndicator"] is True and options["titleLines"] == 0
    assert ft("options", url, "opts", "--show-busy-indicator", "off", "--title-lines", "2").returncode == 0
    assert {k: v for k, v in ft_json("options", url, "opts").items() if k in ("showBusyIndicator", "titleLines")} == {
        "showBusyIndicator": False, "titleLines": 2}
    refused = ft("options", url, "opts", "--title-lines", "11")
    assert refused.returncode == 1 and one_line(refused.stderr) == "foldtable: titleLines must be between 0 and 10"


def test_get_and_watch_take_json_too(server):
    assert ft_json("get", server.ws, "demo") == collapsed_map(server.ws)
    watch = subprocess.Popen([CLIENT, "watch", server.ws, "demo", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = Lines(watch.stdout)
    try:
        assert json.loads(output.next())["type"] == "welcome"
    finally:
        watch.send_signal(signal.SIGINT)
        assert watch.wait(5) == 0


def test_refused_edits_fail_with_the_servers_reason(server):
    url = server.ws
    assert ft("add-section", url, "refuse", "Mac", "--key", "mac").stdout == "mac\n"
    assert ft("add-row", url, "refuse", "mac", "MacBook Air", "--key", "mac-1").stdout == "mac-1\n"
    cases = [
        (["remove-row", url, "refuse", "nope"], "unknown_row", 'no row has the key "nope"'),
        (["update-row", url, "refuse", "nope", "--value", "1"], "unknown_row", 'no row has the key "nope"'),
        (["reveal", url, "refuse", "nope"], "unknown_row", 'no row has the key "nope"'),
        (["move-row", url, "refuse", "mac-1", "nope"], "unknown_section", 'no section has the key "nope"'),
        (["add-row", url, "refuse", "--title", "Nope", "x"], "unknown_section", 'no section has the title "Nope"'),
        (["add-section", url, "refuse", "Again", "--key", "mac"], "duplicate_key", 'the key "mac" is already used'),
        (["rename-section", url, "refuse", "nope", "X"], "unknown_section", 'no section has the key "nope"'),
    ]
    for args, code, message in cases:
        done = ft(*args)
        assert done.returncode == 1 and done.stdout == "", (args, done)
        assert one_line(done.stderr) == f"foldtable: {message}", args
        done = ft(*args, "--json")
        assert done.returncode == 1, (args, done)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == code and error["message"] == message, (args, error)
    # Nothing of it was applied.
    assert "Again" not in ft("get", url, "refuse", "--by-title").stdout


def test_bad_arguments_of_the_new_commands_fail_before_connecting():
    port = free_port()  # nothing listens: a usage error must come before any connection
    url = f"ws://127.0.0.1:{port}/ws"
    cases = [
        (["find", url, "demo"], "find needs the text to find"),
        (["find", url, "demo", "x", "--limit", "0"], "--limit must be a number from 1 to 500"),
        (["reveal", url, "demo"], "reveal needs a row key"),
        (["add-section", url, "demo"], "add-section needs a title"),
        (["add-row", url, "demo", "mac"], "add-row needs a section key (or --title TITLE) and a label"),
        (["add-row", url, "demo", "mac", "x", "--index", "-1"], "--index must be a whole number"),
        (["update-row", url, "demo", "r1"], "update-row needs --label, --value, --detail or --clear-detail"),
        (["move-row", url, "demo", "r1"], "move-row needs a row key and a section key (or --title TITLE)"),
        (["rename-section", url, "demo", "mac"], "rename-section needs a section key (or --title TITLE) and the new title"),
        (["options", url, "demo", "--accordion", "maybe"], "--accordion must be on or off"),
        (["list"], "list needs a URL"),
        (["list", url, "demo"], 'unexpected argument "demo"'),
        (["get", url, "demo", "--id", "x"], "--id only goes with commands that change the table"),
        (["toggle", url, "demo", "mac", "--id", "x" * 65], "--id must be 1 to 64 bytes on one line"),
        (["join", url, "demo", "--json"], "--json does not go with join"),
    ]
    for args, words in cases:
        done = ft(*args)
        assert done.returncode == 2 and done.stdout == "", (args, done)
        assert words in one_line(done.stderr), (args, done.stderr)


def test_help_lists_every_command_with_an_example():
    done = ft("--help")
    assert done.returncode == 0 and done.stderr == ""
    for verb in ["join", "watch", "list", "get", "find", "toggle", "expand", "collapse", "expand-all", "collapse-all",
                 "reveal", "add-section", "add-row", "update-row", "remove-row", "move-row", "rename-section", "options"]:
        assert f"\n  {verb} URL" in done.stdout, verb
        assert f"\n      foldtable {verb} ws://" in done.stdout, verb


def test_the_new_commands_fail_with_one_line_when_the_server_is_unreachable():
    port = free_port()
    url = f"ws://127.0.0.1:{port}/ws"
    for args in (["list", url], ["find", url, "demo", "x"], ["add-row", url, "demo", "mac", "x"], ["options", url, "demo"]):
        done = ft(*args, "--json")
        assert done.returncode == 3 and done.stdout == "", (args, done)
        assert one_line(done.stderr).startswith(f"foldtable: cannot connect to {url}")


def test_tokens_open_the_sessions_they_name_and_a_refused_join_exits_1(tmp_path):
    secret = tmp_path / "token.secret"
    secret.write_text("s" * 40)
    server = Server("--memory", "--token-secret-file", str(secret))

    def make(session, role):
        made = subprocess.run([os.path.join(REPO, BIN), "token",
                               "--token-secret-file", str(secret), "--session", session, "--role", role,
                               "--ttl", "1h"], capture_output=True, text=True, timeout=10)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    try:
        url = server.ws
        editor = make("notes", "editor")
        # Only an owner makes a session: the editor's first change is refused until one has.
        refused = ft("add-section", url, "notes", "Todo", "--token", editor, "--json")
        assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["code"] == "session_not_found", refused
        owner = make("notes", "owner")

        async def create():
            member = await Client.join(url, session="notes", name="owner", token=owner)
            await member.close()

        run(create())
        assert ft("add-section", url, "notes", "Todo", "--token", editor).stdout == "s1\n"
        assert ft_json("list", url, "--token", make("*", "viewer"))["sessions"] == [
            {"name": "demo", "members": 0}, {"name": "notes", "members": 0}]
        # FOLDTABLE_TOKEN is the default.
        listed = subprocess.run([CLIENT, "list", url, "--json"], capture_output=True, text=True, timeout=20,
                                env={**os.environ, "FOLDTABLE_TOKEN": editor})
        assert listed.returncode == 0 and json.loads(listed.stdout) == {"sessions": [{"name": "notes", "members": 0}]}
        for args in (["list", url], ["get", url, "notes"], ["add-row", url, "notes", "s1", "x"]):
            refused = ft(*args, "--json")
            assert refused.returncode == 1, (args, refused)
            assert json.loads(refused.stdout)["error"]["code"] == "unauthorized"
            assert one_line(refused.stderr).startswith("foldtable: the server refused to "), refused.stderr
        viewer = ft("add-row", url, "notes", "s1", "x", "--token", make("notes", "viewer"), "--json")
        assert viewer.returncode == 1 and json.loads(viewer.stdout)["error"]["code"] == "forbidden"
    finally:
        server.stop()


def test_a_deleted_session_ends_watch_with_what_the_close_means(server):
    assert ft("add-section", server.ws, "gone", "Doomed").returncode == 0  # watch makes no session
    watch = subprocess.Popen([CLIENT, "watch", server.ws, "gone"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = Lines(watch.stdout)
    try:
        assert json.loads(output.next())["type"] == "welcome"

        async def delete():
            member = await Client.join(server.ws, session="gone", name="bo")
            await member.send({"type": "deleteSession"})
            await asyncio.sleep(0.2)

        run(delete())
        assert watch.wait(10) == 3  # 4501 is not retried
        assert one_line(watch.stderr.read()) == (
            f"foldtable: connection to {server.ws} lost (code 4501): the session was deleted")
    finally:
        if watch.poll() is None:
            watch.kill()


class Proxy:
    """A TCP proxy in front of the server that can drop every connection and refuse new ones:
    a network failure the client has to ride out."""

    def __init__(self, port):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepting = True
        self.pairs = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting:
                downstream.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.pairs.append((downstream, upstream))
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop_all(self):
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def close(self):
        self.accepting = False
        self.listener.close()
        self.drop_all()


def test_watch_reconnects_after_a_drop_and_resumes_where_it_left_off(server):
    proxy = Proxy(server.port)
    watch = subprocess.Popen([CLIENT, "watch", f"ws://127.0.0.1:{proxy.port}/ws", "demo"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = Lines(watch.stdout)
    try:
        welcome = json.loads(output.next())
        assert welcome["type"] == "welcome"
        assert ft("toggle", server.ws, "demo", "friends").returncode == 0
        while json.loads(output.next())["type"] != "event":
            pass
        proxy.accepting = False
        proxy.drop_all()
        # While it is away, someone else changes the table.
        assert ft("toggle", server.ws, "demo", "mac").returncode == 0
        time.sleep(0.5)
        proxy.accepting = True
        messages = []
        while not any(m["type"] == "event" for m in messages):
            messages.append(json.loads(output.next()))
        resume = next(m for m in messages if m["type"] in ("resume", "welcome"))
        assert resume["type"] == "resume" and resume["epoch"] == welcome["epoch"]
        event = next(m for m in messages if m["type"] == "event")
        assert event["change"] == {"type": "toggle", "section": "mac"}  # the one it missed
    finally:
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(5) == 0
        proxy.close()


# ---- wss ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def test_wss_works_with_the_ca_file_or_insecure_and_refuses_an_untrusted_certificate(tls_files):
    cert, key = tls_files
    tls = demo_server("--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert tls.url.startswith("https://")
        trusted = ft("get", f"wss://localhost:{tls.port}/ws", "demo", "--ca", str(cert))
        assert trusted.returncode == 0, trusted.stderr
        assert json.loads(trusted.stdout)["mac"] is False
        toggled = ft("toggle", f"wss://localhost:{tls.port}/ws", "demo", "mac", "--ca", str(cert))
        assert toggled.returncode == 0 and json.loads(toggled.stdout) == {"mac": True}
        insecure = ft("get", f"wss://127.0.0.1:{tls.port}/ws", "demo", "--insecure")
        assert insecure.returncode == 0 and json.loads(insecure.stdout)["mac"] is True
        untrusted = ft("get", f"wss://127.0.0.1:{tls.port}/ws", "demo")
        assert untrusted.returncode == 3
        assert "certificate is not trusted" in one_line(untrusted.stderr)
        missing = ft("get", f"wss://localhost:{tls.port}/ws", "demo", "--ca", "/nonexistent/ca.pem")
        assert missing.returncode == 2
        assert one_line(missing.stderr) == "foldtable: cannot read CA file /nonexistent/ca.pem"
    finally:
        tls.stop()


# ---- interactive, in tmux ------------------------------------------------------------------------


class Pane:
    """One tmux session running a shell command; the screen is read with capture-pane."""

    def __init__(self, command, width=100, height=40):
        self.name = f"ft{time.monotonic_ns()}"
        shell = f"{command}; echo EXIT=$?; sleep 60"
        subprocess.run([*TMUX, "new-session", "-d", "-x", str(width), "-y", str(height), "-s", self.name, shell],
                       check=True)

    def text(self):
        return subprocess.run([*TMUX, "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def lines(self):
        return self.text().split("\n")

    def keys(self, *keys):
        subprocess.run([*TMUX, "send-keys", "-t", self.name, *keys], check=True)

    def type(self, text):
        subprocess.run([*TMUX, "send-keys", "-t", self.name, "-l", text], check=True)

    async def wait(self, predicate, timeout=10.0, what=""):
        """Polls the screen until predicate(text) holds; returns the text."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"screen never showed {what}:\n{text}")
            await asyncio.sleep(0.05)

    async def wait_for(self, *needles, timeout=10.0):
        return await self.wait(lambda t: all(n in t for n in needles), timeout, repr(needles))

    def resize(self, width, height):
        subprocess.run([*TMUX, "resize-window", "-t", self.name, "-x", str(width), "-y", str(height)], check=True)

    def close(self):
        subprocess.run([*TMUX, "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture(scope="module", autouse=True)
def tmux_server():
    yield
    subprocess.run([*TMUX, "kill-server"], capture_output=True)


def join_command(url, *extra, name="ana"):
    return "env NO_COLOR=1 TERM=xterm-256color " + shlex.join([CLIENT, "join", url, "demo", "--name", name, *extra])


def line_with(text, needle):
    return next((line for line in text.split("\n") if needle in line), None)


def test_the_interactive_client_shows_the_table_and_shares_toggles_both_ways(server):
    async def scenario():
        pane = Pane(join_command(server.ws))
        try:
            screen = await pane.wait_for("connected", "Inventory")
            # The demo table: indicators, detail text right-aligned, row counts, two-line titles.
            mac = line_with(screen, "Mac")
            assert mac.startswith("› − Mac") and mac.rstrip().endswith("4 models     4")
            assert len(mac) == 100
            assert line_with(screen, "iPhone").startswith("  + iPhone")
            assert "MacBook Air" in screen and "iPhone 16" not in screen  # rows of expanded sections only
            guangdong = screen.split("\n").index(line_with(screen, "4 cities"))
            assert screen.split("\n")[guangdong + 1].strip() == "Guangdong"
            assert "2000 items  2000" in line_with(screen, "Inventory")
            status = pane.lines()[39]
            assert "● connected" in status and "demo" in status and "1 here: ana" in status

            other = await Client.join(server.ws, name="bo")
            await pane.wait_for("2 here: ana, bo")
            # A key press here is seen by the other member...
            pane.keys("Enter")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["by"]["name"] == "ana" and event["collapsed"] == {"mac": True}
            screen = await pane.wait_for("+ Mac")
            assert "MacBook Air" not in screen and "ana collapsed Mac" in screen
            # ...and the other member's change shows up here.
            await other.send({"type": "toggle", "section": "iphone", "id": "bo-1"})
            screen = await pane.wait_for("− iPhone", "iPhone 16 Pro", "bo expanded iPhone")
            assert "A18 Pro" in line_with(screen, "iPhone 16 Pro")
            await other.close()
            await pane.wait_for("1 here: ana")

            pane.keys("q")
            screen = await pane.wait_for("EXIT=0")
            assert "Inventory" not in screen  # the alternate screen is gone: the terminal is back
        finally:
            pane.close()

    run(scenario())


def test_keys_move_search_reveal_edit_and_expand_or_collapse_everything(server):
    async def scenario():
        other = await Client.join(server.ws, name="bo")
        pane = Pane(join_command(server.ws))
        try:
            await pane.wait_for("connected", "Inventory")
            pane.keys("j", "j", "Down", "j")
            await pane.wait(lambda t: (line_with(t, "Mac mini") or "").startswith("›"), what="cursor on Mac mini")
            pane.keys("k")
            await pane.wait(lambda t: (line_with(t, "iMac") or "").startswith("›"), what="cursor on iMac")
            # Edit the selected row's value.
            pane.keys("v")
            await pane.wait_for("value of iMac: M4█")
            pane.keys("BSpace", "BSpace")
            pane.type("M5 Max")
            pane.keys("Enter")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["change"] == {"type": "updateRow", "row": "mac-3", "set": {"value": "M5 Max"}}
            await pane.wait(lambda t: (line_with(t, "iMac") or "").rstrip().endswith("M5 Max"), what="new value")
            # Left collapses the selected row's section (the cursor goes to its header).
            pane.keys("Left")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["change"] == {"type": "set", "section": "mac", "collapsed": True}
            await pane.wait(lambda t: (line_with(t, "Mac") or "").startswith("› + Mac"), what="Mac collapsed")
            # Search reveals a row of a collapsed section, for everyone.
            pane.keys("/")
            pane.type("MINI")
            await pane.wait_for("/MINI█")
            pane.keys("Enter")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["change"] == {"type": "reveal", "row": "mac-4"}
            assert event["collapsed"] == {"mac": False}
            await pane.wait(lambda t: (line_with(t, "Mac mini") or "").startswith("›"), what="cursor on Mac mini")
            # Rows this client never loaded (Sichuan was collapsed when it joined): the server finds
            # them, and the row is revealed for everyone.
            pane.keys("/")
            pane.type("leshan")
            pane.keys("Enter")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["change"] == {"type": "reveal", "row": "sichuan-3"}
            await pane.wait(lambda t: (line_with(t, "Leshan") or "").startswith("›"), what="cursor on Leshan")
            pane.keys("/")
            pane.type("no such thing")
            pane.keys("Enter")
            await pane.wait_for('no match for "no such thing"')
            # Collapse all, expand all.
            pane.keys("c")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["change"] == {"type": "setAll", "collapsed": True}
            await pane.wait(lambda t: "−" not in t.split("\n", 1)[0] and "MacBook Air" not in t, what="all collapsed")
            pane.keys("e")
            event = await other.next(lambda m: m["type"] == "event")
            assert event["change"] == {"type": "setAll", "collapsed": False}
            await pane.wait_for("− Friends", "Zhou Wei")
            # A refused change is shown, not fatal: accordion mode refuses expand-all.
            await other.send({"type": "setOptions", "options": {"accordion": True}, "id": "bo-2"})
            # The refusal is sent at once, the options' event after its commit: wait for the event,
            # or its note may replace the refusal's on screen.
            await pane.wait_for("bo changed the table options")
            pane.keys("e")
            await pane.wait_for("refused: expand all is not possible in accordion mode")
            pane.keys("C-c")
            await pane.wait_for("EXIT=0")
        finally:
            pane.close()
            await other.close()

    run(scenario())


def test_title_lines_shows_at_most_that_many_lines_of_each_title_with_an_ellipsis(server):
    async def scenario():
        owner = await Client.join(server.ws, name="bo")
        pane = Pane(join_command(server.ws))
        try:
            screen = await pane.wait_for("connected", "Inventory")
            lines = screen.split("\n")
            guangdong = lines.index(line_with(screen, "4 cities"))
            assert lines[guangdong].startswith("  + Province ") and lines[guangdong + 1].strip() == "Guangdong"
            # The province titles are two lines ("Province", then the name): cut to one.
            await owner.send({"type": "setOptions", "options": {"titleLines": 1}, "id": "lines-1"})
            assert (await owner.next(lambda m: m["type"] in ("ack", "error")))["type"] == "ack"
            screen = await pane.wait(lambda t: "Province…" in t, what="titles cut to one line")
            lines = screen.split("\n")
            guangdong = lines.index(line_with(screen, "4 cities"))
            assert lines[guangdong].startswith("  + Province… ")
            assert "Province…" in lines[guangdong + 1] and "3 cities" in lines[guangdong + 1]  # Zhejiang, next
            assert "Guangdong" not in screen and "Sichuan" not in screen
            # The cursor still stops once per header.
            pane.keys("End")
            await pane.wait(lambda t: (line_with(t, "Inventory") or "").startswith("›"), what="cursor on Inventory")
            pane.keys("Up", "Up", "Up", "Up", "Up")  # Empty section, three friend groups, then Sichuan

            def on_sichuan(text):
                lines = text.split("\n")
                cities = [i for i, line in enumerate(lines) if "3 cities" in line]
                return bool(cities) and lines[cities[-1]].startswith("› + Province…")
            await pane.wait(on_sichuan, what="cursor on Sichuan's one-line title")
            # Back to whole titles.
            await owner.send({"type": "setOptions", "options": {"titleLines": 0}, "id": "lines-0"})
            screen = await pane.wait_for("Guangdong", "Sichuan")
            assert "Province…" not in screen
        finally:
            pane.close()
            await owner.close()

    run(scenario())


def test_the_screen_follows_terminal_resizes(server):
    async def scenario():
        pane = Pane(join_command(server.ws))
        try:
            await pane.wait_for("connected", "Inventory")

            def redrawn(width, height):
                # tmux itself keeps the old bottom line (the status) at the bottom of a resized
                # pane and cuts or pads the old lines: only the Mac line's detail, right-aligned
                # to the new width, shows that the client has drawn the new size.
                def check(text):
                    mac = (line_with(text, "Mac") or "").rstrip()
                    return ("● connected" in text.split("\n")[height - 1] and mac.endswith("4 models     4")
                            and len(mac) > width - 5)
                return check

            pane.resize(60, 15)
            screen = await pane.wait(redrawn(60, 15), what="the table drawn 60 wide, status on line 15")
            assert all(len(line) <= 60 for line in screen.split("\n"))
            pane.resize(100, 40)
            await pane.wait(redrawn(100, 40), what="the table drawn 100 wide, status on line 40")
        finally:
            pane.close()

    run(scenario())


def test_the_interactive_client_reconnects_and_shows_what_it_missed(server):
    async def scenario():
        proxy = Proxy(server.port)
        pane = Pane(join_command(f"ws://127.0.0.1:{proxy.port}/ws"))
        try:
            await pane.wait_for("connected", "Inventory")
            proxy.accepting = False
            proxy.drop_all()
            await pane.wait_for("offline, retrying in")
            assert ft("toggle", server.ws, "demo", "friends", "--name", "bo").returncode == 0
            proxy.accepting = True
            pane.keys("r")  # retry now instead of waiting out the backoff
            await pane.wait_for("● connected", "− Friends", "Zhou Wei")
            pane.keys("Enter")  # still live: the toggle goes through
            await pane.wait_for("+ Mac")
            assert collapsed_map(server.ws)["mac"] is True
        finally:
            pane.close()
            proxy.close()

    run(scenario())


def test_an_enter_pressed_offline_is_replayed_as_the_state_it_asked_for_not_as_a_toggle(server):
    name = f"offline{time.monotonic_ns() % 10**9}"
    assert ft("add-section", server.ws, name, "Shelf", "--key", "shelf", "--expanded").returncode == 0

    async def scenario():
        proxy = Proxy(server.port)
        command = "env NO_COLOR=1 TERM=xterm-256color " + shlex.join(
            [CLIENT, "join", f"ws://127.0.0.1:{proxy.port}/ws", name, "--name", "ana"])
        pane = Pane(command)
        try:
            await pane.wait_for("connected", "− Shelf")
            proxy.accepting = False
            proxy.drop_all()
            await pane.wait_for("offline, retrying in")
            pane.keys("Enter")  # Shelf is expanded on screen: this press asks for it collapsed
            await pane.wait_for("1 unsent")
            # Meanwhile someone else collapses it. A queued toggle would expand it again on the
            # reconnect, undoing their change; the press asked for "collapsed", which it is.
            assert ft("collapse", server.ws, name, "shelf", "--name", "bo").returncode == 0
            watcher = await Client.join(server.ws, session=name, name="watcher")
            proxy.accepting = True
            pane.keys("r")
            event = await watcher.next(lambda m: m["type"] == "event" and m["by"]["name"] == "ana", timeout=10)
            assert event["change"]["type"] == "set" and event["change"]["collapsed"] is True, event
            await pane.wait(lambda t: "● connected" in t and "unsent" not in t, what="connected, nothing unsent")
            assert collapsed_map(server.ws, name) == {"shelf": True}
            await watcher.close()
        finally:
            pane.close()
            proxy.close()

    run(scenario())


def test_the_interactive_client_exits_1_when_the_server_refuses_the_join_for_want_of_a_token(tmp_path):
    secret = tmp_path / "token.secret"
    secret.write_text("s" * 40)
    server = Server("--memory", "--token-secret-file", str(secret))

    async def scenario():
        pane = Pane(join_command(server.ws))
        try:
            screen = await pane.wait_for("EXIT=")
            assert "EXIT=1" in screen, screen
            assert "foldtable: the server refused to join demo: this server needs a token to join" in screen, screen
        finally:
            pane.close()

    try:
        run(scenario())
    finally:
        server.stop()


def test_the_interactive_client_exits_with_one_line_when_the_server_is_unreachable():
    async def scenario():
        port = free_port()
        pane = Pane(join_command(f"ws://127.0.0.1:{port}/ws"))
        try:
            screen = await pane.wait_for("EXIT=3")
            assert f"foldtable: cannot connect to ws://127.0.0.1:{port}/ws" in screen
        finally:
            pane.close()

    run(scenario())


def test_get_of_a_missing_name_fails_and_leaves_no_session_behind(server):
    name = f"nosuch{time.monotonic_ns() % 10**9}"
    done = ft("get", server.ws, name)
    assert done.returncode == 1, done
    assert one_line(done.stderr) == f'foldtable: the server refused to join {name}: no session is named "{name}"', done.stderr
    assert name not in ft("list", server.ws, "--json").stdout
    # Opening the name on purpose (a change here, as `join` does) makes it.
    assert ft("add-section", server.ws, name, "First").returncode == 0
    assert name in ft("list", server.ws, "--json").stdout


def test_u_undoes_your_own_latest_change_and_shifted_u_redoes_it(server):
    async def scenario():
        other = await Client.join(server.ws, name="bo")
        pane = Pane(join_command(server.ws))
        try:
            await pane.wait_for("connected", "Inventory", "2 here")
            pane.keys("Enter")  # collapses Mac, the first section
            event = await other.next(lambda m: m["type"] == "event")
            assert event["collapsed"] == {"mac": True}
            await pane.wait_for("+ Mac")
            pane.keys("u")
            undo = await other.next(lambda m: m["type"] == "event" and m["change"]["type"] == "undo")
            assert undo["change"]["of"] == event["seq"] and undo["collapsed"] == {"mac": False}
            await pane.wait_for("− Mac", f"ana undid change {event['seq']}")
            pane.keys("U")
            redo = await other.next(lambda m: m["type"] == "event" and m["change"]["type"] == "redo")
            assert redo["collapsed"] == {"mac": True}
            await pane.wait_for("+ Mac")
            # Nothing of hers is left to redo: the refusal shows, nothing changes.
            pane.keys("U")
            await pane.wait_for("nothing you undid is left to redo")
            pane.keys("q")
            await pane.wait_for("EXIT=0")
        finally:
            pane.close()
            await other.close()

    run(scenario())


def test_undo_and_redo_from_the_command_line_take_back_this_users_latest_change(server):
    before = table_of(server.ws, "demo")["mac"][2]
    added = ft("add-row", server.ws, "demo", "mac", "Mac Studio", "--value", "M4 Max")
    assert added.returncode == 0, added.stderr
    assert table_of(server.ws, "demo")["mac"][2] == before + 1
    undone = ft_json("undo", server.ws, "demo")
    assert undone["undid"] > 0 and undone["repeated"] is False
    assert table_of(server.ws, "demo")["mac"][2] == before
    redone = ft("redo", server.ws, "demo")
    assert redone.returncode == 0 and redone.stdout.startswith("redid change "), redone
    assert table_of(server.ws, "demo")["mac"][2] == before + 1
    nothing = ft("redo", server.ws, "demo")
    assert nothing.returncode == 1 and one_line(nothing.stderr) == "foldtable: nothing you undid is left to redo"

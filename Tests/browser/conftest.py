"""Fixtures for the browser tests: the real foldtabled, headless Chromium, and a small protocol
peer (websockets) used to seed sessions and to read the server's state."""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def server_binary():
    """FOLDTABLE_BIN, else the newer of the release and debug builds."""
    if os.environ.get("FOLDTABLE_BIN"):
        return os.environ["FOLDTABLE_BIN"]
    built = [p for p in (ROOT / ".build/release/foldtabled", ROOT / ".build/debug/foldtabled") if p.exists()]
    if not built:
        pytest.skip("no foldtabled build: run `swift build --product foldtabled` or set FOLDTABLE_BIN")
    return str(max(built, key=lambda p: p.stat().st_mtime))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One foldtabled process serving web/ from this checkout, in memory."""

    def __init__(self, port=0, busy_threshold_ms=None, extra=()):
        self.port, self.busy, self.extra = port, busy_threshold_ms, list(extra)
        self.proc = None
        self.url = None

    def start(self, timeout=15):
        args = [server_binary(), "--host", "127.0.0.1", "--port", str(self.port),
                "--web-root", str(WEB), "--memory"]
        if self.busy is not None:
            args += ["--busy-threshold-ms", str(self.busy)]
        args += self.extra
        # foldtabled reads FOLDTABLE_<OPTION> variables and refuses unknown ones: keep the test's own
        # (FOLDTABLE_BIN, FOLDTABLE_SCREENSHOT_OUT) and any stray settings away from it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FOLDTABLE_")}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        line = [None]
        self.output = []

        def read_output():
            # Wait for the line that says where it listens; keep draining so the pipe never fills.
            for out in self.proc.stdout:
                if line[0] is None:
                    self.output.append(out)
                    if "listening on" in out:
                        line[0] = out.strip()
        threading.Thread(target=read_output, daemon=True).start()
        deadline = time.monotonic() + timeout
        while line[0] is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"foldtabled did not start: {args}\n{''.join(self.output)}")
            time.sleep(0.02)
        self.url = re.search(r"(http://\S+)", line[0]).group(1).rstrip("/")
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    @property
    def ws_url(self):
        return self.url.replace("http://", "ws://") + "/ws"


@pytest.fixture(scope="module")
def server():
    s = Server().start()
    yield s
    s.stop()


@pytest.fixture
def session_name():
    return "t" + uuid.uuid4().hex[:10]


class Peer:
    """A protocol client for arranging and checking state from the test side."""

    def __init__(self, server, session, name="seeder"):
        from websockets.sync.client import connect
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(server.ws_url, max_size=None, open_timeout=5))
        self.n = 0
        self.prefix = uuid.uuid4().hex[:6]
        self.ws.send(json.dumps({"type": "join", "session": session, "name": name, "create": True}))
        self.welcome = self.wait(lambda m: m["type"] == "welcome")

    def messages(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching message from the server")
            raw = self.ws.recv(timeout=left)
            for line in raw.split("\n"):
                if line.strip():
                    yield json.loads(line)

    def wait(self, pred, timeout=10):
        for m in self.messages(timeout):
            if pred(m):
                return m

    def send(self, change, timeout=10):
        """Send a change and wait until it is acknowledged; returns its seq."""
        self.n += 1
        cid = f"{self.prefix}-{self.n}"
        self.ws.send(json.dumps({**change, "id": cid}))
        m = self.wait(lambda m: m.get("id") == cid and m["type"] in ("ack", "error"), timeout)
        if m["type"] == "error":
            raise AssertionError(f"server refused {change}: {m}")
        return m["seq"]

    def close(self):
        self.stack.close()


def welcome(server, session):
    """The welcome a fresh member of `session` gets (the member leaves at once)."""
    p = Peer(server, session, name="observer")
    try:
        return p.welcome
    finally:
        p.close()


def snapshot(server, session):
    """The table as a fresh member of `session` sees it (its welcome)."""
    return welcome(server, session)["table"]


def seed(server, session, sections):
    """Create sections (dicts with key, title, optional collapsed/detail/footer, rows=[(key, label, value)])."""
    p = Peer(server, session)
    try:
        for s in sections:
            change = {"type": "addSection", "key": s["key"], "title": s["title"], "collapsed": s.get("collapsed", False)}
            for f in ("detail", "footer"):
                if f in s:
                    change[f] = s[f]
            p.send(change)
            for key, label, value in s.get("rows", []):
                p.send({"type": "addRow", "section": s["key"], "key": key, "label": label, "value": value})
    finally:
        p.close()


# ---- browsers ----

def new_browser(width=1200, height=900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    if shutil.which("chromium"):
        opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}",
              "--disable-dev-shm-usage", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    b = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    if width < 500:  # windows do not get narrower than ~500 px: emulate a phone-sized viewport
        b.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                          {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
    return b


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def browsers(request):
    """browsers() opens one more headless Chromium; all are closed at the end of the test, and
    when the test failed, each one's screenshot and console log go to Tests/browser/artifacts/."""
    opened = []

    def open_one(**kw):
        b = new_browser(**kw)
        opened.append(b)
        return b
    yield open_one
    rep = getattr(request.node, "rep_call", None)
    failed = rep is not None and rep.failed
    for i, b in enumerate(opened):
        try:
            if failed:
                ARTIFACTS.mkdir(exist_ok=True)
                stem = ARTIFACTS / f"{request.node.name}-{i}"
                b.save_screenshot(str(stem) + ".png")
                logs = b.get_log("browser")
                stem.with_suffix(".log").write_text(
                    f"url: {b.current_url}\n" + "\n".join(f"{l['level']} {l['message']}" for l in logs))
        except Exception as e:  # a dead browser must not hide the test's own failure
            print(f"could not save artifacts for browser {i}: {e}")
        finally:
            b.quit()

"""Shared fixtures for the end-to-end tests.

Fixture names say which binary they start: `echo_*` is foldtable-echo (the C wrapper without
the hub, echoing every message). Every server runs on port 0 and is found through its first
stdout line.
"""
import os
import pathlib
import re
import select
import signal
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
ECHO_BIN = os.environ.get("FOLDTABLE_ECHO_BIN", str(REPO / ".build" / "debug" / "foldtable-echo"))


class RunningServer:
    """A started server process, its URL and its stderr (kept in a file, readable any time)."""

    def __init__(self, proc, url, stderr_path):
        self.proc = proc
        self.url = url
        self.stderr_path = stderr_path
        scheme, host, port = re.fullmatch(r"(https?)://\[?([^\]]+)\]?:(\d+)", url).groups()
        self.host, self.port = host, int(port)
        self.ws_url = f"{'wss' if scheme == 'https' else 'ws'}://{host}:{port}/ws"

    def stderr(self):
        return self.stderr_path.read_text()

    def rss_kb(self):
        status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))

    def stop(self, timeout=10):
        """SIGTERM, wait, return the exit code (killed if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode


def _start_echo(tmp_dir, *args, timeout=10.0):
    """Start foldtable-echo; (RunningServer or None, the process, its stderr file)."""
    stderr_path = pathlib.Path(tmp_dir) / f"echo-{os.urandom(4).hex()}.stderr"
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen([ECHO_BIN, "--port", "0", *args], stdout=subprocess.PIPE,
                                stderr=err, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().strip() if ready else ""
    if line.startswith("listening on "):
        return RunningServer(proc, line.split()[-1], stderr_path), proc, stderr_path
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()
    return None, proc, stderr_path


@pytest.fixture(scope="session")
def echo_web_root(tmp_path_factory):
    """A web root with a few assets, plus traps: a secret just outside it (its text is in
    ../secret.txt), a symlink to that secret inside it, and a dotfile directory."""
    secret = "TOP-SECRET-OUTSIDE-WEB-ROOT"
    base = tmp_path_factory.mktemp("echo-web")
    (base / "secret.txt").write_text(secret)
    root = base / "web"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>foldtable</title>\n")
    (root / "app.js").write_text("console.log('app');\n")
    (root / "style.css").write_text("body { margin: 0 }\n")
    (root / "logo.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>\n")
    (root / "escape.txt").symlink_to(base / "secret.txt")
    (root / "up").symlink_to(base)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(secret)
    return root


@pytest.fixture(scope="session")
def echo_server(echo_web_root, tmp_path_factory):
    """The shared echo server (default limits, serving echo_web_root)."""
    server, _, stderr_path = _start_echo(tmp_path_factory.mktemp("echo-logs"), "--web-root",
                                         str(echo_web_root), "--log-closes")
    assert server, stderr_path.read_text()
    yield server
    assert server.stop() == 0


@pytest.fixture
def echo_server_factory(tmp_path):
    """Start extra echo servers with their own flags; all are stopped after the test."""
    started = []

    def start(*args):
        server, _, stderr_path = _start_echo(tmp_path, *args)
        assert server, stderr_path.read_text()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def echo_failed_start(tmp_path):
    """Start foldtable-echo with flags that must make it refuse to start: (exit code, stderr)."""
    def start(*args):
        server, proc, stderr_path = _start_echo(tmp_path, *args)
        if server:
            server.stop()
            pytest.fail(f"foldtable-echo started with {args}")
        return proc.returncode, stderr_path.read_text()

    return start


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """Two throwaway self-signed certificates for localhost (made at test time, never committed):
    a.crt/a.key and b.crt/b.key (b's key does not match a's certificate)."""
    d = tmp_path_factory.mktemp("tls")
    for name in ("a", "b"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", d / f"{name}.key", "-out",
                        d / f"{name}.crt"], check=True, capture_output=True)
    return d

"""End-to-end tests of configuration with the real foldtabled binary: a `--config` file, then
FOLDTABLE_* variables, then flags, each overriding the one before; `--check-config`; the errors
that name a file's line; `--help` and README listing every key."""
import os
import re
import select
import signal
import socket
import subprocess

import pytest

from foldtabled import BIN, REPO, raw_ws

WEB = os.path.join(REPO, "web")


def environment(**extra):
    """This process's environment without any foldtabled setting (the harness's FOLDTABLE_BIN
    and the like are not settings, and stay: the server must leave them alone), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOLDTABLE_") or k.endswith("_BIN")}
    env.update(extra)
    return env


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def foldtabled(*args, env=None, cwd=None):
    """Runs foldtabled to completion (for --check-config, --help and refused starts)."""
    return subprocess.run([os.path.abspath(BIN), *args], capture_output=True, text=True, timeout=10,
                          env=environment(**(env or {})), cwd=cwd)


class Started:
    """A foldtabled started with exactly `args` (no --port 0 added): its process and port."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([os.path.abspath(BIN), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=environment(**(env or {})))
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("listening on http"):
            self.proc.kill()
            pytest.fail(f"foldtabled did not start: {line!r} {self.proc.communicate()[1]!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


def write(path, text):
    path.write_text(text)
    return str(path)


def lines_of(stderr):
    return [line for line in stderr.splitlines() if line.strip()]


# MARK: - Sources and their order

def test_a_config_file_sets_the_port_and_a_limit_that_takes_effect(tmp_path):
    port = free_port()
    config = write(tmp_path / "foldtabled.conf", f"""
# A file as an operator would write it.
port = {port}
web-root = "{WEB}"
memory = true
max-connections-per-ip = 1   # a second WebSocket from this address gets 429
""")
    server = Started("--config", config)
    try:
        assert server.port == port
        first, response = raw_ws(port)
        assert " 101 " in response, response
        second, response = raw_ws(port)
        assert " 429 " in response, response
        first.close()
        second.close()
    finally:
        assert server.stop() == 0


def test_the_environment_overrides_the_file_and_a_flag_overrides_both(tmp_path):
    in_file, in_environment, in_flag = free_port(), free_port(), free_port()
    config = write(tmp_path / "f.conf", f"port = {in_file}\nmemory = true\nweb-root = {WEB}\n")
    for args, env, expected in ((["--config", config], {}, in_file),
                                (["--config", config], {"FOLDTABLE_PORT": str(in_environment)}, in_environment),
                                (["--config", config, "--port", str(in_flag)], {"FOLDTABLE_PORT": str(in_environment)}, in_flag)):
        server = Started(*args, env=env)
        try:
            assert server.port == expected, (args, env)
        finally:
            assert server.stop() == 0


def test_FOLDTABLE_CONFIG_names_the_file_when_no_flag_does(tmp_path):
    port = free_port()
    config = write(tmp_path / "f.conf", f"port = {port}\nmemory = true\nweb-root = {WEB}\n")
    server = Started(env={"FOLDTABLE_CONFIG": config})
    try:
        assert server.port == port
    finally:
        assert server.stop() == 0


def test_the_backup_command_reads_the_data_dir_from_the_config_file(tmp_path):
    data = tmp_path / "data"
    config = write(tmp_path / "f.conf", f"data-dir = {data}\nweb-root = {WEB}\nport = 0\n")
    assert Started("--config", config).stop() == 0
    copy = tmp_path / "copy.db"
    result = foldtabled("backup", str(copy), "--config", config)
    assert result.returncode == 0, result.stderr
    assert copy.stat().st_size > 0 and str(data) in result.stdout


# MARK: - Refusals that name the file and line

def test_an_unknown_key_in_the_file_stops_start_up_naming_the_line(tmp_path):
    config = write(tmp_path / "f.conf", "# settings\nport = 0\nmax-sesions = 5\n")
    result = foldtabled("--config", config, "--memory")
    assert result.returncode == 1
    assert lines_of(result.stderr) == [
        f'foldtabled: config {config}:3: unknown key "max-sesions" (did you mean max-sessions?)'], result.stderr
    assert "listening" not in result.stdout


def test_each_problem_in_the_file_gets_its_own_line(tmp_path):
    config = write(tmp_path / "f.conf", "port = 1\nport = 2\nsynchronous = fast\nmemory\n")
    result = foldtabled("--config", config, "--memory")
    assert result.returncode == 1
    assert lines_of(result.stderr) == [
        f"foldtabled: config {config}:2: port is set twice (first on line 1)",
        f'foldtabled: config {config}:3: synchronous must be full or normal, not "fast"',
        f'foldtabled: config {config}:4: expected "key = value", found "memory" alone',
    ], result.stderr


def test_a_token_secret_in_the_file_is_refused_and_never_echoed(tmp_path):
    secret = "this-secret-would-be-copied-with-the-config-0123456789"
    config = write(tmp_path / "f.conf", f"token-secret = {secret}\n")
    for args in (["--config", config], ["--check-config", "--config", config]):
        result = foldtabled(*args, "--memory")
        assert result.returncode == 1, result
        lines = lines_of(result.stderr)
        assert len(lines) == 1 and f"{config}:1: token-secret:" in lines[0] and "--token-secret-file" in lines[0], lines
        assert secret not in result.stderr + result.stdout


def test_an_unknown_FOLDTABLE_variable_is_refused_and_other_programs_ones_are_not():
    result = foldtabled("--check-config", env={"FOLDTABLE_MAX_SESION": "5"})
    assert result.returncode == 1
    assert lines_of(result.stderr) == [
        "foldtabled: FOLDTABLE_MAX_SESION is not a setting of foldtabled (did you mean FOLDTABLE_MAX_SESSIONS?)"]
    result = foldtabled("--check-config", env={"FOLDTABLE_TOKEN": "a.b.c", "FOLDTABLE_CRASH_SEED": "1"})
    assert result.returncode == 0, result.stderr


# MARK: - --check-config

def test_check_config_prints_config_ok_and_where_each_value_came_from(tmp_path):
    secret = "an-environment-secret-of-at-least-32-bytes-0123"
    config = write(tmp_path / "f.conf", "port = 9001\nmax-sessions = 5\nsynchronous = normal\n")
    result = foldtabled("--check-config", "--config", config, "--log-level", "info", "--web-root", WEB,
                        env={"FOLDTABLE_MAX_SESSIONS": "7", "FOLDTABLE_TOKEN_SECRET": secret}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "config ok"
    settings = {m.group(1): (m.group(2), m.group(3)) for m in
                (re.fullmatch(r"([a-z-]+) = (.*?)\s+# (.*)", line) for line in lines[1:]) if m}
    assert settings["port"] == ("9001", f"{config}:1")
    assert settings["max-sessions"] == ("7", "FOLDTABLE_MAX_SESSIONS")
    assert settings["synchronous"] == ("normal", f"{config}:3")
    assert settings["log-level"] == ("info", "--log-level")
    assert settings["host"] == ("127.0.0.1", "default")
    assert "# token-secret: set" in result.stdout and secret not in result.stdout
    # What it prints is a config file that says the same again.
    again = write(tmp_path / "again.conf", "\n".join(lines[1:]))
    result2 = foldtabled("--check-config", "--config", again, env={"FOLDTABLE_TOKEN_SECRET": secret}, cwd=tmp_path)
    assert result2.returncode == 0, result2.stderr
    assert [l.split("#")[0].strip() for l in result2.stdout.splitlines()] == \
        [l.split("#")[0].strip() for l in result.stdout.splitlines()]


def test_check_config_creates_nothing(tmp_path):
    data = tmp_path / "data"
    result = foldtabled("--check-config", "--data-dir", str(data), "--web-root", WEB)
    assert result.returncode == 0, result.stderr
    assert not data.exists()


@pytest.mark.parametrize("args,code,words", [
    (["--port", "99999"], 1, ["--port must be a whole number from 0 to 65535"]),
    (["--frobnicate", "1"], 2, ["unknown option --frobnicate"]),
    (["--port"], 2, ["--port needs a value"]),
    (["--no-open"], 2, ["--open=false"]),
    (["--host", "0.0.0.0"], 1, ["--open"]),
    (["--public-url", "https://tables.example.com"], 1, ["--public-url https://tables.example.com in open mode"]),
    (["--token-secret-file", "/nonexistent/secret"], 1, ["cannot read the token secret file /nonexistent/secret"]),
    (["--web-root", "/nonexistent-dir"], 1, ["--web-root /nonexistent-dir is not a directory"]),
    (["--data-dir", "/nonexistent/deeper/data"], 1, ["--data-dir /nonexistent/deeper/data does not exist"]),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], 1, ["cannot read the TLS files"]),
    (["--config", "/nonexistent.conf"], 1, ["config /nonexistent.conf: no such file"]),
    (["--hangup-secs", "x", "--change-rate", "0"], 1, ["--hangup-secs must be", "--change-rate must be"]),
])
def test_check_config_exits_1_for_bad_settings_and_2_for_a_bad_command_line(args, code, words):
    result = foldtabled("--check-config", "--web-root", WEB, *args)
    assert result.returncode == code, (args, result)
    lines = lines_of(result.stderr)
    assert len(lines) == len(words), (args, lines)
    for line, word in zip(lines, words):
        assert line.startswith("foldtabled: ") and word in line, (args, lines)
    assert "config ok" not in result.stdout


def test_a_public_url_without_a_token_secret_is_refused_at_start_unless_open(tmp_path):
    # On 127.0.0.1 behind a proxy, a public name in --public-url puts the server on the internet:
    # without a token secret that takes --open, as a public bind does.
    args = ["--memory", "--host", "127.0.0.1", "--port", "0", "--web-root", WEB, "--public-url", "https://tables.example.com"]
    refused = foldtabled(*args)
    assert refused.returncode == 1, refused
    lines = lines_of(refused.stderr)
    assert len(lines) == 1 and lines[0].startswith("foldtabled: --public-url https://tables.example.com in open mode"), lines
    assert "--open" in lines[0] and "listening" not in refused.stdout
    started = Started(*args, "--open")
    assert started.stop() == 0
    secret = write(tmp_path / "token.secret", "s" * 40)
    started = Started(*args, "--token-secret-file", secret)
    assert started.stop() == 0


def test_a_short_token_secret_fails_the_check(tmp_path):
    short = write(tmp_path / "short.secret", "x" * 31)
    result = foldtabled("--check-config", "--token-secret-file", short, "--web-root", WEB)
    assert result.returncode == 1 and "32" in result.stderr, result


# MARK: - One list of keys behind --help and README

def readme_keys():
    """(flag or None, environment name, default) of every row of README's settings tables."""
    text = open(os.path.join(REPO, "README.md")).read()
    section = text.split("<!-- settings: begin", 1)[1].split("<!-- settings: end", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `") or line.startswith("| —"):
            flag = cells[0].strip("`") if cells[0].startswith("`") else None
            rows.append((flag, cells[1].split("`")[1], cells[2]))
    return rows


def test_help_lists_every_key_with_its_default_and_environment_name():
    result = foldtabled("--help")
    assert result.returncode == 0
    keys = readme_keys()
    assert len(keys) >= 38, keys
    for flag, env_name, default in keys:
        assert env_name in result.stdout, env_name
        if flag:
            assert re.search(rf"^  {re.escape(flag)}\b", result.stdout, re.M), flag
            assert f"default {default}" in result.stdout, (flag, default)
    # The flags the Makefile and other suites use are among them.
    for flag in ("--port", "--web-root", "--data-dir", "--memory", "--open", "--token-secret-file", "--max-queue-bytes"):
        assert flag in [k[0] for k in keys], flag


def test_readme_holds_what_help_markdown_prints():
    result = foldtabled("--help-markdown")
    assert result.returncode == 0
    text = open(os.path.join(REPO, "README.md")).read()
    section = text.split("<!-- settings: begin", 1)[1].split("\n", 1)[1].split("<!-- settings: end", 1)[0]
    assert section == result.stdout, "README's settings tables differ from foldtabled --help-markdown: run make readme-config"

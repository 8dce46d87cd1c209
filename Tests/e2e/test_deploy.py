"""deploy/ for real: `make install`, the systemd unit with the installed paths, Debian's nginx in
front of the installed foldtabled (TLS, the WebSocket upgrade, the real client address), the
Dockerfile's runtime packages against what the binary links, and a backup taken while clients
write. No Docker engine runs here, so the image itself is not built; everything else is."""
import asyncio
import os
import re
import shutil
import sqlite3
import ssl
import subprocess
import time
import urllib.request

import pytest
from websockets.asyncio.client import connect

from foldtabled import REPO, Client, Server

DEPLOY = os.path.join(REPO, "deploy")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """foldtable installed with `make install PREFIX=...` (the unit then names real paths)."""
    root = tmp_path_factory.mktemp("install") / "usr"
    done = subprocess.run(["make", "-s", "install", f"PREFIX={root}"], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def test_make_install_puts_binaries_web_client_unit_and_examples_in_place(prefix):
    for path in ("bin/foldtabled", "bin/foldtable", "share/foldtable/web/index.html", "share/foldtable/web/app.js",
                 "lib/systemd/system/foldtabled.service", "share/doc/foldtable/foldtabled.env.example",
                 "share/doc/foldtable/nginx.conf"):
        assert (prefix / path).exists(), path
    version = subprocess.run([str(prefix / "bin/foldtabled"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and re.fullmatch(r"foldtabled \d+\.\d+\.\d+\n", version.stdout), version.stdout
    unit = (prefix / "lib/systemd/system/foldtabled.service").read_text()
    assert f"ExecStart={prefix}/bin/foldtabled " in unit and f"--web-root {prefix}/share/foldtable/web" in unit
    assert "@" not in unit.replace("@system-service", "").replace("@privileged", "").replace("@resources", "")


def test_the_installed_unit_passes_systemd_analyze_verify(prefix):
    done = subprocess.run(["systemd-analyze", "verify", str(prefix / "lib/systemd/system/foldtabled.service")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_env_example_sets_nothing_and_names_only_real_settings(prefix):
    """Every line is a comment or blank (the defaults need no setting), and every variable it
    names is accepted by the server (a --check-config run with all of them set to their shown
    defaults passes)."""
    text = (prefix / "share/doc/foldtable/foldtabled.env.example").read_text()
    assert all(line == "" or line.startswith("#") for line in text.splitlines())
    env = {}
    for line in text.splitlines():
        m = re.fullmatch(r"#(FOLDTABLE_[A-Z_]+)=(.*)", line)
        if m:
            env[m.group(1)] = m.group(2)
    assert "FOLDTABLE_PORT" in env and "FOLDTABLE_DATA_DIR" in env
    work = prefix.parent / "check"
    work.mkdir(exist_ok=True)
    (work / "web").mkdir(exist_ok=True)
    done = subprocess.run([str(prefix / "bin/foldtabled"), "--check-config"], cwd=work, capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env})
    assert done.returncode == 0, done.stdout + done.stderr


def make_certificate(directory):
    key, cert = directory / "privkey.pem", directory / "fullchain.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def nginx_for_tests(directory, conf_name, upstreams, cert, key, tls_port):
    """deploy/<conf_name> templated as README says (host name, certificate, upstreams: the
    conf's own upstream addresses mapped to loopback ports), plus one test-only line: nginx
    connects to foldtabled from 127.0.0.2, so the proxy's address differs from the client's
    (both would otherwise be 127.0.0.1) and the log can show which one the server believed.
    Writes the conf and an nginx.conf around it under `directory`, checks it with `nginx -t`
    and returns the path of the nginx.conf to start."""
    conf = open(os.path.join(DEPLOY, conf_name)).read()
    for address, port in upstreams.items():
        conf = conf.replace(address, f"127.0.0.1:{port}")
    conf = (conf.replace("tables.example.com", "127.0.0.1")
            .replace("/etc/ssl/foldtable/fullchain.pem", str(cert))
            .replace("/etc/ssl/foldtable/privkey.pem", str(key))
            .replace("listen 443 ssl;", f"listen 127.0.0.1:{tls_port} ssl;")
            .replace("listen [::]:443 ssl;", "")
            .replace("listen 80;", f"listen 127.0.0.1:{free_port()};")
            .replace("listen [::]:80;", "")
            .replace("proxy_pass http://foldtabled;", "proxy_pass http://foldtabled;\n        proxy_bind 127.0.0.2;"))
    (directory / "foldtable.conf").write_text(conf)
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / d).mkdir()
        os.chmod(directory / d, 0o777)
    (directory / "nginx.conf").write_text(f"""
pid {directory}/nginx.pid;
error_log {directory}/error.log;
worker_processes 1;
events {{ worker_connections 256; }}
http {{
    access_log {directory}/access.log;
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    include {directory}/foldtable.conf;
}}
""")
    test = subprocess.run([NGINX, "-t", "-c", str(directory / "nginx.conf")], capture_output=True, text=True)
    assert test.returncode == 0, test.stderr
    return directory / "nginx.conf"


def start_nginx(main_conf, cert, tls_port, probe="/"):
    """Debian's nginx on `main_conf`, once it answers `probe` over TLS: (process, TLS context)."""
    nginx = subprocess.Popen([NGINX, "-c", str(main_conf), "-g", "daemon off;"], stderr=subprocess.PIPE, text=True)
    context = ssl.create_default_context(cafile=str(cert))
    deadline = time.monotonic() + 10
    while True:
        try:
            urllib.request.urlopen(f"https://127.0.0.1:{tls_port}{probe}", context=context, timeout=2)
            return nginx, context
        except (OSError, ssl.SSLError):
            if time.monotonic() >= deadline or nginx.poll() is not None:
                nginx.terminate()
                raise AssertionError("nginx did not come up: " + (nginx.stderr.read() if nginx.poll() is not None else ""))
            time.sleep(0.1)


@pytest.fixture
def behind_nginx(prefix, tmp_path):
    """The installed foldtabled behind Debian's nginx running deploy/nginx.conf, templated as
    README says (host name, certificate, upstream), plus one test-only line: nginx connects to
    foldtabled from 127.0.0.2, so the proxy's address differs from the client's (both would
    otherwise be 127.0.0.1) and the log can show which one the server believed."""
    cert, key = make_certificate(tmp_path)
    app_port, tls_port = free_port(), free_port()
    main_conf = nginx_for_tests(tmp_path, "nginx.conf", {"127.0.0.1:8080": app_port}, cert, key, tls_port)
    log = open(tmp_path / "foldtabled.log", "w")
    server = subprocess.Popen(
        [str(prefix / "bin/foldtabled"), "--port", str(app_port), "--web-root", str(prefix / "share/foldtable/web"),
         "--data-dir", str(tmp_path / "data"), "--public-url", f"https://127.0.0.1:{tls_port}",
         "--trusted-proxies", "127.0.0.2", "--log-level", "info"],
        stdout=subprocess.PIPE, stderr=log, text=True)
    nginx = None
    try:
        assert server.stdout.readline().startswith("listening on")
        nginx, context = start_nginx(main_conf, cert, tls_port)
        yield {"url": f"https://127.0.0.1:{tls_port}", "ws": f"wss://127.0.0.1:{tls_port}/ws", "context": context,
               "log": tmp_path / "foldtabled.log"}
    finally:
        # Also when start-up failed above: no nginx or foldtabled outlives the test.
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        server.terminate()
        server.wait(10)
        log.close()


def test_through_nginx_clients_share_toggles_the_page_and_healthz_load_and_the_real_address_is_logged(behind_nginx):
    context = behind_nginx["context"]

    async def scenario():
        # The client connects to nginx from 127.0.0.5, nginx to foldtabled from 127.0.0.2.
        a = await connect(behind_nginx["ws"], ssl=context, open_timeout=5, local_addr=("127.0.0.5", 0))
        b = await connect(behind_nginx["ws"], ssl=context, open_timeout=5)
        ca, cb = Client(a), Client(b)
        for c, name in ((ca, "ana"), (cb, "bo")):
            await c.send({"type": "join", "session": "proxied", "name": name, "create": True})
            await c.next(lambda m: m["type"] == "welcome")
        await ca.send({"type": "addSection", "key": "s", "title": "Through nginx", "id": "a1"})
        await ca.send({"type": "toggle", "section": "s", "id": "a2"})
        event = await cb.next(lambda m: m["type"] == "event" and m.get("id") == "a2")
        assert event["collapsed"] == {"s": True}
        await a.close()
        await b.close()
    run(scenario())

    page = urllib.request.urlopen(behind_nginx["url"] + "/", context=context, timeout=5)
    body = page.read().decode()
    assert page.status == 200 and "<html" in body.lower()
    assert "content-security-policy" in {k.lower() for k in page.headers.keys()}
    health = urllib.request.urlopen(behind_nginx["url"] + "/healthz", context=context, timeout=5)
    assert health.status == 200
    log = behind_nginx["log"].read_text()
    opens = [line for line in log.splitlines() if "event=open" in line]
    assert any("peer=127.0.0.5" in line for line in opens), log
    assert not any("peer=127.0.0.2" in line for line in opens), log


# ---- the Dockerfile against reality ----

def dockerfile_stages():
    text = open(os.path.join(DEPLOY, "Dockerfile")).read()
    # Join continued lines, split into stages at FROM.
    text = re.sub(r"\\\n\s*", " ", text)
    stages, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            current = {"from": line, "lines": []}
            stages.append(current)
        elif current is not None and line and not line.startswith("#"):
            current["lines"].append(line)
    return stages


def apt_packages(stage):
    packages = []
    for line in stage["lines"]:
        for command in re.findall(r"apt-get install ([^&]*)", line):
            packages += [w for w in command.split() if not w.startswith("-")]
    return packages


def test_the_runtime_packages_provide_every_library_the_binary_links():
    """Every shared library `ldd foldtabled` lists, except the Swift runtime's own (linked in by
    --static-swift-stdlib in the image), comes from a package the runtime stage installs or one
    of their dependencies, or from libc6, which every Debian image has."""
    runtime = dockerfile_stages()[-1]
    assert runtime["from"].startswith("FROM debian:bookworm-slim")
    named = apt_packages(runtime)
    assert named, "the runtime stage installs no packages"
    closure = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                              "--no-breaks", "--no-replaces", "--no-enhances", "--no-pre-depends", *named],
                             capture_output=True, text=True, check=True).stdout
    provided = {line.strip() for line in closure.splitlines() if not line.startswith(" ")}
    provided |= {line.split(":", 1)[1].strip() for line in closure.splitlines() if "Depends:" in line}
    provided.add("libc6")
    swift_root = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("swift"))))
    binary = os.path.join(REPO, ".build/release/foldtabled")
    missing = []
    for line in subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout.splitlines():
        m = re.search(r"=> (/\S+)", line)
        if not m or os.path.realpath(m.group(1)).startswith(swift_root):
            continue
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(m.group(1))], capture_output=True, text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", m.group(1)], capture_output=True, text=True)
        package = owner.stdout.split(":")[0].strip()
        if package not in provided:
            missing.append(f"{m.group(1)} ({package or 'no package'})")
    assert not missing, f"libraries no runtime package provides: {missing}"


def test_every_path_the_dockerfile_copies_exists_and_the_healthcheck_command_works(prefix):
    for stage in dockerfile_stages():
        for line in stage["lines"]:
            if line.startswith("COPY ") and "--from=" not in line:
                for source in line.split()[1:-1]:
                    assert os.path.exists(os.path.join(REPO, source)), source
    text = open(os.path.join(DEPLOY, "Dockerfile")).read()
    assert 'CMD ["foldtabled", "healthcheck", "--port", "8080"]' in text
    server = Server("--memory")
    try:
        ok = subprocess.run([str(prefix / "bin/foldtabled"), "healthcheck", "--port", str(server.port)], capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
    finally:
        server.stop()
    down = subprocess.run([str(prefix / "bin/foldtabled"), "healthcheck", "--port", str(server.port)], capture_output=True, text=True)
    assert down.returncode == 1 and "no answer" in down.stderr


def test_compose_uses_the_dockerfile_and_nginx_conf_that_exist():
    text = open(os.path.join(DEPLOY, "compose.yaml")).read()
    assert "dockerfile: deploy/Dockerfile" in text and "./nginx.conf:" in text
    assert "127.0.0.1:8080/foldtabled:8080" in text and "server 127.0.0.1:8080;" in open(os.path.join(DEPLOY, "nginx.conf")).read()


# ---- backups ----

def test_a_backup_taken_while_clients_write_restores_into_a_server_that_serves_the_same_table(tmp_path):
    data = tmp_path / "data"
    server = Server("--data-dir", str(data))
    backup = tmp_path / "backup"
    epochs = []
    try:
        async def scenario():
            writers = [await Client.join(server.ws, session="kept", name=f"w{i}") for i in range(3)]
            epochs.append(writers[0].welcome["epoch"])
            await writers[0].send({"type": "addSection", "key": "s", "title": "S", "id": "s"})
            await writers[0].next(lambda m: m["type"] == "ack")
            stop = asyncio.Event()

            async def write(i, c):
                n = 0
                while not stop.is_set():
                    n += 1
                    started = time.monotonic()
                    await c.send({"type": "addRow", "section": "s", "label": f"{i}-{n}", "id": f"{i}-{n}"})
                    reply = await c.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == f"{i}-{n}")
                    assert reply.get("code") != "rate_limited", reply
                    # At most 200 rows a second per writer, far below the change rate limit (1,000 a
                    # second after a burst of 2,000): back to back, a fast machine passes it for as
                    # long as the backup takes, and 50 refusals in a row close the writer.
                    await asyncio.sleep(max(0.0, started + 0.005 - time.monotonic()))
            tasks = [asyncio.create_task(write(i, c)) for i, c in enumerate(writers)]
            await asyncio.sleep(0.5)
            done = await asyncio.to_thread(subprocess.run, [server.proc.args[0], "backup", str(backup), "--data-dir", str(data)],
                                           capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*tasks)
            for c in writers:
                await c.close()
        run(scenario())
    finally:
        server.stop()
    # The copy is a consistent database of its own...
    assert sqlite3.connect(backup).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # ...and restored as README says (the copy put in place as DIR/foldtable.db), a server on
    # it serves the table: the section and the rows written before the copy.
    restore_dir = tmp_path / "restored"
    restore_dir.mkdir()
    shutil.copy(backup, restore_dir / "foldtable.db")
    restored = Server("--data-dir", str(restore_dir))
    try:
        async def check():
            c = await Client.join(restored.ws, session="kept", name="reader")
            sections = {s["key"]: s for s in c.welcome["table"]["sections"]}
            assert "s" in sections and sections["s"]["rowCount"] > 0
            # A restored backup is another history: a client of the old one cannot resume.
            assert c.welcome["epoch"] != epochs[0]
            await c.close()
        run(check())
    finally:
        restored.stop()

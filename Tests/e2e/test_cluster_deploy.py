"""deploy/compose.cluster.yaml for real, short of Docker (no engine runs here): Debian's nginx
running deploy/nginx-cluster.conf (paths and addresses rewritten to loopback) in front of two
foldtabled nodes sharing sessions through a redis-server started with the compose file's own
Redis flags. WebSocket clients through nginx land on both nodes and see the same events; an HTTP
change through nginx reaches everyone; with one node killed, nginx skips it and the service goes
on through the other. The compose file itself is parsed and checked against what these tests run."""
import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
import yaml
from websockets.asyncio.client import connect

from foldtabled import BIN, REPO, Client, LoggedServer
from test_deploy import make_certificate, nginx_for_tests, start_nginx

DEPLOY = os.path.join(REPO, "deploy")
REDIS = shutil.which("redis-server")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
needs_peers = pytest.mark.skipif((REDIS is None or NGINX is None) and os.environ.get("CI") != "true",
                                 reason="redis-server or nginx is not installed (under CI=true this fails instead)")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compose():
    with open(os.path.join(DEPLOY, "compose.cluster.yaml")) as f:
        return yaml.safe_load(f)


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns()}"


# ---- the compose file and the nginx file, read ----

def test_the_cluster_compose_has_redis_two_nodes_and_nginx_wired_to_each_other(tmp_path):
    spec = compose()
    services = spec["services"]
    assert set(services) == {"redis", "node-a", "node-b", "nginx"}
    redis = services["redis"]
    command = redis["command"]
    assert command[0] == "redis-server"
    flags = dict(zip(command[1::2], command[2::2]))
    assert flags["--appendonly"] == "yes" and flags["--appendfsync"] in ("always", "everysec")
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "redis-data:/data" in redis["volumes"] and "redis-data" in spec["volumes"]
    assert "ports" not in redis, "Redis must not be published outside the compose network"

    proxy_address = services["nginx"]["networks"]["tables"]["ipv4_address"]
    node_ids, data_volumes = set(), set()
    for name in ("node-a", "node-b"):
        node = services[name]
        assert node["build"]["dockerfile"] == "deploy/Dockerfile"
        assert node["depends_on"]["redis"]["condition"] == "service_healthy"
        env = node["environment"]
        # redis://redis:6379: the service above, on Redis' own port (its command sets none).
        assert env["FOLDTABLE_REDIS"] == "redis://redis:6379/0" and "--port" not in command
        assert env["FOLDTABLE_TRUSTED_PROXIES"] == proxy_address
        node_ids.add(env["FOLDTABLE_NODE_ID"])
        (volume,) = node["volumes"]
        assert volume.endswith(":/data")
        data_volumes.add(volume.split(":")[0])
        # The node's settings as the image would see them pass foldtabled's own check.
        secret = tmp_path / "secret"
        secret.write_text("a" * 48)
        (tmp_path / "web").mkdir(exist_ok=True)
        check_env = {"PATH": os.environ["PATH"], **env, "FOLDTABLE_TOKEN_SECRET_FILE": str(secret),
                     "FOLDTABLE_HOST": "0.0.0.0", "FOLDTABLE_PORT": "8080",
                     "FOLDTABLE_DATA_DIR": str(tmp_path / f"data-{name}"), "FOLDTABLE_WEB_ROOT": str(tmp_path / "web")}
        done = subprocess.run([os.path.abspath(BIN), "--check-config"], env=check_env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    assert len(node_ids) == 2 and len(data_volumes) == 2, "each node needs its own id and its own data volume"
    assert data_volumes <= set(spec["volumes"])

    nginx = services["nginx"]
    assert {dep: v["condition"] for dep, v in nginx["depends_on"].items()} == {"node-a": "service_healthy",
                                                                                "node-b": "service_healthy"}
    assert "./nginx-cluster.conf:/etc/foldtable/nginx.conf:ro" in nginx["volumes"]
    assert os.path.exists(os.path.join(DEPLOY, "secrets")) or spec["secrets"]["token-secret"]["file"] == "./secrets/token-secret"
    # The command's sed turns the file's two upstream servers into the two node services.
    script = nginx["command"][-1]
    conf = open(os.path.join(DEPLOY, "nginx-cluster.conf")).read()
    expressions = re.findall(r"-e '([^']*)'", script)
    rewritten = subprocess.run(["sed", *sum((["-e", e] for e in expressions), [])], input=conf, capture_output=True,
                               text=True, check=True).stdout
    servers = re.findall(r"^\s*server (\S+) ", rewritten, re.M)
    assert servers == ["node-a:8080", "node-b:8080"], servers


def test_the_cluster_nginx_conf_repeats_the_single_node_one_but_for_its_upstream_and_retries():
    """Two files for one proxy must not drift: every setting outside the upstream block is the
    same, apart from the lines that choose another node."""
    def settings(path):
        text = open(os.path.join(DEPLOY, path)).read()
        text = re.sub(r"upstream foldtabled \{.*?\n\}", "upstream foldtabled {}", text, flags=re.S)
        lines = [line.strip() for line in text.splitlines()]
        return [line for line in lines if line and not line.startswith("#")
                and not line.startswith(("proxy_next_upstream", "proxy_connect_timeout"))]
    assert settings("nginx.conf") == settings("nginx-cluster.conf")
    cluster = open(os.path.join(DEPLOY, "nginx-cluster.conf")).read()
    assert "least_conn;" in cluster and "proxy_next_upstream error timeout;" in cluster


def test_both_compose_files_build_the_one_dockerfile():
    """The runtime packages of deploy/Dockerfile are checked against `ldd foldtabled` in
    test_deploy.py; both layouts must use that Dockerfile and no other."""
    single = yaml.safe_load(open(os.path.join(DEPLOY, "compose.yaml")))
    assert single["services"]["foldtabled"]["build"]["dockerfile"] == "deploy/Dockerfile"
    for service in compose()["services"].values():
        if "build" in service:
            assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}


# ---- the two-node layout, running ----

def start_redis(directory):
    """redis-server with the compose file's own flags, on a free loopback port."""
    command = compose()["services"]["redis"]["command"]
    port = free_port()
    proc = subprocess.Popen([REDIS, *command[1:], "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("redis-server did not start with the compose file's flags")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Redis, nodes a and b, and nginx with deploy/nginx-cluster.conf in front of them. nginx
    connects to the nodes from 127.0.0.2, so the proxy's address differs from the clients'."""
    tmp = tmp_path_factory.mktemp("cluster")
    cert, key = make_certificate(tmp)
    tls_port = free_port()
    (tmp / "redis").mkdir()
    redis, redis_port = start_redis(tmp / "redis")
    nodes, nginx = {}, None
    try:
        for node in ("a", "b"):
            nodes[node] = LoggedServer(
                "--redis", f"redis://127.0.0.1:{redis_port}/0", "--node-id", node, "--data-dir", str(tmp / f"data-{node}"),
                "--public-url", f"https://127.0.0.1:{tls_port}", "--trusted-proxies", "127.0.0.2", "--log-level", "info",
                stderr_path=tmp / f"node-{node}.log")
        main_conf = nginx_for_tests(tmp, "nginx-cluster.conf", {"127.0.0.1:8081": nodes["a"].port, "127.0.0.1:8082": nodes["b"].port},
                                    cert, key, tls_port)
        nginx, context = start_nginx(main_conf, cert, tls_port, probe="/healthz")
        yield {"url": f"https://127.0.0.1:{tls_port}", "ws": f"wss://127.0.0.1:{tls_port}/ws", "context": context,
               "nodes": nodes, "nginx_log": tmp / "error.log"}
    finally:
        # Also when start-up failed above: nothing outlives the tests.
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        for node in nodes.values():
            node.stop()
        redis.terminate()
        redis.wait(10)


async def join_through_nginx(cluster, session, name):
    ws = await connect(cluster["ws"], ssl=cluster["context"], open_timeout=5, max_size=None, local_addr=("127.0.0.5", 0))
    client = Client(ws)
    await client.send({"type": "join", "session": session, "name": name, "create": True})
    client.welcome = await client.next(lambda m: m["type"] in ("welcome", "resume"), timeout=10)
    return client


def https(cluster, method, path, body=None):
    import json
    request = urllib.request.Request(cluster["url"] + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"} if body is not None else {})
    with urllib.request.urlopen(request, context=cluster["context"], timeout=10) as response:
        raw = response.read()
        return response.status, json.loads(raw) if raw and response.headers.get_content_type() == "application/json" else raw


def events(client):
    return [(m["seq"], m["id"] if "id" in m else None, m["collapsed"]) for m in client.all if m["type"] == "event"]


async def settle(clients, count, timeout=10):
    """Waits until every client has received `count` events."""
    deadline = time.monotonic() + timeout
    for client in clients:
        while len(events(client)) < count:
            assert time.monotonic() < deadline, f"{client.welcome['client']} has {len(events(client))} of {count} events"
            try:
                await client.next(lambda m: False, timeout=0.1)
            except TimeoutError:
                pass


@needs_peers
def test_websocket_clients_through_nginx_land_on_both_nodes_and_see_the_same_events(cluster):
    name = unique("spread")

    async def scenario():
        clients = [await join_through_nginx(cluster, name, f"m{n}") for n in range(4)]
        homes = [c.welcome["client"].split(".")[0] for c in clients]
        assert sorted(homes) == ["a", "a", "b", "b"], homes  # least_conn: two each
        await clients[0].send({"type": "addSection", "key": "s", "title": "Shared", "id": "add"})
        await clients[0].next(lambda m: m["type"] == "ack" and m["id"] == "add", timeout=10)
        for round_ in range(5):
            for n, client in enumerate(clients):
                await client.send({"type": "toggle", "section": "s", "id": f"t{round_}-{n}"})
        await settle(clients, 21)
        first = events(clients[0])
        assert [seq for seq, _, _ in first] == list(range(1, 22))
        for client in clients[1:]:
            assert events(client) == first
        for client in clients:
            await client.close()
    run(scenario())
    # Each node saw the clients' own address (X-Forwarded-For from the trusted proxy), never nginx's.
    for node in cluster["nodes"].values():
        opens = [line for line in node.stderr().splitlines() if "event=open" in line]
        assert any("peer=127.0.0.5" in line for line in opens), opens
        assert not any("peer=127.0.0.2" in line for line in opens), opens


@needs_peers
def test_an_http_change_through_nginx_reaches_members_on_both_nodes(cluster):
    name = unique("api")

    async def scenario():
        clients = [await join_through_nginx(cluster, name, f"m{n}") for n in range(2)]
        assert {c.welcome["client"].split(".")[0] for c in clients} == {"a", "b"}
        await clients[0].send({"type": "addSection", "key": "mac", "title": "Mac", "id": "add"})
        await clients[0].next(lambda m: m["type"] == "ack", timeout=10)
        # Two calls: round robin over idle upstreams gives each node one to answer.
        for seq, collapsed in ((2, True), (3, False)):
            status, body = await asyncio.to_thread(https, cluster, "PUT", f"/api/v1/sessions/{name}/sections/mac/collapsed",
                                                   collapsed)
            assert status == 200 and body["seq"] == seq
            for client in clients:
                event = await client.next(lambda m: m["type"] == "event" and m["seq"] == seq, timeout=10)
                assert event["collapsed"] == {"mac": collapsed} and event["by"]["client"] == "api"
        for client in clients:
            await client.close()
    run(scenario())


@needs_peers
def test_with_one_node_killed_nginx_skips_it_and_the_service_goes_on_through_the_other(cluster):
    """Runs last in this file: node a stays down."""
    name = unique("failover")
    a = cluster["nodes"]["a"]

    async def scenario():
        clients = [await join_through_nginx(cluster, name, f"m{n}") for n in range(4)]
        on_a = [c for c in clients if c.welcome["client"].startswith("a.")]
        on_b = [c for c in clients if c.welcome["client"].startswith("b.")]
        assert len(on_a) == 2 and len(on_b) == 2
        await on_a[0].send({"type": "addSection", "key": "s", "title": "S", "id": "add"})
        await on_a[0].next(lambda m: m["type"] == "ack", timeout=10)
        await settle(on_b, 1)

        a.kill9()
        # Node b now holds every open WebSocket, so least_conn tries node a first: each of these
        # is refused there and passed to b by nginx, never failed to the caller.
        for _ in range(6):
            status, _ = await asyncio.to_thread(https, cluster, "GET", "/healthz")
            assert status == 200
            status, body = await asyncio.to_thread(https, cluster, "GET", f"/api/v1/sessions/{name}/collapsed")
            assert status == 200 and body == {"s": False}
        # a's members reconnect through nginx and land on b, with the table as it was.
        back = [await join_through_nginx(cluster, name, f"back{n}") for n in range(2)]
        assert all(c.welcome["client"].startswith("b.") for c in back)
        assert back[0].welcome["seq"] == 1
        await back[0].send({"type": "toggle", "section": "s", "id": "after"})
        for client in on_b + back:
            event = await client.next(lambda m: m["type"] == "event" and m.get("id") == "after", timeout=10)
            assert event["seq"] == 2 and event["collapsed"] == {"s": True}
        status, _ = await asyncio.to_thread(https, cluster, "PUT", f"/api/v1/sessions/{name}/sections/s/collapsed", False)
        assert status == 200
        for client in on_b + back:
            await client.close()
        for client in on_a:
            try:
                await client.close()
            except Exception:
                pass
    run(scenario())
    # nginx tried the dead node and moved on (and logged it once per attempt).
    log = cluster["nginx_log"].read_text()
    assert f"127.0.0.1:{a.port}" in log and "Connection refused" in log, log

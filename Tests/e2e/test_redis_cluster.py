"""Two foldtabled nodes sharing sessions through a real three-shard Redis Cluster
(--redis-cluster; Debian's redis-server in cluster mode, made with `redis-cli --cluster create`):
sessions land on different shards, clients on both nodes see the same events in the same order on
every session, a `redis-cli --cluster reshard` while clients write loses nothing acknowledged, and
a shard that is down makes only its own sessions read-only."""
import asyncio
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from foldtabled import Client, Server

REDIS = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
pytestmark = pytest.mark.skipif((REDIS is None or REDIS_CLI is None) and os.environ.get("CI") != "true",
                                reason="redis-server is not installed (under CI=true this fails instead)")


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def crc16(data):
    """CRC16-CCITT (XMODEM), as Redis Cluster hashes keys."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def slot(session):
    """The hash slot of a session's keys (they share the tag {session})."""
    return crc16(session.encode()) % 16384


def free_cluster_port():
    """A port free with its cluster bus port (port + 10000), both below the ephemeral range."""
    for _ in range(200):
        port = random.randint(20000, 22000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
                return port
        except OSError:
            continue
    raise AssertionError("no free port pair for a cluster node")


def cli(port, *args):
    return subprocess.run([REDIS_CLI, "-p", str(port), *map(str, args)], capture_output=True, text=True, timeout=120).stdout.strip()


class RedisCluster:
    """Three masters, no replicas; a master that is down takes out only its own slots."""

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="foldtable-rcluster-")
        self.ports = []
        self.procs = []
        for _ in range(3):
            port = free_cluster_port()
            home = os.path.join(self.directory, str(port))
            os.makedirs(home)
            self.procs.append(subprocess.Popen(
                [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", home,
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
                 "--cluster-require-full-coverage", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.ports.append(port)
        for port in self.ports:
            deadline = time.monotonic() + 10
            while cli(port, "PING") != "PONG":
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        made = subprocess.run([REDIS_CLI, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                               "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stdout + made.stderr
        deadline = time.monotonic() + 20
        while not all("cluster_state:ok" in cli(p, "CLUSTER", "INFO") for p in self.ports):
            assert time.monotonic() < deadline, "the cluster did not become ok"
            time.sleep(0.1)

    @property
    def seeds(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def owner(self, session):
        """The port of the master that serves the session's slot (from CLUSTER NODES)."""
        wanted = slot(session)
        # "<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges...>"
        for entry in cli(self.ports[0], "CLUSTER", "NODES").splitlines():
            parts = entry.split()
            for item in parts[8:]:
                if item.startswith("["):
                    continue  # a slot being migrated or imported: listed again under its owner
                low, _, high = item.partition("-")
                if int(low) <= wanted <= int(high or low):
                    return int(parts[1].split("@")[0].rsplit(":", 1)[1])
        raise AssertionError(f"no master serves slot {wanted}")

    def kill(self, port):
        """SIGKILL of one master: its slots have no master until it is back (no replicas here)."""
        proc = self.procs[self.ports.index(port)]
        proc.kill()
        proc.wait(10)

    def node_id(self, port):
        return cli(port, "CLUSTER", "MYID")

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    made = RedisCluster()
    yield made
    made.close()


@pytest.fixture(scope="module")
def nodes(cluster):
    started = [Server("--redis-cluster", cluster.seeds, "--node-id", node) for node in ("a", "b")]
    yield started
    for server in started:
        assert server.stop() == 0


def sessions_on_every_shard(cluster, prefix, per_shard=2):
    """Session names, `per_shard` on each master."""
    found = {port: [] for port in cluster.ports}
    n = 0
    while any(len(names) < per_shard for names in found.values()):
        name = f"{prefix}-{time.monotonic_ns()}-{n}"
        port = cluster.owner(name)
        if len(found[port]) < per_shard:
            found[port].append(name)
        n += 1
    return found


def line(client):
    """The events a client received, in order: (seq, type, section, author)."""
    return [(m["seq"], m["change"]["type"], m["change"].get("section"), m["by"]["client"])
            for m in client.all if m["type"] == "event"]


async def wait_for_seq(clients, seq, timeout=30):
    """Until every client has received the event numbered `seq` (or later)."""
    deadline = time.monotonic() + timeout
    while any(max((e[0] for e in line(c)), default=0) < seq for c in clients):
        assert time.monotonic() < deadline, [max((e[0] for e in line(c)), default=0) for c in clients]
        for c in clients:
            try:
                await c.next(lambda m: m["type"] == "event", timeout=0.2)
            except TimeoutError:
                pass


def test_sessions_on_every_shard_reach_the_same_order_on_two_nodes(cluster, nodes):
    a, b = nodes
    shards = sessions_on_every_shard(cluster, "shard")

    async def one(name):
        ana = await Client.join(a.ws, session=name, name="ana")
        await ana.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
        await ana.next(lambda m: m["type"] == "ack" and m["id"] == "x", timeout=10)
        bo = await Client.join(b.ws, session=name, name="bo")
        assert bo.welcome["seq"] == 1
        for n in range(15):
            await ana.send({"type": "toggle", "section": "x", "id": f"a{n}"})
            await bo.send({"type": "toggle", "section": "x", "id": f"b{n}"})
        for client, prefix in ((ana, "a"), (bo, "b")):
            for n in range(15):
                await client.next(lambda m: m["type"] == "ack" and m["id"] == f"{prefix}{n}", timeout=20)
        await wait_for_seq([ana, bo], 31)
        assert [e for e in line(ana) if e[0] > 1] == line(bo)
        assert [e[0] for e in line(bo)] == list(range(2, 32))
        await ana.close()
        await bo.close()

    async def scenario():
        await asyncio.gather(*(one(name) for names in shards.values() for name in names))
    run(scenario())
    # Each session's stream is on the master of its slot, and only there.
    for port, names in shards.items():
        for name in names:
            assert cli(port, "XLEN", f"foldtable:{{{name}}}:stream") == "31"


def test_a_reshard_while_clients_write_loses_nothing_acknowledged(cluster, nodes):
    a, b = nodes
    # Sessions on the first master, whose slots the reshard moves (all of them) to the second.
    source, target = cluster.ports[0], cluster.ports[1]
    names = sessions_on_every_shard(cluster, "reshard", per_shard=3)[source]
    acked = {name: [] for name in names}

    async def writer(name, moving):
        ana = await Client.join(a.ws, session=name, name="ana")
        await ana.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
        await ana.next(lambda m: m["type"] == "ack" and m["id"] == "x", timeout=10)
        bo = await Client.join(b.ws, session=name, name="bo")
        n = 0
        while not moving.is_set() or n < 10:
            for client, who in ((ana, "a"), (bo, "b")):
                await client.send({"type": "toggle", "section": "x", "id": f"{who}{n}"})
                reply = await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == f"{who}{n}", timeout=30)
                if reply["type"] == "ack":
                    acked[name].append(reply["seq"])
            n += 1
            await asyncio.sleep(0.01)
        await wait_for_seq([ana, bo], max(acked[name]), timeout=60)
        # Nothing acknowledged is missing, and both nodes saw one order.
        assert [e for e in line(ana) if e[0] > 1] == [e for e in line(bo) if e[0] > 1]
        seqs = {e[0] for e in line(bo)}
        assert set(acked[name]) <= seqs
        await ana.close()
        await bo.close()

    done = threading.Event()

    def reshard():
        time.sleep(1)
        moved = subprocess.run(
            [REDIS_CLI, "--cluster", "reshard", f"127.0.0.1:{source}", "--cluster-from", cluster.node_id(source),
             "--cluster-to", cluster.node_id(target), "--cluster-slots", "16384", "--cluster-yes"],
            capture_output=True, text=True, timeout=300)
        assert moved.returncode == 0, moved.stdout[-2000:] + moved.stderr[-2000:]
        done.set()

    mover = threading.Thread(target=reshard)
    mover.start()

    async def scenario():
        await asyncio.gather(*(writer(name, done) for name in names))
    try:
        run(scenario(), timeout=300)
    finally:
        mover.join(300)
    assert done.is_set()
    for name in names:
        assert cluster.owner(name) == target
        assert len(acked[name]) >= 20
        # Every acknowledged change is in the stream on its new shard (one whose outcome its
        # author never learnt may be there too).
        assert int(cli(target, "XLEN", f"foldtable:{{{name}}}:stream")) >= 1 + len(acked[name])


def test_a_shard_that_is_down_makes_only_its_sessions_read_only(cluster, nodes):
    """Runs last in this module: it kills a master for good."""
    a, b = nodes
    # After the reshard above, the first master serves no slot: the other two hold them all.
    serving = sorted({cluster.owner(f"probe-{n}") for n in range(64)})
    assert len(serving) == 2, serving
    live, dead = serving
    found = {}
    n = 0
    while len(found) < 2:
        name = f"down-{time.monotonic_ns()}-{n}"
        found.setdefault(cluster.owner(name), name)
        n += 1
    up, down = found[live], found[dead]

    async def scenario():
        clients = {}
        for name in (up, down):
            ana = await Client.join(a.ws, session=name, name="ana")
            await ana.send({"type": "addSection", "key": "x", "title": "X", "id": "x"})
            await ana.next(lambda m: m["type"] == "ack" and m["id"] == "x", timeout=10)
            bo = await Client.join(b.ws, session=name, name="bo")
            clients[name] = (ana, bo)
        cluster.kill(dead)
        # Changes to the session on the dead shard are refused on both nodes once they notice...
        for who, client in zip("ab", clients[down]):
            deadline = time.monotonic() + 20
            for attempt in range(1000):
                wanted = f"d{who}{attempt}"
                await client.send({"type": "toggle", "section": "x", "id": wanted})
                reply = await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == wanted, timeout=20)
                if reply["type"] == "error":
                    assert reply["code"] == "storage_unavailable", reply
                    break
                assert time.monotonic() < deadline, "changes to a session on a dead shard were still acknowledged"
                await asyncio.sleep(0.2)
        # ... while the session on the live shard takes them on both, in one order.
        ana, bo = clients[up]
        for k in range(5):
            await ana.send({"type": "toggle", "section": "x", "id": f"a{k}"})
            await bo.send({"type": "toggle", "section": "x", "id": f"b{k}"})
        for client, prefix in ((ana, "a"), (bo, "b")):
            for k in range(5):
                reply = await client.next(lambda m: m["type"] in ("ack", "error") and m.get("id") == f"{prefix}{k}", timeout=20)
                assert reply["type"] == "ack", reply
        await wait_for_seq([ana, bo], 11)
        assert [e for e in line(ana) if e[0] > 1] == line(bo)
        for pair in clients.values():
            for client in pair:
                await client.close()
    run(scenario())

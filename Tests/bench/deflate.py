"""What permessage-deflate costs and saves: foldtabled with the setting off, then on.

For each mode, on a fresh server (sessions in memory, pinned to CPU 0; the clients on CPU 1):
- expand: CLIENTS members of the demo session (every one offering permessage-deflate, as
  browsers and Python's `websockets` do) see the large section (ROWS rows) expanded once; the
  server's /metrics give the bytes it put on the wire (frame headers and payload after
  compression) and the payload before compression, /proc its CPU seconds (user + system), from
  the expand request until every member has the final rows chunk. Per delivery = per member.
- idle: IDLE members join one session and sit; the server's resident memory (VmRSS) grows by
  what each connection holds (with compression, zlib state).

Prints one line per mode. Run by `make bench` (needs `make venv` and a release build).
Settings (environment): DEFLATE_CLIENTS (100), DEFLATE_IDLE (1000), DEFLATE_ROWS (50000),
DEFLATE_BUILD (.build/release).
"""
import asyncio
import os
import re
import resource
import subprocess
import sys
import time
import urllib.request

from websockets.asyncio.client import connect

BUILD = os.environ.get("DEFLATE_BUILD", ".build/release")
CLIENTS = int(os.environ.get("DEFLATE_CLIENTS", "100"))
IDLE = int(os.environ.get("DEFLATE_IDLE", "1000"))
ROWS = int(os.environ.get("DEFLATE_ROWS", "50000"))
TIMEOUT = 300


def pin(cpu):
    """Keep to one CPU when there are two or more (the server gets the other)."""
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {cpu})


class Server:
    def __init__(self, deflate):
        args = [f"{BUILD}/foldtabled", "--port", "0", "--memory", "--web-root", "", "--demo-large-rows", str(ROWS),
                "--max-connections-per-ip", "100000", "--stream-timeout-secs", "120"]
        if deflate:
            args.append("--permessage-deflate")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     preexec_fn=lambda: pin(0))
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on http"):
            sys.exit(f"deflate: foldtabled did not start: {line!r}")
        self.http = line.split()[-1]
        self.ws = self.http.replace("http://", "ws://") + "/ws"

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def metric(self, name):
        with urllib.request.urlopen(self.http + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


async def join(url, session, name):
    ws = await connect(url, max_size=None, open_timeout=30, compression="deflate")
    await ws.send(f'{{"type":"join","session":"{session}","name":"{name}","create":true}}')
    while '"type":"welcome"' not in await ws.recv():
        pass
    return ws


async def until_final_rows(ws):
    """Reads until the last rows chunk of the large section (the demo has no other row stream)."""
    while True:
        frame = await ws.recv()
        for line in frame.split("\n"):
            if line.startswith('{"type":"rows"') and '"final":true' in line:
                return


async def expand(server):
    members = await asyncio.gather(*(join(server.ws, "demo", f"m{i}") for i in range(CLIENTS)))
    negotiated = sum(1 for ws in members if ws.response.headers.get("Sec-WebSocket-Extensions"))
    wire, payload, cpu = (server.metric("foldtable_written_bytes_total"),
                          server.metric("foldtable_written_payload_bytes_total"), server.cpu_seconds())
    start = time.monotonic()
    readers = [asyncio.create_task(until_final_rows(ws)) for ws in members]
    await members[0].send('{"type":"set","section":"big","collapsed":false}')
    await asyncio.gather(*readers)
    seconds = time.monotonic() - start
    cpu = server.cpu_seconds() - cpu
    wire = server.metric("foldtable_written_bytes_total") - wire
    payload = server.metric("foldtable_written_payload_bytes_total") - payload
    await asyncio.gather(*(ws.close() for ws in members))
    return negotiated, wire / CLIENTS, payload / CLIENTS, cpu / CLIENTS, seconds


async def idle(server):
    before = server.rss_kb()
    members = []
    for start in range(0, IDLE, 100):
        members += await asyncio.gather(*(join(server.ws, "idle", f"i{i}") for i in range(start, min(IDLE, start + 100))))
    await asyncio.sleep(1)
    grown = server.rss_kb() - before
    await asyncio.gather(*(ws.close() for ws in members))
    return grown


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, IDLE + 200)), hard))
    pin(1)
    for deflate in (False, True):
        server = Server(deflate)
        try:
            negotiated, wire, payload, cpu, seconds = asyncio.run(asyncio.wait_for(expand(server), TIMEOUT))
        finally:
            server.stop()
        server = Server(deflate)
        try:
            grown_kb = asyncio.run(asyncio.wait_for(idle(server), TIMEOUT))
        finally:
            server.stop()
        print(f"deflate: permessage-deflate={'on' if deflate else 'off'} negotiated={negotiated}/{CLIENTS}: "
              f"expanding {ROWS:,} rows to {CLIENTS} members: {wire / 1e6:.2f} MB on the wire per delivery "
              f"({payload / 1e6:.2f} MB before compression, {payload / wire:.1f}x), "
              f"server CPU {cpu * 1000:.1f} ms per delivery, {seconds:.1f} s in all; "
              f"{IDLE:,} idle members: server RSS +{grown_kb / 1024:.0f} MB ({grown_kb / IDLE:.0f} KB each)",
              flush=True)


if __name__ == "__main__":
    main()

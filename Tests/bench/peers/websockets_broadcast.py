"""A broadcast server on PyPI's `websockets` (asyncio): the peer that `make bench` measures
foldtabled against. Every message from a client goes to every client of its room, the sender
included, the room being the URL path; nothing is parsed or stored. It uses the library's own
`broadcast()`, the way its documentation says to fan a message out.

    python websockets_broadcast.py [PORT]   (0 or none: a free port; prints "listening on 127.0.0.1:PORT")
"""

import asyncio
import signal
import sys

from websockets.asyncio.server import broadcast, serve

rooms: dict[str, set] = {}


async def member(connection):
    name = connection.request.path
    room = rooms.setdefault(name, set())
    room.add(connection)
    try:
        async for message in connection:
            broadcast(room, message)
    finally:
        room.discard(connection)
        if not room and rooms.get(name) is room:
            del rooms[name]


async def main(port):
    stop = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
    # Like the other servers of the run: no compression, no keepalive pings (Node `ws` and the
    # mirror send none), messages up to 1 MiB.
    async with serve(member, "127.0.0.1", port, compression=None, ping_interval=None, max_size=1 << 20, backlog=1024) as server:
        print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await stop


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))

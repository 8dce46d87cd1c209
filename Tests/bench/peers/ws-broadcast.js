// A broadcast server on Node's `ws` (Debian `node-ws`): the peer that `make bench` measures
// foldtabled against. Every message from a client goes to every client of its room, the sender
// included, the room being the URL path; nothing is parsed or stored. This is the broadcast loop
// the `ws` README shows, with rooms added so that the many-sessions scenario runs on it too.
//
//   node ws-broadcast.js [PORT]   (0 or none: a free port; prints "listening on 127.0.0.1:PORT")
'use strict';

let ws;
try {
    ws = require('ws');
} catch {
    // Debian installs node-ws under /usr/share/nodejs, which a Node from elsewhere does not search.
    ws = require('/usr/share/nodejs/ws');
}

const rooms = new Map();
const server = new ws.WebSocketServer({
    host: '127.0.0.1',
    port: Number(process.argv[2] || 0),
    // Like the other servers of the run: no compression (the generator does not offer it anyway).
    perMessageDeflate: false,
    maxPayload: 1 << 20,
});

server.on('connection', (socket, request) => {
    const name = request.url;
    let room = rooms.get(name);
    if (!room) {
        room = new Set();
        rooms.set(name, room);
    }
    room.add(socket);
    socket.on('message', (data, isBinary) => {
        for (const member of room) {
            if (member.readyState === ws.WebSocket.OPEN) member.send(data, { binary: isBinary });
        }
    });
    socket.on('close', () => {
        room.delete(socket);
        if (room.size === 0 && rooms.get(name) === room) rooms.delete(name);
    });
    // A client gone mid-write: its close event cleans up.
    socket.on('error', () => {});
});

server.on('listening', () => {
    console.log(`listening on 127.0.0.1:${server.address().port}`);
});
process.on('SIGTERM', () => process.exit(0));

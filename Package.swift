// swift-tools-version:6.0
// Foldtable: a self-hosted, multi-user WebSocket server for shared collapsible tables.
// Layers (see Sources/FoldtableServer/FoldtableServer.docc/Architecture.md):
//   FoldtableCore      pure Swift: table model, changes -> events, wire protocol. No I/O, no C.
//   FoldtableServer    hub, sessions (room + order), HTTP API; talks to Transport, store and Broker ports.
//   FoldtableTransport the only Swift module that imports CFoldtableWS (libwebsockets).
//   FoldtableStore     the only Swift module that imports CSQLite: sessions and event logs on disk.
//   FoldtableRedis     the only Swift module that imports CHiredis: a threaded Redis client (streams).
//   FoldtableWebhook   the only Swift module that imports CCurl: webhook POSTs on a thread of its own.
//   FoldtableClient    the client side: session replica, lws client adapter, terminal UI.
//   foldtabled, foldtable  executables that only wire things up.
import PackageDescription

let package = Package(
    name: "Foldtable",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "foldtabled", targets: ["foldtabled"]),
        .executable(name: "foldtable", targets: ["foldtable"]),
        .executable(name: "foldtable-bench", targets: ["foldtable-bench"]),
    ],
    targets: [
        // System library: libwebsockets 4.1.6 from Debian.
        .systemLibrary(
            name: "CLibWebSockets",
            pkgConfig: "libwebsockets",
            providers: [.apt(["libwebsockets-dev"])]
        ),
        // System library: SQLite 3.40 from Debian, for FoldtableStore only.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // System library: hiredis 0.14.1 from Debian (libhiredis-dev), for FoldtableRedis only.
        // No pkgConfig: hiredis.pc's cflags carry -D_FILE_OFFSET_BITS=64, which SwiftPM refuses
        // (and drops) with a warning on every build; the header is found as <hiredis/hiredis.h>
        // in /usr/include and the library by the modulemap's `link`, so pkg-config adds nothing.
        .systemLibrary(name: "CHiredis"),
        // System library: libcurl 7.88 from Debian, for FoldtableWebhook only (webhook POSTs).
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // The C helpers both libwebsockets wrappers share (buffer growth, UTF-8-safe truncation).
        .target(
            name: "CFoldtableWSCommon",
            cSettings: [.unsafeFlags(["-Wall", "-Wextra", "-Wno-unused-parameter"])]
        ),
        // The server's C wrapper around libwebsockets (see include/CFoldtableWS.h for why it exists).
        .target(
            name: "CFoldtableWS",
            dependencies: ["CLibWebSockets", "CFoldtableWSCommon"],
            cSettings: [.unsafeFlags(["-Wall", "-Wextra", "-Wno-unused-parameter"])]
        ),
        // The terminal client's C wrapper around libwebsockets (include/CFoldtableWSClient.h).
        .target(
            name: "CFoldtableWSClient",
            dependencies: ["CLibWebSockets", "CFoldtableWSCommon"],
            cSettings: [.unsafeFlags(["-Wall", "-Wextra", "-Wno-unused-parameter"])]
        ),
        .target(name: "FoldtableCore"),
        // System library: OpenSSL 3.0's libcrypto from Debian (HMAC-SHA256 for tokens).
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // Signed tokens (JWT HS256): the only module that imports COpenSSL.
        .target(name: "FoldtableAuth", dependencies: ["COpenSSL", "FoldtableCore", "FoldtableServer"]),
        .target(name: "FoldtableServer", dependencies: ["FoldtableCore"]),
        .target(name: "FoldtableTransport", dependencies: ["CFoldtableWS", "FoldtableCore", "FoldtableServer"]),
        // SessionStore and EventLog on SQLite: one writer thread, group commit, online backup.
        .target(name: "FoldtableStore", dependencies: ["CSQLite", "FoldtableCore", "FoldtableServer"]),
        // A Redis client on threads of its own (hiredis): the Broker of sessions shared by several
        // nodes (streams, snapshots, presence); see the "More than one machine" article.
        .target(name: "FoldtableRedis", dependencies: ["CHiredis", "FoldtableCore", "FoldtableServer"]),
        // Webhook POSTs with libcurl's multi interface on a thread of its own, signed with
        // FoldtableAuth's HMAC, connecting only where the address policy allows.
        .target(name: "FoldtableWebhook", dependencies: ["CCurl", "FoldtableServer", "FoldtableAuth"]),
        .executableTarget(
            name: "foldtabled",
            dependencies: [
                "FoldtableCore", "FoldtableServer", "FoldtableTransport", "FoldtableStore", "FoldtableAuth", "FoldtableRedis", "FoldtableWebhook",
            ]
        ),
        // Client side: the session replica, the lws client adapter and the terminal UI pieces.
        .target(name: "FoldtableClient", dependencies: ["CFoldtableWSClient", "FoldtableCore"]),
        .executableTarget(name: "foldtable", dependencies: ["FoldtableClient"]),
        // The wrapper as an echo server for the transport tests and Autobahn; started through
        // FoldtableTransport's WrapperConfig, as foldtabled's transport is.
        .executableTarget(
            name: "foldtable-echo",
            dependencies: ["CFoldtableWS", "FoldtableTransport"]
        ),
        // epoll shims for the benchmark's load generator (see its header for why).
        .target(name: "CFoldtableBench"),
        .executableTarget(
            name: "foldtable-bench",
            dependencies: ["FoldtableCore", "FoldtableServer", "FoldtableStore", "CFoldtableBench"]
        ),
        .testTarget(name: "FoldtableCoreTests", dependencies: ["FoldtableCore"]),
        .testTarget(name: "FoldtableServerTests", dependencies: ["FoldtableServer", "FoldtableCore", "FoldtableAuth"]),
        .testTarget(name: "FoldtableStoreTests", dependencies: ["FoldtableStore", "FoldtableServer", "FoldtableCore"]),
        .testTarget(name: "FoldtableClientTests", dependencies: ["FoldtableClient", "FoldtableCore"]),
        .testTarget(name: "FoldtableAuthTests", dependencies: ["FoldtableAuth", "FoldtableServer"]),
        .testTarget(name: "FoldtableRedisTests", dependencies: ["FoldtableRedis", "FoldtableServer", "FoldtableCore"]),
        .testTarget(name: "FoldtableTransportTests", dependencies: ["FoldtableTransport", "FoldtableServer"]),
        // The daemon's own pure pieces (process tuning), tested through `@testable import`.
        .testTarget(name: "foldtabledTests", dependencies: ["foldtabled"]),
    ]
)

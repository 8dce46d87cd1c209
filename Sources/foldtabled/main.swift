// foldtabled: read the configuration, validate it, wire the hub to the libwebsockets transport,
// serve until SIGINT/SIGTERM, then close every client with 1001 and exit 0.
import FoldtableCore
import FoldtableServer
import FoldtableTransport
import FoldtableWebhook
import Foundation

// Block SIGINT and SIGTERM before anything starts a thread (the store's writer, the transport):
// threads inherit the mask, so the signals stay pending until SignalWaiter takes them, even one
// sent the instant the start line appears.
SignalWaiter.blockStopSignals()

func fail(_ line: String) -> Never {
    FileHandle.standardError.write(Data("foldtabled: \(line)\n".utf8))
    exit(1)
}

// Subcommands: `backup DEST` (an online copy of the database), `token ...` (a signed token).
if CommandLine.arguments.count > 1 {
    switch CommandLine.arguments[1] {
    case "backup": BackupCommand.run(Array(CommandLine.arguments.dropFirst(2)), environment: ProcessInfo.processInfo.environment)
    case "token": TokenCommand.run(Array(CommandLine.arguments.dropFirst(2)), environment: ProcessInfo.processInfo.environment)
    case "healthcheck": HealthCheck.run(Array(CommandLine.arguments.dropFirst(2)))
    case "--version", "version":
        print("foldtabled \(FoldtableVersion.current)")
        exit(0)
    default: break
    }
}

let parsedConfig: ServerConfig
do {
    switch try ServerConfig.parse(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment) {
    case .help:
        print(ServerConfig.usage)
        exit(0)
    case .helpMarkdown:
        print(ServerConfig.markdownTable)
        exit(0)
    case .helpEnvironment:
        print(ServerConfig.environmentExample)
        exit(0)
    case .check(let config, let sources):
        ConfigCheck.run(config, sources: sources)
    case .run(let parsed):
        parsedConfig = parsed
    }
} catch {
    ConfigCheck.refuse(error)
}
let startProblems = ConfigCheck.problems(parsedConfig, storage: false)
if !startProblems.isEmpty { ConfigCheck.refuse(ServerConfig.Invalid(startProblems)) }
// First, while nothing is open: asking for huge pages may mean running this binary again.
let hugePages = HugePages.apply(parsedConfig)

let verifier: TokenVerifier?
do {
    verifier = try TokenSetup.verifier(parsedConfig)
} catch {
    fail(error.description)
}
let fileLimit = FileLimit.raise()
var config = parsedConfig
if config.maxConnections == 0 { config.maxConnections = Int(max(64, min(fileLimit, 10_000_000)) - 64) }

signal(SIGPIPE, SIG_IGN)
// A file-size limit (ulimit -f) must fail a write with EFBIG, which the store reports as
// storage_unavailable, instead of killing the server with SIGXFSZ.
signal(SIGXFSZ, SIG_IGN)
let transport: LWSTransport
do {
    transport = try LWSTransport(config: config)
} catch {
    fail(error.description)
}
let storage: StorageSetup.Opened
do {
    storage = try StorageSetup.open(config, transport: transport)
} catch {
    fail(error.description)
}
let hub = Hub(
    config: config, transport: transport, ordering: storage.ordering, log: Log(level: config.logLevel), verifier: verifier, ready: storage.ready,
    residentBytes: ResidentMemory.bytes)
transport.delegate = hub
if let signer = verifier as? TokenSigner {
    do {
        try hub.enableInvites(signer: signer, ledger: storage.invites)
    } catch {
        fail(error.description)
    }
}
if let cluster = storage.cluster { ClusterSetup.register(cluster, metrics: hub.metrics) }
hub.metrics.counter("foldtable_frames_written_total", "WebSocket frames written to clients.") { Double(transport.written.frames) }
hub.metrics.counter("foldtable_frames_coalesced_total", "Messages that shared a frame with an earlier one (batching's saving).") {
    let written = transport.written
    return Double(written.messages - written.frames)
}
hub.metrics.counter(
    "foldtable_written_bytes_total",
    "Bytes of WebSocket frames written to clients: headers and payload after permessage-deflate, what the network carries (TLS aside)."
) { Double(transport.written.bytes) }
hub.metrics.counter("foldtable_written_payload_bytes_total", "Bytes of the messages written to clients, before compression.") {
    Double(transport.written.payloadBytes)
}
let serviceQueue = transport.serviceQueue
do {
    try WebhookSetup.start(config, storage: storage, hub: hub, post: { serviceQueue.post($0) })
} catch {
    fail(error.description)
}
SessionLoader.loadDemo(into: hub, config: config)
do {
    try SessionLoader.loadFiles(into: hub, config: config)
} catch {
    fail(error.description)
}

// SIGINT/SIGTERM were blocked at the top, before any thread existed, so every thread inherits
// the block and a signal sent at any moment stays pending until this thread takes it.
SignalWaiter.start(SignalWaiter.stopping(transport.stopHandle))

let scheme = config.tlsCertPath == nil ? "http" : "https"
let shownHost = config.host.contains(":") ? "[\(config.host)]" : config.host
// Unbuffered, so a supervisor or test reading the pipe sees the URL at once.
FileHandle.standardOutput.write(Data("listening on \(scheme)://\(shownHost):\(transport.port)\n".utf8))
Log(level: config.logLevel)(
    .info, "start",
    [
        "port": String(transport.port), "storage": storage.cluster != nil ? "redis" : config.memoryOnly ? "memory" : config.dataDirectory,
        "node": storage.cluster?.node ?? "", "web_root": config.webRoot,
        "tokens": verifier == nil ? "off" : "on", "open_files": String(fileLimit), "huge_pages": hugePages.rawValue,
    ])

if fileLimit < UInt64(config.maxConnections) + 64 {
    // --max-connections asked for more than the descriptors allow: lws would refuse the rest.
    Log(level: config.logLevel)(
        .warning, "open_files_low", ["open_files": String(fileLimit), "max_connections": String(config.maxConnections)])
}
let status = transport.run()
// A normal stop: with --redis, this node's members leave the other nodes' presence now, not
// when their heartbeat expires. The service loop is over, so this thread runs what Redis answers.
var stopped = false
hub.stop { stopped = true }
let deadline = transport.nowMilliseconds() + 2_000
while !stopped && transport.nowMilliseconds() < deadline {
    transport.serviceQueue.drain()
    usleep(2_000)
}
// Everything acknowledged is committed already; this waits for checkpoints still being written.
storage.close()
Log(level: config.logLevel)(.info, "stop", ["status": String(status)])
exit(status == 0 ? 0 : 1)

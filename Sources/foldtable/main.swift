// foldtable: the terminal client. Only wiring: parse the arguments, run one command, exit.
import FoldtableClient
import Glibc

var environment: [String: String] = [:]
var cursor = environ
while let entry = cursor.pointee {
    let text = String(cString: entry)
    if let equals = text.firstIndex(of: "=") {
        environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
    }
    cursor += 1
}

let command: Command
do {
    command = try Arguments.parse(Array(CommandLine.arguments.dropFirst()), environment: environment)
} catch {
    Console.error(error.message)
    exit(Console.Status.usage)
}

switch command {
case .help:
    Console.out(Arguments.usage)
    exit(Console.Status.success)
case .join(var options):
    // Opening a name that does not exist yet makes it (the server allows it to owners only).
    options.create = true
    guard let terminal = Terminal() else {
        Console.error("join needs a terminal; for scripts use watch, get, find or the other commands (foldtable --help)")
        exit(Console.Status.usage)
    }
    let connection: ClientConnection
    do {
        connection = try ClientConnection(options: options, reconnects: true)
    } catch {
        Console.error(error.message)
        exit(Console.Status.usage)
    }
    let session = InteractiveSession(connection: connection, terminal: terminal, color: Terminal.colorEnabled(environment))
    exit(session.run())
default:
    exit(ScriptCommand.run(command))
}

import FoldtableCore
import Glibc

/// This user's ``JoinRequest/idScope`` for the terminal client, kept in
/// `$XDG_STATE_HOME/foldtable/id-scope` (default `~/.local/state/foldtable/id-scope`, mode 0600):
/// one random string per account, so that `--id` retries from separate runs (a script run
/// again, after a restart) are still recognised by an open-mode server as the same author's.
/// Without a usable home (or the file cannot be written), a random one for this process.
enum IDScopeFile {
    /// The scope in the file, made there first when it has none.
    static func load() -> String {
        guard let directory = directory() else { return random() }
        let path = directory + "/id-scope"
        if let text = read(path), JoinRequest.isValidIDScope(text) { return text }
        let fresh = random()
        // Each missing directory on the way (an existing one is left as it is).
        var made = ""
        for part in directory.split(separator: "/") {
            made += "/" + part
            _ = mkdir(made, 0o700)
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return fresh }
        defer { close(fd) }
        let bytes = Array(fresh.utf8)
        guard write(fd, bytes, bytes.count) == bytes.count else { return fresh }
        return fresh
    }

    private static func directory() -> String? {
        if let state = getenv("XDG_STATE_HOME").map({ String(cString: $0) }), state.hasPrefix("/") { return state + "/foldtable" }
        guard let home = getenv("HOME").map({ String(cString: $0) }), home.hasPrefix("/") else { return nil }
        return home + "/.local/state/foldtable"
    }

    /// The file's text without surrounding whitespace, if it is short enough to be a scope.
    private static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = Glibc.read(fd, &buffer, buffer.count)
        guard count > 0 else { return nil }
        let text = buffer[..<count].filter { $0 != UInt8(ascii: "\n") && $0 != UInt8(ascii: " ") }
        return String(decoding: text, as: UTF8.self)
    }

    private static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdefghijklmnopqrstuvwxyz")
        return String((0..<20).map { _ in digits[Int(generator.next() % 36)] })
    }
}

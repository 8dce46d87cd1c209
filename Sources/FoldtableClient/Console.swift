import Glibc

/// Plain output for the script commands and error lines: straight `write(2)` calls, one per
/// line, so every line is out the moment it is complete (a `watch` piped into another program
/// must not sit in a buffer), and nothing touches the C `stdout`/`stderr` globals.
public enum Console {
    /// Exit statuses of `foldtable`.
    public enum Status {
        public static let success: Int32 = 0
        /// The server refused the change (the section or row does not exist, ...) or the join
        /// itself (a missing or expired token).
        public static let refused: Int32 = 1
        /// Bad command line or URL.
        public static let usage: Int32 = 2
        /// The server could not be reached, or the connection was lost.
        public static let connection: Int32 = 3
    }

    /// Writes `text` and a newline to stdout; `false` when stdout is gone (a closed pipe).
    @discardableResult
    public static func out(_ text: String) -> Bool {
        write(STDOUT_FILENO, Array(text.utf8) + [0x0A])
    }

    /// Writes `bytes` and a newline to stdout.
    @discardableResult
    public static func out(bytes: some Collection<UInt8>) -> Bool {
        write(STDOUT_FILENO, Array(bytes) + [0x0A])
    }

    /// Writes "foldtable: <line>" to stderr, with any line breaks in `line` flattened: the
    /// promise to scripts is one line.
    public static func error(_ line: String) {
        let flat = line.split(whereSeparator: \.isNewline).joined(separator: " ")
        write(STDERR_FILENO, Array("foldtable: \(DisplayText.sanitize(flat))\n".utf8))
    }

    /// Writes all of `bytes` to `fd`, retrying short writes.
    @discardableResult
    public static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return true }  // nothing to write
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd, base + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
    }
}

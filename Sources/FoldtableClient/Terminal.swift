import Glibc
import Synchronization

/// The controlling terminal in full-screen mode: raw input, the alternate screen, a hidden
/// cursor, and everything restored on the way out (quit, SIGINT, SIGTERM, SIGHUP).
///
/// Signals are turned into bytes on a pipe (the self-pipe trick) that the client's event loop
/// watches like stdin, so resizes and interrupts are handled on the loop's thread, where it is
/// safe to redraw and to restore the terminal; the handler itself only calls `write`.
public final class Terminal {
    public let inputFD: Int32 = STDIN_FILENO
    public let outputFD: Int32 = STDOUT_FILENO
    private var original: termios?
    public private(set) var isActive = false

    /// `nil` when stdin or stdout is not a terminal.
    public init?() {
        guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else { return nil }
    }

    deinit { restore() }

    /// Raw mode, alternate screen, cursor hidden, no line wrap (writing the last column must not
    /// scroll the screen).
    public func enter() {
        guard !isActive else { return }
        var settings = termios()
        guard tcgetattr(inputFD, &settings) == 0 else { return }
        original = settings
        cfmakeraw(&settings)
        // One byte is enough to return from read (after poll said it is readable).
        withUnsafeMutableBytes(of: &settings.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        tcsetattr(inputFD, TCSAFLUSH, &settings)
        isActive = true
        write("\u{1B}[?1049h\u{1B}[?25l\u{1B}[?7l\u{1B}[2J")
    }

    /// Puts the terminal back as it was. Safe to call more than once.
    public func restore() {
        guard isActive else { return }
        isActive = false
        write("\u{1B}[0m\u{1B}[?7h\u{1B}[?25h\u{1B}[?1049l")
        if var settings = original { tcsetattr(inputFD, TCSAFLUSH, &settings) }
    }

    /// Columns and lines (80 × 24 when the terminal does not say).
    public func size() -> (width: Int, height: Int) {
        var size = winsize()
        if ioctl(outputFD, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 {
            return (Int(size.ws_col), Int(size.ws_row))
        }
        return (80, 24)
    }

    /// Writes all of `text` (retrying short writes).
    public func write(_ text: String) {
        Console.write(outputFD, Array(text.utf8))
    }

    /// Whether to use colour: not when `NO_COLOR` is set to anything non-empty
    /// (https://no-color.org) or the terminal is "dumb".
    public static func colorEnabled(_ environment: [String: String]) -> Bool {
        if let value = environment["NO_COLOR"], !value.isEmpty { return false }
        return environment["TERM"] != "dumb"
    }

    // MARK: - Signals

    /// Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGWINCH that write the signal number to
    /// a pipe; returns the pipe's read end (non-blocking) for the event loop to watch.
    public static func signalPipe() -> Int32? {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return nil }
        for fd in fds {
            // Non-blocking: a flood of signals must never block the handler, nor a drain the loop.
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        signalWriteFD.store(fds[1], ordering: .relaxed)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGWINCH] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                var byte = UInt8(truncatingIfNeeded: number)
                _ = Glibc.write(signalWriteFD.load(ordering: .relaxed), &byte, 1)
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(signal, &action, nil)
        }
        return fds[0]
    }

    /// The signals that arrived since the last call (read from the pipe's read end).
    public static func pendingSignals(_ fd: Int32) -> [Int32] {
        var buffer = [UInt8](repeating: 0, count: 64)
        var signals: [Int32] = []
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { break }
            signals.append(contentsOf: buffer[0..<count].map { Int32($0) })
        }
        return signals
    }
}

/// The signal pipe's write end, for the handler: an atomic, because a handler may only touch
/// lock-free state.
private let signalWriteFD = Atomic<Int32>(-1)

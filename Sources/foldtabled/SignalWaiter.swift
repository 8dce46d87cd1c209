import FoldtableTransport
import Foundation
import Glibc

/// SIGINT and SIGTERM, taken with `sigwait` on a thread of their own. A dispatch signal source
/// arms itself asynchronously: a signal arriving before that was lost (seen in tests sending
/// SIGTERM right after the start line). Blocked in every thread and waited for here, none is.
enum SignalWaiter {
    static func blockStopSignals() {
        var set = stopSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// What to do on the first signal: the transport's thread-safe stop.
    static func stopping(_ handle: LWSTransport.StopHandle) -> @Sendable () -> Void {
        { handle.stop(graceMilliseconds: 2_000) }
    }

    static func start(_ action: @escaping @Sendable () -> Void) {
        let thread = Thread {
            var set = stopSet()
            var number: Int32 = 0
            while sigwait(&set, &number) == 0 {
                action()
            }
        }
        thread.name = "foldtabled-signals"
        thread.start()
    }

    private static func stopSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        return set
    }
}

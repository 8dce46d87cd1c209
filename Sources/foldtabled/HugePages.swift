import FoldtableServer
import Foundation
import Glibc

/// Transparent huge pages for malloc (``ServerConfig/hugePages``): glibc reads its tunables only
/// while the process starts, so when they do not ask for huge pages yet, the server adds
/// `glibc.malloc.hugetlb=1` to `GLIBC_TUNABLES` and runs itself again: same process id,
/// arguments and descriptors, before it has opened anything (see ``MallocTunables``).
enum HugePages {
    /// What the start line reports.
    enum State: String {
        /// malloc asks for huge pages.
        case on
        /// Not asked for (the default), or `GLIBC_TUNABLES` sets the tunable to 0.
        case off
        /// The kernel gives none (THP `never`, or no THP at all), or running again failed.
        case unavailable
    }

    private static let kernelMode = "/sys/kernel/mm/transparent_hugepage/enabled"

    /// Runs the server again with huge pages asked for, when `config` wants them and they are
    /// neither asked for already nor unavailable; returns (without running again) otherwise.
    /// Call before anything is opened or started: whatever was would be lost to the new image.
    static func apply(_ config: ServerConfig) -> State {
        guard config.hugePages else { return .off }
        guard let mode = try? String(contentsOfFile: kernelMode, encoding: .utf8), MallocTunables.kernelGivesHugePages(enabledFile: mode)
        else { return .unavailable }
        let current = getenv(MallocTunables.variable).map { String(cString: $0) }
        guard let wanted = MallocTunables.addingHugePages(to: current) else {
            return MallocTunables.hugePagesValue(in: current) == "0" ? .off : .on
        }
        setenv(MallocTunables.variable, wanted, 1)
        // /proc/self/exe, not argv[0]: argv[0] may be a bare name found through PATH, or a
        // path relative to a directory since left.
        execv("/proc/self/exe", CommandLine.unsafeArgv)
        // Still here: running again failed (no /proc in a sandbox, say). Serve without.
        let reason = String(cString: strerror(errno))
        if let current { setenv(MallocTunables.variable, current, 1) } else { unsetenv(MallocTunables.variable) }
        Log(level: config.logLevel)(.warning, "huge_pages_unavailable", ["reason": reason])
        return .unavailable
    }
}

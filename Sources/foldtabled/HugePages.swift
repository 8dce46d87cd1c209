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
        /// The kernel's THP mode is `always`: huge pages whatever this setting says.
        case kernel
        /// Asked for, but not to be had: THP `never` or absent, the tunable gone after running
        /// again (a privileged process: the loader erases it), or running again failed.
        case unavailable
    }

    private static let kernelModeFile = "/sys/kernel/mm/transparent_hugepage/enabled"
    /// Set for the new image only: a second start that still lacks the tunable serves without
    /// instead of running itself again forever. The loader erases the tunable for a process
    /// started with privileges (setuid, or file capabilities such as `cap_net_bind_service`
    /// run by a user without them), so such a server runs again once, then says `unavailable`.
    private static let ranAgain = "FOLDTABLE_HUGE_PAGES_RAN_AGAIN"

    /// Runs the server again with huge pages asked for, when `config` wants them, the kernel
    /// gives them only on request, and they are not asked for already; returns (without
    /// running again) otherwise. Call before anything is opened or started: whatever was would
    /// be lost to the new image.
    static func apply(_ config: ServerConfig) -> State {
        let ranBefore = getenv(ranAgain) != nil
        unsetenv(ranAgain)
        let mode = (try? String(contentsOfFile: kernelModeFile, encoding: .utf8)).flatMap(MallocTunables.kernelMode(enabledFile:))
        if mode == .always { return .kernel }
        guard config.hugePages else { return .off }
        guard mode == .madvise else { return .unavailable }
        let current = getenv(MallocTunables.variable).map { String(cString: $0) }
        guard let wanted = MallocTunables.addingHugePages(to: current) else {
            return MallocTunables.hugePagesValue(in: current) == "0" ? .off : .on
        }
        guard !ranBefore else { return .unavailable }
        setenv(MallocTunables.variable, wanted, 1)
        setenv(ranAgain, "1", 1)
        // /proc/self/exe, not argv[0]: argv[0] may be a bare name found through PATH, or a
        // path relative to a directory since left.
        execv("/proc/self/exe", CommandLine.unsafeArgv)
        // Still here: running again failed (no /proc in a sandbox, say). Serve without.
        let reason = String(cString: strerror(errno))
        unsetenv(ranAgain)
        if let current { setenv(MallocTunables.variable, current, 1) } else { unsetenv(MallocTunables.variable) }
        Log(level: config.logLevel)(.warning, "huge_pages_unavailable", ["reason": reason])
        return .unavailable
    }
}

/// glibc's malloc settings as the `GLIBC_TUNABLES` environment variable spells them, for asking
/// malloc to back the heap with transparent huge pages (`glibc.malloc.hugetlb=1`).
///
/// Why the server wants them: at a thousand busy sessions its working set is hundreds of MB
/// touched at random (every session's table, change-id window and journal index, every
/// connection's state), so with 4 KiB pages nearly every such access also misses the TLB, and
/// in a virtual machine a TLB miss walks two page tables. glibc reads its tunables once, when
/// the process starts, so `foldtabled` sets this variable and runs itself again (see
/// ``ServerConfig/hugePages``). Pure, so the rules are tested without starting processes.
///
/// The variable is read by the dynamic loader, which erases this tunable for a process started
/// with more privileges than its parent (setuid, or file capabilities such as
/// `cap_net_bind_service`): asking again cannot work there, so `foldtabled` asks once.
enum MallocTunables {
    /// The environment variable glibc's dynamic loader reads its tunables from.
    static let variable = "GLIBC_TUNABLES"
    /// The tunable: 1 = `madvise(MADV_HUGEPAGE)` on the memory malloc takes from the kernel.
    static let hugePagesTunable = "glibc.malloc.hugetlb"

    /// The value `hugePagesTunable` has in `tunables` (a `GLIBC_TUNABLES` value: `name=value`
    /// items separated by colons), `nil` when it is not there. The last one counts, as in glibc.
    static func hugePagesValue(in tunables: String?) -> String? {
        guard let tunables else { return nil }
        var value: String?
        for item in tunables.split(separator: ":") {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, parts[0] == hugePagesTunable { value = String(parts[1]) }
        }
        return value
    }

    /// `tunables` with huge pages asked for and its other items kept; `nil` when it already
    /// names the tunable, whatever its value: an operator who set it (to 0 as well) has chosen.
    static func addingHugePages(to tunables: String?) -> String? {
        guard hugePagesValue(in: tunables) == nil else { return nil }
        let item = "\(hugePagesTunable)=1"
        guard let tunables, !tunables.isEmpty else { return item }
        return tunables.hasSuffix(":") ? tunables + item : tunables + ":" + item
    }

    /// The kernel's transparent huge page mode.
    enum KernelMode: String, Sendable {
        /// Every large enough anonymous mapping gets huge pages, asked for or not.
        case always
        /// Only memory that asks (`madvise(MADV_HUGEPAGE)`): the one mode in which glibc's
        /// tunable does anything (its malloc skips the call in the others).
        case madvise
        /// None.
        case never
    }

    /// The mode in force from the text of `/sys/kernel/mm/transparent_hugepage/enabled`, where
    /// it is bracketed (`always [madvise] never`); `nil` when the text names none.
    static func kernelMode(enabledFile text: String) -> KernelMode? {
        guard let open = text.firstIndex(of: "["), let close = text[open...].firstIndex(of: "]") else { return nil }
        return KernelMode(rawValue: String(text[text.index(after: open)..<close]))
    }
}

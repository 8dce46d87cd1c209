/// glibc's malloc settings as the `GLIBC_TUNABLES` environment variable spells them, for asking
/// malloc to back the heap with transparent huge pages (`glibc.malloc.hugetlb=1`).
///
/// Why the server wants them: at a thousand busy sessions its working set is hundreds of MB
/// touched at random (every session's table, change-id window and journal index, every
/// connection's state), so with 4 KiB pages nearly every such access also misses the TLB, and
/// in a virtual machine a TLB miss walks two page tables. glibc reads its tunables once, when
/// the process starts, so `foldtabled` sets this variable and runs itself again (see
/// ``ServerConfig/hugePages``). Pure, so the rules are tested without starting processes.
public enum MallocTunables {
    /// The environment variable glibc's dynamic loader reads its tunables from.
    public static let variable = "GLIBC_TUNABLES"
    /// The tunable: 1 = `madvise(MADV_HUGEPAGE)` on the memory malloc takes from the kernel.
    public static let hugePagesTunable = "glibc.malloc.hugetlb"

    /// The value `hugePagesTunable` has in `tunables` (a `GLIBC_TUNABLES` value: `name=value`
    /// items separated by colons), `nil` when it is not there. The last one counts, as in glibc.
    public static func hugePagesValue(in tunables: String?) -> String? {
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
    public static func addingHugePages(to tunables: String?) -> String? {
        guard hugePagesValue(in: tunables) == nil else { return nil }
        let item = "\(hugePagesTunable)=1"
        guard let tunables, !tunables.isEmpty else { return item }
        return tunables.hasSuffix(":") ? tunables + item : tunables + ":" + item
    }

    /// Whether the kernel gives huge pages to memory that asks for them, from the text of
    /// `/sys/kernel/mm/transparent_hugepage/enabled` (the mode in force is bracketed, as in
    /// `always [madvise] never`): not when it is `never`, or the text says no mode.
    public static func kernelGivesHugePages(enabledFile text: String) -> Bool {
        guard let open = text.firstIndex(of: "["), let close = text[open...].firstIndex(of: "]") else { return false }
        let mode = text[text.index(after: open)..<close]
        return mode == "always" || mode == "madvise"
    }
}

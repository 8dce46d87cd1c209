import Testing

@testable import foldtabled

@Suite struct MallocTunablesTests {
    @Test func asksForHugePagesWhenNoTunablesAreSet() {
        #expect(MallocTunables.addingHugePages(to: nil) == "glibc.malloc.hugetlb=1")
        #expect(MallocTunables.addingHugePages(to: "") == "glibc.malloc.hugetlb=1")
    }

    @Test func keepsTheOperatorsOtherTunables() {
        #expect(
            MallocTunables.addingHugePages(to: "glibc.malloc.tcache_count=100")
                == "glibc.malloc.tcache_count=100:glibc.malloc.hugetlb=1")
        #expect(MallocTunables.addingHugePages(to: "glibc.malloc.arena_max=2:") == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
    }

    @Test func leavesAnOperatorsOwnHugePagesChoiceAlone() {
        #expect(MallocTunables.addingHugePages(to: "glibc.malloc.hugetlb=0") == nil)
        #expect(MallocTunables.addingHugePages(to: "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2") == nil)
        #expect(MallocTunables.hugePagesValue(in: "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2") == "2")
    }

    @Test func readsTheLastValueAsGlibcDoes() {
        #expect(MallocTunables.hugePagesValue(in: "glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0") == "0")
        #expect(MallocTunables.hugePagesValue(in: "glibc.malloc.hugetlbx=1") == nil)
        #expect(MallocTunables.hugePagesValue(in: nil) == nil)
    }

    @Test func readsTheKernelsModeFromItsBracketedChoice() {
        #expect(MallocTunables.kernelMode(enabledFile: "always [madvise] never\n") == .madvise)
        #expect(MallocTunables.kernelMode(enabledFile: "[always] madvise never\n") == .always)
        #expect(MallocTunables.kernelMode(enabledFile: "always madvise [never]\n") == .never)
        #expect(MallocTunables.kernelMode(enabledFile: "") == nil)
        #expect(MallocTunables.kernelMode(enabledFile: "always madvise never") == nil)
        #expect(MallocTunables.kernelMode(enabledFile: "always [sometimes] never") == nil)
    }
}

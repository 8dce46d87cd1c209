import Glibc

/// The process's resident set size, for the memory budget and `/metrics`: the second field of
/// `/proc/self/statm` (pages) times the page size. Read fresh each time (a few microseconds):
/// a join storm is exactly when a stale figure would let the process past its budget.
enum ResidentMemory {
    static func bytes() -> Int {
        let fd = open("/proc/self/statm", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { return 0 }
        let fields = buffer[..<count].split(separator: UInt8(ascii: " "))
        guard fields.count >= 2, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}

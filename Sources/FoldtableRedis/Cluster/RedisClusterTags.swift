import Synchronization

/// A hash tag for each slot: the first of `b0`, `b1`, ... that hashes into it, found once per
/// slot and kept. Every node finds the same tag for the same slot, so keys that must live on a
/// given master (its bell) are named alike everywhere.
enum RedisClusterTags {
    private static let found = Mutex<[Int: String]>([:])

    static func tag(for slot: Int) -> String {
        if let known = found.withLock({ $0[slot] }) { return known }
        // About 16,384 tries on average (CRC16 spreads short strings evenly); bounded, so a slot
        // out of range ends the search instead of a loop.
        var tag = "b0"
        for n in 0..<2_000_000 {
            let candidate = "b\(n)"
            if RedisHashSlot.slot(of: candidate) == slot {
                tag = candidate
                break
            }
        }
        found.withLock { $0[slot] = tag }
        return tag
    }
}

/// The index of a table's change-id window: for each id, its slot in the window's ring
/// (``Table/RememberedChange`` entries, which hold the ids themselves).
///
/// Open addressing with linear probing. Each bucket holds the ring slot and 32 bits of the id's
/// hash, so a probe reads nothing but the buckets: an id not in the window (every new change)
/// is found absent in one cache line, and removing the oldest id shifts its cluster back by the
/// hashes in the buckets. Reading each probed slot's hash from an array beside the ring cost a
/// cache miss a probe (~4 a lookup at a full window), 3.5% of a service thread acknowledging
/// 100,000 changes a second across 1,000 busy sessions. A `[String: (seq, digest)]` dictionary
/// before that hashed every id it held again each time it grew, and held a second copy of every
/// id. Hashes are `String.hashValue`, seeded per process, so ids a client picks cannot be made
/// to collide on purpose.
struct ChangeIdIndex: Sendable {
    /// Per bucket: 0 when empty, else the low 32 bits of the id's hash (high half) and its ring
    /// slot plus one (low half). A power of two long, at most 2³¹, or empty.
    private var buckets: [UInt64] = []
    /// The low 32 bits of the hash of the id in each ring slot, as far as the ring has slots:
    /// what finds the bucket of the oldest id, which is forgotten in ring order.
    private var hashes: [UInt32] = []
    /// Ids indexed.
    private(set) var count = 0

    /// The ring slot of `id` (whose `hashValue` is `hash`), if indexed.
    func slot(of id: String, hash: Int, in ring: [Table.RememberedChange]) -> Int? {
        guard !buckets.isEmpty else { return nil }
        let tag = UInt32(truncatingIfNeeded: hash)
        let mask = buckets.count - 1
        var bucket = Int(tag) & mask
        while true {
            let entry = buckets[bucket]
            if entry == 0 { return nil }
            if Self.tag(entry) == tag {
                let slot = Self.slot(entry)
                if ring[slot].id == id { return slot }
            }
            bucket = (bucket + 1) & mask
        }
    }

    /// Indexes ring slot `slot` (the ring's next slot, or one just forgotten) for an id whose
    /// `hashValue` is `hash`.
    mutating func insert(slot: Int, hash: Int) {
        let tag = UInt32(truncatingIfNeeded: hash)
        if slot == hashes.count { hashes.append(tag) } else { hashes[slot] = tag }
        if !Self.holds(count + 1, in: buckets.count) { grow() }
        place(UInt64(tag) << 32 | UInt64(slot + 1))
        count += 1
    }

    /// Takes room for `capacity` ids at once: the buckets they will need and their hashes.
    mutating func reserve(_ capacity: Int) {
        hashes.reserveCapacity(capacity)
        var size = Swift.max(16, buckets.count)
        while !Self.holds(capacity, in: size) { size *= 2 }
        if size > buckets.count { rehash(into: size) }
    }

    /// Forgets ring slot `slot` (indexed), before the ring reuses it.
    mutating func remove(slot: Int) {
        let mask = buckets.count - 1
        let entry = UInt64(hashes[slot]) << 32 | UInt64(slot + 1)
        var hole = Int(hashes[slot]) & mask
        while buckets[hole] != entry { hole = (hole + 1) & mask }
        // Backward shift: each entry after the hole, up to the next empty bucket, moves into
        // the hole when that keeps it at or after its own bucket, so lookups never stop early.
        var next = (hole + 1) & mask
        while buckets[next] != 0 {
            let home = Int(Self.tag(buckets[next])) & mask
            if (next &- home) & mask >= (next &- hole) & mask {
                buckets[hole] = buckets[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        buckets[hole] = 0
        count -= 1
    }

    private static func tag(_ entry: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: entry >> 32) }

    private static func slot(_ entry: UInt64) -> Int { Int(truncatingIfNeeded: entry & 0xFFFF_FFFF) - 1 }

    private mutating func place(_ entry: UInt64) {
        let mask = buckets.count - 1
        var bucket = Int(Self.tag(entry)) & mask
        while buckets[bucket] != 0 { bucket = (bucket + 1) & mask }
        buckets[bucket] = entry
    }

    /// Whether `size` buckets may hold `ids`: at most three quarters full, so that probes stay
    /// short.
    private static func holds(_ ids: Int, in size: Int) -> Bool {
        ids * 4 <= size * 3
    }

    /// Doubles the buckets and places every entry again, by the hash it holds.
    private mutating func grow() {
        rehash(into: Swift.max(16, buckets.count * 2))
    }

    private mutating func rehash(into size: Int) {
        let old = buckets
        buckets = [UInt64](repeating: 0, count: size)
        for entry in old where entry != 0 { place(entry) }
    }
}

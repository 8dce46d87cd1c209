/// The index of a table's change-id window: for each id, its slot in the window's ring
/// (``Table/RememberedChange`` entries, which hold the ids themselves).
///
/// Open addressing with linear probing, each slot's hash kept beside the ring: growing moves
/// slot numbers without hashing a string, and forgetting the oldest id hashes nothing. A
/// `[String: (seq, digest)]` dictionary hashed every id it held again each time it grew, which
/// while a busy session's window filled cost 500 to 2,400 instructions a change (callgrind),
/// and it held a second copy of every id. Hashes are `String.hashValue`, seeded per process, so
/// ids a client picks cannot be made to collide on purpose.
struct ChangeIdIndex: Sendable {
    /// Per bucket, the ring slot it holds plus one; 0: empty. A power of two long, or empty.
    private var buckets: [Int32] = []
    /// The hash of the id in each ring slot, as far as the ring has slots.
    private var hashes: [Int] = []
    /// Ids indexed.
    private(set) var count = 0

    /// The ring slot of `id` (whose `hashValue` is `hash`), if indexed.
    func slot(of id: String, hash: Int, in ring: [Table.RememberedChange]) -> Int? {
        guard !buckets.isEmpty else { return nil }
        let mask = buckets.count - 1
        var bucket = hash & mask
        while true {
            let entry = Int(buckets[bucket])
            if entry == 0 { return nil }
            if hashes[entry - 1] == hash && ring[entry - 1].id == id { return entry - 1 }
            bucket = (bucket + 1) & mask
        }
    }

    /// Indexes ring slot `slot` (the ring's next slot, or one just forgotten) for an id whose
    /// `hashValue` is `hash`.
    mutating func insert(slot: Int, hash: Int) {
        if slot == hashes.count { hashes.append(hash) } else { hashes[slot] = hash }
        if !Self.holds(count + 1, in: buckets.count) { grow() }
        place(slot)
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
        var hole = hashes[slot] & mask
        while Int(buckets[hole]) != slot + 1 { hole = (hole + 1) & mask }
        // Backward shift: each entry after the hole, up to the next empty bucket, moves into
        // the hole when that keeps it at or after its own bucket, so lookups never stop early.
        var next = (hole + 1) & mask
        while buckets[next] != 0 {
            let home = hashes[Int(buckets[next]) - 1] & mask
            if (next &- home) & mask >= (next &- hole) & mask {
                buckets[hole] = buckets[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        buckets[hole] = 0
        count -= 1
    }

    private mutating func place(_ slot: Int) {
        let mask = buckets.count - 1
        var bucket = hashes[slot] & mask
        while buckets[bucket] != 0 { bucket = (bucket + 1) & mask }
        buckets[bucket] = Int32(truncatingIfNeeded: slot + 1)
    }

    /// Whether `size` buckets may hold `ids`: at most three quarters full, so that probes stay
    /// short.
    private static func holds(_ ids: Int, in size: Int) -> Bool {
        ids * 4 <= size * 3
    }

    /// Doubles the buckets and places every indexed slot again, from its kept hash.
    private mutating func grow() {
        rehash(into: Swift.max(16, buckets.count * 2))
    }

    private mutating func rehash(into size: Int) {
        let old = buckets
        buckets = [Int32](repeating: 0, count: size)
        for entry in old where entry != 0 { place(Int(entry) - 1) }
    }
}

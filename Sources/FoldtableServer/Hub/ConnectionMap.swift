/// A map from connection ids to values: what the hub and each session look their members up in,
/// several times for every message.
///
/// Why not `Dictionary`: it hashes an integer key with seeded SipHash on every lookup, there are
/// several lookups for every change, and an expanding change looks up every member of its
/// session. The seed guards
/// against keys chosen to collide; connection ids are the server's own (one per connection,
/// counted up), never a client's choice, so a multiplicative (Fibonacci) hash spreads them well
/// with no seed. Open addressing with linear probing, at most three quarters full, and
/// backward-shift deletion (no tombstones, so lookups never slow down as members come and go).
struct ConnectionMap<Value> {
    /// Each slot's key plus one; 0 marks an empty slot (so that id 0 is a key like any other).
    private var keys: [UInt64] = []
    /// Each slot's value (`nil` in empty slots).
    private var slots: [Value?] = []
    /// How many keys the map holds.
    private(set) var count = 0

    init() {}

    var isEmpty: Bool { count == 0 }

    /// The values, in no particular order.
    var values: LazyMapSequence<LazyFilterSequence<[Value?]>, Value> {
        slots.lazy.filter { $0 != nil }.map { $0.unsafelyUnwrapped }
    }

    private var mask: Int { keys.count &- 1 }

    /// 64 minus log2 of the capacity: the hash's top bits pick the home slot.
    private var shift: UInt64 { UInt64(64 &- keys.count.trailingZeroBitCount) }

    @inline(__always)
    private func home(_ stored: UInt64) -> Int {
        Int(truncatingIfNeeded: (stored &* 0x9E37_79B9_7F4A_7C15) >> shift)
    }

    /// The slot holding `key`, or the empty slot where it would go.
    @inline(__always)
    private func find(_ key: UInt64) -> (index: Int, found: Bool) {
        guard !keys.isEmpty else { return (0, false) }
        let stored = key &+ 1
        var index = home(stored)
        while true {
            let here = keys[index]
            if here == stored { return (index, true) }
            if here == 0 { return (index, false) }
            index = (index &+ 1) & mask
        }
    }

    /// Whether the map holds `key` (no copy of its value, unlike `map[key] != nil`).
    @inline(__always)
    func contains(_ key: UInt64) -> Bool { find(key).found }

    subscript(key: UInt64) -> Value? {
        // Inlined, so that a caller reading one field of the value copies only that field.
        @inline(__always) get {
            let (index, found) = find(key)
            return found ? slots[index] : nil
        }
        set {
            if let newValue {
                insert(newValue, forKey: key)
            } else {
                removeValue(forKey: key)
            }
        }
        // In place: `map[id]?.held.insert(key)` must not copy the member (and its sets) out and
        // back, which a get and a set would.
        _modify {
            let (index, found) = find(key)
            var value: Value?
            if found { swap(&value, &slots[index]) }
            defer {
                if found {
                    if value != nil { swap(&value, &slots[index]) } else { remove(at: index) }
                } else if let value {
                    insert(value, forKey: key)
                }
            }
            yield &value
        }
    }

    /// Adds `value` for `key`, or replaces the value it had.
    mutating func insert(_ value: Value, forKey key: UInt64) {
        var (index, found) = find(key)
        if found {
            slots[index] = value
            return
        }
        if (count + 1) * 4 > keys.count * 3 {
            grow()
            index = find(key).index
        }
        keys[index] = key &+ 1
        slots[index] = value
        count += 1
    }

    /// Removes `key` and returns its value, if the map held it.
    @discardableResult
    mutating func removeValue(forKey key: UInt64) -> Value? {
        let (index, found) = find(key)
        guard found else { return nil }
        var value: Value?
        swap(&value, &slots[index])
        remove(at: index)
        return value
    }

    /// Empties an occupied slot and moves later keys of its probe run back into the hole, so
    /// that every key stays reachable from its home slot without passing an empty one.
    private mutating func remove(at index: Int) {
        var hole = index
        keys[hole] = 0
        slots[hole] = nil
        count -= 1
        var next = (hole &+ 1) & mask
        while keys[next] != 0 {
            let home = home(keys[next])
            // Movable when its home is not cyclically within (hole, next].
            if (next &- home) & mask >= (next &- hole) & mask {
                keys[hole] = keys[next]
                slots.swapAt(hole, next)
                keys[next] = 0
                hole = next
            }
            next = (next &+ 1) & mask
        }
    }

    private mutating func grow() {
        let capacity = max(8, keys.count * 2)
        var oldKeys = [UInt64](repeating: 0, count: capacity)
        var oldSlots = [Value?](repeating: nil, count: capacity)
        swap(&oldKeys, &keys)
        swap(&oldSlots, &slots)
        for index in oldKeys.indices where oldKeys[index] != 0 {
            var slot = home(oldKeys[index])
            while keys[slot] != 0 { slot = (slot &+ 1) & mask }
            keys[slot] = oldKeys[index]
            swap(&slots[slot], &oldSlots[index])
        }
    }
}

extension ConnectionMap: Sendable where Value: Sendable {}

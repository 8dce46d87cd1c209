import Testing

@testable import FoldtableServer

/// The hub's and sessions' map from connection ids: it must behave as a `Dictionary` would.
struct ConnectionMapTests {
    /// SplitMix64: a seeded generator, so that a failure replays.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    private static func expectSame(_ map: ConnectionMap<Int>, _ reference: [UInt64: Int], keys: ClosedRange<UInt64>) {
        #expect(map.count == reference.count)
        #expect(map.isEmpty == reference.isEmpty)
        for key in keys { #expect(map[key] == reference[key], "key \(key)") }
        #expect(map.values.sorted() == reference.values.sorted())
    }

    @Test(arguments: [1 as UInt64, 2, 3])
    func aMapMatchesADictionaryThroughRandomInsertsRemovalsAndInPlaceChanges(seed: UInt64) {
        var generator = SeededGenerator(state: seed)
        var map = ConnectionMap<Int>()
        var reference: [UInt64: Int] = [:]
        // Few keys, many operations: runs of neighbours probe, collide and are shifted back.
        let keys: ClosedRange<UInt64> = 0...300
        for step in 0..<20_000 {
            let key = UInt64.random(in: keys, using: &generator)
            switch Int.random(in: 0..<5, using: &generator) {
            case 0, 1:
                map[key] = step
                reference[key] = step
            case 2:
                map[key] = nil
                reference[key] = nil
            case 3:
                #expect(map.removeValue(forKey: key) == reference.removeValue(forKey: key))
            default:
                // In place, as `members[id]?.held.insert(key)` is: through `_modify`.
                map[key]? += 1
                reference[key]? += 1
            }
            if step % 1_000 == 0 { Self.expectSame(map, reference, keys: keys) }
        }
        Self.expectSame(map, reference, keys: keys)
    }

    @Test func idsCountedUpFromZeroAreAllFoundAndAllRemoved() {
        var map = ConnectionMap<UInt64>()
        for id in UInt64(0)..<10_000 { map[id] = id * 2 }
        #expect(map.count == 10_000)
        for id in UInt64(0)..<10_000 { #expect(map[id] == id * 2) }
        #expect(map[10_000] == nil)
        // Every other one, then the rest: holes in the middle of probe runs.
        for id in stride(from: UInt64(0), to: 10_000, by: 2) { #expect(map.removeValue(forKey: id) == id * 2) }
        for id in UInt64(0)..<10_000 { #expect(map[id] == (id % 2 == 1 ? id * 2 : nil)) }
        for id in stride(from: UInt64(1), to: 10_000, by: 2) { map[id] = nil }
        #expect(map.isEmpty)
        #expect(Array(map.values).isEmpty)
    }

    @Test func settingAValueToNilInPlaceRemovesItsKey() {
        var map = ConnectionMap<[Int]>()
        map[7] = [1]
        map[8] = [2]
        // An in-place change that ends with no value removes the key, as a Dictionary's does.
        func clear(_ value: inout [Int]?) { value = nil }
        clear(&map[7])
        #expect(map[7] == nil)
        #expect(map.count == 1)
        #expect(map[8] == [2])
        // And one on a missing key that gives it a value adds it.
        func fill(_ value: inout [Int]?) { value = [3] }
        fill(&map[9])
        #expect(map[9] == [3])
        #expect(map.count == 2)
    }

    @Test func aValueChangedInPlaceIsNotCopiedOutAndBack() {
        var map = ConnectionMap<[Int]>()
        var held: [Int] = []
        held.reserveCapacity(64)
        map[42] = held
        held = []
        let before = map[42]!.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
        // A get-and-set would append to a second reference of the buffer and so copy it.
        map[42]?.append(1)
        let after = map[42]!.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
        #expect(before == after)
        #expect(map[42] == [1])
    }
}

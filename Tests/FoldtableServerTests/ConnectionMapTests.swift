import Testing

@testable import FoldtableServer

/// The hub's and sessions' map from connection ids: it must behave as a `Dictionary` would.
struct ConnectionMapTests {
    private static func expectSame(_ map: ConnectionMap<Int>, _ reference: [UInt64: Int], keys: ClosedRange<UInt64>) {
        #expect(map.count == reference.count)
        #expect(map.isEmpty == reference.isEmpty)
        for key in keys { #expect(map[key] == reference[key], "key \(key)") }
        #expect(map.values.sorted() == reference.values.sorted())
    }

    @Test(arguments: [1 as UInt64, 2, 3])
    func aMapMatchesADictionaryThroughRandomInsertsRemovalsAndInPlaceChanges(seed: UInt64) {
        // xorshift64, seeded: a failure replays.
        var state = seed &* 0x9E37_79B9_7F4A_7C15
        func next(_ bound: UInt64) -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state % bound
        }
        var map = ConnectionMap<Int>()
        var reference: [UInt64: Int] = [:]
        // Few keys, many operations: runs of neighbours probe, collide and are shifted back.
        let keys: ClosedRange<UInt64> = 0...300
        for step in 0..<20_000 {
            let key = next(UInt64(keys.count))
            switch next(5) {
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

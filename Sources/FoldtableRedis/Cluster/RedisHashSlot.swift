/// Which of a Redis Cluster's 16,384 hash slots a key lives in, computed as the cluster does
/// (CRC16-CCITT/XMODEM of the key, modulo 16,384), so the node sends each command straight to
/// the shard that owns it instead of learning it from a `MOVED` reply every time.
///
/// A hash tag decides alone when the key has one: the bytes between the first `{` and the first
/// `}` after it, when there is at least one byte between them. That is why every key of a
/// session (`foldtable:{name}:stream`, `…:snapshot`, `…:presence`) lands in one slot, and its
/// scripts, which touch several of them, stay atomic on one shard.
public enum RedisHashSlot {
    /// Slots in a Redis Cluster (fixed by the protocol).
    public static let count = 16_384

    /// The slot of `key`.
    public static func slot(of key: some Collection<UInt8>) -> Int {
        Int(crc16(hashed(key)) & UInt16(count - 1))
    }

    /// The slot of `key` (its UTF-8 bytes).
    public static func slot(of key: String) -> Int {
        slot(of: Array(key.utf8))
    }

    /// The part of `key` that is hashed: its tag when it has a non-empty one, else all of it.
    static func hashed<Key: Collection<UInt8>>(_ key: Key) -> Key.SubSequence {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")) else { return key[...] }
        let after = key.index(after: open)
        guard let close = key[after...].firstIndex(of: UInt8(ascii: "}")), close != after else { return key[...] }
        return key[after..<close]
    }

    /// CRC16-CCITT in its XMODEM form (polynomial 0x1021, initial value 0, no reflection), the
    /// one Redis' `crc16.c` uses: a 256-entry table, one lookup per byte.
    public static func crc16(_ bytes: some Sequence<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
        }
        return crc
    }

    private static let table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 {
            crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
        }
        return crc
    }
}

extension StreamPosition {
    /// The Unix time in milliseconds at which Redis added the entry at `position`
    /// (`<ms>-<seq>`): the commit time of a change ordered by a shared stream, the same on every
    /// node. `nil` for a position without one (``LocalBroker``'s plain numbers).
    static func milliseconds(of position: String) -> UInt64? {
        guard let dash = position.utf8.firstIndex(of: UInt8(ascii: "-")) else { return nil }
        return UInt64(Substring(position.utf8[..<dash]))
    }
}

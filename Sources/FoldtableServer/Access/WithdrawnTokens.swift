/// Token ids (`jti`) withdrawn before their tokens expire, each kept until its token would
/// have expired anyway (plus the verifier's leeway): after that the token is refused for its
/// `exp`, and the id need not be remembered. A pure value: the hub holds one, the
/// ``InviteLedger`` keeps it across restarts (and shares it between nodes under Redis).
///
/// A withdrawal is never refused here: an id the ledger took is refused from then on, whatever
/// the count (a full list must not let a leaked token back in). What bounds the list is minting:
/// no invite is minted while ``hasRoom(now:)`` says no, and each session may hold only so many
/// ids (`InviteDesk`), so the list holds at most about ``maxCount`` ids minted here plus
/// those owners of every session withdraw by hand.
public struct WithdrawnTokens: Equatable, Sendable {
    /// Ten thousand ids of up to 64 bytes: well under a few MiB in memory, SQLite or Redis.
    public static let maxCount = 10_000

    /// Id -> until when it is kept (seconds since 1970).
    public private(set) var until: [String: UInt64] = [:]

    public init() {}

    public var count: Int { until.count }

    /// Whether a token with `id` is refused at `now`.
    public func contains(_ id: String, now: UInt64) -> Bool {
        guard let end = until[id] else { return false }
        return end > now
    }

    /// Whether one more id would fit at `now` (the lapsed ones do not count).
    public func hasRoom(now: UInt64) -> Bool {
        until.count < Self.maxCount || until.values.contains { $0 <= now }
    }

    /// Adds `id` until `end`; a known id keeps the later end. False (nothing added) only when
    /// `end` has passed already (then the token is refused for its expiry and there is nothing
    /// to keep). Lapsed ids are dropped as the list passes ``maxCount``.
    @discardableResult
    public mutating func add(_ id: String, until end: UInt64, now: UInt64) -> Bool {
        guard end > now else { return false }
        if let known = until[id] {
            until[id] = max(known, end)
            return true
        }
        if until.count >= Self.maxCount && (until.count - Self.maxCount) % 256 == 0 { prune(now: now) }
        until[id] = end
        return true
    }

    /// Forgets the ids whose tokens have expired by `now`.
    public mutating func prune(now: UInt64) {
        until = until.filter { $0.value > now }
    }
}

/// Why an ``InviteLedger`` could not do what was asked.
public typealias InviteLedgerError = StoreError

/// Where minted invites and withdrawn token ids are kept between restarts (a port): in the
/// SQLite store by default, in Redis with `--redis` (shared by every node), in memory with
/// `--memory` (lost at exit, like the sessions).
///
/// Every method is called on the service thread and returns at once; completions run later on
/// the service thread. The hub holds the withdrawn ids in memory (``WithdrawnTokens``) to check
/// tokens without waiting: the ledger is read once at start-up and told of every withdrawal.
public protocol InviteLedger: AnyObject {
    /// The withdrawn ids still in force at `now`, id -> until when. Called once at start-up,
    /// before serving: the one call allowed to block.
    func withdrawnTokens(now: UInt64) throws(StoreError) -> [String: UInt64]
    /// Keeps `invite` until it expires.
    func record(_ invite: Invite, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// The session's invites not expired at `now` and not withdrawn, oldest first.
    func invites(session: String, now: UInt64, completion: @escaping (Result<[Invite], StoreError>) -> Void)
    /// Keeps `id` withdrawn until `until` and forgets its invite of `session`, if it was one.
    func withdraw(id: String, session: String, until: UInt64, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// Hands over the ids other nodes withdraw, from now on, as they are heard of (a ledger no
    /// other node writes never calls it).
    func follow(_ withdrawn: @escaping ([String: UInt64]) -> Void)
}

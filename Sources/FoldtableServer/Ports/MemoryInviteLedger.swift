/// An ``InviteLedger`` in memory, for `--memory` and tests: what it holds ends with the
/// process, like the sessions of such a server. Completions are posted to the service queue,
/// never run inside the call, as the port requires.
public final class MemoryInviteLedger: InviteLedger {
    private let queue: ServiceQueue
    private var kept: [String: Invite] = [:]
    private var withdrawn = WithdrawnTokens()
    private let clock: () -> UInt64

    public init(queue: ServiceQueue, clock: @escaping () -> UInt64 = Hub.wallClock) {
        self.queue = queue
        self.clock = clock
    }

    public func withdrawnTokens(now: UInt64) throws(StoreError) -> [String: UInt64] {
        withdrawn.prune(now: now)
        return withdrawn.until
    }

    public func record(_ invite: Invite, completion: @escaping (Result<Void, StoreError>) -> Void) {
        let now = clock()
        kept = kept.filter { $0.value.expires > now }
        kept[invite.id] = invite
        later { completion(.success(())) }
    }

    public func invites(session: String, now: UInt64, completion: @escaping (Result<[Invite], StoreError>) -> Void) {
        let live = kept.values.filter { $0.session == session && $0.expires > now && !withdrawn.contains($0.id, now: now) }
        let sorted = live.sorted { ($0.created, $0.id) < ($1.created, $1.id) }
        later { completion(.success(sorted)) }
    }

    public func withdraw(id: String, session: String, until: UInt64, completion: @escaping (Result<Void, StoreError>) -> Void) {
        kept[id] = nil
        withdrawn.add(id, until: until, now: clock())
        later { completion(.success(())) }
    }

    public func follow(_ withdrawn: @escaping ([String: UInt64]) -> Void) {}

    /// Runs `body` on the service thread after the current call returns.
    private func later(_ body: @escaping () -> Void) {
        let carried = ServiceThreadOnly(body)
        queue.post { carried.value() }
    }
}

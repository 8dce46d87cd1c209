import FoldtableCore

/// Drives a ``StreamOrder``: appends its requests to the session's stream in the ``Broker``,
/// saves its snapshots there, follows the stream (every node's requests come back, in order, as
/// ``SessionInput/sequenced(_:)``) and brings the session back in step after an outage
/// (``resume(afterGap:)``). Owns the stream position: the last entry delivered, where following
/// resumes.
final class StreamOrderDriver: OrderDriver {
    /// The ordering that made this driver (it holds the drivers of resident sessions).
    private weak var ordering: StreamOrdering?
    private let broker: Broker
    private let metrics: Metrics
    /// The request origin of this session's order: its own entries, read back, end their commit clock.
    private let origin: String
    /// The session driven (it holds this driver).
    private weak var session: TableSession?

    /// The stream position of the last request the broker delivered (where following resumes
    /// after an outage), and the number of that entry (``SequencedRequest/number``): what the
    /// broker checks the next entries continue.
    private(set) var deliveredPosition = ""
    private var deliveredNumber: UInt64?
    /// Counts resumes of this session: only the answer to the latest counts (the broker may
    /// flap, and an earlier answer was computed from an older position).
    private var resumes: UInt64 = 0
    /// What ``availabilityChanged(_:)`` was last told (`nil`: nothing yet).
    private var lastAvailable: Bool?
    /// When each of this order's appends was made (for the commit latency: append to own
    /// apply), by origin number.
    private var appendsMade: [UInt64: MonotonicTime] = [:]
    /// Whether this node wrote the session to the broker first (rather than opened another's).
    let createdHere: Bool

    init(ordering: StreamOrdering, broker: Broker, metrics: Metrics, origin: String, opened: BrokeredSession) {
        self.ordering = ordering
        self.broker = broker
        self.metrics = metrics
        self.origin = origin
        self.createdHere = opened.created
        // Where the snapshot ends; delivering the requests after it (`start`) moves on from there.
        deliveredPosition = opened.position
        deliveredNumber = opened.number
    }

    func attach(_ session: TableSession) { self.session = session }

    func detached() {
        guard let session else { return }
        broker.unfollow(session: session.name)
        ordering?.left(session.name)
    }

    func perform(_ effect: SessionEffect, applied: MonotonicTime?) {
        guard let session else { return }
        switch effect {
        case .append(let request):
            let number = request.origin.number
            appendsMade[number] = MonotonicTime.now
            broker.append(session: session.name, request: request) { [self] result in
                guard let session = self.session else { return }
                switch result {
                case .success(let position): session.handle(.appended(number: number, position: position))
                case .failure(let error):
                    if !error.mayHaveRun { appendsMade[number] = nil }
                    session.handle(.appendFailed(number: number, error))
                }
            }
        case .snapshot(let table, let position, let history):
            broker.saveSnapshot(
                session: session.name, epoch: session.core.epoch, table: table, position: position, history: history,
                keep: ordering?.historyEvents ?? 0)
        default:
            break
        }
    }

    /// Requests read from the stream, in order, into the session; this order's own end their
    /// commit clock.
    private func deliver(_ requests: [SequencedRequest], to session: TableSession) {
        guard let last = requests.last else { return }
        deliveredPosition = last.position
        deliveredNumber = last.number
        if !appendsMade.isEmpty {
            for request in requests where request.origin.node == origin {
                if let start = appendsMade.removeValue(forKey: request.origin.number) {
                    metrics.commitLatency.observe(Metrics.seconds(since: start))
                }
            }
        }
        session.handle(.sequenced(requests))
        // Nothing of this order's waits to be applied: no append time is needed any more.
        if !appendsMade.isEmpty && !session.core.waitsForCatchUp { appendsMade.removeAll(keepingCapacity: true) }
    }

    /// Applies the requests an open or a resume read after the snapshot, then follows the stream
    /// from the last of them.
    func start(with requests: [SequencedRequest]) {
        guard let session else { return }
        if !requests.isEmpty { deliver(requests, to: session) }
        follow()
    }

    /// Follows the stream of the session from the last position delivered to it.
    /// `checked`: whether the broker checks the entries continue `deliveredNumber` (not after a
    /// resume that found the stream continuing although its numbers did not: see `resume`).
    private func follow(checked: Bool = true) {
        guard let session else { return }
        broker.follow(
            session: session.name, after: deliveredPosition, number: checked ? deliveredNumber : nil,
            deliver: { [weak self] requests in
                guard let self, let session = self.session, session.isResident else { return }
                deliver(requests, to: session)
            },
            caughtUp: { [weak self] through in
                // Only a session with requests of its own waiting has anything to settle.
                guard let self, let session = self.session, session.isResident, session.core.waitsForCatchUp else { return }
                session.handle(.caughtUp(through: through))
            },
            fellBehind: { [weak self] in
                // The stream was trimmed past what this node applied: the resume finds that
                // position gone and reloads the session from the snapshot (same epoch).
                guard let self, let session = self.session, session.isResident else { return }
                ordering?.log(.warning, "session_fell_behind", ["session": session.name, "position": deliveredPosition])
                resume(afterGap: true)
            })
    }

    /// The broker became available or not: the session turns writable or read-only, and once
    /// it is back, is brought back in step with its stream.
    func availabilityChanged(_ available: Bool) {
        // Told again with what it was last told (another shard of a cluster changed): nothing new.
        guard let session, available != lastAvailable else { return }
        lastAvailable = available
        session.handle(.brokerAvailable(available))
        if available { resume() }
    }

    /// Asks the broker whether the stream of the session continues from what it was delivered:
    /// then follows on from there (entries other nodes appended meanwhile are applied in
    /// order); else reloads it from what the broker holds (members get a fresh welcome). Should
    /// Redis have lost the session altogether, this node's committed table makes it again, in a
    /// new epoch (the first node to do so wins; the others reload that one).
    ///
    /// `afterGap`: the broker found the entries after the delivered one not numbered on from it.
    /// Should the stream still hold that entry (so nothing was trimmed past it: the numbers
    /// themselves went wrong), following goes on unchecked rather than resuming again forever.
    func resume(afterGap: Bool = false) {
        guard let session else { return }
        guard let ordering else { return }
        let fresh = BrokeredSession(epoch: ordering.makeEpoch(), table: session.core.committedWithChangeIds, position: "", requests: [])
        resumes += 1
        let attempt = resumes
        broker.resume(session: session.name, after: deliveredPosition, epoch: session.core.epoch, create: fresh) { [weak self] result in
            guard let self, let session = self.session, session.isResident, resumes == attempt else { return }
            switch result {
            case .success(nil):
                broker.unfollow(session: session.name)
                follow(checked: !afterGap)
                self.ordering?.log(.info, "session_resumed", ["session": session.name, "position": deliveredPosition])
            case .success(let opened?):
                broker.unfollow(session: session.name)
                metrics.sessionReloads += 1
                session.handle(.reload(epoch: opened.epoch, table: opened.table, position: opened.position, history: opened.history))
                deliveredPosition = opened.position
                deliveredNumber = opened.number
                start(with: opened.requests)
            case .failure(let error):
                self.ordering?.log(.warning, "session_resume_failed", ["session": session.name, "reason": error.description])
                // Tried again at the next reconnect, or in a second while the broker is up.
                if broker.isAvailable(session: session.name) { self.ordering?.resumeLater(session.name) }
            }
        }
    }
}

import FoldtableCore

/// Every session's webhook on this node: each one's ``WebhookState`` driven against the event
/// log (what to deliver), the ``WebhookSender`` (the POSTs), the ``WebhookStore`` (config and
/// cursor) and the hub's timers (retries). Service thread only.
///
/// What a change costs: its commit hands the events it committed to the session's state (one
/// dictionary lookup, none when no webhook is set), which sends them as they are while the
/// receiver keeps up, so no read of the log. Only a webhook that fell behind reads the log, a
/// page at a time ending at the head, so memory per webhook is one page however long the
/// receiver is away. The cursor is saved at most once per ``cursorSaveDelayMs`` per webhook (one
/// write in flight; pauses and resumes at once), riding in the store's group commit: at most
/// that long of acknowledged deliveries is sent again after a crash, which at-least-once allows
/// (receivers tell repeats by `webhook-id`).
public final class Webhooks {
    /// The settings deliveries use (from ``ServerConfig``).
    public struct Settings: Sendable {
        public var limits: WebhookState.Limits
        public var policy: WebhookAddressPolicy
        /// Sessions that may have a webhook on this node (`--webhook-max-sessions`).
        public var maxSessions: Int

        public init(limits: WebhookState.Limits, policy: WebhookAddressPolicy, maxSessions: Int = 1_000) {
            self.limits = limits
            self.policy = policy
            self.maxSessions = maxSessions
        }
    }

    /// What an owner sees of a webhook (never the secret).
    public struct Summary: Sendable, Equatable {
        public var url: String
        public var state: String
        public var delivered: UInt64
        public var backlog: UInt64
        public var failures: Int
        /// How long the receiver has been behind, in milliseconds (0: caught up).
        public var lagMs: UInt64
    }

    /// How long an acknowledged delivery's cursor may wait to be saved, so that a busy webhook
    /// costs one write a second rather than one per change.
    public static let cursorSaveDelayMs: UInt64 = 1_000

    /// What a resume found (the API answers 200, 404 or 409).
    public enum Resumed: Sendable, Equatable {
        case resumed
        case notFound
        case notPaused
    }

    private struct Entry {
        var webhook: StoredWebhook
        var key: [UInt8]
        var state: WebhookState
        /// Tells this entry's completions and timers from those of the state it had before a
        /// resume, or of the entry it replaced: stale ones are ignored.
        var generation: UInt64
        /// Set once when installed: tells this webhook from a later one of the same session.
        var install: UInt64
        var saving = false
        var saveAgain = false
        /// A deferred cursor save is armed.
        var saveArmed = false
    }

    private unowned let hub: Hub
    private let store: WebhookStore
    private let eventLog: EventLog
    private let sender: WebhookSender
    public let settings: Settings
    private var entries: [String: Entry] = [:]
    private var nextGeneration: UInt64 = 1
    /// Random in production, fixed in tests.
    private let jitter: () -> Double

    // Counted here, read by /metrics.
    private(set) var deliveredCount: UInt64 = 0
    private(set) var failedCount: UInt64 = 0
    private(set) var retryCount: UInt64 = 0
    private(set) var refusedCount: UInt64 = 0
    private(set) var pauseCount: UInt64 = 0

    public init(
        hub: Hub, store: WebhookStore, eventLog: EventLog, sender: WebhookSender, settings: Settings,
        jitter: @escaping () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.hub = hub
        self.store = store
        self.eventLog = eventLog
        self.sender = sender
        self.settings = settings
        self.jitter = jitter
        registerMetrics()
    }

    /// Loads the stored webhooks and starts delivering what each one's receiver has not
    /// acknowledged (a restart, `kill -9` included, goes on from the saved cursor).
    public func start() throws(StoreError) {
        // The store drops, before this, rows whose session is gone or has another epoch.
        for webhook in try store.webhooks() {
            guard let secret = try? WebhookSecret(webhook.secret) else {
                hub.log(.error, "webhook_unreadable", ["session": webhook.session])
                continue
            }
            let paused = webhook.paused.flatMap(WebhookState.Pause.init(rawValue:))
            install(webhook, key: secret.key, state: WebhookState(delivered: webhook.delivered, paused: paused, limits: settings.limits))
        }
    }

    // MARK: - From the sessions

    /// Whether `session` has a webhook (its commits then hand their events over).
    func isSet(_ session: String) -> Bool { !entries.isEmpty && entries[session] != nil }

    /// A session's append is durable through `seq`; `events` are the ones it committed, when at
    /// hand (sent without reading the log when the webhook is caught up).
    func committed(_ session: String, through seq: UInt64, events: [TableEvent] = []) {
        guard !entries.isEmpty, var entry = entries[session] else { return }
        let actions = entry.state.committed(through: seq, events: events, now: hub.transport.nowMilliseconds())
        entries[session] = entry
        perform(actions, session)
    }

    /// The session was deleted: its webhook goes with it, row included even when none is held
    /// (a PUT's row written meanwhile must not wait for the next session of that name).
    func sessionDeleted(_ session: String) {
        entries.removeValue(forKey: session)
        store.deleteWebhook(session: session) { _ in }
    }

    // MARK: - From the API

    /// Sets `session`'s webhook; deliveries start with the change after the session's current
    /// one. Completes with the cursor stored (the last change not delivered), or the error to
    /// answer.
    func set(_ session: TableSession, url: WebhookURL, secret: WebhookSecret, completion: @escaping (Result<UInt64, ProtocolError>) -> Void) {
        let name = session.name
        // Replacing a session's own webhook is always allowed; a new one only under the cap.
        guard entries[name] != nil || entries.count < settings.maxSessions else {
            return completion(
                .failure(ProtocolError(.limitReached, "this node already has \(settings.maxSessions) webhooks (--webhook-max-sessions)")))
        }
        let webhook = StoredWebhook(
            session: name, url: url.text, secret: secret.text, epoch: session.core.epoch, delivered: session.core.committed.seq)
        // The webhook replaced stops now: nothing it still has under way (a cursor save, a
        // delivery's reply, a timer) may write its cursor or pause over the new row.
        let replaced = entries[name]
        if replaced != nil { entries[name]?.generation = takeGeneration() }
        store.saveWebhook(webhook) { [weak self] result in
            guard let self else { return }
            switch result {
            case .failure(let error):
                hub.log(.warning, "webhook_save_failed", ["session": name, "reason": error.description])
                // The old row stands: the old webhook goes on from its cursor, nothing under way.
                if let replaced, entries[name]?.install == replaced.install {
                    let state = WebhookState(delivered: replaced.state.delivered, paused: replaced.state.paused, limits: settings.limits)
                    install(replaced.webhook, key: replaced.key, state: state)
                }
                completion(.failure(ProtocolError(.storageUnavailable, "the webhook could not be stored; retry later")))
            case .success:
                // Deleted while the row was written (its delete then removed the row, or the
                // store refused to write it for a session gone): set on nothing.
                guard let held = hub.sessions[name], held.core.epoch == webhook.epoch else {
                    entries.removeValue(forKey: name)
                    store.deleteWebhook(session: name) { _ in }
                    return completion(.failure(ProtocolError(.sessionNotFound, "session \(name) was deleted")))
                }
                install(webhook, key: secret.key, state: WebhookState(delivered: webhook.delivered, paused: nil, limits: settings.limits))
                hub.log(.info, "webhook_set", ["session": name, "host": url.host])
                completion(.success(webhook.delivered))
            }
        }
    }

    /// The session's webhook as an owner sees it, or nil.
    func summary(of session: String) -> Summary? {
        guard let entry = entries[session] else { return nil }
        return Summary(
            url: entry.webhook.url, state: entry.state.paused.map { "paused_\($0.rawValue)" } ?? (entry.state.failures > 0 ? "retrying" : "active"),
            delivered: entry.state.delivered, backlog: entry.state.backlog, failures: entry.state.failures,
            lagMs: entry.state.lagMs(now: hub.transport.nowMilliseconds()))
    }

    /// The URL of every session's webhook (for the export).
    func url(of session: String) -> String? { entries[session]?.webhook.url }

    /// Removes the session's webhook once the store has (on a failure it stays, delivering, as
    /// its row does). Completes with whether there was one, or the error.
    func remove(_ session: String, completion: @escaping (Result<Bool, ProtocolError>) -> Void) {
        let install = entries[session]?.install
        store.deleteWebhook(session: session) { [weak self] result in
            switch result {
            case .success:
                // Not one a PUT set after this delete was written.
                if let self, let install, entries[session]?.install == install { entries.removeValue(forKey: session) }
                completion(.success(install != nil))
            case .failure: completion(.failure(ProtocolError(.storageUnavailable, "the webhook could not be removed; retry later")))
            }
        }
    }

    /// Resumes a paused webhook from the session's current change (`head`); the changes it
    /// missed stay readable through the history API. What was under way when it paused (a
    /// delivery's reply, a read, a timer) no longer counts.
    func resume(_ session: String, head: UInt64) -> Resumed {
        guard var entry = entries[session] else { return .notFound }
        guard entry.state.paused != nil else { return .notPaused }
        let skipped = max(head, entry.state.head) - entry.state.delivered
        let actions = entry.state.resume(head: head)
        entry.generation = takeGeneration()
        entry.saving = false
        entry.saveAgain = false
        entry.saveArmed = false
        entries[session] = entry
        hub.log(.info, "webhook_resumed", ["session": session, "skipped": String(skipped)])
        perform(actions, session, saveNow: true)
        return .resumed
    }

    // MARK: - Driving

    private func takeGeneration() -> UInt64 {
        defer { nextGeneration += 1 }
        return nextGeneration
    }

    private func install(_ webhook: StoredWebhook, key: [UInt8], state: WebhookState) {
        let generation = takeGeneration()
        var entry = Entry(webhook: webhook, key: key, state: state, generation: generation, install: generation)
        let actions = entry.state.start()
        entries[webhook.session] = entry
        perform(actions, webhook.session)
    }

    /// Applies `body` to the entry when it is still generation `generation`.
    private func update(_ session: String, _ generation: UInt64, _ body: (inout WebhookState) -> [WebhookState.Action]) {
        guard var entry = entries[session], entry.generation == generation else { return }
        let actions = body(&entry.state)
        entries[session] = entry
        perform(actions, session)
    }

    /// `saveNow`: a cursor to save is saved at once (a resume), not after ``cursorSaveDelayMs``.
    private func perform(_ actions: [WebhookState.Action], _ session: String, saveNow: Bool = false) {
        guard let entry = entries[session] else { return }
        let generation = entry.generation
        for action in actions {
            switch action {
            case .read(let after, let limit):
                read(session, generation, after: after, limit: limit)
            case .send(let event):
                send(event, entry: entry)
            case .saveCursor:
                if saveNow { saveCursor(session) } else { saveCursorSoon(session, generation) }
            case .retryAfter(let milliseconds):
                retryCount += 1
                hub.afterMilliseconds(milliseconds) { [weak self] in
                    self?.update(session, generation) { $0.retry(now: self?.hub.transport.nowMilliseconds() ?? 0) }
                }
            case .paused(let why):
                pauseCount += 1
                hub.log(.warning, "webhook_paused", ["session": session, "reason": why.rawValue])
                saveCursor(session)
            }
        }
    }

    /// Reads the next page after `after` (the log's history, newest first, turned around).
    private func read(_ session: String, _ generation: UInt64, after: UInt64, limit: Int) {
        let (before, overflow) = after.addingReportingOverflow(UInt64(limit) + 1)
        eventLog.history(session: session, before: overflow ? nil : before, limit: limit) { [weak self] result in
            guard let self else { return }
            let now = hub.transport.nowMilliseconds()
            switch result {
            case .success(let page):
                update(session, generation) { $0.read(page.events.reversed(), now: now) }
            case .failure(.conflict):
                // The session is not stored (deleted meanwhile): nothing to deliver, ever.
                update(session, generation) { $0.read([], now: now) }
            case .failure(let error):
                hub.log(.warning, "webhook_read_failed", ["session": session, "reason": error.description])
                // Tried again later: the store may come back.
                update(session, generation) { $0.readFailed() }
            }
        }
    }

    private func send(_ event: TableEvent, entry: Entry) {
        let session = entry.webhook.session
        let generation = entry.generation
        let seq = event.seq
        let request = WebhookRequest(
            url: entry.webhook.url, id: "\(session)-\(entry.webhook.epoch)-\(seq)", body: Self.body(session: session, event: event), key: entry.key,
            session: session, seq: seq)
        sender.send(request) { [weak self] result in
            guard let self else { return }
            if result.isDelivered {
                deliveredCount += 1
            } else {
                failedCount += 1
                if case .refused = result { refusedCount += 1 }
                hub.log(.warning, "webhook_failed", ["session": session, "seq": String(seq), "reason": result.reason, "detail": Self.detail(result)])
            }
            let now = hub.transport.nowMilliseconds()
            let spread = jitter()
            update(session, generation) { $0.finished(seq: seq, result.isDelivered ? .delivered : .failed, now: now, jitter: spread) }
        }
    }

    private static func detail(_ result: WebhookResult) -> String {
        switch result {
        case .refused(let address, let category): return "address \(address) is \(category.rawValue); list it in --webhook-allow to allow it"
        case .unreachable(let message): return message
        case .answered(let status): return "the receiver answered \(status)"
        case .timedOut: return "no answer in time"
        }
    }

    /// Saves the entry's cursor after ``cursorSaveDelayMs``, with whatever was acknowledged
    /// meanwhile: one write for many deliveries.
    private func saveCursorSoon(_ session: String, _ generation: UInt64) {
        guard var entry = entries[session], !entry.saveArmed else { return }
        entry.saveArmed = true
        entries[session] = entry
        hub.afterMilliseconds(Self.cursorSaveDelayMs) { [weak self] in
            guard let self, var entry = entries[session], entry.generation == generation else { return }
            entry.saveArmed = false
            entries[session] = entry
            saveCursor(session)
        }
    }

    /// Saves the entry's cursor, one write in flight per webhook.
    private func saveCursor(_ session: String) {
        guard var entry = entries[session] else { return }
        guard !entry.saving else {
            entry.saveAgain = true
            entries[session] = entry
            return
        }
        entry.saving = true
        entry.saveAgain = false
        entries[session] = entry
        let generation = entry.generation
        store.saveWebhookCursor(session: session, epoch: entry.webhook.epoch, delivered: entry.state.delivered, paused: entry.state.paused?.rawValue)
        {
            [weak self] result in
            guard let self, var entry = entries[session], entry.generation == generation else { return }
            if case .failure(let error) = result {
                hub.log(.warning, "webhook_cursor_save_failed", ["session": session, "reason": error.description])
            }
            entry.saving = false
            let again = entry.saveAgain
            entries[session] = entry
            if again { saveCursor(session) }
        }
    }

    /// `{"session":NAME,"seq":..,"time":..,"author":{..},"change":{..},"collapsed":{..}}`: the
    /// history API's entry for the event with the session's name in front.
    public static func body(session: String, event: TableEvent) -> [UInt8] {
        var entry = JSONWriter(capacity: 256)
        EventHistory.encode(event, into: &entry)
        var out = JSONWriter(capacity: entry.bytes.count + session.utf8.count + 16)
        out.raw("{\"session\":")
        out.string(session)
        out.byte(UInt8(ascii: ","))
        out.raw(Array(entry.bytes.dropFirst()))
        return out.bytes
    }

    private func registerMetrics() {
        let metrics = hub.metrics
        metrics.counter("foldtable_webhook_deliveries_total", "Webhook POSTs the receiver acknowledged (2xx).") { [unowned self] in
            Double(deliveredCount)
        }
        metrics.counter("foldtable_webhook_failures_total", "Webhook POSTs that failed (non-2xx, timeout, unreachable, refused address).") {
            [unowned self] in Double(failedCount)
        }
        metrics.counter("foldtable_webhook_retries_total", "Webhook retries scheduled after a failure.") { [unowned self] in Double(retryCount) }
        metrics.counter(
            "foldtable_webhook_refused_addresses_total", "Webhook connections refused because the name resolved to an address not allowed."
        ) { [unowned self] in Double(refusedCount) }
        metrics.counter("foldtable_webhook_pauses_total", "Webhooks paused (backlog over its bound, failing too long, log trimmed).") {
            [unowned self] in Double(pauseCount)
        }
        metrics.gauge("foldtable_webhooks", "Sessions with a webhook.") { [unowned self] in Double(entries.count) }
        metrics.gauge("foldtable_webhooks_paused", "Webhooks paused until an owner resumes them.") { [unowned self] in
            Double(entries.values.count { $0.state.paused != nil })
        }
        metrics.gauge("foldtable_webhook_backlog_events", "Committed changes not yet acknowledged by their webhook's receiver, all sessions.") {
            [unowned self] in Double(entries.values.reduce(UInt64(0)) { $0 + $1.state.backlog })
        }
    }
}

/// What the hub needs for invites and withdrawn tokens: the signer that mints, the ledger that
/// keeps, and the withdrawn ids in memory, so a token is checked without waiting for storage.
/// Service thread only.
final class InviteDesk {
    let signer: TokenSigner
    let ledger: InviteLedger
    var withdrawn = WithdrawnTokens()
    /// Tokens refused for a withdrawn id (`/metrics`).
    var refusals: UInt64 = 0
    /// The invites each session withdrew through this node that are still kept withdrawn (id ->
    /// until when): they count against the session's room with its live ones, so an owner
    /// minting and withdrawing in a loop fills only the session's share of the list, never the
    /// room every other session needs to mint. (Forgotten at a restart: then the shared list's
    /// own bound still holds.)
    private var withdrawnBySession: [String: [String: UInt64]] = [:]

    /// Notes that `session` withdrew its invite `id`, kept until `until`.
    func noteWithdrawn(_ id: String, of session: String, until: UInt64) {
        withdrawnBySession[session, default: [:]][id] = until
    }

    /// How many of `session`'s withdrawn invites are still kept at `now` (lapsed ones forgotten).
    func withdrawnCount(of session: String, now: UInt64) -> Int {
        guard let ids = withdrawnBySession[session] else { return 0 }
        let kept = ids.filter { $0.value > now }
        withdrawnBySession[session] = kept.isEmpty ? nil : kept
        return kept.count
    }

    /// Invites one session may have live or withdrawn-and-still-kept at once: a link per person
    /// for a team is a few dozen; past this, minting is refused (`limit_reached`) instead of the
    /// ledger (or the withdrawn list every session shares) growing without bound.
    static let maxLivePerSession = 1_000
    /// Lifetimes an invite may ask for, in seconds: a minute to 90 days (a link that outlives a
    /// quarter should be a token an operator issues on purpose). 7 days when none is asked.
    static let expiresInRange: ClosedRange<Int64> = 60...7_776_000
    static let defaultExpiresIn: Int64 = 604_800
    /// How long an id the server never minted is kept withdrawn (`foldtabled token --jti`,
    /// whose `exp` the server never saw): a year and a month, longer than any token such a
    /// server should hand out. A token that lives longer than that would be accepted again
    /// afterwards; issue long-lived tokens without a `jti` only if that is acceptable.
    static let unknownKeepSeconds: UInt64 = 34_128_000

    init(signer: TokenSigner, ledger: InviteLedger) {
        self.signer = signer
        self.ledger = ledger
    }

    /// A fresh token id: 128 random bits in hex (unguessable: withdrawing needs it).
    static func newId() -> String { Hub.randomTokenId() }
}

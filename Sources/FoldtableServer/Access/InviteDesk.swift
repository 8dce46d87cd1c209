/// What the hub needs for invites and withdrawn tokens: the signer that mints, the ledger that
/// keeps, and the withdrawn ids in memory, so a token is checked without waiting for storage.
/// Service thread only.
final class InviteDesk {
    let signer: TokenSigner
    let ledger: InviteLedger
    var withdrawn = WithdrawnTokens()
    /// Tokens refused for a withdrawn id (`/metrics`).
    var refusals: UInt64 = 0

    /// Invites one session may have live at once: a link per person for a team is a few dozen;
    /// past this, minting is refused (`limit_reached`) instead of the ledger growing without bound.
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

import FoldtableCore

/// One connected client as the hub sees it: before `join`, then a member of one session.
final class ClientState {
    let connection: Connection
    /// The id other members see (`c<connection id>`).
    let clientId: String
    /// The session this client joined, or is waiting to join while it loads.
    var session: TableSession?
    /// Refused messages in a row; reset by an accepted one.
    var consecutiveErrors = 0
    /// The join-deadline timer, until the client joins.
    var joinTimer: UInt64?
    /// True between `join` and the session being ready (loading from the store).
    var joining = false
    /// Messages that came while `joining`, in order: handled once the welcome is sent (or the
    /// join refused), so a change sent right after `join` meets a joined member whether the
    /// session was resident or had to be loaded. Bounded by ``Hub/heldWhileJoiningMax``.
    var heldWhileJoining: [[UInt8]] = []
    var heldWhileJoiningBytes = 0
    /// What the member's token grants (`nil` in open mode).
    var grant: AccessGrant?
    /// What the member may do: the token's role. In open mode nobody is identified, so there is
    /// nobody to reserve options or deletion for: everyone is an owner (today's behaviour).
    var role = Role.owner
    /// Whose change ids this member's are (`ChangeIdScope`): set at join.
    var idScope = ""
    /// The timer for the token's expiry, then for the grace period after it.
    var tokenTimer: UInt64?
    /// Changes allowed now (see ``ServerConfig/changeRatePerSec``).
    var changes: TokenBucket
    /// History pages allowed now: each is a read of the store or a decode of kept events.
    var historyReads: TokenBucket
    /// History pages a member may ask for a second (in a burst of twice as many): a person
    /// paging back reads a handful; a client polling faster is refused, not served.
    static let historyReadsPerSec = 5
    /// False once the transport reported the connection closed: its handle is then dead and
    /// nothing may be sent to it (changes it left waiting are still applied, without replies).
    private(set) var isOpen = true

    init(connection: Connection, changes: TokenBucket) {
        self.connection = connection
        self.clientId = "c\(connection.id)"
        self.changes = changes
        self.historyReads = TokenBucket(ratePerSecond: Self.historyReadsPerSec, burst: 2 * Self.historyReadsPerSec, now: changes.last)
    }

    func markClosed() {
        isOpen = false
    }
}

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
    /// False once the transport reported the connection closed: its handle is then dead and
    /// nothing may be sent to it (changes it left waiting are still applied, without replies).
    private(set) var isOpen = true

    init(connection: Connection) {
        self.connection = connection
        self.clientId = "c\(connection.id)"
    }

    func markClosed() {
        isOpen = false
    }
}

import FoldtableCore

/// One connected client as the hub sees it: before `join`, then a member of one session.
final class ClientState {
    let connection: Connection
    /// The id other members see (`c<connection id>`).
    let clientId: String
    /// Display name, set by `join` and `rename`.
    var name = ""
    private(set) weak var session: TableSession?
    /// Refused messages in a row; reset by an accepted one.
    var consecutiveErrors = 0
    /// The join-deadline timer, until the client joins.
    var joinTimer: UInt64?
    /// Keys of the sections whose row streams this client is in.
    var streams: Set<String> = []
    /// False once the transport reported the connection closed: its handle is then dead and
    /// nothing may be sent to it (changes it left waiting are still applied, without replies).
    private(set) var isOpen = true

    init(connection: Connection) {
        self.connection = connection
        self.clientId = "c\(connection.id)"
    }

    var author: Author { Author(client: clientId, name: name) }

    func markClosed() {
        isOpen = false
        session = nil
    }

    func joined(_ session: TableSession, as name: String) {
        self.session = session
        self.name = name
    }
}

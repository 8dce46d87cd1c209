/// Every WebSocket close code the server sends, in one place (documented in the protocol article
/// and README). 4000-4499: the client may reconnect; 4500-4999: it should not retry unchanged.
public enum CloseCode {
    /// The server is shutting down.
    public static let goingAway = 1001
    /// A binary message where text is expected.
    public static let unsupportedData = 1003
    /// Invalid UTF-8.
    public static let invalidPayload = 1007
    /// A message over the size limit.
    public static let messageTooBig = 1009
    /// The outbound queue passed its cap: the client stopped reading.
    public static let slowConsumer = 4000
    /// No `join` arrived within the join deadline.
    public static let joinTimeout = 4001
    /// The member's token expired and no fresh one came within the grace period: fetch a new
    /// token and reconnect.
    public static let tokenExpired = 4002
    /// Too many refused messages in a row.
    public static let tooManyErrors = 4500
    /// The session was deleted (by a member's `deleteSession`). Joining the same name again
    /// starts a new, empty session with a new epoch, so clients should not rejoin unasked.
    public static let sessionDeleted = 4501
    /// The join's token was missing, forged, expired or not for the session: do not retry with
    /// the same token.
    public static let unauthorized = 4502
}

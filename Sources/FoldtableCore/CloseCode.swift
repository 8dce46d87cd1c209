/// Every WebSocket close code of the protocol and what it means, in one place.
///
/// The server closes with these constants, the terminal client reads ``retries(_:)`` and
/// ``sentence(_:)`` to decide whether to reconnect and what to tell people, the protocol
/// article's "Closes" table lists ``documented`` row by row, and the web client's
/// `web/protocol.js` mirrors it in `CLOSE_CODES`; a unit test fails while the three disagree.
/// The same test holds the other places that spell a code: the terminal client's C layer
/// (`FTWSC_CLOSE_*` in `CFoldtableWSClient.h`, the closes it reports itself) and the banners
/// `web/app.js` words for ``sessionDeleted`` and ``unauthorized``.
///
/// Two ranges:
/// - The application codes, 4000-4999, are the server's own: 4000-4499 mean the client may
///   reconnect, 4500-4999 that it should not retry unchanged.
/// - The standard codes, 1000-1011, are sent by the C WebSocket layer, which defines them
///   (`FTWS_CLOSE_*` in `CFoldtableWS.h`: ``normal`` is `FTWS_CLOSE_NORMAL`, ``goingAway``
///   `FTWS_CLOSE_GOING_AWAY`, ``protocolError`` `FTWS_CLOSE_PROTOCOL`, ``unsupportedData``
///   `FTWS_CLOSE_UNSUPPORTED`, ``abnormal`` `FTWS_CLOSE_ABNORMAL`, ``invalidPayload``
///   `FTWS_CLOSE_BAD_DATA`, ``policyViolation`` `FTWS_CLOSE_POLICY`, ``messageTooBig``
///   `FTWS_CLOSE_TOO_BIG`, ``serverError`` `FTWS_CLOSE_SERVER_ERROR`). They are repeated here,
///   with the same numbers (the unit test reads the header), so that clients and the
///   documentation have one table.
public enum CloseCode {
    /// A normal close (clients close with it; the server does not).
    public static let normal = 1000
    /// The server is shutting down.
    public static let goingAway = 1001
    /// A WebSocket protocol violation.
    public static let protocolError = 1002
    /// A binary message where text is expected.
    public static let unsupportedData = 1003
    /// No close frame was seen (reported locally, never sent).
    public static let abnormal = 1006
    /// Invalid UTF-8.
    public static let invalidPayload = 1007
    /// A policy violation (not used by the server).
    public static let policyViolation = 1008
    /// A message over the size limit.
    public static let messageTooBig = 1009
    /// An internal error of the WebSocket layer.
    public static let serverError = 1011
    /// The outbound queue passed its cap, or a row stream was not taken within the stream
    /// timeout: the client stopped reading.
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
    /// An owner withdrew the token the member joined with (`DELETE .../invites/ID`): it is
    /// refused everywhere from now on.
    public static let tokenWithdrawn = 4503
    /// An owner disconnected the member (`DELETE .../members/CLIENT`). Its token still works
    /// unless it was withdrawn too: a person may come back, a client should not on its own.
    public static let removed = 4504

    /// What one close code means: a row of the protocol article's "Closes" table.
    public struct Meaning: Equatable, Sendable {
        public var code: Int
        /// When the server closes with it, as a clause for people ("the session was deleted").
        public var sentence: String
        /// Whether reconnecting unchanged can help.
        public var retry: Bool
        /// What a client should do.
        public var advice: String

        public init(_ code: Int, _ sentence: String, retry: Bool, advice: String) {
            self.code = code
            self.sentence = sentence
            self.retry = retry
            self.advice = advice
        }
    }

    /// Every code the server closes with, in ascending order: the "Closes" table.
    public static let documented: [Meaning] = [
        Meaning(goingAway, "the server is shutting down", retry: true, advice: "reconnect with backoff and resume"),
        Meaning(
            protocolError, "a WebSocket protocol violation (bad opcode, RSV bits, oversized control frame)", retry: false,
            advice: "fix the client"),
        Meaning(unsupportedData, "a binary message", retry: false, advice: "fix the client"),
        Meaning(invalidPayload, "invalid UTF-8", retry: false, advice: "fix the client"),
        Meaning(messageTooBig, "a message over the size limit", retry: false, advice: "fix the client"),
        Meaning(
            slowConsumer, "too slow: the outbound queue passed its cap, or a row stream was not taken within the stream timeout",
            retry: true, advice: "reconnect and resume"),
        Meaning(joinTimeout, "no join within the join deadline", retry: true, advice: "reconnect"),
        Meaning(
            tokenExpired, "the token expired and no fresh one came within the grace period", retry: true,
            advice: "fetch a new token, reconnect"),
        Meaning(
            tooManyErrors, "too many refused messages in a row (malformed or refused changes alike)", retry: false,
            advice: "do not retry unchanged"),
        Meaning(
            sessionDeleted, "the session was deleted", retry: false,
            advice: "do not rejoin unasked: joining creates a new, empty session"),
        Meaning(
            unauthorized, "the join had no token, or one not valid for the session", retry: false,
            advice: "do not retry with the same token"),
        Meaning(tokenWithdrawn, "an owner withdrew the token", retry: false, advice: "ask an owner for a new link"),
        Meaning(
            removed, "an owner disconnected this member", retry: false,
            advice: "do not reconnect on your own (the token still works unless withdrawn)"),
    ]

    /// The documented meaning of `code`, if it has one.
    public static func meaning(_ code: Int) -> Meaning? {
        documented.first { $0.code == code }
    }

    /// Whether a client should reconnect after a close with `code`: what the table says, and for
    /// codes it does not list, yes except in 4500-4999.
    public static func retries(_ code: Int) -> Bool {
        meaning(code)?.retry ?? !(4500...4999).contains(code)
    }

    /// The close in words for people: the table's sentence, or "closed with code N" for a code
    /// it does not list.
    public static func sentence(_ code: Int) -> String {
        meaning(code)?.sentence ?? "closed with code \(code)"
    }
}

/// Why a message or change was refused: what an `error` reply carries.
///
/// Refusals are values, never crashes: every decoding and validation failure in the core ends up
/// here, with a stable `code` for programs and a sentence naming the field for people.
public struct ProtocolError: Error, Equatable, Sendable {
    /// Stable machine-readable codes, documented in the protocol article.
    public enum Code: String, Sendable, CaseIterable {
        case badJSON = "bad_json"
        case tooDeep = "too_deep"
        case unknownType = "unknown_type"
        case missingField = "missing_field"
        case wrongType = "wrong_type"
        case invalidValue = "invalid_value"
        case tooLong = "too_long"
        case limitReached = "limit_reached"
        case unknownSection = "unknown_section"
        case ambiguousTitle = "ambiguous_title"
        case unknownRow = "unknown_row"
        case duplicateKey = "duplicate_key"
        case idReused = "id_reused"
        case notJoined = "not_joined"
        case alreadyJoined = "already_joined"
        case invalidSession = "invalid_session"
        /// The change could not be made durable (disk full, I/O error, database locked); it was
        /// not applied. Retry later.
        case storageUnavailable = "storage_unavailable"
        /// The HTTP API named a session that does not exist (404).
        case sessionNotFound = "session_not_found"
        /// No token, or a token that is forged, expired, malformed or not for this session.
        case unauthorized = "unauthorized"
        /// The member's role does not allow this (a viewer changing, an editor changing options).
        case forbidden = "forbidden"
        /// Changes came faster than the connection's rate allows; slow down.
        case rateLimited = "rate_limited"
        /// The member's token expired: send a fresh one with `auth` before the grace period ends.
        case tokenExpired = "token_expired"
        /// An imported CSV file cannot be read: its syntax (quotes, line ends, the number of
        /// fields), its encoding (not UTF-8) or its header (an unknown, repeated or missing column).
        /// Problems with what a readable file says use the codes above (`too_long`, ...).
        case invalidCSV = "invalid_csv"
        /// Whether the change was applied cannot be told (it was sent without an id, and the
        /// session was reloaded from shared storage before its answer): read the table before
        /// retrying. Never sent for a change with an id the server still remembers.
        case outcomeUnknown = "outcome_unknown"
        /// `undo`: the sender has no change of its own left to take back (none since the session
        /// was loaded here, or all undone already).
        case nothingToUndo = "nothing_to_undo"
        /// `redo`: nothing the sender undid is left to make again (or it changed something since).
        case nothingToRedo = "nothing_to_redo"
        /// `undo`/`redo`: what the change touched was changed since by someone else (or is gone),
        /// so taking it back would undo their work or surprise them; nothing was changed.
        case undoConflict = "undo_conflict"
    }

    public var code: Code
    /// The offending field, when there is one.
    public var field: String?
    /// One sentence for people.
    public var message: String

    public init(_ code: Code, _ message: String, field: String? = nil) {
        self.code = code
        self.message = message
        self.field = field
    }
}

extension ProtocolError {
    /// The same refusal said of a place in an imported file (`"line 7, column label"`,
    /// `"sections[2].rows[0]"`), with `field` naming it there: the table's own words name the
    /// field of a change, which an importer did not write.
    func at(_ place: String, field: String?) -> ProtocolError {
        ProtocolError(code, "\(place): \(message)", field: field)
    }
}

/// Size limits of one table. Each is a named setting so a server can tune it; a change that
/// would pass one is refused with `limit_reached` or `too_long`, never truncated.
public struct TableLimits: Equatable, Sendable {
    /// Sections in one table. Default 1,000: far more than a person can scan; bounds the size of
    /// a `setAll` event.
    public var maxSections = 1_000
    /// Rows in one section. Default 200,000: twice the largest section the server must stream.
    public var maxRowsPerSection = 200_000
    /// Rows in the whole table. Default 1,000,000: bounds the per-row bookkeeping.
    public var maxRowsPerTable = 1_000_000
    /// Text (titles, details, footers, labels, values) in the whole table, in UTF-8 bytes.
    /// Default 64 MiB: with the row overhead, one session stays within a few hundred MiB however
    /// its rows are filled.
    public var maxTextBytesPerTable = 64 * 1_048_576
    /// Titles, labels, values, detail and footer text, in UTF-8 bytes. Default 1,024.
    public var maxTextBytes = 1_024
    /// Section and row keys, change ids, in UTF-8 bytes. Default 64.
    public var maxKeyBytes = 64
    /// Collapsed/expanded indicators, in UTF-8 bytes. Default 16: they sit beside every header.
    public var maxIndicatorBytes = 16
    /// Largest busy threshold a table may set, in milliseconds. Default 60,000. A table that wants
    /// no busy indicator at all turns `showBusyIndicator` off instead.
    public var maxBusyThresholdMs = 60_000
    /// Largest `titleLines` a table may set. Default 10: a header taller than that is a page, not
    /// a header; 0 (no limit) is always allowed.
    public var maxTitleLines = 10
    /// Change ids remembered for idempotent retries. Default 10,000: covers far more than any
    /// client's offline queue.
    public var idempotencyWindow = 10_000

    public init() {}
}

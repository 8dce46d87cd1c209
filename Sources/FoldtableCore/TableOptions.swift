/// Per-table display and behaviour options, shared by every member of a session.
public struct TableOptions: Equatable, Sendable {
    /// Whether sections added without an explicit state start collapsed. Default off (as in the
    /// original `sectionsInitiallyCollapsed`).
    public var sectionsInitiallyCollapsed = false
    /// Shown on a collapsed header. Default "+".
    public var collapsedIndicator = "+"
    /// Shown on an expanded header. Default "−" (U+2212).
    public var expandedIndicator = "\u{2212}"
    /// At most one section expanded at a time. Default off.
    public var accordion = false
    /// How long work on a section may take before members see it busy, in milliseconds. Default
    /// 500 (the original busy indicator's 0.5 s), at most ``TableLimits/maxBusyThresholdMs``. To
    /// never show it, turn ``showBusyIndicator`` off rather than raising the threshold.
    public var busyThresholdMs = 500
    /// Whether members are told that the server is busy with a section (the original
    /// `showBusyIndicator`). Default on. Off: the server never sends `busy` for this table and
    /// clients show no spinner.
    public var showBusyIndicator = true
    /// Most lines of a section header's title that clients show; a longer title is cut with an
    /// ellipsis (the whole title stays available: to screen readers, on hover). 0 = no limit, the
    /// default (the original header label's `numberOfLines = 0`); at most
    /// ``TableLimits/maxTitleLines``.
    public var titleLines = 0

    public init() {}

    /// Sets every option `patch` gives; validation is the table's (``Table/apply(_:by:changeId:)``).
    public mutating func merge(_ patch: OptionsPatch) {
        if let value = patch.sectionsInitiallyCollapsed { sectionsInitiallyCollapsed = value }
        if let value = patch.collapsedIndicator { collapsedIndicator = value }
        if let value = patch.expandedIndicator { expandedIndicator = value }
        if let value = patch.accordion { accordion = value }
        if let value = patch.busyThresholdMs { busyThresholdMs = value }
        if let value = patch.showBusyIndicator { showBusyIndicator = value }
        if let value = patch.titleLines { titleLines = value }
    }
}

/// A partial update of ``TableOptions``; `nil` keeps the current value.
public struct OptionsPatch: Equatable, Sendable {
    public var sectionsInitiallyCollapsed: Bool?
    public var collapsedIndicator: String?
    public var expandedIndicator: String?
    public var accordion: Bool?
    public var busyThresholdMs: Int?
    public var showBusyIndicator: Bool?
    public var titleLines: Int?

    public init(
        sectionsInitiallyCollapsed: Bool? = nil, collapsedIndicator: String? = nil, expandedIndicator: String? = nil,
        accordion: Bool? = nil, busyThresholdMs: Int? = nil, showBusyIndicator: Bool? = nil, titleLines: Int? = nil
    ) {
        self.sectionsInitiallyCollapsed = sectionsInitiallyCollapsed
        self.collapsedIndicator = collapsedIndicator
        self.expandedIndicator = expandedIndicator
        self.accordion = accordion
        self.busyThresholdMs = busyThresholdMs
        self.showBusyIndicator = showBusyIndicator
        self.titleLines = titleLines
    }

    public var isEmpty: Bool {
        sectionsInitiallyCollapsed == nil && collapsedIndicator == nil && expandedIndicator == nil && accordion == nil
            && busyThresholdMs == nil && showBusyIndicator == nil && titleLines == nil
    }
}

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
    /// 500 (the original busy indicator's 0.5 s).
    public var busyThresholdMs = 500

    public init() {}
}

/// A partial update of ``TableOptions``; `nil` keeps the current value.
public struct OptionsPatch: Equatable, Sendable {
    public var sectionsInitiallyCollapsed: Bool?
    public var collapsedIndicator: String?
    public var expandedIndicator: String?
    public var accordion: Bool?
    public var busyThresholdMs: Int?

    public init(
        sectionsInitiallyCollapsed: Bool? = nil, collapsedIndicator: String? = nil, expandedIndicator: String? = nil,
        accordion: Bool? = nil, busyThresholdMs: Int? = nil
    ) {
        self.sectionsInitiallyCollapsed = sectionsInitiallyCollapsed
        self.collapsedIndicator = collapsedIndicator
        self.expandedIndicator = expandedIndicator
        self.accordion = accordion
        self.busyThresholdMs = busyThresholdMs
    }

    public var isEmpty: Bool {
        sectionsInitiallyCollapsed == nil && collapsedIndicator == nil && expandedIndicator == nil && accordion == nil
            && busyThresholdMs == nil
    }
}

/// What a key press that flips a section asks for, as a state rather than a flip.
///
/// A `toggle` queued while offline is replayed after the reconnect against whatever the table is
/// by then: if someone else collapsed the section meanwhile, the replayed toggle expands it
/// again, undoing their change. So the terminal client sends `set` with the state the user
/// wants, as the page does: the opposite of what the user was last shown or promised, which is
/// the state of their latest press on that section while the server has not answered it yet
/// (pressing twice offline comes back to where it started), else the replica's.
public struct CollapseIntents: Sendable {
    private var latest: [String: (id: String, collapsed: Bool)] = [:]

    public init() {}

    /// The collapsed state a press on `section` asks for. `shown`: the replica's state;
    /// `unanswered`: whether a change id is still waiting for the server's answer.
    public func target(for section: String, shown: Bool, unanswered: (String) -> Bool) -> Bool {
        if let press = latest[section], unanswered(press.id) { return !press.collapsed }
        return !shown
    }

    /// A press on `section` was sent as change `id`, asking for `collapsed`.
    public mutating func record(_ section: String, id: String, collapsed: Bool) {
        latest[section] = (id, collapsed)
    }
}

import FoldtableCore

// MARK: - Private views

// A member may switch to a view of its own: from then on its toggles, sets, expand/collapse-all
// and reveals change only which sections it sees expanded, answered with `viewChanged` and
// broadcast to nobody, while every change to the table itself still reaches it (its events say
// what the shared state is, which clients show as a marker). The room keeps each private view
// (section key -> collapsed) and sends rows for what that view shows, exactly as it does for
// the shared state. A token user's view is kept under its `sub` (`savedViews`), so a reload or
// a reconnect (any device) finds it again; in open mode the client keeps its own. A session on
// one node stores them with its checkpoints, and when it is evicted or the server stops, so
// they survive both; after a crash, changes to views since the last save are lost. A session
// shared through a broker keeps them in each node's memory only.

extension SessionRoom {
    /// Most saved private views a session keeps for members who left.
    static let savedViewsMax = 1_000

    /// Whether `connection` is a member in a private view.
    func isPrivate(_ connection: Connection) -> Bool { members[connection.id]?.view != nil }

    /// Whether `origin` may change the table's options: an owner, or anyone in open mode (no
    /// roles). An undo of an options change made as owner needs it still (a later editor token).
    func mayChangeOptions(_ origin: ChangeOrigin) -> Bool {
        guard case .member(let connection) = origin, let member = members[connection.id] else { return true }
        return member.role == nil || member.role == "owner"
    }

    /// Whose changes `connection` makes (`ChangeIdScope`), if it is a member.
    func scope(of connection: Connection) -> String? { members[connection.id]?.scope }

    /// Switches `connection` to a private view (`start`: states it saved, over the shared ones;
    /// empty: the shared state as it is now) or, with `nil`, back to the shared view. Either
    /// way the member hears which view it is in and gets the rows of what it now shows.
    mutating func setView(_ start: [CollapseEffect]?, of connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        guard let member = members[connection.id] else { return }
        guard let start else {
            if member.view != nil { privateMembers -= 1 }
            members[connection.id]?.view = nil
            // Only when there is one: each change of `savedViews` makes the next save write them.
            if savedViews[member.scope] != nil { savedViews[member.scope] = nil }
            effects.append(.send(OutboundMessage(ServerMessage.view(private: nil)), to: connection))
            sendRowsShown(to: connection, now: now, into: &effects)
            return
        }
        var view = member.view ?? sharedStates()
        for effect in start where view[effect.key] != nil { view[effect.key] = effect.collapsed }
        if member.view == nil { privateMembers += 1 }
        enter(view, for: connection, now: now, into: &effects)
    }

    /// Gives a joining token user the private view it left with.
    mutating func restoreSavedView(of connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        guard !savedViews.isEmpty, let member = members[connection.id], let saved = savedViews[member.scope] else { return }
        var view = sharedStates()
        for (key, collapsed) in saved where view[key] != nil { view[key] = collapsed }
        privateMembers += 1
        enter(view, for: connection, now: now, into: &effects)
    }

    private mutating func enter(_ view: [String: Bool], for connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        members[connection.id]?.view = view
        if let scope = members[connection.id]?.scope { saveView(view, of: scope) }
        effects.append(.send(OutboundMessage(ServerMessage.view(private: ordered(view))), to: connection))
        sendRowsShown(to: connection, now: now, into: &effects)
    }

    /// A collapse change of a member in a private view, applied to that view alone.
    mutating func changeView(_ change: Change, id: String?, of connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        guard var view = members[connection.id]?.view else { return }
        let sent = id.map(ChangeIdScope.id(ofKey:))
        var altered: [String: Bool] = [:]
        func set(_ key: String, _ collapsed: Bool) {
            guard view[key] != collapsed else { return }
            view[key] = collapsed
            altered[key] = collapsed
            // As in the shared view: in accordion mode, expanding one collapses the others.
            if !collapsed && committed.options.accordion {
                for (other, state) in view where other != key && !state {
                    view[other] = true
                    altered[other] = true
                }
            }
        }
        switch change {
        case .toggle(let ref):
            guard let key = resolve(ref, connection, sent, into: &effects) else { return }
            set(key, !(view[key] ?? false))
        case .setCollapsed(let ref, let collapsed):
            guard let key = resolve(ref, connection, sent, into: &effects) else { return }
            set(key, collapsed)
        case .setAll(let collapsed):
            if !collapsed && committed.options.accordion && committed.sections.count > 1 {
                effects.append(
                    .refuse(connection, ProtocolError(.invalidValue, "expand all is not possible in accordion mode", field: "collapsed"), id: sent))
                return
            }
            for section in committed.sections { set(section.key, collapsed) }
        case .reveal(let row):
            guard let key = committed.sectionKey(ofRow: row) else {
                effects.append(.refuse(connection, ProtocolError(.unknownRow, "no row has the key \"\(row.prefix(64))\"", field: "row"), id: sent))
                return
            }
            set(key, false)
        default:
            return
        }
        members[connection.id]?.view = view
        if let scope = members[connection.id]?.scope { saveView(view, of: scope) }
        let delta = committed.sections.compactMap { section in altered[section.key].map { CollapseEffect(key: section.key, collapsed: $0) } }
        effects.append(.send(OutboundMessage(ServerMessage.viewChanged(id: sent, collapsed: delta)), to: connection))
        sendRowsShown(to: connection, now: now, into: &effects)
    }

    /// After a committed event: private views gain the sections it added (in the state the
    /// table gave them) and lose those it removed, and a private view that shows a section
    /// whose rows were replaced gets the new ones.
    mutating func followPrivateViews(_ event: TableEvent, into effects: inout [SessionEffect]) {
        let added = event.addedSections
        let removed = event.removedSections
        let reloaded = event.reloadedSections
        guard !added.isEmpty || !removed.isEmpty || !reloaded.isEmpty else { return }
        // Each view changed in place (no copy of it out and back: O(1) per section an event
        // adds or removes, per private member), and only the reloaded sections looked at.
        for connection in connections where members[connection.id]?.view != nil {
            for key in removed { members[connection.id]?.view?[key] = nil }
            for key in added {
                if let position = committed.position(ofSection: key) { members[connection.id]?.view?[key] = committed.sections[position].collapsed }
            }
            for key in reloaded {
                guard let position = committed.position(ofSection: key), members[connection.id]?.view?[key] == false,
                    members[connection.id].map({ !$0.held.contains(key) && !$0.streams.contains(key) }) ?? false
                else { continue }
                stream(committed.sections[position], to: connection, now: now, into: &effects)
            }
        }
    }

    /// Keeps a token user's view for when it joins again (open mode: the client keeps it).
    mutating func saveView(_ view: [String: Bool], of scope: String) {
        guard scope.hasPrefix("u:"), savedViews[scope] != view else { return }
        if savedViews[scope] == nil && savedViews.count >= Self.savedViewsMax, let any = savedViews.keys.first { savedViews[any] = nil }
        savedViews[scope] = view
    }

    /// Sends `connection` the rows of every section its view (private or shared) shows and it
    /// does not hold or receive yet.
    private mutating func sendRowsShown(to connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        guard let member = members[connection.id] else { return }
        for section in committed.sections {
            let collapsed = member.view?[section.key] ?? section.collapsed
            guard !collapsed, !member.held.contains(section.key), !member.streams.contains(section.key) else { continue }
            stream(section, to: connection, now: now, into: &effects)
        }
    }

    private func sharedStates() -> [String: Bool] {
        var states: [String: Bool] = [:]
        states.reserveCapacity(committed.sections.count)
        for section in committed.sections { states[section.key] = section.collapsed }
        return states
    }

    /// A view in table order.
    private func ordered(_ view: [String: Bool]) -> [CollapseEffect] {
        committed.sections.compactMap { section in view[section.key].map { CollapseEffect(key: section.key, collapsed: $0) } }
    }

    /// The key a private collapse change names (as the table resolves it), or its refusal sent.
    private func resolve(_ ref: SectionRef, _ connection: Connection, _ id: String?, into effects: inout [SessionEffect]) -> String? {
        do {
            return committed.sections[try committed.position(of: ref)].key
        } catch {
            effects.append(.refuse(connection, error, id: id))
            return nil
        }
    }
}

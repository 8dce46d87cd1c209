import FoldtableCore
import Testing

@testable import FoldtableServer

/// Undo and private views in the session core alone: inputs in, effects out.
@Suite struct UndoViewCoreTests {
    let ana = Connection(id: 1)
    let bo = Connection(id: 2)
    let cy = Connection(id: 3)

    func core() throws -> SessionCore {
        let section = Section(key: "s", title: "S", collapsed: true, rows: [Row(key: "r0", label: "zero")])
        let other = Section(key: "t", title: "T")
        var core = SessionCore(
            name: "x", epoch: "e1", table: try Table(options: TableOptions(), sections: [section, other], seq: 0), settings: SessionCore.Settings(),
            order: LocalOrder())
        _ = core.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil, scope: "k:ana"), now: 0)
        _ = core.handle(.join(bo, JoinRequest(session: "x", name: "bo"), role: nil, scope: "k:bo"), now: 0)
        _ = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: "viewer", scope: "u:cy"), now: 0)
        return core
    }

    func persisted(_ effects: [SessionEffect]) -> (events: [LoggedEvent], generation: UInt64)? {
        for case .persist(let events, let generation) in effects { return (events, generation) }
        return nil
    }

    func refusals(_ effects: [SessionEffect]) -> [ProtocolError.Code] {
        effects.compactMap { if case .refuse(_, let error, _) = $0 { return error.code } else { return nil } }
    }

    func sent(_ effects: [SessionEffect], to connection: Connection) -> [String] {
        effects.compactMap { effect -> String? in
            guard case .send(let message, let to) = effect, to == connection else { return nil }
            return String(decoding: message.bytes, as: UTF8.self)
        }
    }

    @Test func anUndoSentBeforeItsChangeCommittedTakesThatChangeBack() throws {
        var core = try core()
        let add = try #require(
            persisted(core.handle(.change(.addRow(section: .key("t"), row: NewRow(key: "n", label: "new")), id: "a1", from: ana), now: 0)))
        // Not committed yet: the undo still finds it (recorded when applied, not when durable).
        let undo = try #require(persisted(core.handle(.undo(redo: false, id: "u1", from: ana), now: 0)))
        #expect(undo.events.map(\.event.seq) == [2])
        guard case .undo(let resolved) = undo.events[0].event.change else {
            Issue.record("not an undo: \(undo.events[0].event.change)")
            return
        }
        #expect(resolved.of == 1)
        #expect(resolved.changes == [.removeRow(row: "n")])
        _ = core.handle(.committed(generation: add.generation, through: 2), now: 0)
        #expect(core.committed.section("t")?.rows.isEmpty == true)
    }

    @Test func anotherMembersChangesAreNotTheirsToUndo() throws {
        var core = try core()
        _ = core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)
        #expect(refusals(core.handle(.undo(redo: false, id: "u1", from: bo), now: 0)) == [.nothingToUndo])
        #expect(refusals(core.handle(.undo(redo: true, id: "r1", from: ana), now: 0)) == [.nothingToRedo])
    }

    @Test func aFailedAppendLeavesNothingToUndo() throws {
        var core = try core()
        let add = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)))
        _ = core.handle(.commitFailed(generation: add.generation, .unavailable("disk full")), now: 0)
        #expect(refusals(core.handle(.undo(redo: false, id: "u1", from: ana), now: 0)) == [.nothingToUndo])
    }

    @Test func aViewerCollapsesOnlyInItsPrivateViewAndNothingIsOrdered() throws {
        var core = try core()
        #expect(refusals(core.handle(.privateChange(.toggle(section: .key("t")), id: "p1", from: cy), now: 0)) == [.forbidden])
        let entered = core.handle(.view(private: true, collapsed: nil, from: cy), now: 0)
        #expect(sent(entered, to: cy) == [#"{"type":"view","mode":"private","collapsed":{"s":true,"t":false}}"#])
        let toggled = core.handle(.privateChange(.toggle(section: .key("s")), id: "u:cy/p2", from: cy), now: 0)
        #expect(persisted(toggled) == nil)
        let messages = sent(toggled, to: cy)
        #expect(messages.first == #"{"type":"viewChanged","id":"p2","collapsed":{"s":false}}"#)
        // s's one row, which cy did not hold (s was collapsed when it joined).
        #expect(messages.count == 1 || messages.dropFirst().allSatisfy { $0.contains("\"rows\"") })
        #expect(core.committed.section("s")?.collapsed == true)
    }

    @Test func aTokenUsersPrivateViewComesBackWhenItJoinsAgain() throws {
        var core = try core()
        _ = core.handle(.view(private: true, collapsed: [CollapseEffect(key: "t", collapsed: true)], from: cy), now: 0)
        _ = core.handle(.leave(cy), now: 0)
        let again = Connection(id: 4)
        let joined = core.handle(.join(again, JoinRequest(session: "x", name: "cy"), role: "viewer", scope: "u:cy"), now: 0)
        #expect(sent(joined, to: again).contains(#"{"type":"view","mode":"private","collapsed":{"s":true,"t":true}}"#))
        // Someone without a token (no `sub`) gets no saved view.
        let other = Connection(id: 5)
        let fresh = core.handle(.join(other, JoinRequest(session: "x", name: "dee"), role: nil, scope: "k:dee"), now: 0)
        #expect(!sent(fresh, to: other).contains { $0.contains("\"view\"") })
    }

    @Test func theHistoryKeepsAtMostItsDepthPerAuthorAndForgetsTheAuthorsIdleLongest() {
        func record(_ seq: UInt64) -> UndoRecord { UndoRecord(seq: seq, kind: "toggle", backward: UndoStep(), forward: UndoStep()) }
        var history = UndoHistory(depth: 2, authors: 4)
        for seq: UInt64 in 1...3 { history.recorded(record(seq), by: "a") }
        history.applied(redo: false, of: 3, by: "a")
        history.applied(redo: false, of: 2, by: "a")
        #expect(history.next(redo: false, of: "a") == nil)  // 1 fell out: two are kept
        #expect(history.next(redo: true, of: "a")?.seq == 2)
        // A new change clears what can be redone.
        history.recorded(record(4), by: "a")
        #expect(history.next(redo: true, of: "a") == nil)
        for (index, author) in ["b", "c", "d"].enumerated() { history.recorded(record(UInt64(5 + index)), by: author) }
        history.recorded(record(9), by: "a")  // a is the most recent again
        history.recorded(record(10), by: "e")  // one too many: the idlest half (b, c) go
        #expect(history.next(redo: false, of: "b") == nil && history.next(redo: false, of: "c") == nil)
        #expect(history.next(redo: false, of: "a")?.seq == 9)
        #expect(history.next(redo: false, of: "e")?.seq == 10)
    }

    @Test func anUndoUnderAnIdUsedForAnotherChangeIsRefusedAsReusedNotAcknowledged() throws {
        var core = try core()
        _ = core.handle(.change(.toggle(section: .key("t")), id: "k:ana/x", from: ana), now: 0)
        #expect(refusals(core.handle(.undo(redo: false, id: "k:ana/x", from: ana), now: 0)) == [.idReused])
        // The same undo sent twice under its own id is one undo, acknowledged again.
        let first = try #require(persisted(core.handle(.undo(redo: false, id: "k:ana/u", from: ana), now: 0)))
        #expect(first.events.count == 1)
        #expect(refusals(core.handle(.undo(redo: false, id: "k:ana/u", from: ana), now: 0)).isEmpty)
        #expect(core.head.seq == 2)
    }

    @Test func anOptionsChangeMadeAsOwnerIsNotUndoneWithAnEditorsToken() throws {
        var core = try core()
        let owner = Connection(id: 7)
        _ = core.handle(.join(owner, JoinRequest(session: "x", name: "oz"), role: "owner", scope: "u:oz"), now: 0)
        _ = core.handle(.change(.setOptions(OptionsPatch(accordion: true)), id: nil, from: owner), now: 0)
        _ = core.handle(.leave(owner), now: 0)
        let editor = Connection(id: 8)
        _ = core.handle(.join(editor, JoinRequest(session: "x", name: "oz"), role: "editor", scope: "u:oz"), now: 0)
        #expect(refusals(core.handle(.undo(redo: false, id: nil, from: editor), now: 0)) == [.forbidden])
        #expect(core.head.options.accordion)
    }

    @Test func aChangeOfMoreRowsThanAnUndoKeepsIsRefusedAsTooLargeAndTheNextUndoGoesOn() throws {
        var core = try core()
        _ = core.handle(.change(.toggle(section: .key("t")), id: nil, from: ana), now: 0)
        let rows = (0...UndoRecord.maxRows).map { NewRow(label: "row \($0)") }
        _ = core.handle(.change(.importRows(section: .key("s"), rows: RowImport(rows: rows)), id: nil, from: ana), now: 0)
        #expect(core.head.section("s")?.rows.count == UndoRecord.maxRows + 1)
        #expect(refusals(core.handle(.undo(redo: false, id: nil, from: ana), now: 0)) == [.limitReached])
        #expect(core.head.section("s")?.rows.count == UndoRecord.maxRows + 1)
        // The toggle before it is what the next undo takes back.
        let next = try #require(persisted(core.handle(.undo(redo: false, id: nil, from: ana), now: 0)))
        guard case .undo(let undo) = next.events[0].event.change else {
            Issue.record("not an undo")
            return
        }
        #expect(undo.of == 1)
    }
}

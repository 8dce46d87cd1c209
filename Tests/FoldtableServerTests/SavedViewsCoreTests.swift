import FoldtableAuth
import FoldtableCore
import Testing

@testable import FoldtableServer

/// Private views as a session stores them: what the core hands a save, when it counts them as
/// unsaved, and that a core opened with stored views gives each back to its user.
@Suite struct SavedViewsCoreTests {
    let cy = Connection(id: 3)

    func table() throws -> Table {
        let section = Section(key: "s", title: "S", collapsed: true, rows: [Row(key: "r0", label: "zero")])
        return try Table(options: TableOptions(), sections: [section, Section(key: "t", title: "T")], seq: 0)
    }

    func core(views: SavedViews = SavedViews(), order: any SessionOrder = LocalOrder()) throws -> SessionCore {
        SessionCore(name: "x", epoch: "e1", table: try table(), savedViews: views, settings: SessionCore.Settings(), order: order)
    }

    func sent(_ effects: [SessionEffect], to connection: Connection) -> [String] {
        effects.compactMap { effect -> String? in
            guard case .send(let message, let to) = effect, to == connection else { return nil }
            return String(decoding: message.bytes, as: UTF8.self)
        }
    }

    @Test func aViewStoredWithTheSessionComesBackToItsUserInACoreOpenedFromIt() throws {
        var before = try core()
        _ = before.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: "viewer", scope: "u:cy"), now: 0)
        _ = before.handle(.view(private: true, collapsed: [CollapseEffect(key: "t", collapsed: true)], from: cy), now: 0)
        _ = before.handle(.privateChange(.toggle(section: .key("s")), id: nil, from: cy), now: 0)
        _ = before.handle(.leave(cy), now: 0)
        // Through the storage form, as a restart reads it.
        let stored = try SavedViews(decoding: before.savedViews.views.encoded())
        #expect(stored == SavedViews(["u:cy": ["s": false, "t": true]]))

        var after = try core(views: stored)
        #expect(!after.viewsUnsaved)
        let again = Connection(id: 4)
        let joined = after.handle(.join(again, JoinRequest(session: "x", name: "cy"), role: "viewer", scope: "u:cy"), now: 0)
        #expect(sent(joined, to: again).contains(#"{"type":"view","mode":"private","collapsed":{"s":false,"t":true}}"#))
        // Finding its view again changes nothing to save.
        #expect(!after.viewsUnsaved)
        // Another user finds none.
        let other = Connection(id: 5)
        let fresh = after.handle(.join(other, JoinRequest(session: "x", name: "dee"), role: "viewer", scope: "u:dee"), now: 0)
        #expect(!sent(fresh, to: other).contains { $0.contains("\"view\"") })
    }

    @Test func viewsAreUnsavedFromAPrivateChangeUntilTheStoreHoldsThatRevision() throws {
        var core = try core()
        _ = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: "viewer", scope: "u:cy"), now: 0)
        #expect(!core.viewsUnsaved)
        _ = core.handle(.view(private: true, collapsed: nil, from: cy), now: 0)
        #expect(core.viewsUnsaved)
        // What a save carries; a private toggle after it is not covered by that save.
        let saved = core.savedViews
        #expect(saved.views == SavedViews(["u:cy": ["s": true, "t": false]]))
        _ = core.handle(.privateChange(.toggle(section: .key("t")), id: nil, from: cy), now: 0)
        core.viewsStored(revision: saved.revision)
        #expect(core.viewsUnsaved)
        core.viewsStored(revision: core.savedViews.revision)
        #expect(!core.viewsUnsaved)
        // Back to the shared view: the saved view goes, and that too is to be saved.
        _ = core.handle(.view(private: false, collapsed: nil, from: cy), now: 0)
        #expect(core.viewsUnsaved)
        #expect(core.savedViews.views == SavedViews())
    }

    @Test func aSessionOrderedByAStreamDoesNotStoreViews() throws {
        var core = try core(order: StreamOrder(node: "n1"))
        _ = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: "viewer", scope: "u:cy"), now: 0)
        _ = core.handle(.view(private: true, collapsed: nil, from: cy), now: 0)
        #expect(core.savedViews.views.byScope["u:cy"] != nil)
        #expect(!core.viewsUnsaved)
    }
}

/// Private views through the hub and its (memory) store: saved when a session is evicted or the
/// hub stops, though no event was logged, and given back from the store.
@Suite struct SavedViewsHubTests {
    let tokens = HMACTokens(secret: Array("a test secret of at least thirty-two bytes".utf8))

    func join(_ h: Harness, _ id: UInt64) {
        h.open(id)
        let token = tokens.sign(user: "ana", name: "ana", sessions: ["demo"], role: .viewer, expires: 1_800_003_600)
        h.say(id, #"{"type":"join","session":"demo","name":"ana","token":"\#(token)"}"#)
    }

    /// Joins as ana, switches to her own view and collapses "mac" in it: the view she then has.
    func privateView(_ h: Harness, _ id: UInt64) throws -> JSONValue {
        join(h, id)
        h.say(id, #"{"type":"view","mode":"private"}"#)
        guard case .object(var states)? = h.transport.messages(id, type: "view").first?["collapsed"] else {
            throw ProtocolError(.invalidValue, "no private view")
        }
        let mac = try #require(states.firstIndex { $0.0 == "mac" })
        h.say(id, #"{"type":"set","section":"mac","collapsed":\#(states[mac].1 == .bool(true) ? "false" : "true"),"id":"p1"}"#)
        #expect(h.transport.messages(id, type: "viewChanged").count == 1)
        states[mac].1 = states[mac].1 == .bool(true) ? .bool(false) : .bool(true)
        return .object(states)
    }

    func storedViews(_ h: Harness) -> SavedViews? {
        var views: SavedViews?
        h.store.load("demo") { views = try? $0.get()?.views }
        h.transport.settle()
        return views
    }

    @Test func aViewChangedWithNoEventIsSavedWhenTheSessionIsEvictedAndGivenBackAfter() throws {
        let h = Harness(verifier: tokens) { $0.idleEvictSecs = 1 }
        let view = try privateView(h, 1)
        h.close(1)
        h.transport.fireTimers()
        #expect(!h.hub.residentSessions.contains("demo"))
        #expect(storedViews(h)?.byScope["u:ana"] != nil)
        join(h, 2)
        #expect(h.transport.messages(2).first?["type"] == .string("welcome"))
        #expect(h.transport.messages(2, type: "view").first?["collapsed"] == view)
    }

    @Test func aStoppingHubSavesViewsThatChangedSinceTheLastSave() throws {
        let h = Harness(verifier: tokens)
        _ = try privateView(h, 1)
        #expect(storedViews(h)?.byScope["u:ana"] == nil)
        h.hub.stop {}
        h.transport.settle()
        #expect(storedViews(h)?.byScope["u:ana"] != nil)
    }
}

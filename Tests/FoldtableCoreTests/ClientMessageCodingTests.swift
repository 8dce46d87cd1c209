import Testing

@testable import FoldtableCore

/// Both directions of the client message codec: what a client encodes, the server decodes back
/// into the same message.
@Suite struct ClientMessageCoding {
    /// At least one message of every case, every change type and every optional field set and
    /// left out.
    static let messages: [ClientMessage] = [
        .join(JoinRequest(session: "demo", name: "ana")),
        .join(JoinRequest(session: "demo", name: "ana b.", since: 17, epoch: "e1c2", token: "eyJ.x.y")),
        .join(JoinRequest(session: "a-b_9", name: "ana", since: 0)),
        .list(token: nil),
        .list(token: "eyJ.x.y"),
        .auth(token: "eyJ.x.y"),
        .rename("bo \"the\" builder ✓"),
        .deleteSession,
        .find(query: "leshan", limit: 50, id: nil),
        .find(query: "Mac \"mini\"\n", limit: 500, id: "find-3"),
        .change(.toggle(section: .key("mac")), id: "k3f9-1"),
        .change(.toggle(section: .title("Province\nSichuan")), id: nil),
        .change(.setCollapsed(section: .key("mac"), collapsed: true), id: "k3f9-3"),
        .change(.setCollapsed(section: .title("Mac"), collapsed: false), id: nil),
        .change(.setAll(collapsed: false), id: "k3f9-4"),
        .change(.setAll(collapsed: true), id: nil),
        .change(.reveal(row: "r204"), id: "k3f9-5"),
        .change(.addSection(NewSection(title: "Watch")), id: nil),
        .change(.addSection(NewSection(key: "w", title: "Watch", detail: "2 items", footer: "Wearables", collapsed: true, index: 1)), id: "k3f9-6"),
        .change(.removeSection(section: .key("s6")), id: "k3f9-7"),
        .change(.removeSection(section: .title("Watch")), id: nil),
        .change(.updateSection(section: .key("s6"), patch: SectionPatch(title: "Watches", footer: .some(nil))), id: "k3f9-8"),
        .change(.updateSection(section: .title("W"), patch: SectionPatch(detail: .some("d"), footer: .some("f"))), id: nil),
        .change(.moveSection(section: .key("s6"), index: 0), id: "k3f9-9"),
        .change(.addRow(section: .key("mac"), row: NewRow(label: "Mac mini", value: "M4", index: 0)), id: "k3f9-10"),
        .change(.addRow(section: .title("Mac"), row: NewRow(key: "mm", label: "Mac mini", detail: "small")), id: nil),
        .change(.removeRow(row: "r10"), id: "k3f9-11"),
        .change(.updateRow(row: "r10", patch: RowPatch(value: "M4 Pro")), id: "k3f9-12"),
        .change(.updateRow(row: "r10", patch: RowPatch(label: "L", detail: .some(nil))), id: nil),
        .change(.moveRow(row: "r10", section: .key("ipad"), index: 2), id: "k3f9-13"),
        .change(.moveRow(row: "r10", section: .title("iPad"), index: nil), id: nil),
        .change(
            .setOptions(
                OptionsPatch(sectionsInitiallyCollapsed: true, collapsedIndicator: "▸", expandedIndicator: "▾", accordion: true, busyThresholdMs: 0)),
            id: "k3f9-14"),
        .change(.setOptions(OptionsPatch(busyThresholdMs: 2_147_483_647)), id: nil),
        .change(
            .importRows(
                section: .key("mac"),
                rows: RowImport(rows: [NewRow(key: "k", label: "Mac \"mini\"", value: "M4", detail: "d"), NewRow(label: "iMac")])),
            id: "k3f9-15"),
        .change(.importRows(section: .title("Mac"), rows: RowImport(rows: [], replace: false)), id: nil),
        .undo(redo: false, id: "k3f9-16"),
        .undo(redo: true, id: nil),
        .view(private: true, collapsed: nil),
        .view(private: true, collapsed: [CollapseEffect(key: "mac", collapsed: false), CollapseEffect(key: "ipad", collapsed: true)]),
        .view(private: false, collapsed: nil),
        .history(before: 120, limit: 20, id: "h1"),
        .history(before: nil, limit: EventHistory.defaultLimit, id: nil),
    ]

    @Test(arguments: messages)
    func decodingTheEncodingGivesTheMessageBack(message: ClientMessage) throws {
        let bytes = message.encoded()
        let (result, _) = ClientMessage.decode(bytes)
        #expect(try result.get() == message, "\(String(decoding: bytes, as: UTF8.self))")
        #expect(!bytes.contains(UInt8(ascii: "\n")), "one line")
    }

    @Test func everyCaseAndChangeTypeIsCovered() {
        var kinds: Set<String> = []
        for message in Self.messages {
            switch message {
            case .join: kinds.insert("join")
            case .list: kinds.insert("list")
            case .auth: kinds.insert("auth")
            case .rename: kinds.insert("rename")
            case .deleteSession: kinds.insert("deleteSession")
            case .find: kinds.insert("find")
            case .history: kinds.insert("history")
            case .change(let change, _): kinds.insert(change.typeName)
            case .undo(let redo, _): kinds.insert(redo ? "redo" : "undo")
            case .view: kinds.insert("view")
            }
        }
        #expect(kinds == Change.typeNames.union(["join", "list", "auth", "rename", "deleteSession", "find", "undo", "redo", "view", "history"]))
    }

    /// The bytes clients sent before the codec moved here, and what the protocol article shows:
    /// the server accepts exactly these.
    @Test func theEncodingIsTheDocumentedBytes() {
        let cases: [(ClientMessage, String)] = [
            (
                .join(JoinRequest(session: "demo", name: "ana", since: 17, epoch: "e1c2", token: "t")),
                #"{"type":"join","session":"demo","name":"ana","token":"t","since":17,"epoch":"e1c2"}"#
            ),
            (.join(JoinRequest(session: "demo", name: "ana")), #"{"type":"join","session":"demo","name":"ana"}"#),
            (.list(token: nil), #"{"type":"list"}"#),
            (.list(token: "t"), #"{"type":"list","token":"t"}"#),
            (.auth(token: "t"), #"{"type":"auth","token":"t"}"#),
            (.rename("ana b."), #"{"type":"rename","name":"ana b."}"#),
            (.deleteSession, #"{"type":"deleteSession"}"#),
            (.undo(redo: false, id: "k3f9-6"), #"{"type":"undo","id":"k3f9-6"}"#),
            (
                .view(private: true, collapsed: [CollapseEffect(key: "mac", collapsed: false)]),
                #"{"type":"view","mode":"private","collapsed":{"mac":false}}"#
            ),
            (.view(private: false, collapsed: nil), #"{"type":"view","mode":"shared"}"#),
            (.find(query: "leshan", limit: 20, id: "find-3"), #"{"type":"find","q":"leshan","limit":20,"id":"find-3"}"#),
            (.history(before: 120, limit: 20, id: "h1"), #"{"type":"history","before":120,"limit":20,"id":"h1"}"#),
            (.change(.toggle(section: .key("mac")), id: "k3f9-1"), #"{"type":"toggle","section":"mac","id":"k3f9-1"}"#),
            (.change(.toggle(section: .title("Mac")), id: nil), #"{"type":"toggle","title":"Mac"}"#),
            (
                .change(.setCollapsed(section: .key("mac"), collapsed: true), id: "k3f9-3"),
                #"{"type":"set","section":"mac","collapsed":true,"id":"k3f9-3"}"#
            ),
            (.change(.setAll(collapsed: false), id: "k3f9-4"), #"{"type":"setAll","collapsed":false,"id":"k3f9-4"}"#),
            (.change(.reveal(row: "r204"), id: "k3f9-5"), #"{"type":"reveal","row":"r204","id":"k3f9-5"}"#),
            (
                .change(.updateRow(row: "r10", patch: RowPatch(value: "M4 Pro")), id: "k3f9-12"),
                #"{"type":"updateRow","row":"r10","set":{"value":"M4 Pro"},"id":"k3f9-12"}"#
            ),
            (
                .change(.moveRow(row: "r10", section: .key("ipad"), index: 2), id: "k3f9-13"),
                #"{"type":"moveRow","row":"r10","section":"ipad","index":2,"id":"k3f9-13"}"#
            ),
            (
                .change(.addRow(section: .key("mac"), row: NewRow(label: "Mac mini", value: "M4", index: 0)), id: "k3f9-10"),
                #"{"type":"addRow","section":"mac","index":0,"row":{"label":"Mac mini","value":"M4"},"id":"k3f9-10"}"#
            ),
        ]
        for (message, text) in cases {
            #expect(String(decoding: message.encoded(), as: UTF8.self) == text)
        }
    }

    @Test func encodeIntoAppendsToWhatIsThere() {
        var out = JSONWriter()
        out.raw("[")
        ClientMessage.deleteSession.encode(into: &out)
        out.raw("]")
        #expect(String(decoding: out.bytes, as: UTF8.self) == #"[{"type":"deleteSession"}]"#)
    }
}

import FoldtableCore
import Testing

@testable import FoldtableClient

@Suite struct ArgumentsTests {
    let url = "ws://127.0.0.1:8080/ws"

    func parse(_ line: [String]) throws(UsageError) -> Command {
        try Arguments.parse(line, environment: ["USER": "ana"])
    }

    func error(_ line: [String]) -> String? {
        do {
            _ = try parse(line)
            return nil
        } catch {
            return error.message
        }
    }

    let options = ConnectOptions(url: ServerURL(tls: false, host: "127.0.0.1", port: 8080, path: "/ws"), session: "demo", name: "ana")

    @Test func everyCommandParses() throws {
        var lobby = options
        lobby.session = nil
        #expect(try parse(["join", url, "demo"]) == .join(options))
        #expect(try parse(["watch", url, "demo"]) == .watch(options))
        #expect(try parse(["list", url]) == .list(lobby))
        #expect(try parse(["get", url, "demo"]) == .get(options, byTitle: false))
        #expect(try parse(["get", url, "demo", "--by-title"]) == .get(options, byTitle: true))
        #expect(try parse(["find", url, "demo", "leshan"]) == .find(options, query: "leshan", limit: 50))
        #expect(try parse(["find", url, "demo", "Mac mini", "--limit", "500"]) == .find(options, query: "Mac mini", limit: 500))
        #expect(try parse(["toggle", url, "demo", "mac"]) == .change(options, .toggle(section: .key("mac")), id: nil))
        #expect(
            try parse(["expand", url, "demo", "--title", "Province\nSichuan"])
                == .change(options, .setCollapsed(section: .title("Province\nSichuan"), collapsed: false), id: nil))
        #expect(
            try parse(["collapse", url, "demo", "--title=Mac"]) == .change(options, .setCollapsed(section: .title("Mac"), collapsed: true), id: nil))
        #expect(try parse(["expand-all", url, "demo"]) == .change(options, .setAll(collapsed: false), id: nil))
        #expect(try parse(["collapse-all", url, "demo"]) == .change(options, .setAll(collapsed: true), id: nil))
        #expect(try parse(["reveal", url, "demo", "sichuan-3"]) == .change(options, .reveal(row: "sichuan-3"), id: nil))
        #expect(try parse(["add-section", url, "demo", "Watch"]) == .change(options, .addSection(NewSection(title: "Watch")), id: nil))
        #expect(
            try parse([
                "add-section", url, "demo", "Watch", "--key", "watch", "--detail", "2 models", "--footer", "Wearables", "--index", "1", "--collapsed",
            ])
                == .change(
                    options,
                    .addSection(NewSection(key: "watch", title: "Watch", detail: "2 models", footer: "Wearables", collapsed: true, index: 1)),
                    id: nil))
        #expect(
            try parse(["add-section", url, "demo", "Watch", "--expanded"])
                == .change(options, .addSection(NewSection(title: "Watch", collapsed: false)), id: nil))
        #expect(
            try parse(["add-row", url, "demo", "mac", "Mac Pro"])
                == .change(options, .addRow(section: .key("mac"), row: NewRow(label: "Mac Pro")), id: nil))
        #expect(
            try parse(["add-row", url, "demo", "--title", "Mac", "Mac Pro", "--value", "M2", "--detail", "tower", "--key", "mp", "--index", "0"])
                == .change(
                    options, .addRow(section: .title("Mac"), row: NewRow(key: "mp", label: "Mac Pro", value: "M2", detail: "tower", index: 0)),
                    id: nil))
        #expect(
            try parse(["update-row", url, "demo", "mac-3", "--value", "M4 Pro"])
                == .change(options, .updateRow(row: "mac-3", patch: RowPatch(value: "M4 Pro")), id: nil))
        #expect(
            try parse(["update-row", url, "demo", "mac-3", "--label", "iMac 24", "--clear-detail"])
                == .change(options, .updateRow(row: "mac-3", patch: RowPatch(label: "iMac 24", detail: .some(nil))), id: nil))
        #expect(
            try parse(["update-row", url, "demo", "mac-3", "--detail", ""])
                == .change(options, .updateRow(row: "mac-3", patch: RowPatch(detail: .some(""))), id: nil))
        #expect(try parse(["remove-row", url, "demo", "mac-3"]) == .change(options, .removeRow(row: "mac-3"), id: nil))
        #expect(
            try parse(["move-row", url, "demo", "mac-3", "ipad", "--index", "2"])
                == .change(options, .moveRow(row: "mac-3", section: .key("ipad"), index: 2), id: nil))
        #expect(
            try parse(["move-row", url, "demo", "mac-3", "--title", "iPad"])
                == .change(options, .moveRow(row: "mac-3", section: .title("iPad"), index: nil), id: nil))
        #expect(
            try parse(["rename-section", url, "demo", "mac", "Macs"])
                == .change(options, .updateSection(section: .key("mac"), patch: SectionPatch(title: "Macs")), id: nil))
        #expect(
            try parse(["rename-section", url, "demo", "--title", "Mac", "Macs"])
                == .change(options, .updateSection(section: .title("Mac"), patch: SectionPatch(title: "Macs")), id: nil))
        #expect(try parse(["options", url, "demo"]) == .options(options))
        #expect(
            try parse([
                "options", url, "demo", "--accordion", "on", "--sections-initially-collapsed=false", "--collapsed-indicator", "▸",
                "--expanded-indicator", "▾", "--busy-threshold-ms", "0",
            ])
                == .change(
                    options,
                    .setOptions(
                        OptionsPatch(
                            sectionsInitiallyCollapsed: false, collapsedIndicator: "▸", expandedIndicator: "▾", accordion: true, busyThresholdMs: 0)),
                    id: nil))
        #expect(
            try parse(["options", url, "demo", "--show-busy-indicator", "off", "--title-lines=2"])
                == .change(options, .setOptions(OptionsPatch(showBusyIndicator: false, titleLines: 2)), id: nil))
        #expect(try parse(["--help"]) == .help)
        #expect(try parse(["help"]) == .help)
    }

    @Test func jsonGoesWithEveryCommandButJoinAndIdWithEveryChange() throws {
        var json = options
        json.json = true
        #expect(try parse(["get", url, "demo", "--json"]) == .get(json, byTitle: false))
        #expect(try parse(["watch", url, "demo", "--json"]) == .watch(json))
        #expect(try parse(["find", "--json", url, "demo", "x"]) == .find(json, query: "x", limit: 50))
        #expect(try parse(["options", url, "demo", "--json"]) == .options(json))
        #expect(try parse(["toggle", url, "demo", "mac", "--json", "--id", "k-1"]) == .change(json, .toggle(section: .key("mac")), id: "k-1"))
        for verb in Arguments.verbs where verb != "join" {
            guard case .some(let message) = error([verb, url, "demo", "--json", "--frobnicate"]) else { continue }
            #expect(message.hasPrefix("unknown option --frobnicate"), "\(verb)")
        }
        let changes: [[String]] = [
            ["toggle", "mac"], ["expand", "mac"], ["collapse", "mac"], ["expand-all"], ["collapse-all"], ["reveal", "r1"],
            ["add-section", "T"], ["add-row", "mac", "L"], ["update-row", "r1", "--value", "v"], ["remove-row", "r1"],
            ["move-row", "r1", "mac"], ["rename-section", "mac", "T"], ["options", "--accordion", "off"],
        ]
        for words in changes {
            let command = try parse([words[0], url, "demo"] + words.dropFirst() + ["--id", "retry-7", "--json"])
            guard case .change(let options, _, let id) = command else {
                Issue.record("\(words[0]) is not a change: \(command)")
                continue
            }
            #expect(id == "retry-7" && options.json, "\(words[0])")
        }
        for verb in ["undo", "redo"] {
            #expect(try parse([verb, url, "demo", "--id", "retry-7", "--json"]) == .undo(json, redo: verb == "redo", id: "retry-7"))
        }
        #expect(Set(changes.map { $0[0] } + ["undo", "redo"]) == Arguments.changeVerbs)
    }
    @Test func optionsGoAnywhereAndTakeTheirValues() throws {
        let command = try parse(["--name", "bo", "join", "wss://example.org/ws", "demo", "--ca", "/tmp/ca.pem", "--insecure", "--timeout", "2.5"])
        guard case .join(let options) = command else {
            Issue.record("not a join: \(command)")
            return
        }
        #expect(options.name == "bo")
        #expect(options.url == ServerURL(tls: true, host: "example.org", port: 443, path: "/ws"))
        #expect(options.caPath == "/tmp/ca.pem")
        #expect(options.insecure)
        #expect(options.timeoutMs == 2_500)
        #expect(try parse(["toggle", url, "demo", "--", "-odd-key"]) != .help)
    }

    @Test func aTokenComesFromTheFlagOrTheEnvironmentAndTheFlagWins() throws {
        guard case .get(let fromFlag, _) = try parse(["get", url, "demo", "--token", "abc.def.ghi"]) else {
            Issue.record("not a get")
            return
        }
        #expect(fromFlag.token == "abc.def.ghi")
        guard case .get(let fromEnvironment, _) = try Arguments.parse(["get", url, "demo"], environment: ["FOLDTABLE_TOKEN": "e.n.v"]),
            case .get(let both, _) = try Arguments.parse(["get", url, "demo", "--token=f.l.g"], environment: ["FOLDTABLE_TOKEN": "e.n.v"])
        else {
            Issue.record("not a get")
            return
        }
        #expect(fromEnvironment.token == "e.n.v")
        #expect(both.token == "f.l.g")
        #expect(error(["get", url, "demo", "--token", "has space"]) != nil)
        #expect(error(["get", url, "demo", "--token", ""]) != nil)
    }

    @Test func theDefaultNameComesFromTheEnvironment() throws {
        #expect(Arguments.defaultName(["USER": "ana"]) == "ana")
        #expect(Arguments.defaultName(["LOGNAME": "bo"]) == "bo")
        #expect(Arguments.defaultName([:]) == "terminal")
        #expect(Arguments.defaultName(["USER": String(repeating: "x", count: 65)]) == "terminal")
    }

    @Test func mistakesAreOneSentenceEach() {
        #expect(error([]) == "no command given (try foldtable --help)")
        #expect(error(["fold", url, "demo"]) == "unknown command \"fold\" (try foldtable --help)")
        #expect(error(["get", url]) == "get needs a URL and a session name")
        #expect(error(["list"]) == "list needs a URL")
        #expect(error(["list", url, "demo"]) == "unexpected argument \"demo\"")
        #expect(error(["toggle", url, "demo"]) == "toggle needs a section key (or --title TITLE)")
        #expect(error(["toggle", url, "demo", "mac", "--title", "Mac"]) == "give a section key or --title, not both")
        #expect(error(["toggle", url, "demo", ""]) == "the section key is empty")
        #expect(error(["expand", url, "demo", "--title", ""]) == "--title needs a title")
        #expect(error(["get", url, "demo", "extra"]) == "unexpected argument \"extra\"")
        #expect(error(["get", url, "demo", "--verbose"]) == "unknown option --verbose (try foldtable --help)")
        #expect(error(["get", url, "demo", "--name"]) == "--name needs a value")
        #expect(error(["get", url, "demo", "--name", ""]) == "--name must be 1 to 64 bytes on one line")
        #expect(error(["get", url, "demo", "--timeout", "soon"]) == "--timeout must be a number of seconds from 0 to 3600, not \"soon\"")
        #expect(error(["toggle", url, "demo", "mac", "--by-title"]) == "--by-title only goes with get")
        #expect(
            error(["get", url, "demo", "--title", "Mac"]) == "--title only goes with toggle, expand, collapse, add-row, move-row and rename-section")
        #expect(error(["get", url, "de mo"]) == "bad session name \"de mo\": 1 to 64 letters, digits, _ or -")
        #expect(error(["get", url, "demo", "--ca", "/x.pem"]) == "--ca only applies to wss:// URLs (/x.pem)")
        #expect(error(["get", "http://127.0.0.1:8080/", "demo"])?.hasPrefix("bad URL") == true)
        #expect(error(["get", url, "demo", "--json=yes"]) == "--json takes no value")
    }

    @Test func mistakesInTheNewCommandsAreOneSentenceEach() {
        let cases: [([String], String)] = [
            (["join", url, "demo", "--json"], "--json does not go with join (it is interactive)"),
            (["get", url, "demo", "--id", "x"], "--id only goes with commands that change the table"),
            (["find", url, "demo", "--id", "x", "q"], "--id only goes with commands that change the table"),
            (["toggle", url, "demo", "mac", "--id", ""], "--id must be 1 to 64 bytes on one line"),
            (["toggle", url, "demo", "mac", "--id", String(repeating: "x", count: 65)], "--id must be 1 to 64 bytes on one line"),
            (["find", url, "demo"], "find needs the text to find"),
            (["find", url, "demo", ""], "the text to find must be 1 to 256 bytes"),
            (["find", url, "demo", String(repeating: "x", count: 257)], "the text to find must be 1 to 256 bytes"),
            (["find", url, "demo", "x", "--limit", "0"], "--limit must be a number from 1 to 500, not \"0\""),
            (["find", url, "demo", "x", "--limit", "501"], "--limit must be a number from 1 to 500, not \"501\""),
            (["find", url, "demo", "x", "y"], "unexpected argument \"y\""),
            (["reveal", url, "demo"], "reveal needs a row key"),
            (["reveal", url, "demo", ""], "the row key is empty"),
            (["add-section", url, "demo"], "add-section needs a title"),
            (["add-section", url, "demo", "W", "--collapsed", "--expanded"], "give --collapsed or --expanded, not both"),
            (["add-section", url, "demo", "W", "--index", "-1"], "--index must be a whole number from 0 to 2147483647, not \"-1\""),
            (["add-section", url, "demo", "W", "--index", "two"], "--index must be a whole number from 0 to 2147483647, not \"two\""),
            (["add-section", url, "demo", "W", "--key", ""], "--key needs a key"),
            (["add-section", url, "demo", "W", "--value", "v"], "--value only goes with add-row and update-row"),
            (["add-section", url, "demo", "--title", "W"], "--title only goes with toggle, expand, collapse, add-row, move-row and rename-section"),
            (["add-row", url, "demo", "mac"], "add-row needs a section key (or --title TITLE) and a label"),
            (["add-row", url, "demo", "--title", "Mac"], "add-row needs a section key (or --title TITLE) and a label"),
            (["add-row", url, "demo", "mac", "L", "--title", "Mac"], "give a section key or --title, not both"),
            (["add-row", url, "demo", "mac", "L", "--footer", "f"], "--footer only goes with add-section"),
            (["update-row", url, "demo", "r1"], "update-row needs --label, --value, --detail or --clear-detail"),
            (["update-row", url, "demo", "r1", "--detail", "d", "--clear-detail"], "give --detail or --clear-detail, not both"),
            (["update-row", url, "demo", "--value", "v"], "update-row needs a row key"),
            (["remove-row", url, "demo"], "remove-row needs a row key"),
            (["remove-row", url, "demo", "r1", "r2"], "unexpected argument \"r2\""),
            (["move-row", url, "demo", "r1"], "move-row needs a row key and a section key (or --title TITLE)"),
            (["move-row", url, "demo", "r1", "mac", "--index", "x"], "--index must be a whole number from 0 to 2147483647, not \"x\""),
            (["rename-section", url, "demo", "mac"], "rename-section needs a section key (or --title TITLE) and the new title"),
            (["rename-section", url, "demo", "--title", "Mac"], "rename-section needs a section key (or --title TITLE) and the new title"),
            (["options", url, "demo", "--accordion", "maybe"], "--accordion must be on or off, not \"maybe\""),
            (["options", url, "demo", "--show-busy-indicator", "1"], "--show-busy-indicator must be on or off, not \"1\""),
            (["options", url, "demo", "--title-lines", "-1"], "--title-lines must be a whole number from 0 to 2147483647, not \"-1\""),
            (["options", url, "demo", "--busy-threshold-ms", "-5"], "--busy-threshold-ms must be a whole number from 0 to 2147483647, not \"-5\""),
            (["options", url, "demo", "--id", "x"], "--id needs a setting to change (options without settings only prints them)"),
            (["options", url, "demo", "extra"], "unexpected argument \"extra\""),
            (["toggle", url, "demo", "mac", "--accordion", "on"], "--accordion only goes with options"),
            (["get", url, "demo", "--limit", "5"], "--limit only goes with find and history"),
            (["toggle", url, "demo", "mac", "--clear-detail=1"], "--clear-detail takes no value"),
        ]
        for (line, message) in cases {
            #expect(error(line) == message, "\(line)")
        }
    }

    @Test func helpListsEveryCommandWithAnExample() {
        let lines = Arguments.usage.split(separator: "\n")
        for verb in Arguments.verbs {
            #expect(lines.contains { $0.hasPrefix("  \(verb) URL") }, "\(verb) is not listed")
            #expect(lines.contains { $0.hasPrefix("      foldtable \(verb) ws://") }, "\(verb) has no example")
        }
        #expect(lines.allSatisfy { $0.count <= 104 })
    }

    @Test func urlsAreCheckedStrictly() throws {
        #expect(try ServerURL.parse("ws://127.0.0.1:8080/ws") == ServerURL(tls: false, host: "127.0.0.1", port: 8080, path: "/ws"))
        #expect(try ServerURL.parse("WSS://Example.org") == ServerURL(tls: true, host: "Example.org", port: 443, path: "/ws"))
        #expect(try ServerURL.parse("ws://[::1]:9000/ws?x=1") == ServerURL(tls: false, host: "::1", port: 9000, path: "/ws?x=1"))
        #expect(try ServerURL.parse("ws://host:80/").description == "ws://host/")
        #expect(try ServerURL.parse("ws://[::1]:9000/ws").description == "ws://[::1]:9000/ws")
        let bad: [(String, String)] = [
            ("127.0.0.1:8080/ws", "it must start with ws:// or wss://"),
            ("ftp://host/ws", "it must start with ws:// or wss://"),
            ("https://host/ws", "use ws:// or wss:// (the WebSocket endpoint, e.g. ws://host:8080/ws)"),
            ("ws:///ws", "the host is missing"),
            ("ws://host:0/ws", "the port must be a number from 1 to 65535"),
            ("ws://host:99999/ws", "the port must be a number from 1 to 65535"),
            ("ws://host:http/ws", "the port must be a number from 1 to 65535"),
            ("ws://user@host/ws", "user names and passwords are not supported"),
            ("ws://ho st/ws", "it contains spaces or control characters"),
            ("ws://host/ws#top", "it must not have a #fragment"),
            ("ws://[::1/ws", "an IPv6 address lacks its closing ]"),
            ("ws://hö/ws", "\"hö\" is not a host name"),
        ]
        for (text, why) in bad {
            #expect(throws: UsageError("bad URL \"\(text)\": \(why)")) { try ServerURL.parse(text) }
        }
    }

    @Test func backoffGrowsExponentiallyWithJitterUpToItsCap() {
        let backoff = ReconnectBackoff(baseMs: 400, maxMs: 10_000)
        #expect(backoff.delayMs(attempt: 0, random: 1) == 400)
        #expect(backoff.delayMs(attempt: 0, random: 0) == 300)
        #expect(backoff.delayMs(attempt: 3, random: 1) == 3_200)
        #expect(backoff.delayMs(attempt: 10, random: 1) == 10_000)
        #expect(backoff.delayMs(attempt: 1_000, random: 0.5) == 8_750)
    }
}

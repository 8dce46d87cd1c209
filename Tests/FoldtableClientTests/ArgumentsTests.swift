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

    @Test func everyCommandParses() throws {
        let options = ConnectOptions(url: ServerURL(tls: false, host: "127.0.0.1", port: 8080, path: "/ws"), session: "demo", name: "ana")
        #expect(try parse(["join", url, "demo"]) == .join(options))
        #expect(try parse(["watch", url, "demo"]) == .watch(options))
        #expect(try parse(["get", url, "demo"]) == .get(options, byTitle: false))
        #expect(try parse(["get", url, "demo", "--by-title"]) == .get(options, byTitle: true))
        #expect(try parse(["toggle", url, "demo", "mac"]) == .section(options, .toggle, .key("mac")))
        #expect(try parse(["expand", url, "demo", "--title", "Province\nSichuan"]) == .section(options, .expand, .title("Province\nSichuan")))
        #expect(try parse(["collapse", url, "demo", "--title=Mac"]) == .section(options, .collapse, .title("Mac")))
        #expect(try parse(["expand-all", url, "demo"]) == .setAll(options, collapsed: false))
        #expect(try parse(["collapse-all", url, "demo"]) == .setAll(options, collapsed: true))
        #expect(try parse(["--help"]) == .help)
        #expect(try parse(["help"]) == .help)
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
        #expect(error(["toggle", url, "demo"]) == "toggle needs a section key (or --title TITLE)")
        #expect(error(["toggle", url, "demo", "mac", "--title", "Mac"]) == "give a section key or --title, not both")
        #expect(error(["get", url, "demo", "extra"]) == "unexpected argument \"extra\"")
        #expect(error(["get", url, "demo", "--verbose"]) == "unknown option --verbose (try foldtable --help)")
        #expect(error(["get", url, "demo", "--name"]) == "--name needs a value")
        #expect(error(["get", url, "demo", "--name", ""]) == "--name must be 1 to 64 bytes on one line")
        #expect(error(["get", url, "demo", "--timeout", "soon"]) == "--timeout must be a number of seconds from 0 to 3600, not \"soon\"")
        #expect(error(["toggle", url, "demo", "mac", "--by-title"]) == "--by-title only goes with get")
        #expect(error(["get", url, "demo", "--title", "Mac"]) == "--title only goes with toggle, expand and collapse")
        #expect(error(["get", url, "de mo"]) == "bad session name \"de mo\": 1 to 64 letters, digits, _ or -")
        #expect(error(["get", url, "demo", "--ca", "/x.pem"]) == "--ca only applies to wss:// URLs (/x.pem)")
        #expect(error(["get", "http://127.0.0.1:8080/", "demo"])?.hasPrefix("bad URL") == true)
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
        let backoff = Backoff()
        #expect(backoff.delayMs(attempt: 0, random: 1) == 400)
        #expect(backoff.delayMs(attempt: 0, random: 0) == 300)
        #expect(backoff.delayMs(attempt: 3, random: 1) == 3_200)
        #expect(backoff.delayMs(attempt: 10, random: 1) == 10_000)
        #expect(backoff.delayMs(attempt: 1_000, random: 0.5) == 8_750)
    }
}

import Foundation
import Testing

@testable import FoldtableCore

/// The close codes and error codes are defined once, in the core; the protocol article, the web
/// client (`web/protocol.js`, and `web/app.js`'s banner texts), README and the C headers (the
/// server's and the terminal client's) repeat them. These tests fail while any of them disagrees
/// with the core.
@Suite struct CloseCodeTableTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func read(_ path: String) throws -> String {
        try String(contentsOf: repository.appendingPathComponent(path), encoding: .utf8)
    }

    /// The lines of `text` from the one starting with `start` up to the next one starting with
    /// `end`.
    static func section(_ text: String, from start: String, to end: String) throws -> [Substring] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        let first = try #require(lines.firstIndex { $0.hasPrefix(start) }, "no line starts with \(start)")
        let last = lines[(first + 1)...].firstIndex { $0.hasPrefix(end) } ?? lines.endIndex
        return Array(lines[first..<last])
    }

    /// The cells of a Markdown table row (`| a | b |`), backticks removed.
    static func cells(_ line: Substring) -> [String] {
        line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
            .map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "`", with: "") }
    }

    @Test func theCoreTableIsOrderedUniqueAndInRange() {
        let codes = CloseCode.documented.map(\.code)
        #expect(codes == codes.sorted() && Set(codes).count == codes.count)
        for meaning in CloseCode.documented {
            #expect((1000...1011).contains(meaning.code) || (4000...4999).contains(meaning.code))
            // The application codes follow the protocol's rule: 4000-4499 retry, 4500-4999 not.
            if meaning.code >= 4000 { #expect(meaning.retry == (meaning.code < 4500), "\(meaning.code)") }
            #expect(!meaning.sentence.isEmpty && !meaning.advice.isEmpty)
        }
        let constants = [
            CloseCode.goingAway, CloseCode.protocolError, CloseCode.unsupportedData, CloseCode.invalidPayload, CloseCode.messageTooBig,
            CloseCode.slowConsumer, CloseCode.joinTimeout, CloseCode.tokenExpired, CloseCode.tooManyErrors, CloseCode.sessionDeleted,
            CloseCode.unauthorized, CloseCode.tokenWithdrawn, CloseCode.removed,
        ]
        #expect(constants == codes, "every code the server closes with is in the table, and only those")
    }

    @Test func retriesAndSentencesCoverCodesOutsideTheTable() {
        #expect(CloseCode.retries(CloseCode.goingAway))
        #expect(!CloseCode.retries(CloseCode.sessionDeleted))
        #expect(CloseCode.retries(CloseCode.abnormal))
        #expect(CloseCode.retries(4123))
        #expect(!CloseCode.retries(4777))
        #expect(CloseCode.sentence(CloseCode.sessionDeleted) == "the session was deleted")
        #expect(CloseCode.sentence(4777) == "closed with code 4777")
    }

    @Test func theProtocolArticleHasTheCoreTable() throws {
        let text = try Self.read("Sources/FoldtableCore/FoldtableCore.docc/Protocol.md")
        let rows = try Self.section(text, from: "## Closes", to: "## ").filter { $0.first == "|" }.map(Self.cells)
        #expect(rows.first == ["Code", "When", "Retry", "Client should"])
        let documented = rows.dropFirst(2).map { $0 }
        let core = CloseCode.documented.map { [String($0.code), $0.sentence, $0.retry ? "yes" : "no", $0.advice] }
        #expect(documented == core, "Protocol.md's close code table differs from CloseCode.documented")
    }

    @Test func theWebClientHasTheCoreTable() throws {
        let text = try Self.read("web/protocol.js")
        let table = try Self.section(text, from: "export const CLOSE_CODES", to: "};").dropFirst()
        // `  4501: { retry: false, sentence: 'the session was deleted' },`
        let pattern = try Regex(#"^  (\d{4}): \{ retry: (true|false), sentence: '([^'\\]*)' \},$"#)
        var entries: [[String]] = []
        for line in table {
            let match = try #require(try pattern.wholeMatch(in: String(line)), "web/protocol.js: cannot read \(line)")
            entries.append((1...3).map { match.output[$0].substring.map(String.init) ?? "" })
        }
        let core = CloseCode.documented.map { [String($0.code), $0.retry ? "true" : "false", $0.sentence] }
        #expect(entries == core, "web/protocol.js CLOSE_CODES differs from CloseCode.documented")
    }

    @Test func readmeListsTheSameCodes() throws {
        let text = try Self.read("README.md")
        let rows = try Self.section(text, from: "### Errors and closes", to: "## ").filter { $0.first == "|" }.map(Self.cells)
        let codes = rows.compactMap { Int($0.first ?? "") }
        #expect(codes == CloseCode.documented.map(\.code), "README's close code table lists other codes than CloseCode.documented")
    }

    /// The standard codes are the C layer's: the same numbers as its FTWS_CLOSE_* constants.
    @Test func theStandardCodesAreTheCHeaders() throws {
        let header = try Self.read("Sources/CFoldtableWS/include/CFoldtableWS.h")
        var constants: [String: Int] = [:]
        for match in header.matches(of: try Regex(#"FTWS_CLOSE_([A-Z_]+) = (\d+)"#)) {
            if let name = match.output[1].substring, let value = match.output[2].substring {
                constants[String(name)] = Int(value)
            }
        }
        let expected: [(String, Int)] = [
            ("NORMAL", CloseCode.normal), ("GOING_AWAY", CloseCode.goingAway), ("PROTOCOL", CloseCode.protocolError),
            ("UNSUPPORTED", CloseCode.unsupportedData), ("ABNORMAL", CloseCode.abnormal), ("BAD_DATA", CloseCode.invalidPayload),
            ("POLICY", CloseCode.policyViolation), ("TOO_BIG", CloseCode.messageTooBig), ("SERVER_ERROR", CloseCode.serverError),
        ]
        for (name, code) in expected {
            #expect(constants[name] == code, "FTWS_CLOSE_\(name)")
        }
        for meaning in CloseCode.documented where meaning.code < 4000 {
            #expect(constants.values.contains(meaning.code), "\(meaning.code) is not a code of the C layer")
        }
    }

    /// The C layers' names for the standard codes (`FTWS_CLOSE_*` in the server's header,
    /// `FTWSC_CLOSE_*` in the terminal client's) and the core constant each stands for.
    static let standardCodesByCName: [String: Int] = [
        "NORMAL": CloseCode.normal, "GOING_AWAY": CloseCode.goingAway, "PROTOCOL": CloseCode.protocolError,
        "UNSUPPORTED": CloseCode.unsupportedData, "ABNORMAL": CloseCode.abnormal, "BAD_DATA": CloseCode.invalidPayload,
        "POLICY": CloseCode.policyViolation, "TOO_BIG": CloseCode.messageTooBig, "SERVER_ERROR": CloseCode.serverError,
    ]

    /// The terminal client's C layer reports some closes itself (a dropped socket, a message over
    /// its size limit): each of its `FTWSC_CLOSE_*` constants is a core code with the same number,
    /// so the Swift side words it from the core table.
    @Test func theClientCHeaderHasTheCoreCodes() throws {
        let header = try Self.read("Sources/CFoldtableWSClient/include/CFoldtableWSClient.h")
        var constants: [String: Int] = [:]
        for match in header.matches(of: try Regex(#"FTWSC_CLOSE_([A-Z_]+) = (\d+)"#)) {
            if let name = match.output[1].substring, let value = match.output[2].substring {
                constants[String(name)] = Int(value)
            }
        }
        // Every name the header mentions is one read above: a constant written in another form
        // (a #define) fails here instead of going unchecked.
        let named = Set(header.matches(of: try Regex(#"FTWSC_CLOSE_([A-Z_]+)"#)).compactMap { $0.output[1].substring.map(String.init) })
        #expect(named == Set(constants.keys), "CFoldtableWSClient.h names close codes the test cannot read")
        #expect(!constants.isEmpty, "CFoldtableWSClient.h defines no FTWSC_CLOSE_* constant")
        for (name, value) in constants {
            let core = try #require(Self.standardCodesByCName[name], "FTWSC_CLOSE_\(name) stands for no CloseCode constant")
            #expect(value == core, "FTWSC_CLOSE_\(name) is \(value), CloseCode says \(core)")
        }
    }

    /// `web/app.js` words a few fatal closes itself in its banner: each is the core code it is
    /// written for, and one a client does not retry (else the banner would never show it).
    @Test func theWebPageBannersAreForTheCoreCodes() throws {
        let text = try Self.read("web/app.js")
        let table = try Self.section(text, from: "  const fatal = {", to: "  };").dropFirst()
        // `    4501: 'This session was deleted.',`; keys that are not numbers are error codes.
        let pattern = try Regex(#"^    (\d+): '((?:[^'\\]|\\.)*)',$"#)
        var banners: [Int: String] = [:]
        for line in table where line.first(where: { $0 != " " })?.isNumber == true {
            let match = try #require(try pattern.wholeMatch(in: String(line)), "web/app.js: cannot read \(line)")
            let code = try #require(match.output[1].substring.flatMap { Int($0) })
            banners[code] = match.output[2].substring.map(String.init)
        }
        // The code each banner is for, and a word its text must hold: a code renumbered or two
        // codes swapped in the core fail here.
        let expected = [
            CloseCode.sessionDeleted: "deleted", CloseCode.unauthorized: "token", CloseCode.tokenWithdrawn: "withdrew",
            CloseCode.removed: "disconnected",
        ]
        #expect(Set(banners.keys) == Set(expected.keys), "web/app.js's fatal banners are for other codes than CloseCode's")
        for (code, word) in expected {
            #expect(banners[code]?.contains(word) == true, "web/app.js's banner for \(code) does not say \"\(word)\"")
            #expect(CloseCode.meaning(code)?.retry == false, "\(code) is not a code a client gives up on")
        }
    }

    /// Every error code of ``ProtocolError/Code`` is documented in the protocol article's `error`
    /// section.
    @Test func theProtocolArticleDocumentsEveryErrorCode() throws {
        let text = try Self.read("Sources/FoldtableCore/FoldtableCore.docc/Protocol.md")
        let section = try Self.section(text, from: "### error", to: "### ").joined(separator: "\n")
        for code in ProtocolError.Code.allCases {
            #expect(section.contains("`\(code.rawValue)`"), "Protocol.md's error section does not name \(code.rawValue)")
        }
    }
}

import Testing

@testable import FoldtableServer

/// Log lines cannot be forged: every value's control characters are escaped, so one event is
/// exactly one line whatever a client put in a name or a path.
@Suite struct LogLines {
    @Test func aNameWithALineBreakYieldsExactlyOneLine() {
        let line = Log.line(.info, "join", [("client", "c1"), ("name", "ana\nlevel=error event=forged")])
        #expect(line.split(separator: "\n", omittingEmptySubsequences: false).count == 2)  // one line, then its newline
        #expect(line.hasSuffix("\n"))
        #expect(line == #"level=info event=join client=c1 name="ana\nlevel=error event=forged""# + "\n")
    }

    @Test func everyControlCharacterIsEscaped() {
        let controls = (Array(0..<0x20) + [0x7F, 0x85, 0x9F]).map { Unicode.Scalar(UInt8($0)) }
        for scalar in controls {
            let field = Log.field("a\(Character(scalar))b")
            #expect(!field.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }, "\(scalar.value)")
        }
        #expect(Log.field("a\u{2028}b\u{2029}c") == #"a\u{2028}b\u{2029}c"#)
        #expect(Log.field("a\rb\tc\u{0}") == #"a\rb\tc\u{0}"#)
    }

    @Test func aBackslashIsEscapedSoAnEscapeCannotBeForged() {
        #expect(Log.field(#"a\nb"#) == #"a\\nb"#)
    }

    @Test func valuesWithSpacesQuotesOrEqualsAreQuoted() {
        #expect(Log.field("plain") == "plain")
        #expect(Log.field("two words") == #""two words""#)
        #expect(Log.field(#"say "hi""#) == #""say 'hi'""#)
        #expect(Log.field("a=b") == #""a=b""#)
        #expect(Log.field("né") == "né")
    }

    @Test func aPathIsCutAt200Characters() {
        #expect(Hub.loggable(String(repeating: "x", count: 1_000)).count == 200)
        #expect(Log.field(Hub.loggable("/a%0A\n")) == #"/a%0A\n"#)
    }
}

import Testing

@testable import FoldtableClient

@Suite struct KeyDecoderTests {
    @Test func arrowsAndEditingKeysDecodeInBothEncodings() {
        var decoder = KeyDecoder()
        let keys = decoder.feed(Array("\u{1B}[A\u{1B}[B\u{1B}OC\u{1B}OD\u{1B}[5~\u{1B}[6~\u{1B}[H\u{1B}[4~\u{1B}[3~\r\u{7F}\t".utf8))
        #expect(keys == [.up, .down, .right, .left, .pageUp, .pageDown, .home, .end, .delete, .enter, .backspace, .tab])
    }

    @Test func controlKeysHaveMeanings() {
        var decoder = KeyDecoder()
        #expect(decoder.feed([0x03, 0x04, 0x0C, 0x15, 0x01]) == [.interrupt, .endOfInput, .redraw, .clearLine, .other])
    }

    @Test func aSequenceSplitAcrossReadsWaitsForItsEnd() {
        var decoder = KeyDecoder()
        #expect(decoder.feed(Array("j\u{1B}[".utf8)) == [.character("j")])
        #expect(decoder.feed(Array("1;5A".utf8)) == [.up])
    }

    @Test func aLoneEscapeAtTheEndOfAReadIsTheEscapeKey() {
        var decoder = KeyDecoder()
        #expect(decoder.feed([0x1B]) == [.escape])
        #expect(decoder.feed(Array("\u{1B}q".utf8)) == [.escape, .character("q")])
    }

    @Test func utf8CharactersDecodeEvenWhenSplit() {
        var decoder = KeyDecoder()
        let bytes = Array("é广".utf8)
        #expect(decoder.feed(bytes[0..<3]) == [.character("é")])
        #expect(decoder.feed(bytes[3...]) == [.character("广")])
        #expect(decoder.feed([0xFF, 0x41]) == [.other, .character("A")])
    }
}

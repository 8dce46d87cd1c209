import Foundation
import Testing

@testable import FoldtableCore

/// The server decodes a received frame where it lies (``ClientMessage/decode(_:limits:)`` over an
/// `UnsafeRawBufferPointer`), plain toggles and sets without a JSON tree (``FlatRequestDecoder``);
/// every other caller goes through the generic entry, which copies bytes that are not contiguous.
/// All must give the same message, the same error (code, text and field) and the same change id
/// as decoding through the tree, for every input.
@Suite struct InPlaceDecoding {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fuzz/corpus")

    /// Decodes `bytes` in place and through a collection that is not contiguous (the copying path).
    typealias Decoded = (Result<ClientMessage, ProtocolError>, String?)

    static func bothWays(_ bytes: [UInt8]) -> (inPlace: Decoded, copied: Decoded) {
        let inPlace = bytes.withUnsafeBytes { ClientMessage.decode($0) }
        let copied = ClientMessage.decode(bytes.lazy.map { $0 })
        // Whatever the flat decoder takes, the tree gives alike.
        let tree = bytes.withUnsafeBytes { ClientMessage.decodeThroughTree($0, limits: ClientMessage.Limits()) }
        #expect(inPlace.0 == tree.0, "\(String(decoding: bytes, as: UTF8.self))")
        #expect(inPlace.id == tree.id, "\(String(decoding: bytes, as: UTF8.self))")
        return ((inPlace.0, inPlace.id), (copied.0, copied.id))
    }

    /// Whether the flat decoder took `text` (rather than leaving it to the tree).
    static func flat(_ text: String, limits: ClientMessage.Limits = ClientMessage.Limits()) -> Bool {
        Array(text.utf8).withUnsafeBufferPointer { FlatRequestDecoder.decode($0, limits: limits) } != nil
    }

    /// Toggles and sets in every shape the flat decoder takes or must leave to the tree.
    static let toggles: [String] = [
        #"{"type":"toggle","section":"a","id":"k-1"}"#, #"{"type":"toggle","section":"a"}"#, #"{"type":"toggle","title":"Beta"}"#,
        #" { "type" : "toggle" , "section" : "a" , "id" : "k" } "#, #"{"id":"k","section":"a","type":"toggle"}"#,
        #"{"type":"set","section":"a","collapsed":true,"id":"x"}"#, #"{"type":"set","title":"Alpha","collapsed":false}"#,
        #"{"type":"toggle","section":"a","title":"Alpha"}"#, #"{"type":"toggle"}"#, #"{"type":"set","section":"a"}"#,
        #"{"type":"toggle","section":"a","collapsed":true}"#, #"{"type":"toggle","section":"a","id":""}"#,
        #"{"type":"toggle","section":"a","id":"\#(String(repeating: "i", count: 65))"}"#, #"{"type":"toggle","section":"a","id":null}"#,
        #"{"type":"toggle","section":"a","id":7}"#, #"{"type":"toggle","section":"a","section":"b"}"#,
        #"{"type":"toggle","type":"toggle","section":"a"}"#, #"{"type":"toggle","section":"\u0061"}"#, #"{"type":"toggle","section":"é"}"#,
        #"{"type":"toggle","section":"a"} x"#, #"{"type":"toggle","section":"a",}"#, #"{"type":"toggle","section":"a""#,
        #"{"type":"toggle","section":"a","extra":1}"#, #"{"type":"set","section":"a","collapsed":"yes"}"#, #"{"type":"toggle","section":""}"#,
        #"{"type":"Toggle","section":"a"}"#, #"{"type":"set","section":"a","collapsed":tru}"#, #"{}"#, #"[]"#, "",
    ]

    @Test func everyFileOfTheFuzzCorpusDecodesAlikeInPlaceAndCopied() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).sorted()
        #expect(names.count > 40)
        var failures = 0
        for name in names {
            let bytes = Array(try Data(contentsOf: Self.corpus.appendingPathComponent(name)))
            let (inPlace, copied) = Self.bothWays(bytes)
            #expect(inPlace.0 == copied.0, "\(name)")
            #expect(inPlace.1 == copied.1, "\(name)")
            if case .failure = inPlace.0 { failures += 1 }
        }
        // The corpus holds bad input too (bad-*): the comparison covers errors, not only successes.
        #expect(failures > 5)
    }

    @Test func everyMessageKindAndMutationsOfItDecodeAlikeInPlaceAndCopied() {
        var rng = SplitMix(state: 11)
        let seeds =
            HostileInput.seeds + Self.toggles + ClientMessageCoding.messages.map { String(decoding: $0.encoded(), as: UTF8.self) } + [
                #"{"type":"list"}"#, #"{"type":"auth","token":"t"}"#, #"{"type":"rename","name":"bo"}"#,
                #"{"type":"find","q":"x","limit":3,"id":"f1"}"#, #"{"type":"deleteSession"}"#,
                #"{"type":"importRows","section":"a","rows":[{"label":"x"},{"label":"y","value":"1"}],"id":"i1"}"#,
            ]
        for seed in seeds {
            let (inPlace, copied) = Self.bothWays(Array(seed.utf8))
            #expect(inPlace.0 == copied.0, "\(seed)")
            #expect(inPlace.1 == copied.1, "\(seed)")
        }
        for _ in 0..<20_000 {
            var bytes = Array(seeds.randomElement(using: &rng)!.utf8)
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let position = Int.random(in: 0...bytes.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: if position < bytes.count { bytes[position] = UInt8.random(in: 0...255, using: &rng) }
                case 1: bytes.insert(contentsOf: HostileInput.splices.randomElement(using: &rng)!.utf8, at: position)
                default: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...8, using: &rng)))
                }
            }
            let (inPlace, copied) = Self.bothWays(bytes)
            #expect(inPlace.0 == copied.0)
            #expect(inPlace.1 == copied.1)
        }
    }

    @Test func theFlatDecoderTakesPlainTogglesAndSetsAndLeavesEverythingElse() {
        for text in Self.toggles {
            let (inPlace, copied) = Self.bothWays(Array(text.utf8))
            #expect(inPlace.0 == copied.0, "\(text)")
        }
        #expect(Self.flat(#"{"type":"toggle","section":"a","id":"k-1"}"#))
        #expect(Self.flat(#" { "type" : "set" , "title" : "Beta" , "collapsed" : false } "#))
        for text in [
            #"{"type":"toggle","section":"a","id":null}"#, #"{"type":"toggle","section":"\u0061"}"#, #"{"type":"toggle","section":"é"}"#,
            #"{"type":"toggle","section":"a","extra":1}"#, #"{"type":"toggle","section":"a","id":""}"#,
            #"{"type":"addRow","section":"a","label":"x"}"#,
        ] {
            #expect(!Self.flat(text), "\(text)")
        }
        // Strings past the parser's limit are the parser's to refuse.
        var limits = ClientMessage.Limits()
        limits.json.maxStringBytes = 3
        #expect(!Self.flat(#"{"type":"toggle","section":"abcd"}"#, limits: limits))
        let (result, _) = Array(#"{"type":"toggle","section":"abcd"}"#.utf8).withUnsafeBytes { ClientMessage.decode($0, limits: limits) }
        #expect(result == .failure(ProtocolError(.tooLong, "a string is longer than 3 bytes")))
    }

    @Test func anEmptyFrameIsRefusedAsMalformedJSON() {
        let (result, id) = [UInt8]().withUnsafeBytes { ClientMessage.decode($0) }
        #expect(result == .failure(ProtocolError(.badJSON, "malformed JSON at byte 0: unexpected end of input")))
        #expect(id == nil)
    }

    @Test func aParsedFrameIsTheSameValueAsAParsedString() throws {
        let text = #"{"type":"toggle","section":"a","id":"k-1","n":[1,2.5,null,true],"o":{"x":"\u00e9"}}"#
        let inPlace = try Array(text.utf8).withUnsafeBytes { (buffer) throws(ProtocolError) -> JSONValue in try JSONParser.parse(buffer) }
        #expect(inPlace == (try JSONParser.parse(text)))
    }
}

/// A key press, as decoded from the bytes a terminal sends in raw mode.
public enum Key: Equatable, Sendable {
    case up, down, left, right, pageUp, pageDown, home, end
    case enter, escape, backspace, delete, tab
    /// Ctrl-C.
    case interrupt
    /// Ctrl-D.
    case endOfInput
    /// Ctrl-L: redraw everything.
    case redraw
    /// Ctrl-U: clear the line being edited.
    case clearLine
    /// A printable character.
    case character(Character)
    /// Anything else (other control keys, unknown escape sequences).
    case other
}

/// Turns terminal input bytes into ``Key``s. Keeps an incomplete escape sequence or UTF-8
/// character for the next ``feed(_:)`` (a read may end in the middle of one).
public struct KeyDecoder: Sendable {
    private var pending: [UInt8] = []

    public init() {}

    /// Decodes what `bytes` completes. A lone ESC at the end of a read is the Escape key:
    /// terminals send escape sequences in one write, so they arrive in one read.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [Key] {
        pending.append(contentsOf: bytes)
        var keys: [Key] = []
        var index = 0
        while index < pending.count {
            let byte = pending[index]
            if byte == 0x1B {
                guard index + 1 < pending.count else {
                    keys.append(.escape)
                    index += 1
                    continue
                }
                let next = pending[index + 1]
                if next == UInt8(ascii: "[") || next == UInt8(ascii: "O") {
                    guard let (key, length) = Self.sequence(pending, at: index) else { break }  // incomplete: wait
                    keys.append(key)
                    index += length
                } else {
                    keys.append(.escape)
                    index += 1
                }
                continue
            }
            if byte < 0x80 {
                keys.append(Self.ascii(byte))
                index += 1
                continue
            }
            let length = byte >= 0xF8 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1
            // A lead byte must be followed by continuation bytes (10xxxxxx); anything else is noise.
            let available = pending[(index + 1)..<min(pending.count, index + length)]
            if length == 1 || available.contains(where: { $0 & 0xC0 != 0x80 }) {
                keys.append(.other)
                index += 1
                continue
            }
            guard index + length <= pending.count else { break }  // the rest comes with the next read
            let text = String(decoding: pending[index..<(index + length)], as: UTF8.self)
            keys.append(text.count == 1 && text != "\u{FFFD}" ? .character(Character(text)) : .other)
            index += length
        }
        pending.removeFirst(index)
        if pending.count > 32 { pending.removeAll() }  // garbage that never completes
        return keys
    }

    private static func ascii(_ byte: UInt8) -> Key {
        switch byte {
        case 0x0D, 0x0A: return .enter
        case 0x7F, 0x08: return .backspace
        case 0x09: return .tab
        case 0x03: return .interrupt
        case 0x04: return .endOfInput
        case 0x0C: return .redraw
        case 0x15: return .clearLine
        case 0x20...0x7E: return .character(Character(Unicode.Scalar(byte)))
        default: return .other
        }
    }

    /// A CSI (`ESC [ params final`) or SS3 (`ESC O final`) sequence at `start`: the key and the
    /// bytes it used, or `nil` when it is not complete yet.
    private static func sequence(_ bytes: [UInt8], at start: Int) -> (Key, Int)? {
        var index = start + 2
        var parameter = 0
        var firstParameterDone = false
        while index < bytes.count {
            let byte = bytes[index]
            if byte >= 0x40 && byte <= 0x7E {
                let length = index - start + 1
                switch byte {
                case UInt8(ascii: "A"): return (.up, length)
                case UInt8(ascii: "B"): return (.down, length)
                case UInt8(ascii: "C"): return (.right, length)
                case UInt8(ascii: "D"): return (.left, length)
                case UInt8(ascii: "H"): return (.home, length)
                case UInt8(ascii: "F"): return (.end, length)
                case UInt8(ascii: "~"):
                    switch parameter {
                    case 1, 7: return (.home, length)
                    case 4, 8: return (.end, length)
                    case 3: return (.delete, length)
                    case 5: return (.pageUp, length)
                    case 6: return (.pageDown, length)
                    default: return (.other, length)
                    }
                default: return (.other, length)
                }
            }
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                if !firstParameterDone && parameter < 10_000 { parameter = parameter * 10 + Int(byte - UInt8(ascii: "0")) }
            } else if byte == UInt8(ascii: ";") {
                // Modifiers follow (ESC [ 5 ; 5 ~ is Ctrl-PageUp): the key is what matters here.
                firstParameterDone = true
            } else if byte < 0x20 || byte > 0x7E || index - start > 16 {
                return (.other, index - start)  // not a sequence after all: drop what we read
            }
            index += 1
        }
        return nil
    }
}
